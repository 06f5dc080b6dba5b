"""Regenerate the snapshot documents of ``symvram explain`` (tests/snapshots/) after an intended change.

    python3 scripts/regen_snapshots.py           # prints each changed document's diff, then writes it
    python3 scripts/regen_snapshots.py --check   # prints the diffs, writes nothing, exits 1 if any changed

The settings live in tests/test_explain.py (SNAPSHOTS); the version field is pinned so that a release
does not change them. A snapshot is never the only test of a number: tests/test_accuracy.py holds every
measured case, so read the diff for what moved and why before writing it.
"""
from __future__ import annotations

import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_explain import SNAPSHOTS, SNAPSHOT_DIR, snapshot_text  # noqa: E402



def main(check: bool) -> int:
    SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
    changed = 0
    for name in SNAPSHOTS:
        path = SNAPSHOT_DIR / name
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = snapshot_text(name)
        if old == new:
            print(f"unchanged {path.relative_to(ROOT)}")
            continue
        changed += 1
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                   f"a/{path.relative_to(ROOT)}", f"b/{path.relative_to(ROOT)}", n=1))
        if not check:
            path.write_text(new, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
