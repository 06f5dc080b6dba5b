"""What if one or more symbols took other values? Both ledgers, term by term, with the change.

``rank``, ``batch``, ``seq`` (the registry symbols that are Scenario fields, ``scenario.FIELD_SYMBOLS``)
change the scenario; every other symbol — model dimensions, bytes per element, quantization constants —
becomes an override. A symbol the method's ledger does not contain is refused, not silently ignored.

>>> from symvram.scenario import Scenario
>>> w = whatif(Scenario.create("7b", method="lora", rank=64), {"rank": 16})
>>> w.before.derived["P_train"], w.after.derived["P_train"]
(159907840, 39976960)
>>> w.term_delta("adapters") == 2 * (39976960 - 159907840)
True
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import UserError, did_you_mean
from ..evaluate import Breakdown, evaluate
from ..ledger import Ledger, Moment, Term, build_ledger
from ..scenario import Scenario
from ..symbols import SYMBOLS


STRUCTURAL_FIELDS = {"gpus", "tp"}  # Scenario fields that switch sharding on, so they change the ledger itself


@lru_cache(maxsize=128)
def ledger_symbols(ledger: Ledger) -> frozenset[str]:
    """Names of the leaf symbols the ledger's terms depend on (derived quantities expanded)."""
    names: set[str] = set()
    for t in ledger.terms:
        names |= {str(s) for s in ledger.expand(t.expr).free_symbols}
    return frozenset(names)


def check_symbol(sc: Scenario, name: str, option: str = "--set") -> None:
    """Refuse a name that is not a leaf symbol of this scenario's ledger, in one line."""
    if name not in SYMBOLS:
        leaves = [n for n, d in SYMBOLS.items() if d.group != "derived"]
        raise UserError(f"{option}: unknown symbol {name!r}{did_you_mean(name, leaves)}")
    from ..timing import STEP_TIME

    if SYMBOLS[name].symbol in STEP_TIME.free_symbols:
        raise UserError(f"{option} {name}: {name} ({SYMBOLS[name].meaning}) prices the step time, not memory; "
                        "estimate --gpu CARD prints the step time (with --mfu, --interconnect, --set overlap=…)")
    ledger = build_ledger(sc.structure)
    defined = {str(s): e for s, e in ledger.definitions}
    if name in defined:
        raise UserError(f"{option} {name}: {name} ({SYMBOLS[name].meaning}) is derived here, {name} = "
                        f"{ledger.expand(defined[name])}; change the symbols it is built from")
    if SYMBOLS[name].group == "derived":
        raise UserError(f"{option} {name}: {SYMBOLS[name].meaning} does not occur with --method {sc.method}")
    if name in STRUCTURAL_FIELDS:  # --set tp=2 is --tp 2: it may add terms the current ledger lacks
        return
    if name not in ledger_symbols(ledger):
        raise UserError(f"{option} {name}: {SYMBOLS[name].meaning} does not apply to --method {sc.method} "
                        f"(no term of its ledger contains {name})")


def apply_changes(sc: Scenario, changes: dict[str, int | float]) -> Scenario:
    """The scenario with ``changes`` applied (``Scenario.create`` turns batch, seq, rank … into fields)."""
    for name in changes:
        check_symbol(sc, name)
    return sc.with_changes(overrides={**dict(sc.overrides), **changes})


@dataclass(frozen=True)
class WhatIf:
    """Two breakdowns and the changes that lead from one to the other."""

    before: Breakdown
    after: Breakdown
    changes: dict[str, int | float]

    def terms(self) -> list[Term]:
        """Every term of either ledger (a change of t or N can change the structure), after's formula first."""
        after = {t.key: t for t in self.after.ledger.terms}
        return [after.pop(t.key, t) for t in self.before.ledger.terms] + list(after.values())

    def moments(self) -> list[Moment]:
        after = {m.key: m for m in self.after.ledger.moments}
        return [after.pop(m.key, m) for m in self.before.ledger.moments] + list(after.values())

    def term_delta(self, key: str) -> int:
        return self.after.terms.get(key, 0) - self.before.terms.get(key, 0)

    def block_delta(self, block: str) -> int:
        return self.after.blocks[block] - self.before.blocks[block]

    def moment_delta(self, key: str) -> int:
        return self.after.moments.get(key, 0) - self.before.moments.get(key, 0)

    @property
    def peak_delta(self) -> int:
        return self.after.peak - self.before.peak

    def time(self) -> dict:
        """Matmul FLOPs per step and per token, before and after (the time ledger beside the memory one)."""
        from ..timing import flops

        out = {}
        for side, bd in (("before", self.before), ("after", self.after)):
            f, sc = flops(bd.scenario), bd.scenario
            out[side] = {"flops_per_step": f.per_step, "flops_per_token": f.per_step / (sc.batch * sc.seq)}
        out["flops_per_token_change_percent"] = 100 * (out["after"]["flops_per_token"] / out["before"]["flops_per_token"] - 1)
        return out

    def symbol_values(self) -> list[tuple[str, int | float, int | float]]:
        """(name, before, after) of each changed symbol."""
        return [(n, self.before.values[n], self.after.values[n]) for n in self.changes]

    def __repr__(self) -> str:
        from ..rendering import render
        return render(self, "repr")

    def _repr_markdown_(self) -> str:
        from ..rendering import render
        return render(self, "markdown")

def whatif(sc: Scenario, changes: dict[str, int | float]) -> WhatIf:
    """Estimate ``sc`` and ``sc`` with ``changes`` (registry names → numbers)."""
    if not changes:
        raise UserError("what-if needs at least one --set SYMBOL=VALUE")
    after = apply_changes(sc, changes)
    return WhatIf(evaluate(sc), evaluate(after), dict(changes))
