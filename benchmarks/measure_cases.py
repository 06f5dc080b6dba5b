"""Measure a list of cases with symvram.validate.measure, caching each finished case.

    python benchmarks/measure_cases.py benchmarks/cases.jsonl \
        [--out benchmarks/results/measurements.jsonl] [--jobs 2] [--only NAME ...]
    python benchmarks/measure_cases.py benchmarks/cases.jsonl --device cuda --smallest-first \
        --max-gib 120 --stop-after 300 --out benchmarks/results/measurements_cuda.jsonl   # on a GPU

The cases file is JSON (a list of specs) or JSONL (one spec per line); each spec is what
``symvram.validate.measure.measure`` takes, optionally with ``name`` and ``model`` labels.
Every finished case is appended (and flushed) to the results JSONL at once, keyed by a hash of
its canonical spec; cases already there are skipped, so an interrupted run (Ctrl-C) loses
nothing that finished and resumes where it stopped.  Progress goes to stderr.

On a GPU lent for minutes: ``--device cuda`` measures every case with real tensors
(``torch.cuda.max_memory_allocated``), ``--smallest-first`` orders them by symvram's estimate and
``--max-gib`` skips those estimated above the card, ``--stop-after`` starts no case after that many seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _measure_module():
    """symvram.validate.measure; works from a checkout without installing symvram."""
    import importlib

    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module("symvram.validate.measure")
    except ImportError as e:
        if e.name in ("torch", "transformers", "peft"):
            raise
        # the core package failed to import (e.g. its own dependencies are missing here):
        # load the validate subpackage alone, it needs only torch/transformers/peft
        import types

        for name in [n for n in sys.modules if n == "symvram" or n.startswith("symvram.")]:
            del sys.modules[name]
        pkg = types.ModuleType("symvram")
        pkg.__path__ = [str(ROOT / "symvram")]
        sys.modules["symvram"] = pkg
        return importlib.import_module("symvram.validate.measure")


def load_cases(path: str) -> list[dict]:
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def spec_key(spec: dict, normalize) -> str:
    """Hash of the canonical spec (labels such as name/model do not count)."""
    canon = json.dumps(normalize(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def estimate_bytes(spec: dict, normalize) -> float:
    """symvram's estimated peak of the case (bytes), on the device it will be measured on."""
    from symvram.evaluate import evaluate
    from symvram.validate.spec import to_scenario

    return evaluate(to_scenario(normalize(spec))).peak


def load_done(out: Path, normalize=None) -> set[str]:
    """Keys of the cases already in ``out``: each row's stored key and, with ``normalize``, its stored spec keyed
    again by today's normalization (a setting added since, whose default is the old behaviour, changes the key of
    the case it was stored for; that case is still measured)."""
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                row = json.loads(line)
                done.add(row["key"])
            except (ValueError, KeyError):
                continue  # a torn last line from a killed run
            if normalize is not None and "spec" in row:
                done.add(spec_key(row["spec"], normalize))
    return done


def _run_one(spec: dict) -> dict:
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    if spec.get("objective", "sft") != "sft":   # DPO / KTO: TRL's own trainer step, traced (needs trl)
        import importlib

        return importlib.import_module("symvram.validate.objectives").measure_preference(spec)
    return _measure_module().measure(spec, flops=True)


