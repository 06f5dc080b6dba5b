r"""How results show themselves: a short ``repr`` in a console, Markdown with formulas in Jupyter.

The result classes (Breakdown, Ledger, Term …) call ``symvram.rendering.render(self, "repr")`` (or
``"markdown"``, ``"latex"``) from one-line methods; this module registers the renderers, and the registry
imports it by name the first time something is displayed, so nothing below the render layer imports it.
Numbers come from ``evaluate``; this module formats them.

>>> from symvram.api import estimate
>>> bd = estimate("7b", method="full")
>>> bd                                   # doctest: +ELLIPSIS
<Breakdown 7b full: peak ... GiB at ...; base 13.04 GiB, trainable 65.19 GiB, activations ... GiB>
>>> bd.ledger.by_key["grads"]
Term('grads', trainable: P_train*bytes_grad)
>>> print(bd.ledger.by_key["grads"]._repr_latex_())
$M_{\mathrm{grad}} = P_{\mathrm{train}} \cdot \beta_{g}$
"""
from __future__ import annotations

from ..analysis.diagnose import Diagnosis
from ..analysis.fit import FitResult
from ..analysis.plan import PlanResult
from ..analysis.sensitivity import SensitivityResult
from ..analysis.whatif import WhatIf
from ..evaluate import Breakdown
from ..ledger.terms import BLOCKS, Ledger, Term
from ..rendering import renders
from ..scenario import METHODS
from ..symbols import latex
from ..units import fmt_bytes
from . import reports
from .tables import markdown_cell, moment_label, render_rows

LEDGER_BLOCKS = (*BLOCKS, "transient", "host", "paged")  # host: offloaded to CPU memory; paged: unified memory


def term_math(t: Term) -> str:
    """``label = expression`` in LaTeX (no dollars)."""
    return f"{t.label} = {latex(t.expr)}"


@renders(Term, "repr")
def term_repr(t: Term) -> str:
    return f"Term({t.key!r}, {t.block}: {t.expr})"


@renders(Term, "latex")
def term_latex(t: Term) -> str:
    return f"${term_math(t)}$"


@renders(Breakdown, "repr")
def breakdown_repr(bd: Breakdown, units: str = "GiB") -> str:
    blocks = ", ".join(f"{b} {fmt_bytes(bd.blocks[b], units)}" for b in BLOCKS)
    moment = moment_label(bd.ledger, bd.peak_moment)
    return (f"<Breakdown {bd.scenario.model.name} {bd.scenario.method}: peak {fmt_bytes(bd.peak, units)} "
            f"at {moment}; {blocks}>")


def definitions_markdown(led: Ledger) -> str:
    """The derived quantities (P, P_train, P_LoRA …) a ledger's formulas use, as one Markdown line."""
    return "where " + ", ".join(f"${latex(s)} = {latex(e)}$" for s, e in led.definitions) if led.definitions else ""


@renders(Breakdown, "markdown")
def breakdown_markdown(bd: Breakdown, units: str = "GiB") -> str:
    """``symvram estimate --method … --format markdown`` (every term with its formula and value, the
    block sums, the moments and the peak), then the definitions its formulas use."""
    from .tables import detail

    return "\n\n".join(part for part in (detail(bd, units, "markdown"), definitions_markdown(bd.ledger)) if part)


@renders(Ledger, "repr")
def ledger_repr(led: Ledger) -> str:
    counts = ", ".join(f"{b} {len(led.block_terms(b))}" for b in LEDGER_BLOCKS if led.block_terms(b))
    return f"<Ledger {len(led.terms)} terms ({counts}); moments {', '.join(m.key for m in led.moments)}>"


@renders(Ledger, "markdown")
def ledger_markdown(led: Ledger) -> str:
    """The symbolic ledger: every term's formula and reason, the definitions, and each moment's terms."""
    rows = [["block", "term", "formula", "why"]]
    for block in LEDGER_BLOCKS:
        for t in led.block_terms(block):
            rows.append([block, t.key, f"${term_math(t)}$", markdown_cell(t.why)])
    lines = [render_rows(rows, "llll", "markdown"), ""]
    if led.definitions:
        lines += [definitions_markdown(led), ""]
    moments = [["moment of the step", "live terms"]]
    for m in led.moments:
        moments.append([m.label, "$" + " + ".join(led.by_key[k].label for k in m.terms) + "$"])
    lines.append(render_rows(moments, "ll", "markdown"))
    lines += ["", "peak $= \\max$ over the moments"]
    return "\n".join(lines)


