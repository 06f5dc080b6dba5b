"""Shapes of a Llama-family decoder as expressions: linear layers, parameter counts.

>>> LINEARS["k_proj"].d_out
head_dim*kv_heads
>>> dims = {h: 4096, f: 11008, nh: 32, nkv: 32, dh: 128}
>>> params_per_layer(qkv_bias=False).xreplace(dims)    # Llama-2-7B: 4·4096² + 3·4096·11008 + 2·4096
202383360
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..symbols import sym

h, f, L, nh, nkv, dh, V = (sym(n) for n in ("hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab"))


@dataclass(frozen=True)
class Linear:
    """One projection of a decoder layer: y = x W^T with W of shape (d_out, d_in).

    ``input_group`` names the tensor it reads: projections in one group read the same tensor
    (q, k and v all read the attention norm's output)."""

    name: str
    d_in: sp.Expr
    d_out: sp.Expr
    input_group: str


LINEARS: dict[str, Linear] = {m.name: m for m in (
    Linear("q_proj", h, nh * dh, "attn_in"),
    Linear("k_proj", h, nkv * dh, "attn_in"),
    Linear("v_proj", h, nkv * dh, "attn_in"),
    Linear("o_proj", nh * dh, h, "attn_out"),
    Linear("gate_proj", h, f, "mlp_in"),
    Linear("up_proj", h, f, "mlp_in"),
    Linear("down_proj", f, h, "mlp_act"),
)}
INPUT_WIDTH = {"attn_in": h, "attn_out": nh * dh, "mlp_in": h, "mlp_act": f}
TARGET_SETS = {
    "all-linear": tuple(LINEARS),
    "attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "qv": ("q_proj", "v_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}


def linear_params_per_layer() -> sp.Expr:
    return sp.Add(*(m.d_in * m.d_out for m in LINEARS.values()))


def bias_params_per_layer(qkv_bias: bool) -> sp.Expr:
    """Qwen2 keeps a bias on q, k and v."""
    return (nh * dh + 2 * nkv * dh) if qkv_bias else sp.Integer(0)


def params_per_layer(qkv_bias: bool) -> sp.Expr:
    """Linear weights, optional qkv biases and the two RMSNorm weights of one decoder layer."""
    return linear_params_per_layer() + bias_params_per_layer(qkv_bias) + 2 * h


def embedding_params(tied: bool) -> sp.Expr:
    """Token embeddings, plus the lm_head unless it is tied to them."""
    return V * h if tied else 2 * V * h


def total_params(tied: bool, qkv_bias: bool) -> sp.Expr:
    """P derived from the architecture: embeddings (+ lm_head), L layers, the final norm."""
    return embedding_params(tied) + L * params_per_layer(qkv_bias) + h


def kept_16bit_params(tied: bool, qkv_bias: bool) -> sp.Expr:
    """Parameters QLoRA leaves unquantized: embeddings, lm_head, norms and biases."""
    return embedding_params(tied) + L * (2 * h + bias_params_per_layer(qkv_bias)) + h


def lora_params(targets: tuple[str, ...], rank: sp.Symbol) -> sp.Expr:
    """r (d_in + d_out) per target matrix, summed over targets and layers."""
    return L * rank * sp.Add(*(LINEARS[t].d_in + LINEARS[t].d_out for t in targets))
