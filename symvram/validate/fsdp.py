"""Check the ZeRO-3 terms against PyTorch's own FSDP2 (needs torch, transformers, peft).

The model of ``spec`` (see ``symvram.validate.spec``) is built on the meta device, materialised as
FakeTensors, wrapped with ``fully_shard`` per decoder layer and then at the root (with the stack's
``MixedPrecisionPolicy`` when it has one: fp32 storage, bf16 compute, fp32 reduce) over a fake process
group of ``world_size`` ranks (``torch.testing._internal.distributed.fake_pg``: collectives return at
once, nothing is communicated), and trained for two steps under FakeTensorMode. PyTorch's
``FSDPMemTracker`` sorts every live byte of rank 0 into FSDP's categories; the largest value each
category reaches, and the peak of the step, are compared with the per-GPU terms of the ZeRO-3 ledger:

* sharded parameters ↔ ``weights`` (+ ``adapters``) = P β_w / N;
* sharded gradients ↔ ``grads`` = P_train β_g / N;
* optimizer states (read from ``optimizer.state`` after the steps) ↔ ``optimizer_states`` +
  ``optimizer_steps``;
* unsharded parameters ↔ ``gathered_root`` + ``gathered_layer`` (the all-gather outputs are a category
  of their own);
* the peak ↔ the largest moment of the ledger.

A fake group runs every collective synchronously, yet the buffers live exactly as long as on a GPU:
FSDP2 keeps the all-gather outputs and reduce-scatter inputs alive by explicit references released
on events (``AllGatherState``, ``reduce_scatter_states``), not by the caching allocator's stream
bookkeeping, so the prefetched layer's all-gather output is allocated — and counted — when the
prefetch is issued. What a real GPU adds is outside ``max_memory_allocated``: the per-stream pools'
fragmentation, reported by ``memory_reserved``.
"""
from __future__ import annotations

import contextlib
import warnings

import torch

from ..errors import UserError
from ..evaluate import Breakdown, evaluate, substitution
from ..ledger import build_ledger
from ..ledger.terms import Role
from ..scenario import Scenario
from ..symbols import SYMBOLS
from .spec import from_scenario

_TOTAL = "Total"
CATEGORIES = ("sharded_params", "sharded_grads", "optimizer_states", "unsharded_params")


def _process_group(world_size: int):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_world_size() == world_size and dist.get_backend() == "fake":
            return init_device_mesh("cpu", (world_size,))
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    return init_device_mesh("cpu", (world_size,))


def _unit(fqn: str) -> str:
    """The FSDP unit a module belongs to: ``…layers.N`` for a decoder layer's modules, else the root.

    >>> _unit("FSDPLlamaForCausalLM.model.layers.20.input_layernorm"), _unit("Global")
    ('layers.20', 'root')
    """
    parts = fqn.split(".")
    return next((f"layers.{parts[i + 1]}" for i, p in enumerate(parts[:-1]) if p == "layers"), "root")


def _tracker_class():
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from .measure import _ForwardModules

    class MaxTracker(FSDPMemTracker):
        """FSDPMemTracker that also keeps the largest value each category reaches."""

        def __init__(self, *args):
            super().__init__(*args)
            self._mod_tracker = _ForwardModules()   # no ModTracker backward hooks: they keep tensors alive
            self.maxima: dict[str, int] = {}
            self.suspended = 0
            self.op = ""
            self.by_unit: dict[str, int] = {}   # the largest total in each phase of each FSDP unit
            self.peak_at: dict = {_TOTAL: 0}   # the categories at the largest total, and where it happened

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.suspended:  # see _untracked_sharding_propagation
                return func(*args, **(kwargs or {}))
            self.op = str(func)
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state) -> None:
            super()._update_peak_stats(peak_state)
            for snap in self._curr_mem_snap.values():
                for key, value in snap.items():
                    name = getattr(key, "value", key)
                    self.maxima[name] = max(self.maxima.get(name, 0), int(value))
                phase = "optimizer" if self._in_opt else "backward" if self._mod_tracker.is_bw else "forward"
                where = max(self._mod_tracker.parents, key=len, default="")
                total = int(snap[_TOTAL])
                unit = f"{phase} {_unit(where)}"
                self.by_unit[unit] = max(self.by_unit.get(unit, 0), total)
                if total > self.peak_at[_TOTAL]:
                    self.peak_at = {**{getattr(k, "value", k): int(v) for k, v in snap.items()},
                                    "where": f"{phase} {where}".strip(), "op": self.op}

    return MaxTracker


