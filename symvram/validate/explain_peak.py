"""What is alive at the peak: the tensors live at the global peak of a measured case.

Runs the case twice under FakeTensorMode (the op sequence is deterministic): the first run finds
the global peak and each phase's peak, the second stops the first time each phase reaches its
peak and lists every live tracked storage with the shape/dtype of the tensor that created it,
its category, the aten op that produced it and the module that was running.

    python -m symvram.validate.explain_peak spec.json [--phases] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import defaultdict

import torch
from torch.distributed._tools.common_utils import get_untyped_storages
from torch.distributed._tools.mem_tracker import _MemRefType

from .measure import (
    PeakTracker,
    _train_steps,
    _untraced_packed_check,
    normalize_spec,
    prepare,
)

_CAT = {
    _MemRefType.PARAM: "param",
    _MemRefType.GRAD: "grad",
    _MemRefType.ACT: "activation",
    _MemRefType.TEMP: "backward_temp",
    _MemRefType.BUFFER: "buffer",
    _MemRefType.OTH: "input",
    _MemRefType.OPT: "optimizer",
}


class _AnatomyTracker(PeakTracker):
    """PeakTracker that remembers, for every storage, who made it, and can list the live ones."""

    def __init__(self, optimizer=None, capture_at=None) -> None:
        super().__init__(optimizer)
        self._cur_op = "external"
        self._capture_at = capture_at or {}  # (phase, total bytes) -> label
        self.captures: dict[str, dict] = {}

    # --- provenance ---------------------------------------------------------------------
    def _where(self) -> str:
        parents = [p for p in self._mod_tracker.parents if p != "Global"]
        return max(parents, key=len) if parents else "-"

    def _meta_of(self, t: torch.Tensor) -> tuple:
        bw = " (bw)" if self._mod_tracker.is_bw else ""
        return (tuple(t.shape), str(t.dtype).replace("torch.", ""), self._cur_op + bw,
                self._where(), self.phase)

    def _label(self, t: torch.Tensor) -> None:
        """Attach provenance to the winfo of each (new) storage of ``t``."""
        meta = None
        for st in get_untyped_storages(t):
            winfo, _ = self._WINFO.get(st, (None, None))
            if winfo is not None and not hasattr(winfo, "meta"):
                meta = meta or self._meta_of(t)
                winfo.meta = meta

    def _track(self, reftype, t):
        super()._track(reftype, t)
        self._label(t)

    def _update_and_maybe_create_winfos(self, t, reftype, update_existing=False):
        out = super()._update_and_maybe_create_winfos(t, reftype, update_existing)
        self._label(t)
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._cur_op = str(func.overloadpacket.__name__)
        return super().__torch_dispatch__(func, types, args, kwargs)

    # --- moments ----------------------------------------------------------------------------
    def _tick(self, total: int) -> None:
        # moments are found again by (phase, total): the first time the phase reaches its peak
        label = self._capture_at.get((self.phase, total))
        if label is not None and label not in self.captures:
            self.captures[label] = self.live(total)

    def set_phase(self, phase: str) -> None:
        super().set_phase(phase)
        self._tick(self._total())

    def _update_peak_stats(self, peak_state) -> None:  # noqa: ARG002
        super()._update_peak_stats(peak_state)
        self._tick(self._total())

    def live(self, total: int) -> dict:
        state_storages = set()
        if self._optimizer is not None:
            for st in self._optimizer.state.values():
                for v in st.values():
                    if isinstance(v, torch.Tensor):
                        state_storages.add(id(v.untyped_storage()))
        rows = []
        for st, (winfo, _w) in list(self._WINFO.items()):
            if winfo.mem_consumed <= 0:
                continue
            cat = _CAT.get(winfo.reftype, str(winfo.reftype))
            if cat == "optimizer":
                cat = "optimizer_state" if id(st) in state_storages else "optimizer_step_temp"
            shape, dtype, op, where, born = getattr(winfo, "meta", ((), "?", "?", "?", "?"))
            rows.append({"shape": list(shape), "dtype": dtype, "category": cat, "op": op,
                         "module": where, "born": born, "bytes": int(winfo.mem_consumed)})
        return {"phase": self.phase, "total_bytes": int(total),
                "sum_of_live_bytes": int(sum(r["bytes"] for r in rows)), "tensors": rows}


def _run(spec: dict, capture_at: dict | None):
    from torch._subclasses.fake_tensor import FakeTensorMode

    import contextlib

    # images: real CPU tensors (Qwen3-VL reads its grids as Python ints), as measure runs them
    fake_mode = None if spec.get("image_tokens") else FakeTensorMode()
    model, optimizer, input_ids, labels, trainable, total = prepare(spec, fake_mode)
    tr = _AnatomyTracker(optimizer, capture_at)
    tr.track_external(model, optimizer, input_ids, labels)
    with (_untraced_packed_check() if fake_mode else contextlib.nullcontext()), fake_mode or contextlib.nullcontext(), tr:
        _train_steps(spec, model, optimizer, input_ids, labels, tr, tr.set_phase)
    return tr, trainable, total


def group(tensors: list[dict]) -> list[dict]:
    """Group live tensors by (category, shape, dtype, op) with counts and bytes, largest first."""
    g: dict[tuple, dict] = {}
    for r in tensors:
        key = (r["category"], tuple(r["shape"]), r["dtype"], r["op"])
        e = g.setdefault(key, {"category": key[0], "shape": list(key[1]), "dtype": key[2],
                               "op": key[3], "count": 0, "bytes": 0, "modules": defaultdict(int)})
        e["count"] += 1
        e["bytes"] += r["bytes"]
        e["modules"][_module_pattern(r["module"])] += 1
    out = []
    for e in sorted(g.values(), key=lambda e: (-e["bytes"], e["category"])):
        e["modules"] = dict(sorted(e["modules"].items(), key=lambda kv: -kv[1]))
        out.append(e)
    return out


def _module_pattern(fqn: str) -> str:
    """'PeftModelForCausalLM.base_model.model.model.layers.3.mlp' -> '...layers.N.mlp'."""
    s = ".".join("N" if p.isdigit() else p for p in fqn.split("."))
    i = s.find(".layers.N")
    if i >= 0:
        return "…" + s[i:]
    return s.rsplit(".", 1)[-1]


def explain_peak(spec: dict, phases: bool = False) -> dict:
    """Tensors alive at the global peak (and, with ``phases``, at each phase's peak)."""
    spec = normalize_spec(spec)
    first, trainable, total = _run(spec, None)
    capture = {(first.peak_phase, first.peak_bytes): "global"}
    if phases:
        for ph, phase_total in first.phase_peak.items():
            if ph != "setup":
                capture.setdefault((ph, phase_total), ph)
    second, _, _ = _run(spec, capture)
    if second.peak_bytes != first.peak_bytes:
        raise RuntimeError("the two runs differ: the op sequence is not deterministic")
    result = {
        "peak_bytes": first.peak_bytes,
        "peak_phase": first.peak_phase,
        "peak_bytes_by_phase": {k: v for k, v in first.phase_peak.items() if k != "setup"},
        "breakdown_at_peak": first.breakdown(),
        "trainable_params": trainable,
        "total_params": total,
        "moments": {},
    }
    for label, cap in second.captures.items():
        cap = dict(cap)
        cap["groups"] = group(cap.pop("tensors"))
        result["moments"][label] = cap
    return result


def format_report(res: dict, max_rows: int = 40) -> str:
    lines = [f"peak {res['peak_bytes']:,} B at {res['peak_phase']}",
             "phase peaks: " + ", ".join(f"{k} {v:,}" for k, v in res["peak_bytes_by_phase"].items())]
    for label, cap in res["moments"].items():
        lines.append(f"\n== {label}: {cap['phase']}  total {cap['total_bytes']:,} B "
                     f"(sum of listed {cap['sum_of_live_bytes']:,})")
        lines.append(f"{'category':<20}{'shape':<26}{'dtype':<10}{'op':<34}{'n':>5}{'bytes':>16}  module")
        for e in cap["groups"][:max_rows]:
            mods = ", ".join(f"{m}×{n}" for m, n in e["modules"].items())
            lines.append(f"{e['category']:<20}{str(tuple(e['shape'])):<26}{e['dtype']:<10}"
                         f"{e['op']:<34}{e['count']:>5}{e['bytes']:>16,}  {mods}")
        if len(cap["groups"]) > max_rows:
            rest = cap["groups"][max_rows:]
            lines.append(f"... {len(rest)} more groups, {sum(e['bytes'] for e in rest):,} B")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", help="a JSON file with one spec (or '-' for stdin)")
    ap.add_argument("--phases", action="store_true", help="also list the live tensors at each phase's peak")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", type=int, default=40)
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    spec = json.load(sys.stdin if a.spec == "-" else open(a.spec))
    res = explain_peak(spec, phases=a.phases)
    print(json.dumps(res, indent=1) if a.json else format_report(res, a.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