def _append(out: Path, row: dict) -> None:
    with out.open("a") as f:
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", help="JSON list or JSONL of case specs")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/measurements.jsonl"))
    ap.add_argument("--jobs", type=int, default=1, help="cases measured in parallel (processes)")
    ap.add_argument("--only", nargs="*", help="names of the cases to run")
    ap.add_argument("--device", choices=("fake", "cuda"),
                    help="measure every case on this device (default: each spec's own; fake when it names none)")
    ap.add_argument("--smallest-first", action="store_true", help="order the cases by symvram's estimate")
    ap.add_argument("--max-gib", type=float, help="skip cases whose estimate is above this many GiB")
    ap.add_argument("--stop-after", type=float, help="start no case after this many seconds")
    a = ap.parse_args(argv)

    mm = _measure_module()
    cases = load_cases(a.cases)
    if a.only:
        cases = [c for c in cases if c.get("name") in set(a.only)]
    if a.device:
        cases = [{**c, "device": a.device} for c in cases]
    if a.smallest_first or a.max_gib is not None:
        sized = sorted(((estimate_bytes(c, mm.normalize_spec), i, c) for i, c in enumerate(cases)),
                       key=lambda t: t[:2])
        if a.max_gib is not None:
            skipped = [c.get("name") for b, _, c in sized if b > a.max_gib * 2**30]
            if skipped:
                print(f"skipped (estimate above {a.max_gib:g} GiB): {', '.join(map(str, skipped))}", file=sys.stderr)
            sized = [t for t in sized if t[0] <= a.max_gib * 2**30]
        cases = [c for _, _, c in (sized if a.smallest_first else sorted(sized, key=lambda t: t[1]))]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = load_done(out, mm.normalize_spec)
    todo = []
    for c in cases:
        k = spec_key(c, mm.normalize_spec)
        if k not in done:
            todo.append((k, c))
            done.add(k)  # duplicates in the cases file run once
    print(f"{len(cases)} cases, {len(cases) - len(todo)} cached, {len(todo)} to measure -> {out}",
          file=sys.stderr)
    if todo and a.device == "cuda" and a.jobs <= 1:
        print(f"CUDA warm-up: {mm.warm_up_cuda() / 2**20:.1f} MiB of library workspaces allocated before the first case",
              file=sys.stderr)
    t_start = time.perf_counter()
    run_id = time.strftime("%Y-%m-%dT%H:%M:%S")
    n_ok = n_fail = 0

    def finish(i, k, c, res=None, err=None):
        nonlocal n_ok, n_fail
        name = c.get("name", k)
        if err is not None:
            n_fail += 1
            print(f"[{i}/{len(todo)}] {name}: FAILED {err}", file=sys.stderr)
            return
        n_ok += 1
        row = {"key": k, "name": c.get("name"), "model": c.get("model"), **res}
        if res.get("device") == "cuda":  # cases share a process: accuracy_cuda.py reads them in the order run
            row.update(run=run_id, order=i)
        _append(out, row)
        print(f"[{i}/{len(todo)}] {name}: {res['peak_bytes'] / 2**30:.2f} GiB at {res['peak_phase']} "
              f"({res['seconds']:.1f} s, {time.perf_counter() - t_start:.0f} s total)", file=sys.stderr)

    try:
        if a.jobs <= 1:
            for i, (k, c) in enumerate(todo, 1):
                if a.stop_after is not None and time.perf_counter() - t_start > a.stop_after:
                    print(f"stopped after {a.stop_after:g} s: {len(todo) - i + 1} cases left for the next run",
                          file=sys.stderr)
                    break
                if k in load_done(out):  # finished meanwhile by another runner
                    continue
                try:
                    res = _run_one(c)
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # noqa: BLE001 - report and go on
                    finish(i, k, c, err=f"{type(e).__name__}: {e}")
                else:
                    finish(i, k, c, res)
        else:
            import multiprocessing as mp

            # fresh workers now and then (a long-lived process slowly accumulates memory);
            # cases are submitted lazily so that one finished by another runner is skipped
            with ProcessPoolExecutor(max_workers=a.jobs, mp_context=mp.get_context("spawn"),
                                     max_tasks_per_child=4) as ex:
                queue = list(todo)
                pending: dict = {}
                i = 0
                while queue or pending:
                    while queue and len(pending) < a.jobs:
                        k, c = queue.pop(0)
                        if k not in load_done(out):
                            pending[ex.submit(_run_one, c)] = (k, c)
                    if not pending:
                        break
                    fin, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for f in fin:
                        k, c = pending.pop(f)
                        i += 1
                        e = f.exception()
                        finish(i, k, c, err=None if e is None else f"{type(e).__name__}: {e}",
                               res=None if e is not None else f.result())
    except KeyboardInterrupt:
        print(f"\ninterrupted: {n_ok} cases saved in {out}; run again to resume", file=sys.stderr)
        return 130
    print(f"done: {n_ok} measured, {n_fail} failed, {time.perf_counter() - t_start:.0f} s", file=sys.stderr)
    return 1 if n_fail else 0


if __name__ == "__main__":
    raise SystemExit(main())