class CollectiveBytes:
    """Bytes rank 0 sends per collective, from the c10d ops FSDP2 dispatches (a dispatch mode, as
    CommDebugMode is, that also reads their sizes). Ring convention: an all-gather or reduce-scatter of a
    full tensor S over n ranks sends (n − 1)/n · S = (n − 1) × the shard from each rank."""

    OPS = {"c10d._allgather_base_": "allgather", "c10d._reduce_scatter_base_": "reduce_scatter",
           "c10d.allreduce_": "allreduce"}

    def __init__(self, world_size: int) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self
        self.world_size = world_size
        self.sent: dict[str, int] = {}

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kind = counter.OPS.get(str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func))
                if kind is None:
                    kind = counter.OPS.get(str(func).rsplit(".", 1)[0])
                if kind is not None:
                    counter.add(kind, [a for a in args if isinstance(a, torch.Tensor)]
                                + [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)])
                return func(*args, **(kwargs or {}))

        self.mode = _Mode()

    def add(self, kind: str, tensors: list) -> None:
        n = self.world_size
        sizes = [t.numel() * t.element_size() for t in tensors]
        if kind == "allreduce":
            sent = 2 * (n - 1) * sizes[0] // n
        else:
            sent = (n - 1) * min(sizes[:2])   # (output, input): the shard is the smaller one
        self.sent[kind] = self.sent.get(kind, 0) + sent

    def reset(self) -> None:
        self.sent = {}


@contextlib.contextmanager
def _untracked_sharding_propagation(tracker):
    """Leave DTensor's sharding propagation out of the count.

    The first time DTensor meets an op schema it runs the op once on fake tensors of the *global*
    shapes to learn the output's shape and stride (``ShardingPropagator._propagate_tensor_meta_non_cached``,
    cached per schema afterwards). It uses the active FakeTensorMode, i.e. ours, so the tracker counted
    those full-size tensors: for the foreach AdamW step of step 1, three unsharded parameter-sized sets
    (3 P β, whatever N). With real tensors the propagation runs in a private FakeTensorMode and
    allocates nothing.
    """
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    orig = ShardingPropagator._propagate_tensor_meta_non_cached

    def _propagate_tensor_meta_non_cached(self, op_schema):
        tracker.suspended += 1
        try:
            return orig(self, op_schema)
        finally:
            tracker.suspended -= 1

    ShardingPropagator._propagate_tensor_meta_non_cached = _propagate_tensor_meta_non_cached
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = orig


