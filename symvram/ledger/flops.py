"""The FLOPs ledger: every matmul of one training step as a SymPy term over the registry symbols.

Same style as the memory ledger: a ``Term`` per line (its ``block`` is the phase: forward | backward |
recompute), built per Structure and cached. Counted as ``torch.utils.flop_counter`` counts (the
independent check in ``symvram validate``): a matmul of (m×k)·(k×n) is 2·m·k·n; attention is QKᵀ and
AV over the full s×s scores (causal masking is not discounted), and the SDPA kernel's backward
recomputes the scores (5 matmuls against eager attention's 4, each needed only for the operands that
need a gradient). Elementwise work — norms, activations, softmax, the loss, the optimizer's update —
is not a matmul and is priced as memory traffic in ``symvram.timing`` instead.

* forward: 2·T·d_in·d_out per linear (T = b·s tokens; a routed expert sees T·k_E of them), the
  router, attention, the lm_head, the LoRA adapters (x·A, then ·B);
* backward: an input gradient wherever the input needs one (under LoRA not in the first layer's
  attention input: the frozen embedding needs no gradient), a weight gradient only for trainable
  weights — so LoRA's backward is about half of full fine-tuning's — and the adapters' own gradients;
* recompute: checkpointing runs each layer's forward again in backward, stopping early (torch's
  non-reentrant checkpoint) once the last saved tensor is rebuilt: the down projection's product,
  which nothing saves, is skipped unless a post-norm or the expert routing weights read it.

>>> from symvram.ledger.structure import Structure
>>> fl = build_flops(Structure(method="full"))
>>> fl.phase_expr("backward") - 2 * fl.phase_expr("forward")   # full: 2 × forward, plus SDPA's score recompute
2*batch*head_dim*heads*layers*seq**2
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import sympy as sp

from ..symbols import sym
from .architecture import L, V, h, k_e, nh
from .structure import Structure
from .activations import checkpointed_layers, embedding_output_grad, needs_grad, sac_matmuls
from .functions import ceil_div
from .terms import Role, Term
from .weights import model_lora_linears

b, seq, r, t = sym("batch"), sym("seq"), sym("rank"), sym("tp")
T = b * seq
PHASES = ("forward", "backward", "recompute")
COUNTER = "torch.utils.flop_counter (2·m·k·n per matmul)"
PEFT = "peft tuners/lora/layer.py"


@dataclass(frozen=True)
class FlopsLedger:
    """The matmul FLOPs of one micro-batch's step on one GPU, by phase."""

    terms: tuple[Term, ...]

    @cached_property
    def by_key(self) -> dict[str, Term]:
        return {x.key: x for x in self.terms}

    def phase_terms(self, phase: str) -> tuple[Term, ...]:
        return tuple(x for x in self.terms if x.block == phase)

    def phase_expr(self, phase: str) -> sp.Expr:
        return sp.Add(*(x.expr for x in self.phase_terms(phase)))

    @cached_property
    def total(self) -> sp.Expr:
        return sp.Add(*(x.expr for x in self.terms))


def _tokens(s_: Structure, m) -> sp.Expr:
    """Rows a weight multiplies: T, or T·k_E for a routed expert (count E)."""
    return T * k_e if s_.arch.moe and m.count != 1 and m in s_.arch.moe_weights else T


MIXER_GROUPS = ("attn_in", "attn_out", "ssm_in")   # what a Mamba-2 mixer's bare parameters read (not an expert's)


