"""Regenerate the snapshot documents of ``symvram explain`` (tests/snapshots/) after an intended change.

    python3 scripts/regen_snapshots.py

The settings live in tests/test_explain.py (SNAPSHOTS); the version field is pinned so that a release
does not change them.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_explain import SNAPSHOTS, SNAPSHOT_DIR, snapshot_text  # noqa: E402

if __name__ == "__main__":
    SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
    for name in SNAPSHOTS:
        path = SNAPSHOT_DIR / name
        path.write_text(snapshot_text(name), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
