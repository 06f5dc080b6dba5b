"""The config.json of a Hugging Face Hub model id (``org/name``), without downloading weights.

The config.json in the local Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``, laid out as huggingface_hub lays it out:
``models--org--name/snapshots/<commit>/config.json``); then, with the optional ``hub`` extra
(huggingface_hub) and unless ``HF_HUB_OFFLINE`` is set, a download of config.json alone into that cache.
Otherwise one line says why, with the command that fetches just the config (and what the caller
suggests: ``presets.hub_model`` names the presets whose names are close). Which preset a Hub id names
is the preset table's business (``presets.preset_for_repo``); this module only reads files.

>>> is_hub_id("Qwen/Qwen2.5-7B"), is_hub_id("./models/x"), is_hub_id("a/b/config.json")
(True, False, False)
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import UserError

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
TRUE = ("1", "true", "yes", "on")


def is_hub_id(text: str) -> bool:
    """``org/name`` as the Hub spells repository ids (not a path: no leading ./ or /, no .json)."""
    return bool(HUB_ID.match(text)) and ".." not in text and not text.lower().endswith(".json")


def cache_dir() -> Path:
    """Where huggingface_hub (and so transformers) keeps downloaded files."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def cached_config(repo_id: str, root: Path | None = None) -> Path | None:
    """config.json of ``repo_id`` in the cache: the snapshot ``refs/main`` names, else the newest one."""
    root = root or cache_dir()
    folder = root / ("models--" + repo_id.replace("/", "--"))
    if not folder.is_dir() and root.is_dir():  # the Hub's ids are case-insensitive
        want = folder.name.lower()
        folder = next((p for p in root.iterdir() if p.name.lower() == want), folder)
    snapshots = folder / "snapshots"
    try:
        ref = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        ref = ""
    if ref and (snapshots / ref / "config.json").is_file():
        return snapshots / ref / "config.json"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1] if found else None


def _refuse(repo_id: str, why: str, suggestion: str) -> UserError:
    return UserError(f"{repo_id}: {why}; fetch just its config with `hf download {repo_id} config.json` "
                     f"(or pass a config.json path){suggestion}")


PROBE_SECONDS = 3.0


def unreachable() -> str | None:
    """Why the Hub's host cannot be reached, in at most PROBE_SECONDS, or None: huggingface_hub itself retries
    a failed connection for about 25 s, with a traceback-like log line per try. Behind a proxy (HTTPS_PROXY …)
    only huggingface_hub knows the way: no probe."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return None
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=PROBE_SECONDS).close()
    except OSError as e:
        return f"{url.hostname}: {e.strerror or type(e).__name__}"
    return None


def _download(repo_id: str, suggestion: str) -> Path:
    if offline():
        raise _refuse(repo_id, "not in the local Hugging Face cache and HF_HUB_OFFLINE is set", suggestion)
    try:
        import huggingface_hub
    except ImportError:
        raise _refuse(repo_id, "not in the local Hugging Face cache, and downloading needs "
                               "pip install 'symvram[hub]'", suggestion) from None
    if (why := unreachable()) is not None:
        raise _refuse(repo_id, f"not in the local Hugging Face cache, and the Hub cannot be reached ({why})",
                      suggestion)
    errors = getattr(huggingface_hub, "errors", None)
    gated = getattr(errors, "GatedRepoError", ())
    missing = tuple(getattr(errors, n) for n in ("RepositoryNotFoundError", "RevisionNotFoundError",
                                                 "EntryNotFoundError") if hasattr(errors, n))
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id, "config.json", cache_dir=str(cache_dir())))
    except gated:
        raise _refuse(repo_id, "gated on the Hub: accept its licence on the model page and log in "
                               "(hf auth login)", suggestion) from None
    except missing:
        raise _refuse(repo_id, "no such model on the Hub (or it is private)", suggestion) from None
    except Exception as e:  # no network, a proxy, a timeout: one line, never a traceback
        raise _refuse(repo_id, f"cannot reach the Hub ({type(e).__name__})", suggestion) from None


def config_path(repo_id: str, suggestion: str = "") -> Path:
    """The config.json of a Hub id: the local cache's, else downloaded (the hub extra); ``suggestion`` ends the
    one line that says why not."""
    return cached_config(repo_id) or _download(repo_id, suggestion)