def _layer(s_: Structure, first: bool) -> dict[str, sp.Expr]:
    """FLOPs of one decoder layer by kind (forward, input grads, weight grads, adapters, attention)."""
    fam = s_.arch
    g = needs_grad(s_, first)
    # a Mamba-2 mixer's bare parameters (conv1d, dt_bias, A_log, D, the gated norm) multiply no matrix: the scan's
    # own term counts the conv
    weights = fam.linears + tuple(m for m in fam.moe_weights if not (fam.mamba and m.input_group in MIXER_GROUPS))
    fwd = {m.name: 2 * _tokens(s_, m) * m.d_in * m.d_out for m in weights}
    out = {"forward": sp.Add(*fwd.values())}
    out["input_grad"] = sp.Add(*(fwd[m.name] for m in weights if g[m.input_group]))
    # a weight gradient: full fine-tuning, or a LoRA'd bare parameter (router, fused experts), which PEFT
    # merges (W + B·A) before the op runs, so the merged weight needs its gradient
    out["weight_grad"] = sp.Add(*(fwd[m.name] for m in weights
                                  if s_.method == "full" or (m.name in s_.targets and m in fam.moe_weights)))
    lora_fwd = lora_bwd = dora = sp.Integer(0)
    for m in (fam.linear(n) for n in s_.targets if n in fam.linear_map):   # (not a target outside the layers)
        if m in fam.linears:   # nn.Linear: x·A (d_in → r), then ·B (r → d_out), per token
            lora_fwd += 2 * T * r * (m.d_in + m.d_out)
            if s_.dora:   # the weight norm: ΔW = lora_B(lora_A(eye(d_in))) every forward, detached (no backward)
                dora += 2 * m.d_in * r * (m.d_in + m.d_out)
            if s_.dora and s_.dropout:   # the base result again, from the dropped-out input (variants.py)
                dora += 2 * T * m.d_in * m.d_out
                lora_bwd += 2 * T * m.d_in * m.d_out if g[m.input_group] else 0
            # B: its weight and its input (A's output) gradients; A: its weight, and its input if needed
            lora_bwd += 2 * T * r * (2 * m.d_out + m.d_in + (m.d_in if g[m.input_group] else 0))
        else:                  # a parameter: the delta B·A per copy (E for fused experts), per step, not per token
            delta = 2 * m.count * m.rank_factor * r * m.d_in * m.d_out
            # PEFT's register_parametrization evaluates a stacked expert's delta once more to check it
            lora_fwd += delta * (2 if m.count != 1 else 1)
            lora_bwd += 2 * delta
    out["lora_forward"], out["lora_backward"], out["dora_forward"] = lora_fwd, lora_bwd, dora
    out["scan_forward"], out["scan_backward"] = _mamba2_scan(s_, g["ssm_out" if fam.mixer == "parallel" else "attn_out"])
    d_qk, d_v = fam.attention_widths   # d_head both, but under latent attention
    qk, av = 2 * T * seq * nh * d_qk, 2 * T * seq * nh * d_v   # the two attention matmuls, full scores
    if not fam.attends:   # a Mamba-2 or MLP block: no attention
        qk = av = sp.Integer(0)
    out["attention_forward"] = qk + av
    if s_.attention == "sdpa":   # the fused kernel: one backward recomputing the scores (QKᵀ, dV, dP, dQ, dK)
        out["attention_backward"] = 3 * qk + 2 * av if g["attn_out"] else sp.Integer(0)
    else:                        # eager: autograd of QKᵀ and AV, per operand that needs a gradient
        scores = g["q"] or g["k"]
        out["attention_backward"] = qk * (g["q"] + g["k"]) + av * (scores + g["v"])
    # what checkpointing's early stop leaves out of the recompute: the down projection's product (or,
    # under LoRA on it, the B matmul after it) when no post-norm and no routing weight reads it
    # a block without an MLP (Nemotron-H's Mamba and attention blocks) ends with its mixer's output projection
    m = fam.mlp_output if fam.mlp_kind != "none" else next((x for x in fam.linears if x.input_group == "attn_out"), None)
    skipped = sp.Integer(0)
    # (an MoE layer whose ungated shared MLP runs after the routed experts ends with that MLP's down projection)
    last = not fam.moe or fam.extra("shared_expert_last")
    if m is not None and last and not any(n.at == "mlp_out" for n in fam.norms):
        # under DoRA the magnitude's gradient saves the LoRA result: nothing after the B matmul is skipped
        skipped = (0 if s_.dora else 2 * T * r * m.d_out) if m.name in s_.targets else fwd[m.name]
    out["recompute_skipped"] = skipped
    return out


