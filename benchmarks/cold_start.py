"""CLI cold start as a ratio to `python -c "import sympy"` run in the same loop.

    python benchmarks/cold_start.py [--pairs 7] [--only estimate,plan] [--json benchmarks/results/cold_start.json]

Each command runs in a fresh interpreter, alternated with `import sympy` (one pair at a time, so that a
loaded machine slows both sides alike); the ratio reported is the median of the per-pair ratios.
Goals (issue 16): every command ≤ 1.5×, `plot` ≤ 3× (matplotlib), `page` ≤ 2.5×.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TMP = Path(tempfile.gettempdir())
SYMVRAM = [sys.executable, "-m", "symvram"]
BASE = [sys.executable, "-c", "import sympy"]
COMMANDS = {
    "import symvram": ([sys.executable, "-c", "import symvram"], 1.5),
    "estimate": (SYMVRAM + ["estimate", "7b"], 1.5),
    "estimate --method lora": (SYMVRAM + ["estimate", "7b", "--method", "lora"], 1.5),
    "explain": (SYMVRAM + ["explain", "7b", "-o", str(TMP / "symvram-cold.md"), "--force"], 1.5),
    "whatif": (SYMVRAM + ["whatif", "7b", "--set", "seq=4096"], 1.5),
    "fit": (SYMVRAM + ["fit", "7b", "--gpu", "a100-80g"], 1.5),
    "sensitivity": (SYMVRAM + ["sensitivity", "7b"], 1.5),
    "plan": (SYMVRAM + ["plan", "70b", "--gpu", "a100-80g"], 1.5),
    "diagnose": (SYMVRAM + ["diagnose", "7b", "--gpu", "a100-80g"], 1.5),
    "validate --help": (SYMVRAM + ["validate", "--help"], 1.5),
    "plot": (SYMVRAM + ["plot", "7b", "--kind", "breakdown", "-o", str(TMP / "symvram-cold.png"), "--force"], 3.0),
    "page": (SYMVRAM + ["page", "7b", "-o", str(TMP / "symvram-cold.html"), "--force"], 2.5),
}


# byte-code written and read as in an installed package: a shell with PYTHONDONTWRITEBYTECODE=1 would have every
# changed symvram module recompiled on every run (site-packages, SymPy included, have theirs already)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def seconds(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start


def measure(cmd: list[str], pairs: int) -> tuple[float, float, float]:
    """(median ratio, median command seconds, median `import sympy` seconds) over ``pairs`` pairs."""
    seconds(cmd)  # warm the file cache and byte-code once
    ratios, mine, base = [], [], []
    for _ in range(pairs):
        b, c = seconds(BASE), seconds(cmd)
        ratios.append(c / b)
        mine.append(c)
        base.append(b)
    return statistics.median(ratios), statistics.median(mine), statistics.median(base)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=7)
    p.add_argument("--only", help="comma-separated names (default: all)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(COMMANDS)
    results, over = {}, []
    for name in names:
        cmd, goal = COMMANDS[name]
        ratio, mine, base = measure(cmd, args.pairs)
        results[name] = {"ratio": round(ratio, 2), "seconds": round(mine, 3), "import_sympy_seconds": round(base, 3),
                         "goal": goal}
        flag = "" if ratio <= goal else "   over the goal"
        print(f"{name:26s} {mine:6.2f} s   {ratio:4.2f}× import sympy (goal ≤ {goal}×){flag}", flush=True)
        if ratio > goal:
            over.append(name)
    if args.json:
        args.json.write_text(json.dumps({"pairs": args.pairs, "python": sys.version.split()[0], "results": results},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
