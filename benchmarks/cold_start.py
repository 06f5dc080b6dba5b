"""CLI cold start as a ratio to `python -c "import sympy"` (goal ≤ 2.5×).

    python benchmarks/cold_start.py [--repeat 5]

Runs each command in a fresh interpreter several times and compares the medians, so that a loaded
machine slows both sides alike. Also prints the import time of `import symvram` alone.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "import sympy": [sys.executable, "-c", "import sympy"],
    "import symvram": [sys.executable, "-c", "import symvram"],
    "symvram estimate 7b --method lora": [sys.executable, "-m", "symvram", "estimate", "7b", "--method", "lora"],
    "symvram estimate 7b (4 methods)": [sys.executable, "-m", "symvram", "estimate", "7b"],
}


def median_seconds(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    base = None
    for name, cmd in COMMANDS.items():
        seconds = median_seconds(cmd, args.repeat)
        base = base or seconds
        print(f"{name:40s} {seconds:6.2f} s   {seconds / base:4.2f}× import sympy", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