def _mamba2_scan(s_: Structure, input_grad: bool) -> tuple[sp.Expr, sp.Expr]:
    """(forward, backward) FLOPs of a Mamba-2 mixer beyond its linears, on the torch path (mamba2_chunk_scan,
    modeling_nemotron_h.py:273-378): the five einsums' bmm per chunk and head — the scores C·Bᵀ (C_M² × N), their
    product with x (C_M² × d_M), the chunk states (d_M × N × C_M), the inter-chunk recurrence ((c+1)² × d_M·N) and C
    against the states (C_M × N × d_M) — and the depthwise conv1d (2·K per output element, s + K − 1 columns of
    d_i + 2·g·N channels, as the counter prices convolutions). Backward: every einsum operand and the conv's input need
    a gradient once the mixer's input does (both bmm, 2× forward); the conv's weight gradient only when it trains, priced
    as the counter prices it."""
    if not s_.arch.mamba:
        return sp.Integer(0), sp.Integer(0)
    n_M, d_M, N, g, C_M, K = (sym(n) for n in ("mamba_heads", "mamba_head_dim", "ssm_state", "mamba_groups",
                                               "mamba_chunk", "conv_kernel"))
    chunks = ceil_div(seq, C_M)
    heads = b * n_M
    einsums = 2 * heads * (chunks * C_M**2 * (N + d_M) + 2 * chunks * C_M * d_M * N + (chunks + 1)**2 * d_M * N)
    conv = 2 * b * (n_M * d_M + 2 * g * N) * (seq + K - 1) * K
    if not input_grad:
        return einsums + conv, sp.Integer(0)
    # the weight's gradient as the counter prices it: conv(input, grad_out) with the groups left out
    # (torch/utils/flop_counter.py:273-280), d_conv times the forward's
    weight_grad = conv * (n_M * d_M + 2 * g * N) if s_.method == "full" else 0
    return einsums + conv, 2 * einsums + conv + weight_grad


def _head_lora(s_: Structure) -> tuple[sp.Expr, sp.Expr]:
    """(forward, backward) FLOPs of LoRA outside the layers. lm_head's lora.Linear: x·A (h → r), ·B (r → V) per
    token; backward B's weight and input gradients, A's weight and input gradients (its input, the final norm's
    output, needs one). The embedding's lora.Embedding: the lookup of A is no matmul; after_A·B (r → h) per token,
    backward B's weight gradient and after_A's (peft tuners/lora/layer.py:1517). A model-level nn.Linear's (Gemma 4's
    per_layer_model_projection) as lm_head's, A's input gradient only where the token embeddings need one."""
    fwd = bwd = sp.Integer(0)
    if "lm_head" in s_.head_targets:
        fwd, bwd = 2 * T * r * (h + V), 4 * T * r * (h + V)
    if "embed_tokens" in s_.head_targets:
        fwd, bwd = fwd + 2 * T * r * h, bwd + 4 * T * r * h
    for m in model_lora_linears(s_):
        fwd += 2 * T * r * (m.d_in + m.d_out)
        bwd += 2 * T * r * (2 * m.d_out + m.d_in + (m.d_in if embedding_output_grad(s_) else 0))
    return fwd, bwd


def _per_layer(layers: tuple, key: str) -> sp.Expr:
    """L layers: (L − 1) later ones and the first (``layers``: ``_layers``'), which may differ under LoRA; for a
    family whose layers differ, each kind's count of later ones, and the first layer of its kind."""
    kinds, (later, first) = layers[2], (layers[0][key], layers[1][key])
    if kinds:
        return sp.expand(sp.Add(*(n * k[key] for n, k in kinds)) - later + first)
    return sp.expand((L - 1) * later + first) if later != first else L * later


def _every_layer(layers: tuple, key: str) -> sp.Expr:
    """``key`` of a later layer, for every layer (the first alike)."""
    return sp.Add(*(n * k[key] for n, k in layers[2])) if layers[2] else L * layers[0][key]


def _layers(s_: Structure) -> tuple:
    """(layer 0's kind as a later layer, as the first layer, (layers, a later layer) per kind if they differ)."""
    kinds = tuple((n, _layer(k, False)) for n, k in s_.layer_kinds) if s_.arch.kinds else ()
    return _layer(s_.first_layer, False), _layer(s_.first_layer, True), kinds


# the only fields the FLOPs ledger reads: structures that differ elsewhere (dtypes, optimizer, ZeRO) share it (options:
# a biased linear is an addmm, which op-level checkpointing saves uncounted: activations.sac_matmuls)
FLOPS_FIELDS = ("method", "family", "first_kind", "targets", "head_targets", "attention", "grad_checkpointing",
                "checkpoint_every", "checkpoint_ops", "tensor_parallel", "dora",
                "dropout", "modules_to_save", "options", "tower", "images", "train_vision")