@renders(WhatIf, "repr")
def whatif_repr(w: WhatIf, units: str = "GiB") -> str:
    """One line: the changes and what they do to the peak."""
    plain = reports._number
    change = ", ".join(f"{n} {plain(x)} → {plain(y)}" for n, x, y in w.symbol_values())
    return (f"<WhatIf {w.before.scenario.model.name} {w.before.scenario.method}: {change}: peak "
            f"{fmt_bytes(w.before.peak, units)} → {fmt_bytes(w.after.peak, units)} "
            f"({100 * w.peak_delta / w.before.peak:+.1f} %)>")


@renders(WhatIf, "markdown")
def whatif_markdown(w: WhatIf, units: str = "GiB") -> str:
    """Both ledgers term by term with the change, as ``symvram whatif --format markdown`` prints them."""
    return reports.whatif_text(w, units, "markdown")


@renders(FitResult, "repr")
def fit_text(r: FitResult, units: str = "GiB") -> str:
    """The answer of ``fit`` as ``symvram fit`` prints it (a few lines)."""
    return reports.fit_text(r, units)


@renders(SensitivityResult, "repr")
def sensitivity_repr(res: SensitivityResult, units: str = "GiB", top: int = 4) -> str:
    """One line: the active moment and the largest elasticities."""
    knobs = ", ".join(f"{r.knob} {r.elasticity:.3f}" for r in res.rows[:top])
    more = f", … ({len(res.rows)} knobs)" if len(res.rows) > top else ""
    moment = moment_label(res.breakdown.ledger, res.moment)
    return (f"<SensitivityResult {res.breakdown.scenario.model.name} {res.breakdown.scenario.method}: peak "
            f"{fmt_bytes(res.peak, units)} at {moment}; elasticities {knobs}{more}>")


@renders(PlanResult, "repr")
def plan_repr(r: PlanResult, units: str = "GiB") -> str:
    """One line: the fewest GPUs for each method without offload (with offload when nothing else fits)."""
    parts = []
    for method in [m for m in METHODS if any(x.method == m for x in r.rows)]:
        best = r.best(method, offload=False) or r.best(method)
        parts.append(f"{method} {best.gpus} ({best.strategy.name})" if best else f"{method} > {r.max_gpus}")
    name = r.rows[0].at.scenario.model.name if r.rows else "?"
    return f"<PlanResult {name} on {r.card.name}, {fmt_bytes(r.budget, units)} per GPU: fewest GPUs {'; '.join(parts)}>"


@renders(PlanResult, "markdown")
def plan_markdown(r: PlanResult, units: str = "GiB") -> str:
    """Every strategy × method with its GPU count, as ``symvram plan --format markdown`` prints it."""
    return reports.plan_text(r, r.rows[0].at.scenario, units, "markdown")


@renders(Diagnosis, "repr")
def diagnosis_repr(d: Diagnosis, units: str = "GiB") -> str:
    sc = d.estimate.scenario
    if d.side == "fits":
        verdict = f"fits with {fmt_bytes(d.budget - d.estimate.peak, units)} to spare"
    else:
        verdict = (f"{d.cause} side over at the {d.moment_label}, peak {fmt_bytes(d.estimate.peak, units)} > budget {fmt_bytes(d.budget, units)}; "
                   + (f"fits after {len(d.remedies)} remedies" if d.fixed else "the remedies are not enough"))
    return f"<Diagnosis {sc.model.name} {sc.method} on {d.card.name}: {verdict}>"


@renders(Diagnosis, "markdown")
def diagnosis_markdown(d: Diagnosis, units: str = "GiB") -> str:
    """The triage as ``symvram diagnose`` prints it."""
    return f"```text\n{reports.diagnosis_text(d, units)}\n```"
