"""A headless Chromium for the calculator page's browser test and the screenshot script (not shipped in
the package: only tests and scripts drive a browser)."""
from __future__ import annotations

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def headless_chromium(profile: str, width: int = 1200, height: int = 900):
    """A Selenium driver for Debian's chromium + chromium-driver (tests and the screenshot script).

    ``profile`` is a fresh, empty folder. Raises RuntimeError saying what is missing."""
    import shutil

    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise RuntimeError("selenium is not installed (pip install -e '.[test]')") from None
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        raise RuntimeError("no headless browser: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    try:
        return webdriver.Chrome(options=options, service=Service(driver))
    except Exception as e:  # selenium raises its own WebDriverException family
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise RuntimeError(f"Chromium did not start: {type(e).__name__}: {first}") from None