def _tower_flops(s_: Structure) -> list[Term]:
    """--image-tokens N: the vision tower's matmuls (towers.toml [images], per image token; attention per image of
    N tokens). Its forward always runs; its backward only with --train-vision: full fine-tuning takes every weight's
    gradient and every input's but the pixels'; LoRA all-linear the adapters' and, through the frozen bases, every
    input's but block 0's qkv (its LayerNorm reads no-grad patches) and the pixels'. SDPA's backward: 5 matmuls."""
    n, source = b * sym("image_tokens"), "transformers models/qwen3_vl/modeling_qwen3_vl.py; " + COUNTER
    attn = b * sym("image_tokens")**2 * sym("tower_attn_flops")
    adapted = s_.lora and s_.tower_lora   # PEFT's all-linear put adapters on every tower linear
    rows = 2 * r * n * sym("tower_lora_rows")
    terms = [Term("fwd_tower", Role.FORWARD_FLOPS, n * sym("tower_flops") + attn + (rows if adapted else 0),
                  r"F_{\mathrm{tower}}", "the vision tower's forward: patch embedding, ViT blocks (attention per image), "
                  "mergers" + (", its LoRA adapters" if adapted else ""), source)]
    if s_.train_vision:
        skipped = sym("tower_conv_flops") + (sym("tower_first_flops") if s_.lora else 0)
        bwd = n * (sym("tower_flops") - skipped) + sp.Rational(5, 2) * attn
        if s_.lora:
            bwd += rows + 2 * r * n * (sym("tower_lora_rows") - sym("tower_lora_first"))
        else:
            bwd += n * sym("tower_flops")
        terms.append(Term("bwd_tower", Role.BACKWARD_FLOPS, bwd, r"F_{\nabla\mathrm{tower}}",
                          "the trained tower's backward: input gradients (not the pixels'" + ", nor block 0's qkv"
                          * s_.lora + "), " + ("its adapters' gradients and the gradient through them"
                                               if s_.lora else "every weight's gradient") + ", SDPA's 5 matmuls", source))
    return terms


def build_flops(s_: Structure) -> FlopsLedger:
    """The FLOPs ledger of one structure (built once per ``FLOPS_FIELDS`` and cached; no simplify)."""
    return _build_flops(s_.keep(FLOPS_FIELDS))


