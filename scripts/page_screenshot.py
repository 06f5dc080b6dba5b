"""Regenerate docs/page.png, the README's picture of the calculator page.

    python scripts/page_screenshot.py                  # docs/page.png, desktop width
    python scripts/page_screenshot.py --width 390 --height 1400 -o /tmp/phone.png

It runs ``symvram page`` (the same settings every time) and photographs the result in headless
Chromium (Debian's chromium + chromium-driver, through Selenium); nothing is fetched.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from symvram.cli import main as symvram
from browser import headless_chromium  # scripts/browser.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
PAGE_ARGS = ["llama-3-8b", "--method", "lora", "--rank", "16", "--batch", "4", "--seq", "2048",
             "--grad-checkpointing", "--gpu", "rtx-4090"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", default=str(ROOT / "docs" / "page.png"))
    p.add_argument("--width", type=int, default=1100)
    p.add_argument("--height", type=int, default=1500)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="symvram-page-") as tmp:
        html = Path(tmp) / "plan.html"
        if symvram(["page", *PAGE_ARGS, "-o", str(html)]):
            return 1
        try:
            driver = headless_chromium(str(Path(tmp) / "profile"), args.width, args.height)
        except RuntimeError as e:
            print(f"page_screenshot: {e}", file=sys.stderr)
            return 1
        try:
            driver.get(html.as_uri())
            if not driver.find_element("id", "peak").get_attribute("data-bytes"):
                print("page_screenshot: the page shows no peak", file=sys.stderr)
                return 1
            driver.save_screenshot(args.output)
        finally:
            driver.quit()
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