def _local_bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def measure_fsdp(spec: dict, world_size: int) -> dict:
    """Rank 0's bytes under FSDP2 with ``world_size`` fake ranks, by category (see module docstring)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from .measure import _DTYPES, _fakeify, _untraced_packed_check, build_model, build_optimizer, normalize_spec

    spec = normalize_spec(spec)
    mesh = _process_group(world_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = build_model(spec)
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    _fakeify(model, fake)   # as the one-device measurement does: tied weights stay tied (to_empty would untie them)
    with fake:
        policy = {} if spec.get("mp_policy", "none") == "none" else {"mp_policy": MixedPrecisionPolicy(
            param_dtype=_DTYPES[spec["mp_policy"]], reduce_dtype=torch.float32)}
        for module in model.modules():
            if type(module).__name__.endswith("DecoderLayer"):
                fully_shard(module, mesh=mesh, **policy)
        fully_shard(model, mesh=mesh, **policy)
        optimizer = build_optimizer(spec, [p for p in model.parameters() if p.requires_grad])
        ids = torch.randint(0, int(model.config.vocab_size), (int(spec["batch"]), int(spec["seq"])))
        tracker = _tracker_class()(model, optimizer)
        tracker.track_inputs((ids,))
        collectives = CollectiveBytes(world_size)
        with _untraced_packed_check(), _untracked_sharding_propagation(tracker), tracker, collectives.mode:
            for _ in range(int(spec["steps"])):
                collectives.reset()   # keep the last step's
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                del loss
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                tracker.reset_mod_stats()
        states = sum(_local_bytes(v) for st in optimizer.state.values() for v in st.values()
                     if isinstance(v, torch.Tensor))
    m = tracker.maxima
    return {
        "world_size": world_size,
        "sharded_params": m.get("Sharded Param", 0),
        "sharded_grads": m.get("Sharded Grad", 0),
        "optimizer_states": states,
        "unsharded_params": m.get("Unsharded Param", 0),
        "unsharded_grads": m.get("Unsharded Grad", 0),
        "peak_bytes": int(tracker.get_tracker_snapshot("peak")[torch.device("cpu")][_TOTAL]),
        "peak_at": tracker.peak_at,   # the categories at the peak and the module running then
        "by_unit": tracker.by_unit,
        "comm_bytes": dict(collectives.sent),   # sent by rank 0 in the last step, per collective kind
        "versions": {"torch": torch.__version__},
    }


# FSDPMemTracker's categories (torch/distributed/_tools/fsdp2_mem_tracker.py:35 _FSDPRefType) of the ledger's roles
FSDP_CATEGORY = {Role.WEIGHT: "sharded_params", Role.ADAPTER: "sharded_params", Role.GRADIENT: "sharded_grads",
                 Role.OPTIMIZER_STATE: "optimizer_states", Role.STEP_COUNT: "optimizer_states",
                 Role.GATHERED_WEIGHT: "unsharded_params"}


def expected(bd: Breakdown) -> dict[str, int]:
    """The same categories from the ZeRO-3 ledger of one GPU: its terms summed by role (``FSDP_CATEGORY``)."""
    out = dict.fromkeys(CATEGORIES, 0)
    for t in bd.ledger.terms:
        if t.role in FSDP_CATEGORY and t.block != "paged":
            out[FSDP_CATEGORY[t.role]] += bd.terms[t.key]
    return out


def compare_fsdp(sc: Scenario, world_size: int, measured: dict | None = None) -> dict:
    """Measure ``sc`` (full or LoRA) under FSDP2 with ``world_size`` ranks (or take an earlier ``measured`` of
    the same spec); estimate, measured, error."""
    shape = sorted(n for n, _ in sc.overrides if SYMBOLS[n].group == "model")
    if shape:
        raise UserError(f"--set {', '.join(shape)}: the measured model is built from the preset or config.json, "
                        "not from overrides; write a config.json with those dimensions instead")
    sc = sc.with_changes(zero=3, gpus=world_size, device="cpu")
    spec = from_scenario(sc)
    spec["device"] = "fake"
    measured = measured or measure_fsdp(spec, world_size)
    bd = evaluate(sc)
    est = expected(bd)
    rows = {c: {"estimate": est[c], "measured": measured[c],
                "error": (est[c] - measured[c]) / measured[c] if measured[c] else None} for c in CATEGORIES}
    peak = {"estimate": bd.peak, "estimate_moment": bd.peak_moment, "measured": measured["peak_bytes"],
            "measured_at": measured["peak_at"]["where"]}
    return {"world_size": world_size, "spec": spec, "rows": rows, "peak": peak, "measured": measured,
            "comm": comm_rows(sc, measured["comm_bytes"])}


def expected_comm(sc: Scenario) -> dict[str, int]:
    """Bytes one GPU sends per step, by collective, from the communication ledger."""
    from ..ledger.comm import build_comm

    cm = build_comm(sc.structure)
    subs = substitution(build_ledger(sc.structure), sc.values())
    value = {x.key: int(x.expr.xreplace(subs)) for x in cm.terms}
    return {"allgather": value.get("allgather_forward", 0) + value.get("allgather_backward", 0),
            "reduce_scatter": value.get("reduce_scatter_grads", 0)}


def comm_rows(sc: Scenario, counted: dict[str, int]) -> dict[str, dict]:
    est = expected_comm(sc)
    return {k: {"estimate": est[k], "measured": counted.get(k, 0),
                "error": (est[k] - counted[k]) / counted[k] if counted.get(k) else None} for k in est}


def cli_text(sc: Scenario, world_size: int, fmt: str = "table", units: str = "GiB") -> str:
    """``symvram validate --world-size N``: the comparison as a table or JSON."""
    import json

    from ..present.tables import render_rows
    from ..units import fmt_bytes

    result = compare_fsdp(sc, world_size)
    if fmt == "json":
        return json.dumps(result, indent=2)
    rows = [["rank 0 under FSDP2", "estimate (bytes)", "measured (bytes)", f"measured ({units})", "error"]]
    for name, row in result["rows"].items():
        err = "—" if row["error"] is None else f"{100 * row['error']:+.3f} %"
        rows.append([name, f"{row['estimate']:,}", f"{row['measured']:,}", fmt_bytes(row["measured"], units), err])
    m, peak = result["measured"], result["peak"]
    for name, row in result["comm"].items():
        err = "—" if row["error"] is None else f"{100 * row['error']:+.3f} %"
        rows.append([f"{name} bytes sent per step", f"{row['estimate']:,}", f"{row['measured']:,}",
                     fmt_bytes(row["measured"], units), err])
    rows.append(["peak of the step", f"{peak['estimate']:,}", f"{peak['measured']:,}", fmt_bytes(peak["measured"], units),
                 f"{100 * (peak['estimate'] - peak['measured']) / peak['measured']:+.3f} %"])
    return (render_rows(rows, "lrrrr", "table") +
            f"\n\n{world_size} fake ranks, fully_shard per decoder layer then the root"
            + (f", MixedPrecisionPolicy(param_dtype={sc.mp_policy}, reduce_dtype=fp32)" if sc.mp_policy != "none" else "")
            + f", torch {m['versions']['torch']}; the estimate's peak is at {peak['estimate_moment']}, the measured "
            f"one at {peak['measured_at']}. A fake group runs collectives synchronously, but FSDP2 frees its "
            f"buffers by explicit references, so they live as on a GPU (see docs/sharding.md).")


__all__ = ["measure_fsdp", "expected", "compare_fsdp", "cli_text", "CATEGORIES"]