@lru_cache(maxsize=256)
def _build_flops(s_: Structure) -> FlopsLedger:
    lm_head = 2 * T * h * V
    split = 1 / t if s_.tensor_parallel else sp.Integer(1)   # Megatron: every matmul split t ways (vocab too)
    layers = _layers(s_)   # a later layer's and the first's, built once for every term
    head_fwd, head_bwd = _head_lora(s_)
    terms = [
        Term("fwd_layers", Role.FORWARD_FLOPS, _per_layer(layers, "forward"), r"F_{\mathrm{lin}}",
             "2·T·d_in·d_out per projection of every layer (a routed expert: T·k_E tokens)", COUNTER),
        Term("fwd_attention", Role.FORWARD_FLOPS, _per_layer(layers, "attention_forward"), r"F_{\mathrm{attn}}",
             "QKᵀ and AV per head over the full s×s scores (causal masking not discounted)", COUNTER),
        Term("fwd_lm_head", Role.FORWARD_FLOPS, lm_head, r"F_{\mathrm{head}}", "the lm_head: 2·T·h·V", COUNTER),
    ]
    scan = (_per_layer(layers, "scan_forward"), _per_layer(layers, "scan_backward"))
    if scan[0] != 0:
        terms.append(Term("fwd_mamba_scan", Role.FORWARD_FLOPS, scan[0], r"F_{\mathrm{SSD}}", "the Mamba-2 mixers' "
                          "chunked scan (five einsums per chunk and head) and causal conv1d (torch path)", COUNTER))
    if s_.lora:
        terms.append(Term("fwd_lora", Role.FORWARD_FLOPS, _per_layer(layers, "lora_forward") + head_fwd,
                          r"F_{\mathrm{LoRA}}", "the adapters: 2·T·r·(d_in + d_out) per target (a parameter target: "
                          "its B·A delta" + ("; the embedding's: 2·T·r·h" if "embed_tokens" in s_.head_targets else "")
                          + ")", PEFT))
    if s_.dora:
        terms.append(Term("fwd_dora", Role.FORWARD_FLOPS, _every_layer(layers, "dora_forward"), r"F_{\mathrm{DoRA}}",
                          "DoRA's weight norm: lora_B(lora_A(eye(d_in))) per target, 2·d_in·r·(d_in + d_out), per "
                          "step, not per token" + (" — and, with dropout, the base result again from the dropped-out "
                                                   "input: 2·T·d_in·d_out" if s_.dropout else ""),
                          "peft tuners/lora/dora.py DoraLinearLayer.get_lora_weight, forward; variants.py"))
    terms += [
        Term("bwd_input_grads", Role.BACKWARD_FLOPS, _per_layer(layers, "input_grad") + lm_head, r"F_{\nabla x}",
             "an input gradient for every projection whose input needs one, and the lm_head's", COUNTER),
        Term("bwd_attention", Role.BACKWARD_FLOPS, _per_layer(layers, "attention_backward"), r"F_{\nabla\mathrm{attn}}",
             "SDPA's backward recomputes the scores (5 matmuls); eager: one per operand needing a gradient",
             COUNTER),
    ]
    if scan[1] != 0:
        terms.append(Term("bwd_mamba_scan", Role.BACKWARD_FLOPS, scan[1], r"F_{\nabla\mathrm{SSD}}", "the scan's "
                          "einsums backward (both operands) and the conv1d's input (and, trainable, weight) gradient",
                          COUNTER))
    lm_head_trains = s_.method == "full" or "lm_head" in s_.modules_to_save   # its own weight, or PEFT's copy
    weight_grads = _per_layer(layers, "weight_grad") + (lm_head if lm_head_trains else 0)
    if weight_grads != 0:
        terms.append(Term("bwd_weight_grads", Role.BACKWARD_FLOPS, weight_grads, r"F_{\nabla W}",
                          "a weight gradient for every trainable weight (none for LoRA's frozen base)", COUNTER))
    if s_.lora:
        terms.append(Term("bwd_lora", Role.BACKWARD_FLOPS, _per_layer(layers, "lora_backward") + head_bwd,
                          r"F_{\nabla\mathrm{LoRA}}",
                          "the adapters' weight gradients and the gradient through them", PEFT))
    if s_.grad_checkpointing and s_.checkpoint_ops:   # torchtitan's op-level policy: the mms it does not save
        recompute = L * sp.Add(*(2 * T * d_in * d_out for d_in, d_out, _, saved in sac_matmuls(s_) if not saved))
        terms.append(Term("recompute_sac", Role.RECOMPUTE_FLOPS, recompute, r"F_{\mathrm{rec,SAC}}",
                          "torchtitan's op-level checkpointing reruns, per layer, only the matmuls it did not save "
                          "(every second one, 2·T·d_in·d_out each; SDPA's output is saved) and, without early stop, "
                          "all of them", "torchtitan activation_checkpoint.py (b5bcd76) :254-277 (early_stop=False)"))
    elif s_.grad_checkpointing:
        recompute = (_per_layer(layers, "forward") + _per_layer(layers, "attention_forward") + scan[0]
                     + (_per_layer(layers, "lora_forward") if s_.lora else 0) + _every_layer(layers, "dora_forward")
                     - _every_layer(layers, "recompute_skipped"))
        if s_.checkpoint_every > 1:   # layers 0, k, 2k …: the first one's and ⌈L/k⌉ − 1 later ones
            def rerun(layer: dict) -> sp.Expr:
                return (layer["forward"] + layer["attention_forward"] + layer["scan_forward"]
                        + (layer["lora_forward"] if s_.lora else 0)
                        - layer["recompute_skipped"])
            recompute = (checkpointed_layers(s_) - 1) * rerun(layers[0]) + rerun(layers[1])
        terms.append(Term("recompute_layers", Role.RECOMPUTE_FLOPS, recompute, r"F_{\mathrm{rec}}",
                          "checkpointing reruns every layer's forward in backward, stopping after the last saved "
                          "tensor (the down projection's product is skipped when nothing saves it)",
                          "torch.utils.checkpoint (non-reentrant, early stop)"))
    if s_.images:
        terms += _tower_flops(s_)
    if split != 1:
        terms = [replace(x, expr=x.expr * split, why=x.why + " (÷ t: tensor parallel)")
                 for x in terms]
    return FlopsLedger(tuple(terms))
