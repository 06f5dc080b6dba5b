"""Block 3: the tensors a training step saves for backward, and the step's temporaries.

Each term follows what transformers' Llama code and PEFT's LoRA layer really save (verified with
``symvram validate``): RMSNorm keeps its fp32 upcast and 1/rms; SDPA keeps q, k, v, its output and
the log-sum-exp; SiLU·up keeps three d_ff-wide tensors; a frozen linear saves nothing for its weight,
but PEFT's lora_A saves its input — one fp32 copy per target when adapters are fp32 on a 16-bit
base. The first layer's input needs no gradient under LoRA, so its first RMSNorm saves nothing.

>>> from symvram.ledger.structure import Structure
>>> terms = saved_terms(Structure(method="lora", targets=("q_proj", "v_proj")))
>>> [t.key for t in terms][:3]
['act_norms', 'act_attention', 'act_attention_lse']
"""
from __future__ import annotations

from functools import lru_cache
from itertools import accumulate

import sympy as sp

from ..errors import UserError
from ..symbols import sym
from .architecture import E, L, V, dh, f, f_e, h, k_e, nh, nkv
from .functions import at_least, ceil_div, largest_indicators, pow2_ceil
from .positions import scored
from .structure import Structure
from .terms import TRAINING_STEP, Phase, Place, Role, Term, span
from .weights import (compute_adapter_bytes, compute_weight_bytes, kind_adapter_params, layer_lora_params,
                      litgpt_zero_pad_width, model_lora_linears, per_trainable, rope_width_sum, rotary_width,
                      saved_copy_bytes)

b, seq, r = sym("batch"), sym("seq"), sym("rank")
b_c, b_32, b_a, b_mask, b_id, b_w, b_g, b_i32 = (sym(n) for n in (
    "bytes_act", "bytes_fp32", "bytes_adapter", "bytes_mask", "bytes_index", "bytes_weight", "bytes_grad", "bytes_int32"))
T = b * seq  # tokens in the micro-batch

TRANSFORMERS = "transformers LlamaDecoderLayer / LlamaRMSNorm"
PEFT = "peft tuners/lora/layer.py Linear.forward"
ACTIVATION_NAMES = {"silu": "SiLU", "gelu_tanh": "GELU", "relu2": "ReLU²"}   # a family's mlp.activation, as the texts name it


def matmul_bytes(s_: Structure) -> sp.Expr:
    """Bytes per element of what an autocast matmul keeps (SDPA's q, k, v, lora_A's cast input, the adapters'
    casts): the compute dtype, except in a prepared QLoRA model under autocast, whose fp32 stream autocast
    casts to its 16-bit dtype per call (the norms and the MLP's element-wise tensors stay fp32)."""
    return sym("bytes_autocast") if s_.kbit_prepared and s_.autocast else b_c


def router_logit_bytes(s_: Structure) -> sp.Expr:
    """Bytes per element of the router's logits and of what is derived from them: an autocast matmul's, or without
    autocast the compute dtype's — fp32 where the router casts its input and weight to fp32 (DeepSeek-V3, GLM-4.5:
    ``F.linear(x.float(), W.float())``, modeling_deepseek_v3.py:133, modeling_glm4_moe.py:259), whose sigmoid scores
    and gathered weights stay fp32; autocast casts that linear's inputs back to 16-bit, and all of them are 16-bit
    (traced: the sigmoid's saved output and the routing weights bf16)."""
    return b_32 if s_.arch.extra("router_fp32") and not s_.autocast else matmul_bytes(s_)


def routing_weight_bytes(s_: Structure) -> sp.Expr:
    """Bytes per element of the top-k routing weights the experts multiply by: fp32 where the family makes them so
    (Gemma 4's, ``routing_weights_fp32``), the logits' where they are gathered from the fp32 router's scores, else
    the compute dtype's."""
    if s_.arch.extra("routing_weights_fp32"):
        return b_32
    return router_logit_bytes(s_) if s_.arch.extra("router_fp32") else b_c


def _per_call_cast(s_: Structure, group: str) -> bool:
    """Under autocast, a linear reading the (wider) residual-stream norm output casts it per call."""
    return s_.weight_casts and group in ("attn_in", "mlp_in", "ssm_in")


def _shared_with_attention(s_: Structure, group: str) -> bool:
    """SDPA's output is laid out so that o_proj reads the very tensor SDPA saved (no second copy);
    Phi-3's q comes from a slice of the fused qkv, and a partial RoPE concatenates the rotated part and the rest
    (GLM-4.5, modeling_glm4_moe.py:150-151) into a new (b, n_h, s, d) tensor, so SDPA's output is laid out
    (b, n_h, s, d) and o_proj reads a contiguous copy instead; an output gate (Qwen3.5) or a Gated DeltaNet mixer
    gives o_proj a tensor of its own; so does LitGPT's fused qkv, whose q is a slice concatenated after RoPE
    (litgpt 0.5.13 model.py:512, :571 ``y.reshape``)."""
    fam = s_.arch
    return (group == "attn_out" and s_.attention == "sdpa" and not fam.extra("fused_qkv") and s_.model_code != "litgpt"
            and fam.dim("rotary_dim", 0) == 0 and not fam.latent_attention
            and not (fam.extra("output_gate") or fam.extra("gated_deltanet")) and fam.attends)


NORM_WHY = {
    "rms": "each RMSNorm keeps its fp32 upcast input and 1/rms for backward",
    "rms_fp32_weight": "each RMSNorm keeps its fp32 upcast input and 1/rms for backward (the weight multiplies in fp32)",
    "gemma_rms": "each Gemma RMSNorm keeps its fp32 upcast input, 1/rms and the fp32 (1 + w) it multiplies by",
    "gemma4_rms": "each Gemma 4 RMSNorm keeps its fp32 upcast input, mean(x²) + ε and its pow(·, −0.5), and the fp32 "
                  "copy of its weight",
}


LIGER = ("liger_kernel 0.8.5 ops/rms_norm.py:674-676 LigerRMSNormFunction (X, RSTD); ops/swiglu.py:272 "
         "LigerSiLUMulFunction, ops/geglu.py:138 LigerGELUMulFunction (a, b); modelled, not measured (Triton)")


UNSLOTH_KERNELS = ("unsloth 2026.10.9 kernels/rms_layernorm.py:981 Fast_RMS_Layernorm (X, r); kernels/fast_lora.py:448 "
                   "LoRA_MLP (X, e, g), :845 LoRA_QKV (X), :1073 LoRA_W (X); modelled, not measured (Triton)")


def norm_saved(s_: Structure, rows: sp.Expr, width: sp.Expr, b_in: sp.Expr | None = None, weight: bool = True) -> sp.Expr:
    """What one norm over ``rows`` rows of ``width`` per token saves when its input needs a gradient:
    the fp32 upcast input and 1/rms (Gemma's norm also its fp32 (1 + w), a weight-sized vector; Gemma 4's also
    mean(x²) + ε, which its pow(·, −0.5) keeps, and its weight's fp32 copy where it has a weight). Liger's
    RMSNorm keeps its input as it comes (``b_in`` bytes per element: the residual stream's, or the compute
    dtype's for a q/k norm) and the fp32 1/rms, and recomputes the rest; so does Unsloth's Fast_RMS_Layernorm."""
    if s_.liger or s_.unsloth_kernels:
        return (residual_bytes(s_) if b_in is None else b_in) * T * rows * width + b_32 * T * rows
    saved = b_32 * T * rows * width + b_32 * T * rows
    if s_.arch.norm == "gemma4_rms":   # modeling_gemma4.py:205-214
        return saved + b_32 * T * rows + (b_32 * width if weight else 0)
    return saved + b_32 * width if s_.arch.norm == "gemma_rms" else saved


def norm_weight_copy(s_: Structure, width: sp.Expr) -> sp.Expr:
    """The fp32 copy of a 16-bit norm weight that a norm multiplying ``weight.to(float32)`` keeps for its input's
    gradient (Nemotron-H's NemotronHRMSNorm, modeling_nemotron_h.py:633; ``extras.norm_weight_fp32_copy``): none
    for other families, nor for weights already fp32."""
    if not (s_.arch.extra("norm_weight_fp32_copy") or s_.model_code == "litgpt") or s_.liger:
        return sp.Integer(0)   # LitGPT's RMSNorm: x_normed * weight.float() (litgpt 0.5.13 model.py:1322)
    return b_32 * width * at_least(b_32, 2 * compute_weight_bytes(s_))   # 1 for 16-bit weights, 0 for fp32


def norm_weight_input(s_: Structure) -> sp.Symbol:
    """Bytes per element of the normalized tensor a trainable norm weight keeps for its gradient
    (Gemma and OLMo 2 scale in fp32; Llama casts back to the weight dtype first; torchtune's RMSNorm calls
    ``F.rms_norm(x.float(), weight=scale)``, modules/rms_norm.py:41-46, whose composite path — the dtypes differ —
    multiplies the fp32 normalized tensor by the scale)."""
    return compute_weight_bytes(s_) if s_.arch.norm == "rms" and s_.model_code == "transformers" else b_32


def _feeds(name: str, fam=None) -> str:
    """Which of q, k, v an attention-input projection produces: the letters its name starts with (``qkv`` for a fused
    one, ``kv`` for latent attention's kv_a_proj_with_mqa; a Gated DeltaNet's in_proj_*: every one of them feeds
    the delta rule), or the family's ``extras.feeds`` for the name (OLMo Hybrid's a_proj, b_proj, g_proj: the
    delta rule's gates and the gated norm's z, which make the whole mixer save as a q, k or v projection does)."""
    if fam is not None and name in (feeds := fam.extra("feeds", {})):
        return feeds[name]
    if name.startswith("in_proj"):
        return "qkv"
    head = name.split("_")[0]
    return head if set(head) <= set("qkv") else ""


def embedding_output_grad(s_: Structure) -> bool:
    """Whether the embedding's output needs a gradient: always in full fine-tuning; under LoRA when the embedding is
    a trainable modules_to_save copy or carries LoRA, or under checkpointing (transformers' enable_input_require_grads
    makes it a leaf that requires grad)."""
    return (not s_.lora or s_.grad_checkpointing or "embed_tokens" in s_.modules_to_save
            or "embed_tokens" in s_.head_targets)


def per_layer_inputs_grad(s_: Structure) -> bool:
    """Whether Gemma 4's per-layer inputs need a gradient: where the token embeddings do, or where LoRA adapts
    per_layer_model_projection, which projects them (modeling_gemma4.py:1773)."""
    return embedding_output_grad(s_) or "per_layer_model_projection" in s_.targets


def needs_grad(s_: Structure, first: bool) -> dict[str, bool]:
    """Which tensors of a decoder layer need a gradient — the one answer the saved activations (a norm saves
    for backward only then) and the FLOPs (an input gradient only then) both read. By the tensor:
    ``attn_in`` the layer's input (q, k, v's), ``q`` ``k`` ``v``, ``attn_out`` attention's output (o_proj's
    input), ``attn_proj`` o_proj's output, ``mlp_in`` the residual after attention (the MLP's input),
    ``mlp_act`` the MLP's hidden tensor (down_proj's input), ``mlp_out`` down_proj's output.

    Full fine-tuning: all. LoRA: a later layer's input depends on the adapters of the layers before; the first
    layer's input is the frozen embedding's output — it needs a gradient only when the embedding is a trainable
    modules_to_save copy or carries LoRA, or under checkpointing (transformers' enable_input_require_grads makes it a leaf that
    requires grad) — and a tensor inside it needs a gradient once a trained projection produced it.

    >>> g = needs_grad(Structure(method="lora", targets=("v_proj",)), first=True)
    >>> g["attn_in"], g["q"], g["v"], g["mlp_in"]
    (False, False, True, True)
    """
    fam = s_.arch

    def trained_reader(group: str, feeding: str = "") -> bool:   # a projection reading ``group`` trains
        return any(m.input_group == group and (not s_.lora or m.name in s_.targets) and feeding in _feeds(m.name, fam)
                   for m in fam.linears + fam.moe_weights)

    # images from a trained tower (--train-vision): masked_scatter puts features that need a gradient into layer 0's input
    layer_in = not (first and s_.lora) or embedding_output_grad(s_) or (s_.images and s_.train_vision)
    out = {"attn_in": layer_in, "q_latent": layer_in or trained_reader("attn_in", "q"),   # latent attention's a-proj
           "kv_latent": layer_in or trained_reader("attn_in", "kv")}                       # outputs
    out.update({x: out[lat] or trained_reader(lat) or trained_reader("attn_in", x)   # a latent's b-proj, or q/k/v_proj
                for x, lat in (("q", "q_latent"), ("k", "kv_latent"), ("v", "kv_latent"))})
    out["attn_out"] = out["q"] or out["k"] or out["v"]
    # a parallel Mamba-2 mixer (Falcon-H1): its input is its own scaled copy of the norm's output; its gated output
    # needs a gradient once that input does or in_proj trains, and the mixers' sum does once either output does
    out["ssm_in"] = layer_in
    out["ssm_out"] = fam.mixer == "parallel" and (layer_in or trained_reader("ssm_in"))
    out["attn_proj"] = out["attn_out"] or trained_reader("attn_out") or out["ssm_out"] or trained_reader("ssm_out")
    out["mlp_in"] = layer_in or out["attn_proj"]
    out["router_in"] = out["mlp_in"]   # Gemma 4's router reads its own normed, scaled copy of the MLP's residual
    out["mlp_act"] = out["mlp_in"] or trained_reader("mlp_in")
    out["mlp_out"] = out["mlp_act"] or trained_reader("mlp_act")
    # Gemma 4's per-layer input: the gate reads the residual after the MLP; its product with the layer's slice of the
    # per-layer embeddings (trainable under full fine-tuning) feeds the projection back to the residual
    out["ple_in"] = out["mlp_out"]
    out["ple_act"] = out["ple_in"] or trained_reader("ple_in") or per_layer_inputs_grad(s_)
    out["ple_out"] = out["ple_act"] or trained_reader("ple_act")
    return out


def _grad_sites(s_: Structure, first: bool) -> dict[str, bool]:
    """``needs_grad`` by the sites a norm sits at (a family's ``norms.at``): a q or k norm saves once attention's
    inputs need a gradient. ``first`` without checkpointing (a checkpointed layer is recomputed as a later one)."""
    g = needs_grad(s_, first)
    return {"layer_in": g["attn_in"], "q": g["attn_out"], "k": g["attn_out"], "v": g["attn_out"], "attn_out": g["attn_proj"],
            "resid": g["mlp_in"], "mlp": g["mlp_act"], "mlp_out": g["mlp_out"], "q_latent": g["q_latent"],
            "kv_latent": g["kv_latent"], "ple_out": g["ple_out"]}


def _layer(s_: Structure, first: bool) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """Saved bytes of one decoder layer: key -> (expr, label, why, source), built once per ``ACTIVATION_FIELDS``
    (the saved terms, one recomputed layer and FSDP2's layer ends all read it; not to be changed).

    ``first``: the layer reads the embedding output, which needs no gradient under LoRA."""
    return _layer_of(s_.keep(ACTIVATION_FIELDS), first)


@lru_cache(maxsize=512)
def _layer_of(s_: Structure, first: bool) -> dict[str, tuple[sp.Expr, str, str, str]]:
    fam = s_.arch
    grad = _grad_sites(s_, first)
    lat = needs_grad(s_, first)
    grad_in, attn_grad, resid_grad, mlp_grad = grad["layer_in"], grad["q"], grad["resid"], grad["mlp"]
    out: dict[str, tuple[sp.Expr, str, str, str]] = {}

    targets = set(s_.targets) if s_.lora else set()
    out.update(_norms_saved(s_, fam.active_norms(s_.options), grad))

    if fam.mixer == "parallel" and lat["ssm_out"]:   # Falcon-H1: the Mamba-2 mixer beside attention (below)
        out.update(_mamba2(s_))
    if fam.mixer == "none":   # an MLP block (Nemotron-H's "-" layers): no token mixer
        pass
    elif attn_grad and fam.mixer == "mamba2":
        out.update(_mamba2(s_))
    elif attn_grad and fam.extra("gated_deltanet"):
        out.update(_gated_deltanet(s_))
    elif attn_grad and fam.latent_attention:
        out.update(_latent_attention(s_))
    elif attn_grad:
        if s_.attention == "sdpa":
            b_mm = matmul_bytes(s_)
            fused = b_mm * T * dh * (nh + nkv) if fam.extra("fused_qkv") else 0
            # KV sharing: the storing layer's k and v, counted there — but past the window a sliding layer's SDPA gets
            # k and v repeated to n_h heads (repeat_kv: new tensors unless n_kv = 1), the (n_h − n_kv) of them
            # sliding_extra counts and n_kv more
            shared = fam.extra("kv_shared")   # "sliding": a sliding layer reading shared K/V
            qkv = {None: b_mm * T * dh * (nh + 2 * nkv),
                   "sliding": b_mm * T * dh * nh + b_mm * T * dh * 2 * nkv * past_window(s_) * at_least(nkv, 2)
                   }.get(shared, b_mm * T * dh * nh)
            if fam.extra("attention_dims"):
                # heads that may be wider than 256 (Gemma 4's global 512): transformers passes SDPA no GQA then
                # (sdpa_attention.py:51) and repeats k, v to n_h heads (new tensors unless n_kv = 1: a stride-0
                # view), which SDPA keeps instead — sums of indicator products, each tensor a positive monomial
                wide, narrow = at_least(dh, 257), at_least(256, dh)
                repeated = b_mm * T * dh * 2 * nh * wide * at_least(nkv, 2)
                qkv = b_mm * T * dh * nh + (repeated if shared else
                                            b_mm * T * dh * 2 * nkv * (narrow + wide * at_least(1, nkv)) + repeated)
            if s_.model_code == "torchtune" and not fam.extra("kv_shared"):
                # torchtune 0.6.1 modules/attention.py:288-291: k, v expanded to n_h heads and flattened (a copy
                # unless n_kv = 1), which SDPA keeps instead of GQA's n_kv heads
                qkv += at_least(nkv, 2) * 2 * b_mm * T * dh * (nh - nkv)
            if s_.model_code == "litgpt":
                # litgpt 0.5.13 model.py:535-539: k, v repeat_interleave'd to n_h heads (a copy whenever n_kv < n_h);
                # without GQA, v is a view of the fused qkv output (:466-482), which SDPA then keeps whole: its q and k
                # parts too, beside the concatenated q and k
                qkv += 2 * b_mm * T * dh * (nh - nkv) + at_least(nkv, nh) * b_mm * T * dh * (nh + nkv)
            roped = " after RoPE" * (not fam.extra("no_rope"))
            out["act_attention"] = (qkv + b_mm * T * nh * dh + fused, r"A_{\mathrm{attn}}",
                                    ("SDPA (flash) keeps q, k, v" + roped + " and its output; a layer reading shared K/V "
                                     "keeps only q and its output (k and v are the storing layer's; past the window a "
                                     "sliding one's k, v repeated to n_h heads)" if fam.extra("kv_shared") else
                                     "SDPA (flash) keeps q, k, v" + roped + " and its output")
                                    + ("; v is a view of the fused qkv output, which it keeps whole" if fused else ""),
                                    "torch scaled_dot_product_attention")
            out["act_attention_lse"] = (b_32 * b * nh * seq, r"A_{\mathrm{lse}}",
                                        "and the fp32 log-sum-exp of each query row", "torch _scaled_dot_product_flash_attention")
        elif fam.extra("attention_sinks"):
            out["act_attention"] = (3 * b_c * T * nh * dh, r"A_{\mathrm{attn}}",
                                    "eager attention keeps q and the repeat_kv copies of k and v (n_h heads each)",
                                    "transformers eager_attention_forward")
            out["act_attention_scores"] = _sink_scores(s_)
        else:
            probs_16 = 0 if s_.compute_fp32 else b_c * b * nh * seq**2
            out["act_attention"] = (3 * b_c * T * nh * dh, r"A_{\mathrm{attn}}",
                                    "eager attention keeps q and the repeat_kv copies of k and v (n_h heads each)",
                                    "transformers eager_attention_forward")
            softcap = b_c * b * nh * seq**2 if fam.extra("attn_logit_softcapping") else 0
            out["act_attention_scores"] = (b_32 * b * nh * seq**2 + probs_16 + softcap, r"A_{\mathrm{scores}}",
                                           "the fp32 softmax of b·n_h·s² scores and its 16-bit copy"
                                           + " (and the tanh of the soft-capped scores)" * bool(softcap),
                                           "transformers eager_attention_forward")
    if attn_grad and fam.extra("output_gate"):
        out["act_output_gate"] = (2 * b_c * T * nh * dh, r"A_{\mathrm{gate}}", "the output gate: sigmoid of the second "
                                  "half of q_proj's output (kept by it and by the product) and attention's output in "
                                  "(b, s, n_h·d_head), a copy the product keeps", fam.source)
    if attn_grad and fam.extra("query_position_scale"):
        fp32 = fam.extra("query_position_scale") == "fp32"   # Llama 4 multiplies by the fp32 scale itself
        out["act_query_scale"] = ((b_32 if fp32 else b_c) * seq, r"A_{\mathrm{qscale}}", "the queries' "
                                  "position-dependent scale (1, 1, s, 1), " + ("in fp32" if fp32 else "cast to their "
                                  "dtype") + " in each layer, kept by the product for backward", fam.source)
    if mlp_grad and fam.moe and fam.extra("experts_dense"):
        out.update(_dense_experts(s_, lat["mlp_in"]))
        out.update(_shared_expert(s_))
    elif mlp_grad and fam.moe:
        # the routed block saves nothing when neither its input nor its weights need a gradient (LoRA on the shared
        # expert alone, in a layer whose input is the frozen embedding's): the shared expert still saves
        router, _, _, experts_train = _moe_parts(s_)
        if resid_grad or experts_train or router.name in targets:
            out.update(_moe_layer(s_))
        if fam.extra("shared_expert"):
            out.update(_shared_expert(s_))
    elif s_.unsloth_kernels:   # LoRA_MLP saves them whatever needs a gradient (its adapters always do)
        out["act_mlp"] = (2 * b_c * T * f, r"A_{\mathrm{mlp}}", "Unsloth's LoRA_MLP keeps the gate and up outputs "
                          "(e, g: d_ff wide each) and recomputes the activation in backward", UNSLOTH_KERNELS)
    elif mlp_grad and fam.mlp_kind == "plain":   # relu²: relu keeps its output, which the square reads too
        out["act_mlp"] = (b_c * T * f, r"A_{\mathrm{mlp}}", "the ReLU output (d_ff wide), which ReLU's backward and "
                          "the square's both read", "transformers activations.py ReLUSquaredActivation; " + fam.source)
    elif mlp_grad and fam.mlp_kind == "gated":
        act = ACTIVATION_NAMES[fam.activation]
        out["act_mlp"] = ((2 if s_.liger else 3) * b_c * T * mlp_width(fam), r"A_{\mathrm{mlp}}",
                          f"Liger's fused {act}·up keeps the gate and up outputs (d_ff wide each)" if s_.liger else
                          f"gate output ({act} input), {act} output and up output, d_ff wide each",
                          LIGER if s_.liger else TRANSFORMERS)

    if fam.extra("per_layer_embeddings") and (lat["ple_in"] or any(t in targets for t in ("per_layer_input_gate",))):
        out["act_per_layer_input"] = (b_c * T * d_ple + (b_c * T * d_ple if per_layer_inputs_grad(s_) else 0),
                                      r"A_{\mathrm{PLE}}",
                                      "the per-layer input gate's output (its GELU's input)" + ("" if not per_layer_inputs_grad(s_) else
                                      " and the GELU's output, kept by the product with the layer's slice of the "
                                      "per-layer embeddings, which needs a gradient"), GEMMA4 + ":1405-1413")
    if s_.weight_casts:
        out["act_weight_casts"] = _weight_casts(s_, fam.linears)
    lin_targets = [t for t in s_.targets if fam.linear_map.get(t) in fam.linears]  # the layer's nn.Linear targets
    # (PEFT's lora.Linear; not one outside the layers)
    group_grad = {"attn_in": grad_in, "attn_out": attn_grad, "mlp_in": resid_grad, "mlp_act": mlp_grad,
                  "q_latent": lat["q_latent"], "kv_latent": lat["kv_latent"], "ple_in": lat["ple_in"],
                  "ple_act": lat["ple_act"], "router_in": lat["router_in"], "ssm_in": grad_in, "ssm_out": lat["ssm_out"]}
    if not s_.lora:
        out["act_linear_inputs"] = _linear_inputs(s_, fam.linears, fam.group_width)
    elif s_.unsloth_kernels:
        out.update(_unsloth_lora_inputs(s_))
    else:
        out.update(_lora_saved(s_, lin_targets, fam.group_width, group_grad))
    return _kind_dims(fam, out)


def _weight_casts(s_: Structure, linears) -> tuple[sp.Expr, str, str, str]:
    """Autocast's compute-dtype cast of each of ``linears``' weights, saved for the input's gradient."""
    return (b_c * sp.Add(*(m.params for m in linears)), r"A_{\mathrm{cast},W}",
            "autocast casts each linear weight to the compute dtype per call; backward needs the cast, so it is saved",
            "torch.autocast")


def _linear_inputs(s_: Structure, linears, groups: dict[str, sp.Expr]) -> tuple[sp.Expr, str, str, str]:
    """What trainable ``linears`` keep of their inputs for the weight gradient: each distinct input once (a group of
    ``groups``, its width), under autocast each call's own cast of a residual-stream input; none where o_proj reads
    the tensor SDPA keeps."""
    saved = sp.Integer(0)
    for group, width in groups.items():
        n = sum(1 for m in linears if m.input_group == group)
        if _per_call_cast(s_, group):
            saved += n * b_c * T * width
        elif not _shared_with_attention(s_, group):
            saved += b_c * T * width
    return (saved, r"A_{\mathrm{lin}}", "each distinct linear input, saved for the weight gradient (q, k, v share "
            "one; SDPA's output is o_proj's input; under autocast each call saves its own cast)",
            "torch.nn.functional.linear backward")


def _lora_saved(s_: Structure, lin_targets: list[str], groups: dict[str, sp.Expr],
                group_grad: dict[str, bool]) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What PEFT's lora.Linear targets ``lin_targets`` (reading the tensors of ``groups``, their widths; ``group_grad``:
    which of those need a gradient) save beside their frozen base layers: autocast's adapter casts, an old
    bitsandbytes' 4-bit inputs, lora_A's inputs (and dropout's masks), lora_B's r-wide inputs, DoRA's tensors."""
    fam = s_.arch
    out: dict[str, tuple[sp.Expr, str, str, str]] = {}
    if s_.autocast and s_.adapter_upcast and lin_targets:
        # lora_A's cast weight is saved only for its input's gradient: not in the first layer's q, k, v
        casts = sp.Add(*((fam.linear(t).d_in if group_grad[fam.linear(t).input_group] else 0) + fam.linear(t).d_out
                         for t in lin_targets))
        out["act_adapter_casts"] = (matmul_bytes(s_) * r * casts, r"A_{\mathrm{cast},LoRA}", "autocast's cache of the adapters "
                                    "cast to the compute dtype, saved for backward (lora_A's only where its input "
                                    "needs a gradient)", "torch.autocast weight cache")
    b_ad = compute_adapter_bytes(s_)  # the adapters as they compute (cast by an FSDP2 policy)
    autocast_copy = s_.autocast and s_.adapter_upcast  # lora_A's autocast saves a compute-dtype copy per target
    inputs, masks = sp.Integer(0), sp.Integer(0)
    for group, width in groups.items():
        n = sum(1 for t in lin_targets if fam.linear(t).input_group == group)
        if s_.model_code == "litgpt" and group == "attn_in":
            n = min(n, 1)   # q, k, v: one LoRAQKVLinear, one dropout and one lora_A (litgpt 0.5.13 lora.py:405)
        if n:
            kept, mask = lora_input_bytes(s_, n, width, _per_call_cast(s_, group), _shared_with_attention(s_, group),
                                          group_grad[group])
            inputs, masks = inputs + kept, masks + mask
    if s_.bnb_input_saved:   # bitsandbytes < 0.43.3: each 4-bit linear keeps its input A (versions.MECHANISMS)
        kept = sp.Integer(0)
        for group, width in groups.items():
            lora_keeps_it = any(fam.linear(t).input_group == group for t in lin_targets) and not (
                s_.dropout or autocast_copy or _per_call_cast(s_, group) or s_.adapter_upcast)
            if group_grad[group] and not _shared_with_attention(s_, group) and not lora_keeps_it:
                kept += b_c * T * width
        if kept != 0:
            out["act_bnb_inputs"] = (kept, r"A_{\mathrm{4bit,in}}", "bitsandbytes before 0.43.3: MatMul4Bit saves each "
                                     "4-bit linear's input for backward (one per distinct input; shared where LoRA "
                                     "keeps the same tensor)", "bitsandbytes 0.43.2 autograd/_functions.py MatMul4Bit")
    if s_.dropout:
        why = "lora_A keeps its dropped-out input, one per target"
    elif autocast_copy:
        why = "under autocast lora_A keeps a compute-dtype cast of its input, one per target"
    elif s_.adapter_upcast:
        why = "PEFT casts each target's input to the adapter dtype; lora_A keeps that copy, one per target"
    else:
        why = "lora_A keeps its input for its weight gradient (targets reading one tensor share it)"
    if not lin_targets:
        return out
    litgpt = s_.model_code == "litgpt"
    if litgpt:
        why += " (LitGPT's fused qkv: one for q, k and v)"
    out["act_lora_inputs"] = (inputs, r"A_{\mathrm{LoRA,in}}", why, "litgpt 0.5.13 lora.py:171, :405" if litgpt else PEFT)
    if masks != 0:
        mask_why = ("CPU dropout multiplies by a saved noise tensor of the input's dtype" if s_.device == "cpu"
                    else "CUDA native_dropout keeps a bool mask per target")
        out["act_lora_dropout"] = (masks, r"A_{\mathrm{drop}}", mask_why + " (LitGPT's fused qkv: one)" * litgpt,
                                   "torch dropout")
    out["act_lora_hidden"] = (len(lin_targets) * (matmul_bytes(s_) if s_.autocast else b_ad) * T * r, r"A_{\mathrm{LoRA},r}",
                              "lora_B keeps lora_A's r-wide output, one per target", PEFT)
    if s_.model_code == "litgpt" and (zero_pad := litgpt_zero_pad_width(s_)) != 0:
        out["act_lora_zero_pad"] = ((b_ad * T + b_id) * zero_pad, r"A_{\mathrm{LoRA,pad}}",
                                    "zero_pad's index_copy_ keeps its source, the grouped conv1d's output over the "
                                    "adapted parts of the fused qkv, and the clone of _lora_ind it scatters by (int64)",
                                    "litgpt 0.5.13 lora.py:288-326, :328-360, :413; torch IndexCopyBackward0")
    if s_.dora:
        d_out = [fam.linear(t).d_out for t in lin_targets]
        scale = sp.Add(*(fam.linear(t).d_out for t in lin_targets if group_grad[fam.linear(t).input_group]))
        b_lr = matmul_bytes(s_) if s_.autocast else b_ad  # autocast runs lora_B in its dtype
        out["act_dora"] = (sp.Add(*d_out) * (b_lr * T + b_c * T + 2 * b_32) + b_32 * scale, r"A_{\mathrm{DoRA}}",
                           "DoRA keeps, per target, the LoRA result (adapter dtype) and the base result for the "
                           "magnitude's gradient, the fp32 weight norm and m/‖W′‖ (and m/‖W′‖ − 1 where the "
                           "input needs a gradient)", "peft tuners/lora/dora.py DoraLinearLayer.forward")
    return out


def _norms_saved(s_: Structure, norms, grad: dict[str, bool]) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What ``norms`` of one layer save (``grad``: ``_grad_sites``): a norm saves once its site needs a gradient (a
    norm after a projection, a q/k/v norm, only where the layer's input needs one too or LoRA trains that
    projection): its ``norm_saved`` tensors and a 16-bit weight's fp32 copy; a trainable weight also the normalized
    tensor."""
    fam, targets = s_.arch, set(s_.targets) if s_.lora else set()
    saving = [n for n in norms if grad[n.at] if not n.after or grad["layer_in"] or n.after in targets]
    out: dict[str, tuple[sp.Expr, str, str, str]] = {}
    if not saving:
        return out
    out["act_norms"] = (sp.Add(*(norm_saved(s_, n.rows, n.width, matmul_bytes(s_) if n.after else None, n.weight)
                                 + norm_weight_copy(s_, n.width) for n in saving)), r"A_{\mathrm{norm}}",
                        "each Liger RMSNorm keeps its input and the fp32 1/rms" if s_.liger else
                        "each Unsloth RMSNorm keeps its input and the fp32 1/rms" if s_.unsloth_kernels else
                        NORM_WHY[fam.norm] + " (and a 16-bit weight's fp32 copy)" * (norm_weight_copy(s_, 1) != 0),
                        LIGER if s_.liger else UNSLOTH_KERNELS if s_.unsloth_kernels else TRANSFORMERS)
    if not s_.lora and not s_.liger and any(n.weight for n in saving):   # Liger's backward recomputes it for dW
        out["act_norm_weight_input"] = (sp.Add(*(norm_weight_input(s_) * T * n.rows * n.width for n in saving
                                                 if n.weight)),
                                        r"A_{\mathrm{norm},w}",
                                        "a trainable norm weight also keeps the normalized "
                                        + ("16-bit" if fam.norm == "rms" else "fp32") + " tensor", TRANSFORMERS)
    return out


def _kind_dims(fam, out: dict[str, tuple[sp.Expr, str, str, str]]) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """A layer kind whose attention has its own head width and K/V heads (Gemma 4's full-attention layers:
    ``extras.attention_dims``, d_head → global_head_dim, n_kv → its global K/V heads): the layer's terms with those
    symbols put in."""
    if not (dims := fam.extra("attention_dims")):
        return out
    new = {sym(name): sym(value) for name, value in dims.items()}
    return {k: (e.xreplace(new), *rest) for k, (e, *rest) in out.items()}


def _unsloth_lora_inputs(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What Unsloth's fused LoRA kernels keep of their inputs: one tensor per block, in the compute dtype, whatever
    needs a gradient (the adapters always do) — LoRA_QKV the input norm's output (kernels/fast_lora.py:845), LoRA_W
    attention's output as o_proj reads it (under SDPA a contiguous (b, s, n_h·d) copy, utils/attention_dispatch.py
    :1696; FlashAttention's output is read in place), LoRA_MLP the post-attention norm's output (:448). No r-wide
    tensor (X·A is recomputed in backward) and no fp32 copy of an input; the adapters are cast inside the Function,
    where autograd saves nothing.

    >>> saved = _unsloth_lora_inputs(Structure(method="lora", unsloth_kernels=True, targets=("q_proj",)))
    >>> saved["act_lora_inputs"][0]
    batch*bytes_act*seq*(head_dim*heads + 2*hidden)
    """
    fam = s_.arch
    attn_out = 0 if s_.attention != "sdpa" else fam.group_width["attn_out"]
    return {"act_lora_inputs": (b_c * T * (2 * h + attn_out), r"A_{\mathrm{LoRA,in}}",
                                "Unsloth's fused LoRA kernels keep one input per block: q, k and v's (the input norm's "
                                "output), o_proj's (SDPA's output as a contiguous copy) and the MLP's",
                                UNSLOTH_KERNELS)}


GDN = "transformers models/qwen3_5/modeling_qwen3_5.py"
GEMMA4 = "transformers models/gemma4/modeling_gemma4.py"
d_ple = sym("ple_dim")
n_k, n_v, d_k, d_v, K_conv, C_d = (sym(n) for n in ("linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim",
                                                    "conv_kernel", "delta_chunk"))


def _gated_deltanet(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What a Gated DeltaNet mixer saves on the torch path (Qwen3_5GatedDeltaNet.forward, modeling_qwen3_5.py:545-657;
    torch_chunk_gated_delta_rule, :287-426), measured under FakeTensorMode. The sequence is padded to N_c chunks of
    C_Δ = 64 tokens (S_p = C_Δ·N_c); everything inside the delta rule is fp32, with the n_k query/key heads repeated
    to n_v (:333-335).

    - the causal conv1d (:256-277): its input (b, conv_dim, s) and, for SiLU, the whole padded conv output
      (s + K − 1 columns: SiLU saves a slice of it);
    - the gates (:609-611): sigmoid(b) in the compute dtype, softplus's fp32 input, −exp(A_log) (n_v);
    - the delta rule: the l2-normalised q and k inputs and their 1/‖·‖ (:339-341);
      the padded k, v, β; k·β; the padded query; exp of the cumulative decays (b·n_v·S_p each, for k·β, q and k)
      and of each chunk's total; per chunk the C_Δ × C_Δ pairwise decays, the two products and two decayed
      matrices (:382-391) and the triangular mask; the two triangular solves' results (:397-398); v_new of every
      chunk and the recurrent state entering it (b·n_v·d_k·d_v each: the chunk-by-chunk scan, :415-421); the
      decayed q and k, which the scan keeps only from a second chunk on;
      Under autocast every product (bmm) keeps compute-dtype casts of its operands instead (each chunk's slices
      cast anew) and returns a 16-bit result; the scan's fp32 states stay where the decay multiplies them;
    - the gated RMSNorm (:204-220): its fp32 input and 1/rms, silu(z)'s fp32 input and output, weight · norm(x);
      a trainable weight also keeps norm(x) in the compute dtype, a trainable A_log its exp and softplus's output.

    With ``--kernels fla`` (structure ``kernels``: flash-linear-attention's and causal-conv1d's kernels) the conv and
    the rule are :func:`_fla_deltanet`'s instead; the gates and the gated RMSNorm stay these torch ops."""
    conv_dim = 2 * n_k * d_k + n_v * d_v
    chunks = ceil_div(seq, C_d)
    S_p = C_d * chunks
    rows = b * n_v            # the delta rule's (batch, head) pairs
    later = at_least(chunks, 2)   # the scan reads a grad-requiring state only from its second chunk
    conv = b_c * b * conv_dim * seq + b_c * b * conv_dim * (seq + K_conv - 1)
    gates = b_c * T * n_v + b_32 * T * n_v + b_32 * n_v
    rule = (2 * b_32 * rows * seq * (d_k + 1)                           # l2norm inputs and 1/norms
            + b_32 * rows * S_p * (2 * d_k + d_v + 1)                  # padded k, v, beta; k·beta
            + b_32 * rows * S_p * d_k                                  # the padded, scaled query
            + b_32 * rows * S_p * (2 + later) + b_32 * rows * chunks * later   # exp(cumulative decays), chunk decays
            + b_mask * C_d**2                                          # the strictly-upper bool mask
            + b_32 * rows * S_p * (d_v + d_k))                         # the triangular solves' results
    if s_.autocast:   # every bmm runs on (and keeps) compute-dtype casts of its fp32 operands, per chunk in the scan
        a = matmul_bytes(s_)
        rule += (rows * chunks * C_d**2 * (2 * b_32 + 3 * a)           # pairwise decays, UT system; the 16-bit products
                 + 4 * a * rows * S_p * d_k                             # k·β, k, q, k cast for the two chunk products
                 + 3 * a * rows * (S_p - C_d) * d_k                     # k_cumdecay, decayed q, k slices of later chunks
                 + 2 * a * rows * chunks * d_k * d_v                    # each chunk's state, cast for two products
                 + a * rows * (2 * S_p - C_d) * d_v                     # v_new, cast for the output and the update
                 + b_32 * rows * (chunks - 1) * d_k * d_v)              # the fp32 states the decay multiplies
    else:
        rule += (5 * b_32 * rows * chunks * C_d**2                      # pairwise decays, products, decayed matrices
                 + b_32 * rows * chunks * d_k * d_v                     # the state entering each chunk
                 + b_32 * rows * S_p * d_v                              # v_new of each chunk
                 + later * 2 * b_32 * rows * S_p * d_k)                 # the decayed q and k the scan reads
    norm = b_32 * T * n_v * d_v + b_32 * T * n_v + 2 * b_32 * T * n_v * d_v + b_c * T * n_v * d_v
    out = {"act_deltanet_conv": (conv, r"A_{\mathrm{conv}}", "the causal conv1d's input and its whole output (SiLU "
                                 "keeps a slice of the s + K − 1 columns)", GDN + " causal_conv1d_fn"),
           "act_deltanet_gates": (gates, r"A_{\mathrm{gates}}", "β = sigmoid(b), softplus's fp32 input and −exp(A_log) "
                                  "of the decay g", GDN + " Qwen3_5GatedDeltaNet.forward"),
           "act_deltanet_rule": (rule, r"A_{\Delta}", "the chunked gated delta rule in fp32: per chunk of C_Δ tokens "
                                 "the pairwise decays, the UT system and the intra-chunk scores (C_Δ² each), the "
                                 "triangular solves, v_new and the recurrent state entering the chunk; the padded and "
                                 "normalised q, k, v, β (torch path: torch_chunk_gated_delta_rule)",
                                 GDN + " torch_chunk_gated_delta_rule"),
           "act_deltanet_norm": (norm, r"A_{\mathrm{norm},g}", "the gated RMSNorm: its fp32 input and 1/rms, "
                                 "silu(z)'s fp32 input and output, and weight · norm(x)", GDN + " Qwen3_5RMSNormGated")}
    if s_.kernels == "fla":
        out.update(_fla_deltanet(s_))
    if not s_.lora:
        out["act_deltanet_weights"] = (b_c * T * n_v * d_v + b_32 * T * n_v + b_32 * n_v, r"A_{\Delta,w}",
                                       "trainable mixer weights: the norm keeps norm(x) for its weight, A_log its exp "
                                       "and softplus's output", GDN + " Qwen3_5GatedDeltaNet.forward")
    return out


FLA = "fla 0.6.0 (fla-core 0.6.0) fla/ops/gated_delta_rule/chunk.py"
CAUSAL_CONV1D = "causal-conv1d causal_conv1d/causal_conv1d_interface.py"


def _fla_deltanet(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """The conv and the delta rule of a Gated DeltaNet mixer on its GPU path (``--kernels fla``): transformers 5.24
    imports causal_conv1d's causal_conv1d_fn and fla's chunk_gated_delta_rule in place of its torch functions when
    they are installed (integrations/hub_kernels.py:990-1020, _KERNELS_INTERNAL_PATH_MAPPINGS :70; the call passes
    use_qk_l2norm_in_kernel=True, modeling_qwen3_5.py:632-642). Modelled from the source of flash-linear-attention
    0.6.0 (fla-core 0.6.0, 2026-10-23: the release before transformers 5.24.0's of 2026-11-21) and of causal-conv1d
    (github Dao-AILab/causal-conv1d at 0d2252d, v1.6.1.post4); Triton and CUDA kernels: not measured.

    - the conv: CausalConv1dFn.forward saves (x, weight, bias, seq_idx, initial_states) (causal_conv1d_interface.py
      :59): x is in_proj's output as the (b, conv_dim, s) transposed view (channel-last: no copy, :24-25), in the
      linear's output dtype (the kernel takes a wider weight, csrc/causal_conv1d.cpp:158-159, :249-250); its output
      (empty_like(x), cpp_functions.py:103, SiLU applied in the kernel) is not kept: the backward recomputes it;
    - the rule: ChunkGatedDeltaRuleFunction.forward (chunk.py:253-335) runs under input_guard, which makes every
      input contiguous (fla/utils/decorators.py:97-133, :92-95): v, a view of the conv output's last n_v·d_v columns,
      becomes a copy; it saves (chunk.py:310-326) q and k l2-normalised in their dtype (l2norm_fwd: empty_like,
      fla/modules/norm/l2norm.py:112-139) with their fp32 1/‖·‖ (b·s·n_k each: n_k heads, not repeated to n_v),
      that v, g's chunk-local cumsum in fp32 (chunk.py:62-68, fla/ops/utils/cumsum.py:459), β (the very tensor
      sigmoid keeps, counted with the gates; OLMo Hybrid's 2·sigmoid(b) under linear_allow_neg_eigval is a tensor
      of its own, ``extras.neg_eigval``) and A, the solved (I + A)⁻¹ of every chunk, (b, s, n_v, C_Δ) in k's dtype
      (chunk_fwd.py:385); initial_state, cu_seqlens, chunk_indices, g_input, A_log and dt_bias are None here. The
      per-chunk states h, v_new, w and u are not kept: the backward recomputes them (chunk.py:147-171). No sequence
      padding (the kernels mask the last chunk). FlashQLA's backend (a separate package, fla's dispatch priority 3
      on SM90+, ops/gated_delta_rule/backends/flash_qla.py) is not modelled: fla's Triton path is.

    >>> from symvram.ledger.structure import Structure
    >>> sorted(_fla_deltanet(Structure(family="qwen3_5_text:linear", kernels="fla")))
    ['act_deltanet_conv', 'act_deltanet_rule']
    """
    b_x = matmul_bytes(s_) if s_.autocast else b_c   # what in_proj returns: the conv's input and output dtype
    conv = b_x * T * (2 * n_k * d_k + n_v * d_v)
    rule = (2 * b_x * T * n_k * d_k + 2 * b_32 * T * n_k         # l2-normalised q, k and their fp32 1/‖·‖
            + b_x * T * n_v * d_v                                 # v's contiguous copy
            + b_32 * T * n_v                                      # g's chunk-local cumsum (fp32)
            + b_x * T * n_v * C_d                                 # A: (I + A)⁻¹ per chunk, C_Δ wide per token
            + (b_x * T * n_v if s_.arch.extra("neg_eigval") else 0))   # OLMo Hybrid's β = 2·sigmoid(b)
    return {"act_deltanet_conv": (conv, r"A_{\mathrm{conv}}", "causal-conv1d's CausalConv1dFn keeps its input "
                                  "(in_proj's output; the SiLU output is recomputed in the backward)",
                                  CAUSAL_CONV1D + " CausalConv1dFn"),
            "act_deltanet_rule": (rule, r"A_{\Delta}", "fla's chunk_gated_delta_rule keeps the l2-normalised q and k "
                                  "and their fp32 1/‖·‖, v's contiguous copy, g's fp32 chunk cumsum and the solved "
                                  "C_Δ-wide (I + A)⁻¹ per token and value head; the per-chunk states are recomputed "
                                  "in the backward (fla path: ChunkGatedDeltaRuleFunction)",
                                  FLA + " ChunkGatedDeltaRuleFunction")}


MAMBA = "transformers models/nemotron_h/modeling_nemotron_h.py"
n_M, d_M, N_s, g_M, C_M = (sym(n) for n in ("mamba_heads", "mamba_head_dim", "ssm_state", "mamba_groups", "mamba_chunk"))


def _mamba2(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What a Mamba-2 mixer saves on the torch path (NemotronHMamba2Mixer.forward, modeling_nemotron_h.py:468-613,
    without mamba_ssm: mamba2_split_conv1d_scan_combined returns None, :186-208, :511-513; mamba2_chunk_scan,
    :273-378), derived by walking one layer's autograd graph and measured under FakeTensorMode. d_i = n_M·d_M; the
    sequence is padded to c chunks of C_M tokens (S_p = C_M·c); the scan runs in fp32 with B and C repeated from g_M
    groups to n_M heads (:298-300).

    - the causal conv1d (:163-183): its input, a transposed view of in_proj's whole output (2·d_i + 2·g_M·N + n_M
      per token), and for SiLU the padded conv output (s + K − 1 columns);
    - the gates: softplus's and clamp's 16-bit inputs (dt + dt_bias, softplus(dt)), dt's fp32 copy for x·dt, and
      A = −exp(A_log) (n_M) for A·dt;
    - the scan: x in fp32 (x·dt), per chunk the C_M × C_M decays L and the scores G (and their product M, copied for
      its einsum), the copies each einsum's bmm makes of its operands (x twice, C twice, B, B·decay, the chunk states
      twice), B and the decays for B·decay and the output, C·states, the inter-chunk decays ((c+1)² per head) and the
      four triangular masks; under autocast the bmm's copies are compute-dtype casts and G, C·states 16-bit;
    - the gated RMSNorm (:56-74, over g_M groups): silu(z)'s fp32 input and output, the scan's output (its padded
      storage), the gated product and 1/rms per group.
    Trainable mixer weights also keep the padded fp32 x (for D), dt's second fp32 copy (for A_log), exp(A_log) and
    the normalized tensor (for the gated norm's weight).

    Falcon-H1 without its gated norm (``extras.mamba_gate = "silu"``, mamba_rms_norm false: FalconH1Mixer.forward,
    modeling_falcon_h1.py:815-820; its mamba2_chunk_scan, :473-575, is this one line for line) multiplies the scan's
    fp32 output by silu(z) instead: the product keeps the scan's output (its padded storage) and silu's 16-bit output
    (silu's input z is a view of the projection the conv keeps); there is no norm weight. Its in_proj output is
    scaled by the mup_vector buffer first (:690): a product with a tensor that needs no gradient keeps only that.

    mamba_ssm's fused kernels (the default GPU path) save less: not modelled (the header names the torch path)."""
    d_i, chunks = n_M * d_M, ceil_div(seq, C_M)
    S_p = C_M * chunks
    proj = 2 * d_i + 2 * g_M * N_s + n_M
    conv = b_c * T * proj + b_c * b * (d_i + 2 * g_M * N_s) * (seq + K_conv - 1)
    gates = 2 * b_c * T * n_M + b_32 * T * n_M + b_32 * n_M
    # each einsum's bmm keeps copies of its operands: fp32, or under autocast their compute-dtype casts (and its output
    # is 16-bit: G, C·states); the inter-chunk decays' exp then keeps its own fp32 result beside the cast
    a = matmul_bytes(s_) if s_.autocast else b_32
    exp_kept = b_32 if s_.autocast else 0
    BC = b * S_p * n_M * N_s   # B or C, repeated to n_M heads, padded
    scan = (b_32 * T * d_i                                              # x in fp32, kept by x·dt
            + (b_32 + 2 * a) * b * chunks * n_M * C_M**2                # L, G and M's copy for its einsum
            + 2 * a * b * S_p * d_i                                     # x copied for two einsums
            + 4 * a * BC + b_32 * BC                                    # C twice, B, B·decay copied; B for B·decay
            + a * b * chunks * n_M * d_M * N_s                          # the chunk states copied for C·states
            + b * n_M * (chunks + 1) * ((a + exp_kept) * (chunks + 1)   # the inter-chunk decays ((c+1)² per head)
                                        + a * d_M * N_s)                # and the chunk states with h_0, copied
            + 2 * b_32 * b * S_p * n_M + a * b * S_p * d_i              # decay of B and of the output, C·states
            + 2 * b_mask * (C_M**2 + (chunks + 1)**2))                  # segment_sum's two masks, twice
    silu_gate = s_.arch.extra("mamba_gate") == "silu"
    norm = (b_c * T * d_i + b_32 * b * S_p * d_i if silu_gate else
            2 * b_32 * T * d_i + b_32 * b * S_p * d_i + b_32 * T * d_i + b_32 * T * g_M)
    source = s_.arch.source if silu_gate else MAMBA
    out = {"act_mamba_conv": (conv, r"A_{\mathrm{conv}}", "the causal conv1d's input (in_proj's whole output, of which "
                              "it reads a view) and its padded output (SiLU keeps the s + K − 1 columns)",
                              MAMBA + " causal_conv1d_fn"),
           "act_mamba_gates": (gates, r"A_{\mathrm{dt}}", "the time step: softplus's and clamp's 16-bit inputs, its "
                               "fp32 copy for x·dt and A = −exp(A_log)", MAMBA + " mamba2_chunk_scan"),
           "act_mamba_scan": (scan, r"A_{\mathrm{SSD}}", "the chunked SSD scan in fp32" + " (its einsums on compute-dtype casts)" * s_.autocast + ": per chunk of C_M tokens the "
                              "decays L and scores G (C_M² per head), the einsums' copies of x, B, C and the chunk "
                              "states (d_M × N per head), the decays and the inter-chunk recurrence (torch path: "
                              "mamba2_chunk_scan)", MAMBA + " mamba2_chunk_scan"),
           "act_mamba_norm": (norm, r"A_{\mathrm{norm},g}", "the gated RMSNorm: silu(z)'s fp32 input and output, the "
                              "scan's output, their product and 1/rms per group", MAMBA + " NemotronHRMSNormGated")
           if not silu_gate else
           (norm, r"A_{\mathrm{gate},z}", "the output gate without a norm: the scan's fp32 output and silu(z)'s "
            "16-bit output, kept by their product", source + " FalconH1Mixer.forward")}
    if not s_.lora:
        out["act_mamba_weights"] = (b_32 * b * S_p * d_i + b_32 * T * n_M + b_32 * n_M + (0 if silu_gate else b_32 * T * d_i),
                                    r"A_{\mathrm{M},w}", "trainable mixer weights: D keeps the padded fp32 x, A_log "
                                    "dt's second fp32 copy and its exp, the gated norm's weight the normalized tensor",
                                    MAMBA + " mamba2_chunk_scan")
    return out


def lora_input_bytes(s_: Structure, n: int, width: sp.Expr, per_call_cast: bool, shared: bool,
                     input_grad: bool) -> tuple[sp.Expr, sp.Expr]:
    """(lora_A's kept inputs, dropout's masks) of ``n`` lora.Linear targets reading one tensor ``width`` wide per
    token (PEFT tuners/lora/layer.py:1099-1102: x cast to the adapter dtype, lora_B(lora_A(dropout(x)))): the
    dropped-out input per target (and its mask where the input needs a gradient); under autocast a compute-dtype
    cast per target; a copy in the adapter dtype per target; else the input itself, shared by the targets (and
    with SDPA where o_proj reads SDPA's output, ``shared``). ``per_call_cast``: autocast casts a wider input per
    call anyway."""
    b_ad = compute_adapter_bytes(s_)
    autocast_copy = s_.autocast and s_.adapter_upcast
    if s_.dropout:
        mask = n * (b_ad if s_.device == "cpu" else b_mask) * T * width if input_grad else sp.Integer(0)
        return n * (matmul_bytes(s_) if autocast_copy else b_ad) * T * width, mask
    if autocast_copy or per_call_cast:
        return n * matmul_bytes(s_) * T * width, sp.Integer(0)
    if s_.adapter_upcast:
        return n * b_ad * T * width, sp.Integer(0)
    return (sp.Integer(0) if shared else b_c * T * width), sp.Integer(0)


def lora_head_saved(s_: Structure) -> sp.Expr:
    """What LoRA on lm_head saves until lm_head's backward: lora_A's input (the final norm's output, as
    ``lora_input_bytes`` keeps it; with the base frozen lm_head itself keeps nothing but its weight), dropout's
    mask, lora_A's r-wide output and, under autocast, the adapters' compute-dtype casts. The forward's
    vocabulary-wide tensors — lora_B's output, its scaled copy and the sum (layer.py:1102, 1113) — are freed before
    the loss: in the compute dtype, or with fp32 adapters and no autocast fp32 (with the base output at most
    3·4 B per logit), no more than the loss backward holds then (the fp32 log-softmax and its two fp32 gradients),
    so no moment of their own."""
    return lora_linear_saved(s_, h, V, s_.weight_casts, True)


def lora_linear_saved(s_: Structure, d_in: sp.Expr, d_out: sp.Expr, per_call_cast: bool, input_grad: bool) -> sp.Expr:
    """What one lora.Linear outside the layers saves (lm_head's, Gemma 4's per_layer_model_projection's): lora_A's
    kept input and dropout's mask (``lora_input_bytes``, not shared with another reader), lora_A's r-wide output for
    lora_B and, under autocast with wider adapters, the adapters' compute-dtype casts (A's only where its input needs
    a gradient, for which the linear keeps it)."""
    kept, mask = lora_input_bytes(s_, 1, d_in, per_call_cast, False, input_grad)
    hidden = (matmul_bytes(s_) if s_.autocast else compute_adapter_bytes(s_)) * T * r
    casts = matmul_bytes(s_) * r * ((d_in if input_grad else 0) + d_out) if s_.autocast and s_.adapter_upcast else 0
    return kept + mask + hidden + casts


def lora_embed_saved(s_: Structure) -> sp.Expr:
    """What LoRA on embed_tokens saves (PEFT tuners/lora/layer.py:1513-1518 Embedding.forward: after_A =
    F.embedding(x, lora_embedding_A.T), (after_A @ lora_embedding_B.T) · scaling; no dropout): after_A, T·r in the
    adapter dtype, for B's gradient — under autocast with wider adapters the matmul's compute-dtype casts of after_A
    and of B instead (F.embedding keeps only the ids, which the step holds anyway). Under k-bit preparation with
    checkpointing, transformers' enable_input_require_grads hook (modeling_utils.py:2153, registered by
    prepare_model_for_kbit_training's gradient_checkpointing_enable before PEFT wraps the embedding) makes the
    frozen base embedding's output a leaf that requires grad: its AccumulateGrad node keeps it until backward ends."""
    kept = matmul_bytes(s_) * (T * r + r * h) if s_.autocast and s_.adapter_upcast else compute_adapter_bytes(s_) * T * r
    return kept + (residual_bytes(s_) * T * h if s_.kbit_prepared and s_.grad_checkpointing else 0)


MOE = "transformers integrations/moe.py (grouped_mm experts)"
MLP_OPENING_SET = "ws_norm_mlp"   # the working set that opens a layer's MLP sub-block (its norm), after attention's
MLP_INPUT_SET = "ws_mlp_in"   # the MLP's input projections' working set (gate/up with LoRA): their outputs made there


def layer_working_sets(s_: Structure) -> list[Term]:
    """What each sub-block of one decoder layer's forward makes and frees again, in the order the layer runs
    them: the tensors alive together at the sub-block's high-water mark (one projection group's largest member).
    No moment lists them (a layer's working set is below the loss's); the allocation schedule makes and frees
    them in every layer's forward and recompute, so the caching allocator's segments follow them.

    >>> [t.key for t in layer_working_sets(Structure(method="lora", targets=("q_proj", "v_proj")))]
    ['ws_norm', 'ws_attn_in', 'ws_rope', 'ws_norm_mlp', 'ws_mlp']
    """
    if s_.unsloth_kernels:
        return _unsloth_working_sets(s_)
    fam, b_res, b_ad = s_.arch, residual_bytes(s_), compute_adapter_bytes(s_)
    # lora_B's output and its scaled copy: an autocast matmul's dtype (lora_B(lora_A(x)) runs under autocast: its mm
    # outputs are 16-bit whatever the adapters' dtype; against the traced schedules, DPO Qwen2.5-0.5B LoRA b4·s1024:
    # allocated +0.42 % → −0.00 %, b2·s2048 with checkpointing: reserved +3.2 % → −0.7 %), else the adapters' own
    b_lora = matmul_bytes(s_) if s_.autocast else b_ad
    upcast = 0 if s_.kbit_prepared else b_32 * T * h   # a 16-bit stream is cast to fp32 first (kept under LoRA's saves)
    norm = (b_32 * T * h * 2 + (upcast if s_.grad_checkpointing else 0), r"W_{\mathrm{norm}}",
            "RMSNorm's fp32 square and normalized product (and its fp32 upcast under checkpointing)",
            "transformers models/llama/modeling_llama.py:65-66 LlamaRMSNorm.forward")
    out: dict[str, tuple] = {"ws_norm": norm}
    targets = set(s_.targets) if s_.lora else set()
    clone = s_.method == "qlora"   # bitsandbytes' Linear4bit: result.clone() before the LoRA sum
    for group, width in fam.group_width.items():
        lora = [m for m in fam.linears if m.input_group == group and m.name in targets]
        if group == "mlp_in":
            out[MLP_OPENING_SET] = norm
        if lora:
            d = sp.Max(*(m.d_out for m in lora)) if len(lora) > 1 else lora[0].d_out
            cast = b_ad * T * width if s_.adapter_upcast and s_.grad_checkpointing else 0
            out[f"ws_{group}"] = ((1 + clone) * b_res * T * d + 2 * b_lora * T * d + cast, r"W_{\mathrm{LoRA}}",
                                  "one LoRA projection: the base result" + (" and its clone" if clone else "")
                                  + ", lora_B's output and its scaled copy (16-bit under autocast)"
                                  + (" and the input cast to the adapter dtype" if cast != 0 else ""),
                                  "peft tuners/lora/layer.py:1100-1102 Linear.forward; tuners/lora/bnb.py:533")
        if group == "attn_in" and fam.attends:
            if s_.attention == "eager":
                out["ws_scores"] = (3 * b_c * b * nh * seq**2, r"W_{\mathrm{scores}}",
                                    "eager attention's b·n_h·s² products: q·kᵀ, scaled and masked",
                                    "transformers models/llama/modeling_llama.py:193-197 eager_attention_forward")
            if fam.extra("no_rope"):
                continue
            out["ws_rope"] = (3 * b_res * T * nh * dh, r"W_{\mathrm{RoPE}}",
                              "RoPE on q: q·cos, the rotated half and its concatenation",
                              "transformers models/llama/modeling_llama.py:119-147 apply_rotary_pos_emb")
    down = fam.mlp_output
    if down is not None and not fam.moe:
        # the gated product act(gate)·up is down_proj's input: saved by a trained weight, by an older bitsandbytes'
        # MatMul4Bit, or by lora_A itself where it takes its input as it comes; else made and freed here
        lora_keeps_it = down.name in targets and not (s_.dropout or s_.adapter_upcast or (s_.autocast and s_.adapter_upcast))
        product = 0 if not s_.lora or s_.bnb_input_saved or lora_keeps_it else b_c * T * down.d_in
        out["ws_mlp"] = (product + b_c * T * down.d_out, r"W_{\mathrm{MLP}}",
                         "the gated product fed to down_proj (where nothing keeps it) and down_proj's output before "
                         "the residual add", "transformers models/llama/modeling_llama.py:163-165 LlamaMLP.forward, "
                         ":311-314 LlamaDecoderLayer.forward")
    return [Term(k, Role.LAYER_WORKING_SET, e, label, why, source) for k, (e, label, why, source) in out.items()]


def _unsloth_working_sets(s_: Structure) -> list[Term]:
    """The sub-block working sets of a layer under Unsloth's kernels: its RMSNorm's 16-bit output (the 1/rms is
    saved); matmul_lora's result and X·A per fused block (lora_B's product is added in place; the largest of q, k,
    v's); RoPE rotates q and k in place; LoRA_MLP's SwiGLU product h, the down projection's result and h·A. Modelled,
    not measured (Triton, CUDA only)."""
    fam = s_.arch
    widest_qkv = sp.Max(*(m.d_out for m in fam.linears if m.input_group == "attn_in"))
    source = UNSLOTH_KERNELS.split(";")[0]
    out = {"ws_norm": (b_c * T * h, r"W_{\mathrm{norm}}", "Unsloth's RMSNorm: its 16-bit output", source),
           "ws_attn_in": (b_c * T * widest_qkv + b_c * T * r, r"W_{\mathrm{LoRA}}", "LoRA_QKV: one projection's "
                          "result and X·A (lora_B added in place)", source),
           "ws_attn_out": (b_c * T * h + b_c * T * r, r"W_{\mathrm{LoRA}}", "LoRA_W: o_proj's result and X·A", source),
           "ws_norm_mlp": (b_c * T * h, r"W_{\mathrm{norm}}", "Unsloth's RMSNorm: its 16-bit output", source),
           "ws_mlp": (b_c * T * f + b_c * T * h + b_c * T * r, r"W_{\mathrm{MLP}}", "LoRA_MLP: the SwiGLU product, "
                      "the down projection's result and h·A", source)}
    return [Term(k, Role.LAYER_WORKING_SET, e, label, why, src) for k, (e, label, why, src) in out.items()]


def _latent_attention(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What SDPA keeps of DeepSeek-V3's multi-head latent attention (modeling_deepseek_v3.py:462-464): q as the new
    concatenation of its no-RoPE and rotated parts (n_h heads of d_nope + d_rope), k expanded per head into a new
    tensor of the same width, v a view of kv_b_proj's output, which it keeps whole (n_h · (d_nope + d_v)), its
    output (n_h · d_v) and the fp32 log-sum-exp; not a GQA-sized cache. With d_v ≠ d_nope + d_rope (DeepSeek-V3's
    128 and 192) torch's flash kernels do not run: on CUDA the memory-efficient kernel keeps the same tensors
    (modelled, not measured: its log-sum-exp rows may be padded), on the CPU the math path keeps fp32 copies of q and
    k (each scaled), of v, and the fp32 softmax of the b·n_h·s² scores (what a FakeTensor trace measures)."""
    b_mm = matmul_bytes(s_)
    d_qk, d_v = s_.arch.attention_widths
    kernel = b_mm * T * nh * (2 * d_qk + (d_qk - dh + d_v) + d_v)
    why = ("SDPA keeps q and k (n_h heads of d_nope + d_rope, built anew), kv_b_proj's whole output (v is a view of "
           "it) and its output (d_v wide)")
    terms = {"act_attention": (kernel, r"A_{\mathrm{attn}}", why, s_.arch.source),
             "act_attention_lse": (b_32 * b * nh * seq, r"A_{\mathrm{lse}}", "and the fp32 log-sum-exp of each query "
                                   "row", "torch scaled_dot_product_attention")}
    if s_.device != "cpu":
        return terms
    # 1 when the widths agree (a kernel), 1 when they differ (the math path): products and sums of indicators, no
    # difference, so that each tensor stays one positive monomial for the allocator's schedule
    equal, unequal = at_least(d_qk, d_v) * at_least(d_v, d_qk), at_least(d_qk, d_v + 1) + at_least(d_v, d_qk + 1)
    math = b_32 * T * nh * (2 * d_qk + d_v) + b_32 * b * nh * seq**2
    return {"act_attention": (equal * kernel + unequal * math, r"A_{\mathrm{attn}}",
                              why + "; on the CPU with d_v ≠ d_qk the math path instead: fp32 q, k, v and the fp32 "
                              "softmax of the s² scores", "torch _scaled_dot_product_attention_math"),
            "act_attention_lse": (equal * terms["act_attention_lse"][0], *terms["act_attention_lse"][1:])}


def _sink_scores(s_: Structure) -> tuple[sp.Expr, str, str, str]:
    """gpt-oss's eager attention with sinks: the scores joined to one sink logit per head (s + 1 columns), less
    their row maximum (whose int64 indices the max keeps), softmax in the compute dtype (its output kept)."""
    return (b_c * b * nh * seq * (seq + 1) + b_id * b * nh * seq, r"A_{\mathrm{scores}}",
            "the softmax of the b·n_h·s·(s + 1) scores and sink logits, in the compute dtype, and the int64 indices "
            "of each row's maximum (subtracted before it)", s_.arch.source)


def _moe_parts(s_: Structure) -> tuple:
    """(router module, the fused expert weights, those LoRA targets, whether the experts' weights train)."""
    fam = s_.arch
    router = fam.linear(fam.extra("router"))
    experts = [m for m in fam.moe_weights if m is not router and m.input_group in ("mlp_in", "mlp_act")]
    targeted = [m for m in experts if s_.lora and m.name in s_.targets]
    return router, experts, targeted, (not s_.lora) or bool(targeted)


def _moe_layer(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What one MoE block saves (transformers' grouped_mm path: the S = T·k_E token-expert pairs are
    sorted by expert, gathered, run through two grouped matmuls and scattered back)."""
    fam = s_.arch
    router, experts, targeted, experts_train = _moe_parts(s_)
    S = T * k_e
    renorm = fam.extra("topk_renormalized") or "norm_topk_prob" in s_.options
    b_sw = routing_weight_bytes(s_)
    if fam.extra("router_topk_softmax"):  # gpt-oss: top-k of the logits, then a softmax over those k (Granite: fp32)
        b_p = b_32 if fam.extra("router_topk_softmax") == "fp32" else b_c
        router_saved, router_why = b_id * T * k_e + b_p * T * k_e, "the int64 top-k indices and the softmax of the k logits"
    else:
        # Mistral 4: the softmax of the 16-bit logits; DeepSeek-V3, GLM-4.5: the sigmoid of the fp32 router's
        b_p = b_c if fam.extra("router_compute_dtype") else router_logit_bytes(s_) if fam.extra("router_fp32") else b_32
        router_saved = b_p * T * E + b_id * T * k_e + (b_p * T + b_p * T * k_e if renorm else 0)
        scores = "sigmoid" if fam.extra("router_fp32") else "softmax"   # DeepSeek-V3 and GLM-4.5 score by a sigmoid
        router_why = (f"the router's {'16-bit' if b_p == b_c else 'fp32'} {scores} over E experts and the int64 top-k "
                      "indices"
                      + " (and the renormalized top-k weights with their sum)" * bool(renorm))
    if fam.extra("clamped_swiglu"):  # the gate_up output (2·d_E; the clamps keep views of it) and four d_E-wide
        gated, gated_why = 6 * b_c * S * f_e, "the gate_up output (2·d_E), the clamped gate, its sigmoid, their product and up + 1"
    else:
        gated, gated_why = 3 * b_c * S * f_e, f"the gate_up output (2·d_E) and its {ACTIVATION_NAMES[fam.activation]} (d_E)"
    out = {"act_moe_router": (router_saved, r"A_{\mathrm{route}}", router_why, fam.source),
           "act_moe_experts": (3 * b_id * S + b_i32 * E + gated + b_c * S * h + b_sw * S,
                               r"A_{\mathrm{exp}}", "per token-expert pair: three int64 sort/gather indices, "
                               + gated_why + ", the down output (h) and the routing weight; E int32 group offsets", MOE)}
    if experts_train:
        ids = b_id * S if fam.extra("expert_biases") else 0  # the biases' gather keeps the sorted expert ids
        out["act_moe_expert_inputs"] = (b_c * S * h + b_c * S * f_e + ids, r"A_{\mathrm{exp,in}}",
                                        "the gathered tokens and the SiLU·up product, kept for the expert weights' "
                                        "gradients" + " (and the sorted expert ids, for the biases')" * bool(ids), MOE)
    if targeted:
        # get_delta_factors casts lora_A and lora_B to the expert weight's dtype (layer.py:2542): a copy, kept by the
        # baddbmm, only where the adapters' dtype differs (fp32 adapters on a 16-bit model; none on the fp32 experts
        # of k-bit preparation)
        b_e = b_32 if s_.kbit_prepared else b_w
        casts = at_least(b_a, 2 * b_e) + at_least(b_e, 2 * b_a)   # 1 when they differ (powers of two)
        out["act_moe_merged"] = (b_c * sp.Add(*(m.count * m.d_in * m.d_out + casts * m.count * m.rank_factor * r
                                                * (m.d_in + m.d_out) for m in targeted)), r"A_{\mathrm{exp,W'}}",
                                 "PEFT's target_parameters builds W + (α/r)·B·A of every targeted expert weight each "
                                 "forward (one baddbmm, layer.py:2319-2323), in the weight's dtype, and keeps it for "
                                 "backward, with the low-rank factors cast to that dtype where the adapters' differs",
                                 "peft tuners/lora/layer.py ParamWrapper, :2525-2542 get_delta_factors")
    if fam.extra("router_scaled"):
        out.update(_scaled_router(s_))
    if fam.extra("router_fp32"):   # F.linear(x.float(), W.float()): W's fp32 copy for x's gradient, x's for W's
        # under autocast the linear keeps its 16-bit casts instead; an fp32 W (from_pretrained, unless DeepSpeed's
        # engine cast it) needs no copy. A LoRA target (PEFT's all-linear adds gate.weight as a target parameter,
        # peft utils/transformers_weight_conversion.py:338-343, 369-373): the ParamWrapper's parametrization makes
        # W + (α/r)·B·A, a new tensor in W's dtype (peft tuners/lora/layer.py:2299-2302, 2590-2606), whose fp32 form
        # the linear keeps, and the weight's gradient needs the fp32 input as full fine-tuning's does
        router_trains = not s_.lora or router.name in s_.targets
        weight_copy = (b_c * E * h if s_.autocast else b_32 * E * h if s_.lora and router_trains else
                       0 if s_.compute_fp32 or (fam.extra("router_kept_fp32") and not s_.params_cast) else b_32 * E * h)
        b_in = b_c if s_.autocast else b_32
        merged = s_.lora and router_trains
        out["act_moe_router_input"] = (weight_copy + (b_in * T * h if router_trains else 0)
                                       + (_router_delta_casts(s_, router) if merged else 0), r"A_{\mathrm{route,in}}",
                                       "the router runs in fp32: the " + ("merged W + (α/r)·B·A" if merged else
                                                                          "weight's fp32 copy")
                                       + ", kept for the input's gradient"
                                       + (", and the fp32 input, for the weight's" if router_trains else "")
                                       + (" (under autocast, B·A's 16-bit casts of B and A)" if merged and s_.autocast
                                          else ""), fam.source)
        return out
    reads_input = any(m.input_group == "mlp_in" for m in fam.linears)  # a shared expert: its input is the router's
    if router in fam.linears:   # an nn.Linear router (Gemma 4's proj): its input is a linear input like any other
        return out
    if (not s_.lora and not reads_input) or router.name in s_.targets:
        out["act_moe_router_input"] = (b_c * T * h + (b_c * E * h + _router_delta_casts(s_, router) if s_.lora else 0),
                                       r"A_{\mathrm{route,in}}", "the router's input, kept for its weight gradient"
                                       + " (and the merged router weight; under autocast, B·A's 16-bit casts of B and "
                                       "A)" * s_.lora, fam.source)
    return out


def routed_block_live(s_: Structure, R: sp.Expr, grad: bool = False,
                      stops: bool = True) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """What one routed-experts block on R tokens (S = R·k_E token-expert pairs) holds beyond what autograd saves
    (``grad``: the block recomputed under checkpointing) or, under no_grad, all it holds (transformers 5.24
    integrations/moe.py:424-537 grouped_mm_experts_forward; the router, e.g. modeling_mixtral.py:104-111,
    modeling_qwen3_moe.py:259-268): (through the block, the gated product being made, at the un-permute).

    Through the block: the router's logits (the block keeps them as ``_`` until it returns), the top-k weights —
    saved where they are the softmax of the k logits (gpt-oss), else a local: renormalized in place, the division
    keeps a clone of the values before it (Mixtral's fp32 weights), and Qwen3-MoE casts them
    (``.to(router_logits.dtype)``, :266) — and the int64 top-k indices (saved by topk); the sorted expert ids (a local, but saved by the biases' gather where they train,
    :480) and their permutation (saved by the weights' gather, :447), the gathered tokens (saved where the experts
    train), the sorted weights (saved by their product, :523), histc's 4-byte input (fp32 on the CPU, int32 on CUDA:
    :450-451) and the E counts, and the int32 offsets (saved). The gated product: the gate_up output (2·d_E), its
    SiLU and the product (d_E each). At the un-permute (:526-529): the weighted product, in the routing weights'
    dtype (bf16 × Mixtral's fp32 weights promotes), the down bias gathered per pair (gpt-oss, :507) and under no_grad
    the down output, the inverse permutation and the un-permuted copy; recomputed, the down output and the inverse
    permutation are saved and the un-permute does not run: it saves its index before its output exists
    (torch autograd saves an op's inputs first), which is checkpoint's last saved tensor of the layer, so the
    recompute stops there (torch/utils/checkpoint.py early stop) with the arange of :528 made — unless the layer
    saves tensors after the block (not ``stops``: Qwen2-MoE's shared-expert gate), where the un-permuted copy is made
    instead (the arange freed); the gated product's instant is then the net of ``_gated_recomputed``.

    >>> from symvram.ledger.structure import Structure
    >>> routed_block_live(Structure(method="lora", family="qwen3_moe", grad_checkpointing=True), T, True)[2]
    batch*bytes_act*experts_per_token*hidden*seq + batch*bytes_index*experts_per_token*seq
    """
    fam, S = s_.arch, R * k_e
    _, _, _, experts_train = _moe_parts(s_)
    b_lg = router_logit_bytes(s_)   # an autocast matmul's (16-bit on a prepared fp32 model), or the fp32 router's
    # Mixtral's fp32 weights; Qwen3-MoE casts them to the logits' dtype
    b_sw, b_tk = (b_32, b_32) if fam.extra("routing_weights_fp32") else (routing_weight_bytes(s_), b_lg)
    weights_saved = fam.extra("router_topk_softmax")
    ids_saved = fam.extra("expert_biases") and experts_train
    bias = b_c * S * h if fam.extra("expert_biases") else 0
    if not grad:
        router = b_lg * R * E + (b_tk + b_id) * R * k_e
        sorted_ = 2 * b_id * S + b_c * S * h + b_sw * S + b_32 * S + (b_32 + b_i32) * E
        return router + sorted_, 4 * b_c * S * f_e, b_c * S * h + 2 * b_sw * S * h + bias + b_id * S
    router = b_lg * R * E + (0 if weights_saved else b_tk * R * k_e)
    sorted_ = (0 if ids_saved else b_id * S) + (0 if experts_train else b_c * S * h) + b_32 * S + b_32 * E
    unpermute = b_sw * S * h + bias + (b_id * S if stops else b_sw * S * h)
    return router + sorted_, _gated_recomputed(s_, S), unpermute


def _gated_recomputed(s_: Structure, S: sp.Expr) -> sp.Expr:
    """Recomputed routed experts as their gated product is made (the last op of ``_apply_gate``, moe.py:501;
    _default_apply_gate, :578-579; gpt-oss's, modeling_gpt_oss.py:82-88), beyond the layer's saved tensors: the product
    (saved where the experts train), gpt-oss's clamped up (a local of its gate) and the gate_up bias gathered per
    pair (``selected_biases``, moe.py:480, bound until :507) — less the down output and the inverse permutation,
    saved tensors of the layer not made yet. It is the recompute's peak where d_E is as wide as h (gpt-oss-20b)."""
    fam = s_.arch
    _, _, _, experts_train = _moe_parts(s_)
    made = ((0 if experts_train else 1) + (1 if fam.extra("clamped_swiglu") else 0)
            + (2 if fam.extra("expert_biases") else 0)) * b_c * S * f_e
    return made - b_c * S * h - b_id * S


def routed_rerun(s_: Structure) -> str | None:
    """How checkpointing's recompute of a routed-experts layer ends (``routed_block_live``): ``"stops"`` where the
    block's un-permuted sum is its output (Mixtral, Qwen3-MoE, gpt-oss: nothing of the layer saves a tensor after
    it), ``"gated"`` where a shared expert runs before the routed ones and only its sigmoid gate follows them
    (Qwen2-MoE, Qwen3-Next, Qwen3.5-MoE: modeling_qwen2_moe.py:340-351; under LoRA without targets on the shared
    expert or its gate, whose inputs' copies would follow too). None for the other blocks — a shared expert or
    dense MLP after the routed ones (DeepSeek-V3, GLM-4.5, Mistral 4, Granite, Gemma 4), Llama 4's dense experts:
    not modelled here, they keep the layer's recompute and backward moments."""
    fam = s_.arch
    if not fam.moe or fam.extra("experts_dense"):
        return None
    beside = [m for m in fam.linears if m.input_group in ("mlp_in", "mlp_act")]
    if not fam.extra("shared_expert") and not beside:
        return "stops"
    if fam.extra("shared_expert") is True and not (s_.lora and any(m.name in s_.targets for m in beside)):
        return "gated"
    return None


def _routed_recompute(s_: Structure) -> sp.Expr:
    """The last layer's routed experts recomputed inside its backward, at the un-permute or as the gated product is
    made (``routed_block_live``, ``routed_rerun``), beyond the layer's saved tensors: the block's locals, the gradient reaching the layer
    (the residual stream's dtype) and the (S, h) copy autograd made of it (the backward of ``.view(T, k_E,
    h).sum(1)``, moe.py:535: an expand that the view's backward copies; the un-permute's backward, the next node,
    unpacks the first saved tensor and triggers the recompute; a shared expert's gate after the block is a later
    node, whose backward triggers it before the copy exists), the attention sub-block's residual sum (a 16-bit
    stream's: an fp32 one is the post-attention norm's saved input) and the normed MoE input (locals of the decoder layer and of the block, e.g. modeling_qwen3_moe.py:278-282), where the
    router does not save that input."""
    stops = routed_rerun(s_) == "stops"
    through, gated, unpermute = routed_block_live(s_, T, grad=True, stops=stops)
    b_sw = routing_weight_bytes(s_)
    # the input is saved by the router where its weight trains, or by the shared expert's trainable linears
    saved_in = "act_moe_router_input" in _moe_layer(s_) or (not s_.lora and not stops)
    moe_in = 0 if saved_in else b_c * T * h
    b_res = residual_bytes(s_)
    # an fp32 stream (k-bit preparation) is what the post-attention norm saves itself (its .to(float32) is no copy)
    residual = at_least(b_32, 2 * b_res) * b_res * T * h   # 1 for a 16-bit stream, 0 for an fp32 one
    copy = b_sw * T * k_e * h if stops else 0   # the gate's backward triggers a "gated" recompute, before the copy
    later = 0 if stops else b_c * T   # the shared expert's gate sigmoid, a saved tensor made after the routed block
    around = b_res * T * h + copy + residual + moe_in   # the gradient and its copy, the residual sum, the MoE input
    return through + around + sp.Max(gated - later, unpermute - later, evaluate=False)


def experts_recompute_temp(s_: Structure) -> sp.Expr:
    """What a layer's experts hold when checkpointing reruns them inside the layer's backward, beyond its saved
    tensors: Llama 4's dense experts at their down bmm, or routed experts at their gated product or un-permute."""
    return _experts_forward_temp(s_, recompute=True) if s_.arch.extra("experts_dense") else _routed_recompute(s_)


def _experts_recompute_tensors(s_: Structure) -> tuple[tuple[int, sp.Expr], ...]:
    """The routed recompute's tensors for the allocation schedule (``Term.tensors``): each monomial beside the larger
    instant one tensor shape times its count, and that instant (a net of tensors not made yet) one tensor."""
    if s_.arch.extra("experts_dense"):
        return ()
    expr = _routed_recompute(s_)
    larger = [a for a in sp.Add.make_args(expr) if isinstance(a, sp.Max)]
    rest = [a.as_coeff_Mul() for a in sp.Add.make_args(sp.expand(expr - sp.Add(*larger)))]
    return tuple((int(c), m) for c, m in rest) + tuple((1, a) for a in larger)


def _router_delta_casts(s_: Structure, router) -> sp.Expr:
    """What the LoRA delta of a targeted router weight keeps: ParamWrapper computes (α/r)·B·A once per forward
    before the parametrization adds it (peft tuners/lora/layer.py:2590-2606 _activate_lora; Linear.get_delta_weight,
    :1044-1072), a matmul that saves its operands, the adapters themselves, but under autocast its casts of B and A
    to the autocast dtype where the adapters are wider (fp32 adapters; an fp32 router's always are: they take the
    weight's dtype, :2499-2519)."""
    if not s_.autocast:
        return 0
    b_ad = b_32 if s_.arch.extra("router_kept_fp32") and not s_.params_cast else compute_adapter_bytes(s_)
    b_mm = matmul_bytes(s_)
    differ = at_least(b_ad, 2 * b_mm) + at_least(b_mm, 2 * b_ad)   # 1 when they differ (powers of two)
    return differ * b_mm * router.count * r * (router.d_in + router.d_out)


def _scaled_router(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """Gemma 4's router beyond the softmax and top-k (Gemma4TextRouter.forward, modeling_gemma4.py:1309-1328): the
    renormalized top-k weights times per_expert_scale[top_k_index] keep the gathered (T, k_E) scales for the weights'
    gradient (in the parameters' dtype: fp32 after k-bit preparation); where the scales train, also the fp32 weights
    themselves (the in-place renormalization kept a clone of the top-k values, counted with the softmax), and the
    weightless norm's 16-bit output, which its product with the trainable ``scale`` keeps (T·h)."""
    b_p = b_32 if s_.kbit_prepared else compute_weight_bytes(s_)
    trained = 0 if s_.lora else b_32 * T * k_e + b_c * T * h
    return {"act_moe_router_scale": (b_p * T * k_e + trained, r"A_{\mathrm{route,scale}}",
                                     "the gathered per-expert scales of each token's k experts"
                                     + (", and for the trainable scales' gradients the renormalized fp32 weights and "
                                        "the router norm's output") * (not s_.lora), s_.arch.source)}


LLAMA4 = "transformers models/llama4/modeling_llama4.py"


def _dense_experts(s_: Structure, input_grad: bool) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What Llama 4's MoE block saves (Llama4TextMoe.forward, modeling_llama4.py:159-169; Llama4Router, :139-145;
    Llama4TextExperts, :66-79): the router's fp32 sigmoid over the (T, E) scattered top-k logits and the int64 top-k
    indices; every token repeated E times (kept by the product with the scores, for the scores' gradient) and the
    scores' (E·T, 1) copy; through the bmm over all E experts the gate_up output (2·d_E) and the SiLU output (d_E)
    per token-expert row, E·T rows whatever the top-k or the routing. Trainable experts also keep the scaled tokens
    and the SiLU·up product for their weight gradients. ``input_grad``: the block's input needs a gradient (else, in
    a LoRA model's first layer, the routed path keeps nothing)."""
    _, _, _, experts_train = _moe_parts(s_)
    rows = E * T
    if not (input_grad or experts_train):
        return {}
    # k-bit preparation makes the experts and the stream fp32: under autocast each bmm runs on (and keeps) 16-bit casts
    # of the expert weights, and its outputs are 16-bit
    b_mm = matmul_bytes(s_)
    casts = 3 * b_mm * E * h * f_e if s_.kbit_prepared and s_.autocast else 0
    out = {"act_moe_router": (b_32 * T * E + b_id * T * k_e, r"A_{\mathrm{route}}", "the router's fp32 sigmoid over "
                              "the scattered top-k logits of all E experts and the int64 top-k indices", LLAMA4),
           "act_moe_experts": (b_c * rows * h + b_mm * rows + 3 * b_mm * rows * f_e + casts, r"A_{\mathrm{exp}}",
                               "every token repeated for each of the E experts and the scores' (E·T, 1) copy, kept by "
                               "their product; the bmm's gate_up output (2·d_E) and SiLU output (d_E) per "
                               "token-expert row (E·T rows: the experts run densely)", LLAMA4)}
    if experts_train:
        out["act_moe_expert_inputs"] = (b_c * rows * h + b_c * rows * f_e, r"A_{\mathrm{exp,in}}", "the scaled "
                                        "tokens and the SiLU·up product, kept for the expert weights' gradients",
                                        LLAMA4)
    return out


def _experts_forward_temp(s_: Structure, recompute: bool = False) -> sp.Expr:
    """The last layer's dense experts at their down bmm (Llama4TextExperts.forward, modeling_llama4.py:76; Llama4TextMoe,
    :160-168), beyond what the layer has saved by then: its output (E·T rows of h), the router's (T, E) logits (a
    local of the block until it returns) and, where the experts are frozen and save neither, the scaled tokens
    (``routed_in``, a local too) and the SiLU·up product — net of what the shared expert saves after them (its
    three d_S-wide tensors, the down projection's input, its LoRA targets' copies of their inputs, r-wide outputs and
    autocast casts). Traced on tiny configs (E up to 64 with T = 128).

    ``recompute``: the same bmm when checkpointing reruns the layer inside its backward (the first saved tensor the
    layer's backward unpacks is the down bmm's, torch.utils.checkpoint then reruns the layer): beside it the
    gradient reaching the layer and the (E·T, h) copy autograd made of it (the backward of ``.reshape(E, T,
    h).sum(0)`` at :168, an expand that reshape copies); the mask is the saved one then. Trainable experts (full
    fine-tuning) free nothing after the bmm, so the block's end peaks, the shared expert's tensors made. Traced on
    tiny Llama 4s with E = 64 (LoRA on attention, all linears: to the byte where the last layer peaks; full
    fine-tuning with every layer MoE at the first layer: 8 KiB under).

    >>> from symvram.ledger.structure import Structure
    >>> s = Structure(family="llama4_text", method="lora", targets=("q_proj",), grad_checkpointing=True)
    >>> sp.expand(_experts_forward_temp(s, True) - _experts_forward_temp(s))
    batch*bytes_act*experts*hidden*seq - batch*bytes_mask*seq**2*at_least(seq, window)*at_least(sliding_layers, 1) + batch*bytes_weight*hidden*seq
    """
    fam = s_.arch
    _, _, _, experts_train = _moe_parts(s_)
    rows = E * T
    mask = b_mask * b * past_window(s_) * seq**2 * at_least(fam.dim("sliding_layers"), 1)
    shared = [m for m in fam.linears if m.input_group in ("mlp_in", "mlp_act")]
    down = next(m for m in shared if m.input_group == "mlp_act")
    d_s = down.d_in
    grad = residual_bytes(s_) * T * h + b_c * rows * h if recompute else mask
    if recompute and s_.lora and down.name in s_.targets:   # the shared expert's backward runs first (its nodes are
        # later ones): at its LoRA down projection, the scaled gradient and, adapters wider, its cast to the base's
        grad += ((matmul_bytes(s_) if s_.autocast else compute_adapter_bytes(s_)) * T * h
                 + (b_c * T * h if s_.adapter_upcast and not s_.autocast else 0))
    held = (b_c * rows * h + 2 * b_c * T * E + (0 if experts_train else b_c * rows * h + b_c * rows * f_e)
            + 2 * residual_bytes(s_) * T * h + (b_c * T * h if s_.lora else 0)   # the layer's input and residual;
            + grad)                                                                # the MoE input
    after = 3 * b_c * T * d_s
    if not s_.lora:   # recomputed, the trainable experts free nothing after the bmm: the block's end peaks, its
        return held if recompute else held - after - b_c * T * d_s   # shared expert's tensors made
    targets = [m for m in shared if m.name in s_.targets]
    for group, width in (("mlp_in", h), ("mlp_act", d_s)):
        n = sum(1 for m in targets if m.input_group == group)
        if n and (s_.dropout or s_.adapter_upcast or s_.autocast):   # a copy per target (else the input itself)
            kept, mask = lora_input_bytes(s_, n, width, False, False, True)
            after += kept + mask
    after += len(targets) * (matmul_bytes(s_) if s_.autocast else compute_adapter_bytes(s_)) * T * r
    if s_.autocast and s_.adapter_upcast:
        after += matmul_bytes(s_) * r * sp.Add(*(m.d_in + m.d_out for m in targets))
    return held - after


def _shared_expert(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What a shared expert saves beside the routed ones (Qwen2-MoE): its SwiGLU MLP's three d_S-wide tensors, and
    for sigmoid(shared_expert_gate(x)) · shared output the gate's sigmoid and the MLP's output; an ungated one
    (``shared_expert = "plain"``, GLM-4.5's, added to the routed output; ``"dense"``, Gemma 4's dense GeGLU MLP beside
    the experts, its output normed before the sum) the three tensors alone."""
    fam = s_.arch
    d_s = next(m.d_in for m in fam.linears if m.input_group == "mlp_act")   # its down projection's input
    act = ACTIVATION_NAMES[fam.activation]
    if fam.extra("shared_expert") in ("plain", "dense"):
        who = "the dense MLP's" if fam.extra("shared_expert") == "dense" else "the shared experts'"
        return {"act_shared_expert": (3 * b_c * T * d_s, r"A_{\mathrm{shared}}", f"{who} gate output "
                                      f"({act} input), {act} output and up output (d_S wide each)", fam.source)}
    return {"act_shared_expert": (3 * b_c * T * d_s + b_c * T * h + b_c * T, r"A_{\mathrm{shared}}",
                                  "the shared expert's gate output (SiLU input), SiLU output and up output (d_S wide "
                                  "each), its output and the sigmoid of its gate, kept by the gating product",
                                  fam.source)}


def mlp_width(fam) -> sp.Expr:
    """The width of a dense layer's MLP: its output projection's input (d_ff; Gemma 4's KV-sharing layers with
    use_double_wide_mlp: twice it).

    >>> from symvram.ledger.architecture import family
    >>> mlp_width(family("llama"))
    intermediate
    """
    return fam.mlp_output.d_in if fam.mlp_output is not None else f


def _layer_backward_temp(s_: Structure) -> tuple[sp.Expr, str, str]:
    """The temporaries of the last layer's MLP backward, net of what that backward has freed already (or of the
    norm backward a layer's output norm begins it with, where that is larger: ``_layer_end_norm_backward``)."""
    temp, why, source = _mlp_backward_temp(s_)
    larger = _layer_end_norm_backward(s_, temp)
    if larger != temp:
        why += "; or, where larger, the layer's output norm's backward that begins it"
    return larger, why, source


def _mlp_backward_temp(s_: Structure) -> tuple[sp.Expr, str, str]:
    """The temporaries of the last layer's MLP backward, net of what that backward has freed already."""
    if s_.arch.mlp_kind == "none":   # a mixer-only block (Nemotron-H's Mamba and attention layers): no MLP backward
        return sp.Integer(0), "a block without an MLP: no MLP backward", s_.arch.source
    if s_.arch.mlp_kind == "plain":   # up, ReLU², down: the gradients of down's input, of the square and of ReLU
        made, freed = _output_projection_done(s_)
        return (3 * b_c * T * f + b_c * T * h + made - freed, "inside a layer's ReLU² MLP backward: the gradients of "
                "the down input, the square and the ReLU (d_ff wide) and the incoming hidden gradient; the down "
                "projection's backward has run", "autograd of " + s_.arch.source + " NemotronHMLP")
    if s_.unsloth_kernels:   # LoRA_MLP.backward (kernels/fast_lora.py:458-600)
        return (b_c * T * f + b_c * T * h + 3 * b_c * T * r + 3 * b_c * r * (h + f), "inside Unsloth's LoRA_MLP "
                "backward: down's input gradient DW (d_ff wide; the SwiGLU gradient is then written into DW, e and g in "
                "place, and dX into X), the incoming hidden gradient, r-wide products and the six adapters' 16-bit "
                "gradients (modelled, not measured)", "unsloth 2026.10.9 kernels/fast_lora.py:458-600 LoRA_MLP.backward")
    if not s_.arch.moe:
        made, freed = _output_projection_done(s_)
        return (3 * b_c * T * mlp_width(s_.arch) + b_c * T * h + made - freed, "inside a layer's MLP backward: the gradients of the "
                "down input, the SiLU output and the up output (d_ff wide) and the incoming hidden gradient; the down "
                "projection's backward has run: its weight gradient exists and what only it saved is freed",
                "autograd of LlamaMLP")
    _, _, targeted, experts_train = _moe_parts(s_)
    if s_.arch.extra("experts_dense"):   # Llama 4: E·T rows through the bmm's backward (modeling_llama4.py:76-78)
        rows, w_grad = E * T, (b_g * E * f_e * h if experts_train else 0)
        # the shared expert ran after the routed ones: its backward has run, its saved tensors are freed (and, when
        # trainable, its three weight gradients made)
        d_s = next(m.d_in for m in s_.arch.linears if m.input_group == "mlp_act")
        shared = -3 * b_c * T * d_s + (3 * b_g * h * d_s - b_c * T * d_s if not s_.lora else 0)
        b_mm = matmul_bytes(s_)   # the bmm's gradients: 16-bit under autocast on a k-bit-prepared (fp32) model
        down = b_mm * rows * (h + f_e) + b_c * T * h + w_grad + shared
        product = 3 * b_mm * rows * f_e + b_c * T * h + (w_grad - b_c * rows * f_e if experts_train else 0) + shared
        return (sp.Max(down, product, evaluate=False), "the dense experts' backward over all E·T rows: at the down "
                "bmm the output gradient's copy (h) and the input gradient (d_E), at the SiLU·up product its gradient "
                "and those of up and SiLU (d_E each; the product, if saved, freed), with the incoming hidden gradient "
                "and, for trainable experts, down's weight gradient", LLAMA4)
    S = T * k_e
    freed = b_c * S * h + b_id * S  # the down output and one index vector are gone by then
    if targeted:
        return (b_c * E * h * f_e + b_c * S * f_e + b_c * S * h + b_c * T * h - freed,
                "the down matmul's backward: the merged expert weight's gradient (E·h·d_E), the pairs' gradients and "
                "the incoming hidden gradient, net of the freed down output and index", MOE)
    return (3 * b_c * S * f_e + b_c * T * h - freed, "the SiLU·up backward of the experts: three d_E-wide gradients "
            "per token-expert pair and the incoming hidden gradient, net of the freed down output and index", MOE)


def _layer_end_norm_backward(s_: Structure, mlp: sp.Expr) -> sp.Expr:
    """A layer whose output is normed before its residual add (Gemma's post_feedforward_layernorm, Gemma 4's
    post_per_layer_input_norm): its backward begins in that RMSNorm's, with every other saved tensor of the layer
    still alive: four fp32 hidden-sized gradients beside the incoming 16-bit one (a trainable weight's fifth, the
    product for its gradient, net of the normalized input that weight kept, ``act_norm_weight_input``, freed once
    that mul's backward has run). Measured on tiny Gemma 4 under checkpointing at layer 0 (the peak of full
    fine-tuning: three fp32 mul, a div and a pow of (b, s, h) beside the 16-bit gradient, the layer's saved tensors
    one fp32 (b, s, h) short). The larger of that and the MLP backward (``mlp``); torch's RMSNorm ops only (Liger's
    and Unsloth's kernels have their own)."""
    if s_.liger or s_.unsloth_kernels or not any(
            n.at in ("mlp_out", "ple_out") and n.width == h for n in s_.arch.active_norms(s_.options)):
        return mlp
    return sp.Max(mlp, 4 * b_32 * T * h + b_c * T * h, evaluate=False)


def _output_projection_done(s_: Structure) -> tuple[sp.Expr, sp.Expr]:
    """(made, freed) once the MLP's output projection (down_proj) has run its backward, before the SiLU·up
    products' gradients: its weight gradient — or, as a LoRA target, lora_A's and lora_B's — is made, and what
    only it saved for that gradient is freed: its d_ff-wide input (full fine-tuning; an autocast copy where each
    call casts), or lora_A's kept input, dropout's mask and lora_B's r-wide input. Measured under FakeTensorMode
    (tiny Qwen2; TinyLlama-1.1B full, 8-bit AdamW; Llama-2-7B LoRA with 16-bit adapters).

    >>> _output_projection_done(Structure(method="full"))
    (bytes_grad*hidden*intermediate, batch*bytes_act*intermediate*seq)
    """
    m = s_.arch.mlp_output
    if m is None:
        return sp.Integer(0), sp.Integer(0)
    per_call = _per_call_cast(s_, "mlp_act")
    if not s_.lora:
        return b_g * m.d_in * m.d_out, (b_c if not per_call else matmul_bytes(s_)) * T * m.d_in
    if m.name not in s_.targets:
        return sp.Integer(0), sp.Integer(0)
    kept, mask = lora_input_bytes(s_, 1, m.d_in, per_call, False, True)
    hidden = (matmul_bytes(s_) if s_.autocast else compute_adapter_bytes(s_)) * T * r
    return b_g * r * (m.d_in + m.d_out), kept + mask + hidden


def past_window(s_: Structure) -> sp.Expr:
    """1 once a layer's attention needs an explicit mask: always in a packed row, else once the sequence is as
    long as the sliding window (or Llama 4's attention chunk): transformers materializes the mask from there
    (masking_utils.py:286: kv_length >= local_attention_size)."""
    return sp.Integer(1) if s_.packed else at_least(seq, s_.arch.dim("window"))


PACKED = ("transformers masking_utils.py find_packed_sequence_indices / sdpa_mask: position ids that restart give a "
          "block-diagonal mask")


def masked_layers(s_: Structure) -> sp.Expr:
    """The layers whose SDPA call gets an explicit mask: every layer of a packed row, else the sliding ones."""
    return L if s_.packed else s_.arch.dim("sliding_layers")


def sliding_extra(s_: Structure) -> sp.Expr:
    """A layer whose SDPA call gets an explicit mask — a sliding-window layer once the sequence is longer than the
    window (Gemma 3), or any layer of a packed row (the samples' block-diagonal mask): SDPA saves a 16-bit
    (b, 1, s, s) mask (torch converts the boolean one) and k, v are expanded to n_h heads (repeat_kv, a copy unless
    n_kv = 1) instead of GQA. Nothing while s ≤ w."""
    if (s_.arch.dim("window", 0) == 0 and not s_.packed) or s_.attention != "sdpa":
        return sp.Integer(0)
    repeated = at_least(nkv, 2)  # with one kv head repeat_kv is a stride-0 view: no copy
    return past_window(s_) * (b_c * b * seq**2 + repeated * 2 * b_c * T * dh * (nh - nkv))


def mask_kinds(s_: Structure) -> sp.Expr:
    """How many attention masks the decoder builds when every layer gets one (eager attention, a packed row): one
    per attention kind its layers have, full and sliding (the decoder's ``causal_mask_mapping``, transformers 5.24
    modeling_gemma3.py:525-527, modeling_olmo3.py:420; a kind no layer has reads none and dies at once)."""
    sliding = s_.arch.dim("sliding_layers", 0)
    return sp.Integer(1) if sliding == 0 else at_least(sliding, 1) + at_least(L - sliding, 1)


def eager_mask_term(s_: Structure) -> Term:
    """Eager attention's float masks: ``eager_mask`` casts sdpa_mask's boolean (b, 1, s, s) — an expand over the
    batch — to 0 / finfo.min in inputs_embeds' dtype with ``torch.where``, a full b·s² tensor (transformers 5.24
    masking_utils.py:597-618, :539), one per attention kind the decoder builds a mask for (full, sliding). Under
    non-reentrant checkpointing each is an input of the checkpointed layers that read it, kept until their backward
    (measured: Llama, Qwen3, gpt-oss, Gemma 2); without checkpointing they die when the decoder's forward returns, a
    forward transient like the others the ledger leaves out.

    >>> from symvram.ledger.structure import Structure
    >>> eager_mask_term(Structure(attention="eager", grad_checkpointing=True)).expr
    batch*bytes_weight*seq**2
    """
    return Term("act_eager_mask", Role.SAVED_ACTIVATION, mask_kinds(s_) * residual_bytes(s_) * b * seq**2,
                r"A_{\mathrm{mask}}", "eager attention's float causal mask" + (
                    "s, one per attention kind (full, sliding)" if mask_kinds(s_) != 1 else "") + " (b·s² in the residual "
                "stream's dtype), a checkpoint input until the layers' backward",
                "transformers masking_utils.py:597-618 eager_mask",
                lifetime=span(Phase.FIRST_LAYER_FORWARD, Phase.FIRST_LAYER_BACKWARD))


def torchtune_tokens_term(s_: Structure) -> Term:
    """torchtune's tokens and labels: the batch's tokens and labels, the labels shifted by ``hstack`` with the
    recipe's [b, 1] ignore column (recipes/lora_finetune_single_device.py:650-652), and CEWithChunkedOutputLoss's
    ``reshape(-1)`` of each sequence chunk (modules/loss/ce_chunked_output_loss.py:70-73), a copy once b > 1.

    >>> from symvram.ledger.structure import Structure
    >>> torchtune_tokens_term(Structure(model_code="torchtune")).expr
    bytes_index*(batch*seq*(at_least(batch, 2) + 3) + batch)
    """
    return Term("act_tokens", Role.STEP_INPUT, b_id * (T * (3 + at_least(b, 2)) + b), r"A_{\mathrm{ids}}",
                "tokens, labels, the labels shifted by hstack with the [b, 1] ignore column, and (b > 1) the loss's "
                "copy of each chunk of them (int64)", "torchtune 0.6.1 recipes/lora_finetune_single_device.py:650-652, "
                "modules/loss/ce_chunked_output_loss.py:70-73")


def residual_bytes(s_: Structure) -> sp.Symbol:
    """The residual stream's dtype, which a checkpoint keeps: fp32 after kbit preparation, else the weights' as
    they compute."""
    return b_32 if s_.kbit_prepared else compute_weight_bytes(s_)


def saved_per_layer(s_: Structure) -> sp.Expr:
    """What one layer leaves saved until its backward: its input under checkpointing, else its saved tensors."""
    return residual_bytes(s_) * T * h if s_.grad_checkpointing else per_layer_bytes(s_) + sliding_extra(s_)


def _layer_bytes(s_: Structure) -> sp.Expr:
    """Bytes one (not the first) decoder layer of ``s_``'s own kind saves."""
    return sp.Add(*(e for e, *_ in _layer(s_, first=False).values()))


def largest_kind(s_: Structure, per_layer) -> sp.Expr:
    """``per_layer`` of one layer's structure: the same for every layer, or the largest over the family's layer
    kinds the model has (each times at_least(its count, 1): Gemma 4's MoE kinds in a dense model count nothing;
    left unevaluated, as the numbers decide which)."""
    values = list(dict.fromkeys(per_layer(k) for _, k in s_.layer_kinds))
    if len(values) == 1:
        return values[0]
    return sp.Max(*dict.fromkeys(per_layer(k) * at_least(n, 1) for n, k in s_.layer_kinds), evaluate=False)


def per_layer_bytes(s_: Structure) -> sp.Expr:
    """Bytes one (not the first) decoder layer saves: also what one checkpoint recompute holds (for a family whose
    layers differ, the largest kind's)."""
    return largest_kind(s_, _layer_bytes)


# the only fields the activation and transient terms read (not the optimizer, master copy, quantization, sharding)
ACTIVATION_FIELDS = ("method", "family", "first_kind", "lead_kinds", "kind_depths", "options", "tied", "targets", "adapter_upcast", "attention", "autocast",
                     "compute_fp32", "device", "kernels", "dora", "dropout", "grad_checkpointing", "head_targets",
                     "optimizer_in_backward", "checkpoint_every", "checkpoint_ops", "offload_activations", "offload_checkpoints", "packed", "liger",
                     "unsloth_kernels", "params_cast",
                     "model_code",
                     "kbit_prepared", "loss_impl", "modules_to_save", "score_head", "weight_casts", "fsdp_mixed_precision", "bnb_input_saved",
                     "shift_logits_copy", "forward_logits_upcast", "tower", "objective", "nll", "images",
                     "train_vision", "pixel_cast")


def refuse_unmodelled(fam) -> None:
    """A drafted family (``symvram family-draft``) whose layers run module classes no rule here models: its
    activation block is refused, naming them (its parameter side is exact)."""
    if fam.unmodelled:
        raise UserError(f"the activations of {fam.key} are not modelled: transformers' {', '.join(fam.unmodelled)} "
                        "save tensors no ledger rule describes (the parameter side is read from the model: symvram "
                        "family-draft prints it); measure the step with symvram validate")


EVERY_N = "; transformers modeling_utils.py:3246 _set_gradient_checkpointing (layer_index % every_n_layers == 0)"


def checkpointed_layers(s_: Structure) -> sp.Expr:
    """How many layers checkpointing wraps: all L, or with transformers' ``every_n_layers = k`` layers 0, k, 2k …:
    ⌈L / k⌉ (the first always; the last when k divides L − 1)."""
    return L if s_.checkpoint_every == 1 else ceil_div(L, s_.checkpoint_every)


SAC = ("torchtitan torchtitan/distributed/activation_checkpoint.py (b5bcd76) :31-94 _get_default_save_ops, :245-270 "
       "SelectiveAC's policy; torch utils/checkpoint.py create_selective_checkpoint_contexts")


def sac_matmuls(s_: Structure) -> list[tuple[sp.Expr, sp.Expr, sp.Expr, bool]]:
    """A decoder layer's matmuls in their order, each (d_in, d_out, bytes per output element, saved) under
    torchtitan's op-level policy: its counter of ``aten.mm`` calls restarts per layer and every even-numbered mm is
    recomputed (activation_checkpoint.py:257-273, ``meta[mm_count_key] % 2 == 0``). Each nn.Linear is one matmul in
    the layer's call order (the family entry's order: q, k, v, o, gate, up, down in Llama's decoder layer, traced); a
    LoRA target is three: the base layer's, then lora_A's (r wide), then lora_B's (peft tuners/lora/layer.py
    Linear.forward: ``result = self.base_layer(x)`` before ``lora_B(lora_A(dropout(x)))``), whose outputs have the
    adapters' dtype, the compute dtype under autocast (as ``act_lora_hidden``). A linear with a bias (Qwen2's q, k, v)
    on its contiguous input is ``aten.addmm`` on the input's 2-D view (torch aten/src/ATen/native/Linear.cpp
    ``linear``: the fused path for a contiguous input with a bias; traced): in the save set (torch 2.13
    _functorch/partitioners.py:2976) but not one of the policy's ``mm_ops`` (activation_checkpoint.py:241), so it is
    saved and not counted; LoRA's adapters have no bias (lora_A, lora_B: ``bias=False``)."""
    fam, targets = s_.arch, set(s_.targets) if s_.lora else set()
    b_base, b_lora = matmul_bytes(s_), (matmul_bytes(s_) if s_.autocast else compute_adapter_bytes(s_))
    calls: list[tuple[sp.Expr, sp.Expr, sp.Expr, bool]] = []   # (d_in, d_out, bytes, counted by the policy)
    for m in fam.linears:
        calls.append((m.d_in, m.d_out, b_base, m.bias not in s_.options))
        if m.name in targets:
            calls += [(m.d_in, r * m.rank_factor, b_lora, True), (r * m.rank_factor, m.d_out, b_lora, True)]
    counts = accumulate(counted for *_, counted in calls)   # the policy's counter after each call
    return [(d_in, d_out, width, not counted or n % 2 == 1) for (d_in, d_out, width, counted), n in zip(calls, counts)]


def sac_terms(s_: Structure) -> list[Term]:
    """What torchtitan's op-level policy saves in each of the L checkpointed layers beside its input: the outputs of
    the odd-numbered mms (``sac_matmuls``) and SDPA's output and fp32 log-sum-exp (the CUDA flash op is in the save
    set; the CPU's own flash op is not, and the tracer saves it in its place: validate.sac). The saved outputs are
    held by the policy's cache from the forward to the layer's recompute (the CUDA op's two 8-byte philox scalars are
    left out: modelled, not measured); the cache is the caching mode's own storage (torch utils/checkpoint.py:1355
    _CachingTorchDispatchMode), not autograd's saved tensors, so TRL's activation offloading leaves it on the device."""
    mms = sp.Add(*(T * d_out * width for _, d_out, width, saved in sac_matmuls(s_) if saved))
    attention = matmul_bytes(s_) * T * nh * dh + b_32 * b * nh * seq
    return [Term("act_sac_matmuls", Role.SAVED_ACTIVATION, (L - 1) * mms, r"(L - 1) \cdot A_{\mathrm{SAC,mm}}",
                 "torchtitan's op-level checkpointing keeps the output of every second matmul (the 1st, 3rd … of "
                 "each layer, LoRA's r-wide ones among them)", SAC),
            Term("act_sac_attention", Role.SAVED_ACTIVATION, (L - 1) * attention, r"(L - 1) \cdot A_{\mathrm{SAC,attn}}",
                 "and SDPA's output and fp32 log-sum-exp of each layer (the flash op is in its save set)", SAC),
            Term("act_sac_last_layer", Role.SAVED_ACTIVATION, mms + attention,
                 r"A_{\mathrm{SAC,mm}} + A_{\mathrm{SAC,attn}}",
                 "the last layer's, until its recompute replays them (its recomputed tensors, one_layer, hold them "
                 "then: the policy's cache pops each as it is replayed)", SAC,
                 lifetime=span(Phase.FORWARD, Phase.FINAL_NORM_BACKWARD))]


def saved_terms(s_: Structure) -> list[Term]:
    """Block 3 terms: per-layer saved tensors × L (or checkpointed inputs), then the model's head."""
    fam = s_.arch
    refuse_unmodelled(fam)
    terms: list[Term] = []
    if s_.offload_activations:
        terms += offloaded_terms(s_) + (sac_terms(s_) if s_.checkpoint_ops else [])
    elif s_.offload_checkpoints:
        terms += unsloth_checkpoint_terms(s_)
    elif s_.grad_checkpointing:
        b_res, n_c = residual_bytes(s_), checkpointed_layers(s_)
        terms.append(Term("act_checkpoints", Role.SAVED_ACTIVATION, n_c * b_res * T * h + position_ids(s_),
                          r"A_{\mathrm{ckpt}}", "checkpointing keeps each layer's input"
                          + (" (and the position ids)" if position_ids(s_) != 0 else "")
                          + "; layers are recomputed in backward"
                          + (f" — every {s_.checkpoint_every}th layer (0, {s_.checkpoint_every}, …)"
                             if s_.checkpoint_every > 1 else ""),
                          "torch.utils.checkpoint (non-reentrant)" + EVERY_N * (s_.checkpoint_every > 1)))
        if fam.extra("stored_kv"):
            terms += [stored_kv_term(s_), stored_kv_graph_term(s_)]
        if s_.checkpoint_ops:
            terms += sac_terms(s_)
        if s_.checkpoint_every > 1:   # the other layers save as without checkpointing (none is the first)
            for key, (expr, label, why, source) in _layer(s_, first=False).items():
                terms.append(Term(key, Role.SAVED_ACTIVATION, (L - n_c) * expr, f"(L - L_c) \\cdot {label}",
                                  why + " (the layers not checkpointed)", source))
    else:
        general: dict[str, tuple] = {}   # key -> ({one layer's bytes: layers of the kinds saving them}, label, why, source)
        for n, kind in s_.layer_kinds:
            for key, (expr, label, why, source) in _layer(kind, first=False).items():
                counts = general.setdefault(key, ({}, label, why, source))[0]
                counts[expr] = counts.get(expr, 0) + n   # kinds saving alike (a hybrid's MoE blocks) count together
        for key, (counts, label, why, source) in general.items():
            terms.append(Term(key, Role.SAVED_ACTIVATION, sp.Add(*(n * e for e, n in counts.items())),
                              f"L \\cdot {label}", why, source))
        later, first = _layer(s_.first_layer, first=False), _layer(s_.first_layer, first=True)
        correction = sp.Add(*(first.get(k, (0,))[0] - later[k][0] for k in later))
        correction -= sp.Add(*(e for k in s_.lead_kinds for e, *_ in _layer(s_.layer(k), first=False).values()))
        if correction != 0:
            terms.append(Term("act_first_layer", Role.SAVED_ACTIVATION, sp.expand(correction), r"A_{\mathrm{layer\,0}}",
                              "the first layer's input (the frozen embedding) needs no gradient, so it saves less"
                              + (f"; the {len(s_.lead_kinds)} layers before the first with a LoRA target save nothing"
                                 if s_.lead_kinds else ""), "autograd saves only what a required gradient needs"))
    if sliding_extra(s_) != 0:
        if s_.grad_checkpointing:
            # a sliding-window mask is one (s, s) block broadcast over the batch; Llama 4's chunked mask is built per
            # sample (its left-padding offsets, masking_utils.py:102-109): b blocks; a packed row's block-diagonal
            # mask is built for every attention kind (full and sliding: one each)
            rows = b if fam.extra("chunked_attention") else 1
            masks = mask_kinds(s_) if s_.packed else past_window(s_)
            terms.append(Term("act_sliding_mask", Role.SAVED_ACTIVATION, b_mask * masks * rows * seq**2,
                              r"A_{\mathrm{win}}", "the shared boolean " + ("block-diagonal mask of the packed samples"
                                                                            + ", one per attention kind" * (
                                                                                mask_kinds(s_) != 1)
                                                                            if s_.packed else "sliding-window mask")
                              + ", a checkpoint input", PACKED if s_.packed else fam.source))
        else:
            terms.append(Term("act_sliding_mask", Role.SAVED_ACTIVATION, masked_layers(s_) * sliding_extra(s_),
                              r"L_{\mathrm{win}} \cdot A_{\mathrm{win}}", sliding_extra.__doc__.split(".")[0]
                              + ": a 16-bit mask and k, v repeated to n_h heads, per " + ("layer of the packed row"
                                                                                          if s_.packed else "sliding layer"),
                              PACKED if s_.packed else fam.source))
    if s_.attention == "eager" and s_.grad_checkpointing:
        terms.append(eager_mask_term(s_))
    # the head's saved tensors, counted until the last layer's backward (under checkpointing: the final norm's)
    head_end = Phase.FINAL_NORM_BACKWARD if s_.grad_checkpointing else Phase.LAST_LAYER_BACKWARD
    if s_.weight_casts or (s_.kbit_prepared and s_.autocast):  # a prepared QLoRA model's lm_head is fp32
        b_cast = sym("bytes_autocast") if s_.kbit_prepared else b_c
        terms.append(Term("act_lm_head_cast", Role.SAVED_ACTIVATION, b_cast * V * h, r"A_{\mathrm{cast},V}",
                          "autocast casts lm_head's weight to the compute dtype; backward needs the cast", "torch.autocast",
                          lifetime=span(Phase.FORWARD, head_end)))
    head = norm_saved(s_, 1, h) + norm_weight_copy(s_, h)
    why = ("Unsloth's final RMSNorm keeps its input and the fp32 1/rms" if s_.unsloth_kernels
           else NORM_WHY[fam.norm].replace("each", "the final", 1))
    if not s_.lora:
        head += (0 if s_.liger else norm_weight_input(s_)) * T * h + (b_c if s_.weight_casts else compute_weight_bytes(s_)) * T * h
        why += "; trainable norm and lm_head keep the normalized and the normed tensor"
    elif "lm_head" in s_.modules_to_save or "score" in s_.modules_to_save:
        head += matmul_bytes(s_) * T * h
        why += f"; the trainable {'score' if s_.score_head else 'lm_head'} copy keeps its input for its weight gradient"
    terms.append(Term("act_final_norm", Role.SAVED_ACTIVATION, head, r"A_{\mathrm{head}}", why, TRANSFORMERS,
                      lifetime=span(Phase.LOSS, head_end)))
    if "lm_head" in s_.head_targets:
        terms.append(Term("act_lora_head", Role.SAVED_ACTIVATION, lora_head_saved(s_), r"A_{\mathrm{LoRA},V}",
                          "LoRA on lm_head: lora_A keeps its input (the final norm's output) and lora_B lora_A's "
                          "r-wide output" + (", with the adapters' compute-dtype casts" if s_.autocast and s_.adapter_upcast
                                            else ""), PEFT, lifetime=span(Phase.LOSS, head_end)))
    if "embed_tokens" in s_.head_targets:
        terms.append(Term("act_lora_embed", Role.SAVED_ACTIVATION, lora_embed_saved(s_), r"A_{\mathrm{LoRA,emb}}",
                          "LoRA on embed_tokens: the r-wide lookup of lora_embedding_A, kept for lora_embedding_B's "
                          "gradient until the embedding's backward, the last" + (" (as autocast casts it, with B's cast)"
                                                                               if s_.autocast and s_.adapter_upcast else "")
                          + ("; k-bit preparation's input hook keeps the base embedding's output as a leaf"
                             if s_.kbit_prepared and s_.grad_checkpointing else ""),
                          "peft tuners/lora/layer.py Embedding.forward",
                          lifetime=span(Phase.FIRST_LAYER_FORWARD, Phase.FIRST_LAYER_BACKWARD)))
    if s_.loss_impl == "liger":
        loss = Term("act_logsoftmax", Role.LOSS_ACTIVATION, b_c * T * h + b_32 * T, r"A_{\mathrm{FLCE}}",
                    "Liger's fused linear cross-entropy computes the hidden states' gradient in the forward and "
                    "keeps it (and the per-token loss) for backward; no logits survive (modelled from source, "
                    "not measured here: Triton only)", "liger_kernel ops/fused_linear_cross_entropy.py")
    elif s_.loss_impl == "trl":
        loss = trl_saved_term(s_)
    elif s_.loss_impl == "unsloth":
        loss = Term("act_logsoftmax", Role.LOSS_ACTIVATION, residual_bytes(s_) * T * h, r"A_{\mathrm{FLCE}}",
                    "Unsloth's fused linear cross-entropy writes the hidden states' gradient in the forward and "
                    "keeps it for backward; no logits survive (modelled from source, not measured: Triton)",
                    UNSLOTH_CE + ":1294, :1698 save_for_backward")
    elif s_.loss_impl == "cce":
        loss = Term("act_logsoftmax", Role.LOSS_ACTIVATION, b_32 * T + b_32 * V, r"A_{\mathrm{CCE}}",
                    "Cut Cross-Entropy keeps the fp32 log-sum-exp per token and the fp32 average logit per "
                    "vocabulary entry; no logits are materialised (modelled from source, not measured here)",
                    "cut_cross_entropy cce.py")
    elif s_.model_code == "litgpt":
        loss = Term("act_logsoftmax", Role.LOSS_ACTIVATION, b_c * b * (seq - 1) * V, r"A_{\mathrm{lsm}}",
                    "chunked_cross_entropy: each 128-row chunk's log_softmax of the 16-bit logits (no upcast), all "
                    "chunks together", "litgpt 0.5.13 utils.py:339-345")
    else:
        loss = Term("act_logsoftmax", Role.LOSS_ACTIVATION, b_32 * T * V, r"A_{\mathrm{lsm}}",
                    "cross-entropy upcasts logits to fp32 and keeps log_softmax for backward"
                    + (" (torchtune: each chunk's, all chunks together)" if s_.loss_impl == "chunked" else ""),
                    "torchtune CEWithChunkedOutputLoss" if s_.loss_impl == "chunked"
                    else "transformers ForCausalLMLoss; torch log_softmax")
    terms.append(loss)
    # TRL's fused LM head caps each tile inside its kernel and saves what it saves uncapped (trl 1.16
    # kernels/chunked_logprob.py:66-74 _transform, :180 the backward's tanh from the tile; :386 save_for_backward)
    if (fam.extra("final_logit_softcapping") or "final_logit_softcapping" in s_.options) and s_.loss_impl != "trl":
        # the cap runs on lm_head's output as the matmul made it: 16-bit under autocast, also from a prepared
        # QLoRA model's fp32 lm_head (measured: Gemma 2 and Gemma 4 QLoRA under the hf stack, was +T·V·2 B)
        terms.append(Term("act_logit_softcap", Role.LOSS_ACTIVATION, matmul_bytes(s_) * T * V, r"A_{\mathrm{cap}}",
                          "final-logit soft-capping keeps tanh(logits / cap) for backward, in lm_head's output dtype",
                          fam.source))
    bases = fam.dim("rope_bases")
    b_rope = b_32 if fam.extra("rope_fp32") else b_c  # OLMo 2 keeps cos/sin in fp32
    width = dh / 2 if fam.extra("rope_half_width") else rotary_width(fam)  # gpt-oss: cos, sin of the d_head/2 frequencies
    if fam.extra("rope_widths"):   # Gemma 4: each layer type's cos and sin as wide as its heads
        bases, width = 1, rope_width_sum(fam)
    # multimodal RoPE: position ids (4, b, seq), a table per sample (the family's, or the tower's decoder: Qwen3-VL)
    rows = b if fam.extra("rope_per_sample") or (s_.tower is not None and s_.tower.rope_per_sample) else 1
    # torchtune's RoPE multiplies by views of its cached cos/sin buffer (rope_cache, a weight-side buffer): no tables
    if not fam.extra("no_rope") and s_.model_code == "transformers":   # Nemotron-H: no position embeddings, no tables
        terms.append(Term("act_rope", Role.STEP_INPUT, 2 * bases * b_rope * rows * seq * width, r"A_{\mathrm{rope}}",
                          "RoPE cos and sin, shared by all layers" + " (one pair per rotary base)" * (bases != 1)
                          + " (one per sample: multimodal RoPE expands the position ids to the batch)" * (rows != 1),
                          "transformers LlamaRotaryEmbedding"))
    if s_.model_code == "torchtune":
        terms.append(torchtune_tokens_term(s_))
    elif s_.model_code == "litgpt":
        terms.append(Term("act_tokens", Role.STEP_INPUT, 2 * b_id * T, r"A_{\mathrm{ids}}",
                          "input ids and targets (int64; the loss's shifted copy is a loss temporary)",
                          "litgpt 0.5.13 finetune/full.py:278"))
    else:
        terms.append(Term("act_tokens", Role.STEP_INPUT, 2 * b_id * T, r"A_{\mathrm{ids}}",
                          "input ids and the shifted labels (int64)", "transformers ForCausalLMLoss"))
    if fam.extra("per_layer_embeddings"):
        terms += per_layer_embedding_terms(s_)
    for m in model_lora_linears(s_):   # LoRA on an nn.Linear outside the layers: it runs before the first layer,
        # reading the token embeddings, and its backward comes last
        terms.append(Term(f"act_lora_{m.name}", Role.SAVED_ACTIVATION,
                          lora_linear_saved(s_, m.d_in, m.d_out, s_.weight_casts, embedding_output_grad(s_)),
                          r"A_{\mathrm{LoRA,model}}", f"LoRA on {m.name}: lora_A keeps its input (the token embeddings, "
                          "as lora_input_bytes keeps a linear's input) and lora_B lora_A's r-wide output"
                          + (", with the adapters' compute-dtype casts" if s_.autocast and s_.adapter_upcast else ""),
                          PEFT + ", :1088-1113; " + fam.source + ":1773",
                          lifetime=span(Phase.FORWARD, Phase.FIRST_LAYER_BACKWARD)))
    if fam.extra("embedding_multiplier") and embedding_leaf(s_) and not s_.offload_activations:
        terms.append(Term("act_embed_leaf", Role.SAVED_ACTIVATION, residual_bytes(s_) * T * h, r"A_{\mathrm{emb,leaf}}",
                          "the embedding's output, a leaf that requires grad under checkpointing (its AccumulateGrad "
                          "node keeps it), beside its multiplier-scaled copy the first layer reads", fam.source
                          + " (inputs_embeds · embedding_multiplier); transformers modeling_utils.py:2153",
                          lifetime=span(Phase.FORWARD, Phase.FIRST_LAYER_BACKWARD)))
    if s_.offload_activations:
        terms.append(offloaded_head_copies(s_, loss))
    if s_.tower is not None and s_.tower.ids_copy and (not s_.lora or "embed_tokens" in s_.modules_to_save):
        terms.append(Term("act_ids_copy", Role.SAVED_ACTIVATION, b_id * T, r"A_{\mathrm{ids,copy}}",
                          "the copy of input_ids the multimodal forward embeds (an image token id outside the "
                          "vocabulary blanked), saved by the trainable embedding for its backward", s_.tower.source))
    if s_.images:
        terms += image_terms(s_)
    return terms


QWEN3_VL = "transformers models/qwen3_vl/modeling_qwen3_vl.py"


def image_terms(s_: Structure) -> list[Term]:
    """--image-tokens N: each sample's N image tokens (one image of N·merge² patches) are placeholders within its
    seq tokens, which the tower's merged patches replace (Qwen3VLModel.forward, modeling_qwen3_vl.py:1170-1176:
    masked_scatter; the DeepStack features are added at the first layers' image positions, :831-850). The batch
    brings the processor's fp32 pixel_values, image_grid_thw and mm_token_type_ids (int64, b × seq); get_rope_index
    caches its (b, 1) rope deltas on the model (:1109-1116). A frozen tower runs without saving anything (its
    weights and the fp32 pixel_values need no gradient; its forward's working set is a transient before the
    decoder's, not a moment); a trainable one saves its blocks' tensors (towers.toml [qwen3_vl.images]) until its
    own backward, which runs after the decoder's first layer."""
    n = b * sym("image_tokens")
    terms = [Term("act_images", Role.STEP_INPUT, b_32 * n * sym("tower_pixels") + b_id * (b * seq + 3 * b + b),
                  r"A_{\mathrm{img}}", "the batch's fp32 pixel_values (merge² patches per image token), its image_grid_thw "
                  "and mm_token_type_ids (int64), and the rope deltas get_rope_index caches on the model",
                  QWEN3_VL + ":919-1013 get_rope_index, :1027-1043 get_image_features"),
             Term("act_image_mask", Role.SAVED_ACTIVATION, b_mask * b * seq, r"A_{\mathrm{img,mask}}",
                  "the image-token mask (bool, b × seq) the DeepStack layers' indexing keeps for backward",
                  QWEN3_VL + ":841-850 _deepstack_process", lifetime=span(Phase.FORWARD, Phase.FIRST_LAYER_BACKWARD))]
    if embedding_leaf(s_):
        # the frozen embedding's output is a leaf that requires grad (embedding_leaf); the image tokens'
        # masked_scatter makes layer 0's input a new tensor, and the leaf stays beside it, held by masked_scatter's
        # graph (its AccumulateGrad node)
        terms.append(Term("act_image_embed_leaf", Role.SAVED_ACTIVATION, residual_bytes(s_) * T * h,
                          r"A_{\mathrm{emb,leaf}}", "the embedding's output, a leaf that requires grad under "
                          "checkpointing, beside the masked_scatter copy of it (image features in) that layer 0 reads",
                          QWEN3_VL + ":1170-1176; transformers modeling_utils.py:2147-2177",
                          lifetime=span(Phase.FORWARD, Phase.FIRST_LAYER_BACKWARD)))
    if s_.train_vision:
        # LayerNorm's mean and rstd: fp32 on CUDA (layer_norm_kernel.cu: the accumulate type), the input's dtype on CPU
        b_stat = b_32 if s_.device == "cuda" else b_c
        if s_.lora:   # its adapters train (all-linear): the frozen linears save nothing, lora_A its cast input
            saved = (b_c * sym("tower_lora_act_elems") + b_a * sym("tower_lora_adapter_elems")
                     + b_a * r * sym("tower_lora_rank_elems") + b_32 * sym("tower_lora_fp32_elems")
                     + b_stat * sym("tower_lora_stat_elems"))
            why = ("what the vision tower saves for its trained LoRA adapters: its ViT blocks' residual sums, attention "
                   "and MLP tensors, each adapted linear's input in the adapters' dtype and lora_A's rank-wide output")
        else:
            saved = (b_c * sym("tower_act_elems") + b_32 * sym("tower_fp32_elems") + b_id * sym("tower_index_elems")
                     + b_stat * sym("tower_stat_elems") + (b_w * sym("tower_pixels") if s_.pixel_cast else 0))
            why = ("what the trainable vision tower saves for backward: its ViT blocks' norms, attention and MLP, the "
                   "patch merger and DeepStack mergers, the position interpolation"
                   + ", and the pixel_values cast to the weights' dtype the patch embedding's Conv3d reads" * s_.pixel_cast)
        terms.append(Term("act_tower", Role.SAVED_ACTIVATION, n * saved, r"A_{\mathrm{tower}}", why,
                          QWEN3_VL + ":78-355, :670-729" + "; peft tuners/lora/layer.py Linear.forward" * s_.lora,
                          lifetime=span(Phase.FORWARD, Phase.FIRST_LAYER_BACKWARD)))
    return terms


def stored_kv_term(s_: Structure) -> Term:
    """Gemma 4 under checkpointing: the last layer of each attention type before the KV-sharing ones stores its k
    (after RoPE) and v (after v_norm) in shared_kv_states (configuration_gemma4.py:246-249: even with no layer reading
    them), a dict every checkpointed layer's recompute closure holds: the two pairs live through the step, beyond
    the checkpoints (without checkpointing SDPA keeps them anyway)."""
    sliding, full = sym("sliding_layers"), L - sym("sliding_layers")
    kv = 2 * b_c * T * (at_least(sliding, 1) * nkv * dh + at_least(full, 1) * sym("global_kv_heads") * sym("global_head_dim"))
    return Term("act_stored_kv", Role.SAVED_ACTIVATION, kv, r"A_{\mathrm{KV,store}}",
                "the k and v the last layer of each attention type stores for the KV-sharing layers (shared_kv_states), "
                "held by every checkpointed layer's recompute", GEMMA4 + ":1214-1215 Gemma4TextAttention.forward",
                lifetime=span(Phase.FORWARD, Phase.FIRST_LAYER_BACKWARD))


def _kv_linears(fam) -> list:
    """The projections of a layer that feed its k and v (none in a layer reading shared K/V)."""
    return [m for m in fam.linears if m.input_group == "attn_in" and set(_feeds(m.name, fam)) & set("kv")]


def _kv_branch(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    return _kv_branch_of(s_.keep(ACTIVATION_FIELDS))


@lru_cache(maxsize=64)
def _kv_branch_of(s_: Structure) -> dict[str, tuple[sp.Expr, str, str, str]]:
    """What the K/V branch of one layer of ``s_``'s kind saves, as the layer saves it (``_layer_of``'s building
    blocks): its input norm, the projections feeding k and v (their inputs where they train, autocast's weight
    casts, their LoRA tensors) and the norms after them (Gemma 4's k_norm and weightless v_norm). The recompute
    graph that a stored k, v hold keeps these (``stored_kv_graph_term``)."""
    fam = s_.arch
    kv = _kv_linears(fam)
    grad, names = _grad_sites(s_, first=False), {m.name for m in kv}
    out = _norms_saved(s_, [n for n in fam.active_norms(s_.options) if n.at == "layer_in" or n.after in names], grad)
    if s_.weight_casts:
        out["act_weight_casts"] = _weight_casts(s_, kv)
    group = {"attn_in": fam.group_width["attn_in"]}
    if not s_.lora:
        out["act_linear_inputs"] = _linear_inputs(s_, kv, group)
    else:
        out.update(_lora_saved(s_, [t for t in s_.targets if fam.linear_map.get(t) in kv], group,
                               {"attn_in": grad["layer_in"]}))
    return _kind_dims(fam, out)


def _stored_kv_graph_at(s_: Structure, kind: str, below: tuple[str, ...]) -> sp.Expr:
    """The K/V branches the storing layers' recompute graphs hold (``stored_kv_graph_term``) when the first-layer
    moments recompute the lowest layer of ``kind``, ``below`` the kinds of the layers under it: each storing kind's
    (a kind with its own k and v: its last layer stores) once that layer is above, i.e. its kind has more layers than
    ``below`` holds and, for ``kind`` itself, more than the one recomputed."""
    storing = [(n, layer.family.partition(":")[2], layer) for n, layer in s_.layer_kinds
               if not layer.arch.extra("kv_shared") and _kv_linears(layer.arch)]
    return sp.Add(*(at_least(n, below.count(name) + 1 + (name == kind))
                    * sp.Add(*(e for e, *_ in _kv_branch(layer).values())) for n, name, layer in storing))


def stored_kv_graph_term(s_: Structure) -> Term:
    """Gemma 4 under non-reentrant checkpointing: a storing layer's recompute runs its forward again with the same
    shared_kv_states dict (every checkpointed layer's arguments hold it), so ``shared_kv_states[layer_type] = k, v``
    (modeling_gemma4.py:1230-1231) leaves the *recomputed* k and v there, whose autograd graph the recompute built
    under torch's ``_recomputation_hook``, whose pack hook returns the tensor itself (torch utils/checkpoint.py
    :1094-1133): that graph, never run backward, keeps the K/V branch's saved tensors (``_kv_branch``) after the
    layer's own backward has freed the rest, until the dict dies with the first layer's backward. The last layers
    recompute first, so at the first-layer moments each storing layer above the layer those moments recompute
    holds its branch (``_stored_kv_graph_at``, for the kind ``_reached_kind`` picks of the family's layer kinds).
    Every layer is checkpointed: every_n_layers is refused for layers of several kinds (scenario.py:620-631)."""
    expr = _at_reached_kind(s_, "act_stored_kv_graph")
    return Term("act_stored_kv_graph", Role.SAVED_ACTIVATION, expr, r"A_{\mathrm{KV,graph}}",
                "the recompute graph of the k and v each storing layer leaves in shared_kv_states: its input norm's, "
                "k and v projections' and k_norm's, v_norm's saved tensors, held once its backward is done",
                GEMMA4 + ":1230-1231; torch utils/checkpoint.py:1094-1133 _recomputation_hook",
                lifetime=span(Phase.FIRST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_BACKWARD))


def per_layer_embedding_terms(s_: Structure) -> list[Term]:
    """Gemma 4's per-layer embeddings (Gemma4TextModel.get_per_layer_inputs / project_per_layer_inputs,
    modeling_gemma4.py:1705-1784): the (b, s, L, d_PLE) sum of the table's rows and the normed projection of the token
    embeddings, which every layer reads a slice of — kept by the layers' products (and checkpoints) for the whole
    step. Trainable (full fine-tuning) the pipeline also saves the projection's input (the token embeddings), its
    Gemma 4 RMSNorm over each layer's d_PLE and the normed tensor for the norm's weight. Nothing with d_PLE = 0."""
    rows = L * at_least(d_ple, 1)   # the norm's rows per token: one per layer (none without per-layer embeddings)
    terms = [Term("act_per_layer_inputs", Role.STEP_INPUT, b_c * T * L * d_ple, r"A_{\mathrm{PLE},L}",
                  "the per-layer inputs (b, s, L, d_PLE), read by every layer (each keeps its slice)",
                  GEMMA4 + ":1705-1784 get_per_layer_inputs, project_per_layer_inputs")]
    if per_layer_inputs_grad(s_):   # the token embeddings or the projection's LoRA need a gradient through the norm
        trains = 0 if s_.lora else at_least(d_ple, 1) * b_c * T * h + b_32 * T * L * d_ple
        terms.append(Term("act_per_layer_embedding", Role.SAVED_ACTIVATION, norm_saved(s_, rows, d_ple) + trains,
                          r"A_{\mathrm{PLE},0}", "the per-layer-embedding pipeline, whose input (the token embeddings) "
                          "needs a gradient: its norm over each layer's d_PLE (fp32 input, mean(x²) + ε, its pow, the "
                          "weight's fp32 copy)" + ("" if s_.lora else "; trainable, the projection's input and the "
                          "normed tensor for the norm's weight"), GEMMA4 + ":1751-1784 project_per_layer_inputs",
                          lifetime=span(Phase.FORWARD, Phase.FIRST_LAYER_BACKWARD)))   # its backward comes last
    return terms


OFFLOAD = "trl 1.16 models/activation_offloading.py"
TT_OFFLOAD = "torchtune 0.6.1 training/_activation_offloading.py"
MIN_OFFLOAD = 1024   # OffloadActivations(min_offload_size=1024): smaller saved tensors stay where they are
FORWARD_STASH = 5    # OffloadActivations(max_fwd_stash_size=5): an offload frees the stashed ones 5 packs behind it


def position_ids(s_: Structure) -> sp.Expr:
    """The position ids (int64, [1, seq]) that checkpointing keeps beside the layer inputs: transformers' decoder
    passes them to every layer; torchtune's takes none (TransformerDecoder.forward's input_pos is None, torchtune 0.6.1
    modules/transformer.py:552-560, :635-641: its RoPE slices its cache,
    models/llama3_1/_position_embeddings.py:165); with images Qwen3-VL gives the layers (3, b, seq) mRoPE positions and
    no text position ids (transformers 5.24 modeling_qwen3_vl.py:790-796: text_position_ids None)."""
    return 0 if s_.model_code == "torchtune" or s_.images else b_id * seq


def embedding_leaf(s_: Structure) -> bool:
    """Under LoRA with checkpointing the frozen embedding's output is made a leaf that requires grad
    (transformers' enable_input_require_grads, modeling_utils.py:2153): its AccumulateGrad node keeps it on the
    device until backward ends, whatever saved-tensor hooks do with the checkpoint's copy. torchtune's recipes make
    no input require grad (their non-reentrant checkpointing needs none,
    recipes/lora_finetune_single_device.py:446-449)."""
    return s_.lora and s_.grad_checkpointing and s_.model_code != "torchtune"


def stashed_inputs(s_: Structure) -> tuple[sp.Expr, tuple[Phase, ...], str]:
    """How many layer inputs the forward stash still holds at the loss, how long it holds them, and the source.

    TRL's hooks span the loss too: the last inputs stay until 5 later offloads are issued — the final norm's fp32
    upcast (and its 1/rms from T ≥ 256) after the last layer's —, and the loss's backward, the first to unpack an
    offloaded tensor, ends the stash. Full fine-tuning's trainable norm weight saves one offload more: none is left.

    torchtune's hooks span the model's forward only (the recipes' ``with self.activations_handling_ctx: logits =
    self._model(**batch)``, lora_finetune_single_device.py:643-644, full_finetune_single_device.py:636-637), and
    without TRL's storage deduplication every pack of a tensor of at least 1024 B is offloaded
    (_activation_offloading.py:150-153): the final norm packs x.float(), 1/rms twice and x.float() again (then its
    scale, a Parameter, kept), so its last offload is the 4th pack after the last layer input, which stays (the
    stash frees ids 5 behind, :157-163); full fine-tuning's normalized tensor for the scale's gradient is the 6th:
    none stays. The stash is
    cleared by the first backward node that unpacks an offloaded tensor (:328-332): the final norm's, since the output
    projection saves under a NoOpManager (:396-418) and the loss outside the hooks — it outlives the loss backward."""
    if s_.model_code == "torchtune":
        last_offload = 4 if s_.lora else 6
        return (sp.Min(L, max(0, FORWARD_STASH - last_offload)), span(Phase.LOSS, Phase.HEAD_BACKWARD),
                TT_OFFLOAD + ":150-163, :328-332")
    # TRL (full fine-tuning: the trainable norm weight's input is one offload more, and none is left); the leaf
    # first layer's input is counted with the checkpoints
    stashed = sp.Min(L - int(embedding_leaf(s_)), 4 - at_least(T, MIN_OFFLOAD // 4)) if s_.lora else 0
    return stashed, (Phase.LOSS,), OFFLOAD + ":282-291"


def offloaded_terms(s_: Structure) -> list[Term]:
    """TRL's activation offloading over checkpointed layers (``OffloadActivations`` around the Trainer's
    training_step, trl 1.16 trainer/sft_trainer.py:1190-1193, 1691-1693). Non-reentrant checkpointing saves each
    layer's input through autograd's saved-tensor hooks before its own hooks start (torch/utils/checkpoint.py:842-847,
    1701-1703), so the offloading hooks see the L layer inputs, and nothing of the layers' insides (recomputed in
    backward under checkpoint's hooks). Each input ≥ 1024 B is copied to pinned host memory (activation_offloading.py
    :233, :318-319) and its device tensor freed once 5 later offloads are issued (:282-291); the final norm's and the
    loss's saved tensors are the last ones the forward packs and stay on the device (still in the forward stash, or
    saved twice: a storage saved again while stashed is kept as it is, :217-225), with host copies made anyway;
    lm_head saves under a no-op hook (:717-720). In backward each layer's input is brought back as a new device
    tensor for its recompute (:434-447).

    torchtune's ``enable_activation_offloading`` (torchtune 0.6.1 training/_activation_offloading.py, the class TRL's
    is copied from) is the same mechanism over the same checkpointed layer inputs (its recipes require activation
    checkpointing with it, recipes/lora_finetune_single_device.py:167-175), with what differs in ``stashed_inputs``
    and ``offloaded_head_copies``: its hooks span the model's forward only, offload every pack without TRL's storage
    deduplication, parameter-storage check or device check (:148-153), and no embedding output is a leaf.

    >>> terms = offloaded_terms(Structure(method="lora", grad_checkpointing=True, offload_activations=True))
    >>> [(t.key, t.place.value) for t in terms][:3]
    [('act_checkpoints', 'device'), ('act_offloaded', 'host'), ('offload_forward_stash', 'device')]
    >>> tt = offloaded_terms(Structure(method="full", grad_checkpointing=True, offload_activations=True,
    ...                                model_code="torchtune"))
    >>> [t.key for t in tt], tt[0].expr
    (['act_checkpoints', 'act_offloaded', 'offload_previous_input', 'offload_brought_back'], 0)
    """
    b_res = residual_bytes(s_)
    leaf = int(embedding_leaf(s_))
    tt = s_.model_code == "torchtune"
    source = TT_OFFLOAD if tt else OFFLOAD
    terms = [Term("act_checkpoints", Role.SAVED_ACTIVATION, leaf * b_res * T * h + position_ids(s_),
                  r"A_{\mathrm{ckpt}}",
                  ("offloading leaves nothing of the checkpoints on the device (torchtune's decoder takes no position "
                   "ids)" if tt else "offloading leaves the position ids on the device")
                  + (" and the first layer's input: the embedding output is a leaf that requires grad, kept by its "
                     "AccumulateGrad node" if leaf else ""), "torch.utils.checkpoint (non-reentrant); " + source),
             Term("act_offloaded", Role.SAVED_ACTIVATION, L * b_res * T * h, r"A_{\mathrm{ckpt,host}}",
                  "every checkpointed layer input, copied to pinned host memory in the forward ("
                  + ("torchtune's" if tt else "TRL's") + " activation offloading) and brought back for its layer's "
                  "recompute", source + (":171-187 pack_tensor" if tt else ":318-319 pack_tensor"), place=Place.HOST)]
    stashed, lifetime, stash_source = stashed_inputs(s_)
    if stashed != 0:
        terms.append(Term("offload_forward_stash", Role.SAVED_ACTIVATION, stashed * b_res * T * h,
                          r"A_{\mathrm{ckpt,stash}}", "the last layer inputs still in the forward stash while the loss "
                          "is computed (each freed when 5 later offloads are issued)", stash_source, lifetime=lifetime))
    terms.append(Term("offload_previous_input", Role.RECOMPUTED_ACTIVATION, at_least(L, 2) * b_res * T * h,
                      r"A_{\mathrm{ckpt,prev}}", "the layer above's input, brought back for its recompute, kept in "
                      "the backward stash until the node that brought this layer's back ends",
                      source + (":264-266, :334-338" if tt else ":424-427, :515-522"),
                      lifetime=span(Phase.FIRST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_BACKWARD)))
    terms.append(Term("offload_brought_back", Role.RECOMPUTED_ACTIVATION, b_res * T * h, r"A_{\mathrm{ckpt,back}}",
                      "the layer input brought back from the host for the layer being recomputed",
                      source + (":268-282" if tt else ":434-447") + " unpack_tensor_with_streams",
                      lifetime=span(Phase.LAST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_BACKWARD)))
    return terms


UNSLOTH_GC = "unsloth_zoo 2026.10.9 gradient_checkpointing.py"
UNSLOTH_MIN_OFFLOAD = 2 * 1024 * 1024      # :1308 MINIMUM_SIZE: a checkpointed input of at most 2 MiB is not offloaded
UNSLOTH_STAGING_INITIAL = 2 * 256 * 2048   # :65 INITIAL_GPU_BUFFER_SIZE, elements of the 16-bit buffer dtype
UNSLOTH_HOST_SLOTS, UNSLOTH_HOST_SLOT = 200, 128 * 1024   # :64-66 the pinned pool: 200 buffers of 128Ki elements
UNSLOTH_STORE = sym("bytes_offload")   # 16-bit: bf16 where supported (:1283), an fp32 input stored as bf16 (:1395)


def unsloth_offloads(s_: Structure) -> sp.Expr:
    """1 when Unsloth's checkpointer offloads a layer input: its bytes as stored (16-bit: an fp32 input is stored as
    bf16, :1395-1396) above 2 MiB (:1399 ``new_size > MINIMUM_SIZE``), else 0.

    >>> s_ = Structure(method="lora", grad_checkpointing=True, offload_checkpoints=True)
    >>> [unsloth_offloads(s_).subs({sym("batch"): 1, sym("seq"): n, h: 4096}) for n in (256, 257)]
    [0, 1]
    """
    return at_least(T * h, UNSLOTH_MIN_OFFLOAD // 2 + 1)   # elements of the 16-bit stored copy


def unsloth_keeps(s_: Structure) -> sp.Expr:
    """1 when it does not (``unsloth_offloads``' complement, written as an indicator of its own so that every
    monomial of the terms stays positive: the allocator schedule reads each as so many tensors)."""
    return at_least(UNSLOTH_MIN_OFFLOAD // 2, T * h)


def unsloth_checkpoint_terms(s_: Structure) -> list[Term]:
    """Unsloth's offloaded gradient checkpointing (``use_gradient_checkpointing="unsloth"``: torch's checkpoint
    patched to ``UnslothCheckpointFunction``, unsloth_zoo 2026.10.9 gradient_checkpointing.py:1337-1717, reentrant).
    Each layer's input (the Function's first argument) above 2 MiB is copied on a side stream into a pinned host slot
    (:1453-1506) and not saved; from the second micro-batch on the last layer's is saved on the device instead
    (``LAST_GC_INDEX``, :1387-1399). Backward copies it back into a device staging buffer that lives for the whole
    run (``GPU_BUFFERS``, resized to the largest input, :1470-1480; a second one, ``GPU_BUFFERS_B``, for double
    buffering when more than 512 MiB are free at the second forward, :1425-1444) and recomputes the layer on that
    buffer itself (:1656: ``buffer.detach()``; a 16-bit stream needs no cast). Under LoRA the embedding output is a
    leaf that requires grad (unsloth_zoo training_utils.py:510-520 ``enable_input_require_grads``): its
    AccumulateGrad node keeps the first layer's input on the device as well.

    >>> terms = unsloth_checkpoint_terms(Structure(method="lora", grad_checkpointing=True, offload_checkpoints=True))
    >>> [(t.key, t.place.value) for t in terms]
    [('act_checkpoints', 'device'), ('act_offloaded', 'host'), ('unsloth_staging', 'device')]
    """
    b_res, off, stay = residual_bytes(s_), unsloth_offloads(s_), unsloth_keeps(s_)
    # on the card: every input when none is offloaded, else the last layer's and (LoRA, L ≥ 2) the leaf first layer's
    on_device = stay * L + off + off * at_least(L, 2) * int(embedding_leaf(s_))
    # one factor each, so that a buffer is one tensor: A grown to one input; B too once a later offload resizes it
    staging = off * UNSLOTH_STORE * (sp.Max(T * h, UNSLOTH_STAGING_INITIAL)
                                     + sp.Max(at_least(L, 2) * T * h, UNSLOTH_STAGING_INITIAL))
    host_slots = off * L   # the first micro-batch offloads every layer (FIRST_PASS): L slots grown, kept grown
    terms = [Term("act_checkpoints", Role.SAVED_ACTIVATION, on_device * b_res * T * h + position_ids(s_),
                  r"A_{\mathrm{ckpt}}",
                  "Unsloth's checkpointer keeps on the device the last layer's input (not offloaded from the second "
                  "micro-batch on)" + (", the first layer's (the embedding output is a leaf that requires grad, kept by "
                                       "its AccumulateGrad node)" if embedding_leaf(s_) else "")
                  + " and the position ids; every input of at most 2 MiB stays too",
                  UNSLOTH_GC + ":1387-1399, :1540 save_for_backward"),
             Term("act_offloaded", Role.SAVED_ACTIVATION, host_slots * UNSLOTH_STORE * T * h
                  + sp.Max(0, (UNSLOTH_HOST_SLOTS - host_slots) * UNSLOTH_HOST_SLOT) * UNSLOTH_STORE,
                  r"A_{\mathrm{ckpt,host}}",
                  "the other checkpointed layer inputs, each in a 16-bit pinned host slot (L slots grown to one input "
                  "by the first micro-batch, which offloads every layer) and the rest of the 200-slot pool of 256 KiB "
                  "each", UNSLOTH_GC + ":1290-1298, :1453-1506", place=Place.HOST),
             Term("unsloth_staging", Role.STAGING_BUFFER, staging,
                  r"M_{\mathrm{stage}}", "two 16-bit device staging buffers (double buffering), each the size of one "
                  "layer input, kept for the whole run; the recompute reads the input brought back in place (a card "
                  "with less than 512 MiB free at the second forward keeps one; with one layer the second stays at "
                  "its initial 2 MiB)",
                  UNSLOTH_GC + ":1114-1117, :1425-1444, :1470-1490, :1578-1601")]
    if s_.kbit_prepared or s_.compute_fp32:   # an fp32 stream is stored as bf16 and cast back for the recompute: a new fp32 tensor
        terms.append(Term("offload_brought_back", Role.RECOMPUTED_ACTIVATION, off * b_res * T * h,
                          r"A_{\mathrm{ckpt,back}}", "the fp32 cast of the 16-bit input brought back, for the layer "
                          "being recomputed", UNSLOTH_GC + ":1656 buffer.to(saved_dtype)",
                          lifetime=span(Phase.LAST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_BACKWARD)))
    return terms


def unsloth_traffic(s_: Structure) -> Term:
    """What Unsloth's offloaded checkpointer moves over PCIe per micro-batch: each offloaded input to the host and
    back (priced as not hidden: it copies on a side stream that overlaps compute; modelled, not measured)."""
    return Term("offload_activation_copies", Role.HOST_TRAFFIC, 2 * unsloth_offloads(s_) * (L - 1) * UNSLOTH_STORE * T * h,
                r"C_{\mathrm{host,act}}", "Unsloth's offloaded checkpointing: every offloaded layer input to pinned "
                "host memory and back", UNSLOTH_GC + ":1506, :1601")


def offloaded_head_copies(s_: Structure, loss: Term) -> Term:
    """The host copies of what the final norm, the loss (and in full fine-tuning the embedding) save under TRL's
    activation offloading: the last tensors the forward packs, copied to the host and kept on the device too (in the
    forward stash, or saved twice while stashed). Each tensor of at least 1024 B: the norm's fp32 upcast and 1/rms
    (a trainable weight's normalized input too), the loss's saved tensors and the shifted labels.

    Under torchtune's the loss is outside the hooks (``stashed_inputs``) and a tensor saved twice is copied twice
    (no storage deduplication, training/_activation_offloading.py:148-187): the final norm's fp32 upcast and 1/rms,
    each twice (and full fine-tuning's normalized tensor and the embedding's token ids)."""
    per_token = at_least(T, MIN_OFFLOAD // 4) * b_32 * T, at_least(T, MIN_OFFLOAD // 8) * b_id * T   # fp32, int64
    tt = s_.model_code == "torchtune"
    copies = 2 * (b_32 * T * h + per_token[0]) if tt else b_32 * T * h + per_token[0] + loss.expr + per_token[1]
    if not s_.lora:
        copies += norm_weight_input(s_) * T * h + per_token[1]
    return Term("act_offloaded_head", Role.LOSS_ACTIVATION, copies, r"A_{\mathrm{head,host}}",
                "the host copies of the final norm's" + ("" if tt else " and the loss's")
                + " saved tensors (which stay on the device too)",
                TT_OFFLOAD + ":148-193" if tt else OFFLOAD + ":217-225, :282-291, :318-319",
                place=Place.HOST)


def offload_traffic(s_: Structure) -> Term:
    """What activation offloading moves over PCIe per step: each layer input to the host and back, and the head's
    copies one way (they are used from the device, never brought back). Priced as not hidden (an upper bound: TRL
    copies on a second stream that overlaps compute; modelled, not measured)."""
    host = {t.key: t.expr for t in saved_terms(s_.keep(ACTIVATION_FIELDS)) if t.place is Place.HOST}
    return Term("offload_activation_copies", Role.HOST_TRAFFIC, 2 * host["act_offloaded"] + host["act_offloaded_head"],
                r"C_{\mathrm{host,act}}", "activation offloading: every checkpointed layer input to pinned host memory "
                "and back, and the final norm's and the loss's saved tensors to it", OFFLOAD + ":318-319, :434-447")


def _largest_linear(s_: Structure) -> sp.Expr:
    """Elements of the largest quantized (nn.Linear) weight (left unevaluated: which one depends on the numbers)."""
    return sp.Max(*{m.params for _, k in s_.arch.layer_kinds for m in k.linears}, evaluate=False)


def _first_layer_params(s_: Structure) -> sp.Expr:
    """Trainable parameters whose gradients come last: the first layer's (and an untied embedding's); under
    checkpointing with layers of several kinds, those of every layer up to the lowest of the kind the first-layer
    moment recomputes (``_reached_kind``)."""
    embed = r * (V + h) if "embed_tokens" in s_.head_targets else 0   # LoRA on the embedding: its gradients come last too
    if s_.lora and not s_.arch.kinds:
        return layer_lora_params(s_) + embed
    if not s_.lora:   # and the weights outside the layers that every layer reads (Gemma 4's per-layer-input table,
        # projection and norm: per_layer_inputs is made before the decoder loop, modeling_gemma4.py:1628-1629, :1667)
        embed = (0 if s_.tied and not s_.score_head else V * h) + s_.arch.model_tensor_params + sp.Add(
            *(m.params for m in s_.arch.model_linears))
    if not s_.kind_depths:
        return _kind_params(s_, s_.first_layer) + embed
    return embed + sp.Add(*(wins * _params_up_to(s_, name, below)
                            for (name, below), wins in zip(s_.kind_depths, _reached_kind(s_))))


def _params_up_to(s_: Structure, name: str, below: tuple[str, ...]) -> sp.Expr:
    """The trainable parameters of the layers up to the lowest of the kind ``name`` (``below``: the kinds under it)."""
    return sp.Add(*(_kind_params(s_, s_.layer(k)) for k in (*below, name)))


def _kind_params(s_: Structure, layer: Structure) -> sp.Expr:
    """The trainable parameters of one layer of ``layer``'s kind: its adapters under LoRA, else all its weights."""
    if s_.lora:
        return kind_adapter_params(layer.arch, layer.targets, s_.dora)
    return layer.arch.params_per_layer(s_.options)


def _experts_rerun(layer: Structure) -> bool:
    """A layer whose experts checkpointing reruns inside its backward with a moment of their own: Llama 4's dense
    experts, and routed experts whose recompute is modelled (``routed_rerun``)."""
    return layer.grad_checkpointing and layer.arch.moe and bool(layer.arch.extra("experts_dense")
                                                                or routed_rerun(layer))


def _kind_first_layer(s_: Structure, name: str, below: tuple[str, ...]) -> dict[str, sp.Expr]:
    """The first-layer moments' parts that depend on the layer they recompute, for the lowest layer of the kind
    ``name`` (``below``: the kinds of the layers under it): that layer's saved tensors, recomputed
    (``first_layer_recomputed``), its backward's working set (``first_layer_backward_temp``), the stored K/V
    graphs of the storing layers above it (``act_stored_kv_graph``), the checkpointed inputs of the layers below
    it (``first_checkpoint``, beside layer 0's own), and, negated, the gradients not made yet: its own and those
    of the layers below it (``grads_before_first_layer``)."""
    layer, stored = s_.layer(name), s_.arch.extra("stored_kv") and not s_.offload_checkpoints
    return {"first_layer_recomputed": _layer_bytes(layer) + sliding_extra(layer),
            "first_layer_backward_temp": _layer_backward_temp(layer)[0],
            "act_stored_kv_graph": _stored_kv_graph_at(s_, name, below) if stored else sp.Integer(0),
            "first_checkpoint": len(below) * residual_bytes(s_) * T * h,
            "grads_before_first_layer": -b_g * _params_up_to(s_, name, below)}


def _at_reached_kind(s_: Structure, part: str) -> sp.Expr:
    """One part of ``_kind_first_layer`` at the kind the first-layer moments recompute (``_reached_kind``)."""
    return sp.Add(*(wins * _kind_first_layer(s_, name, below)[part]
                    for (name, below), wins in zip(s_.kind_depths, _reached_kind(s_))))


def _reached_kind(s_: Structure) -> list[sp.Expr]:
    """Per kind of ``s_.kind_depths``: 1 when the first-layer moment is that kind's lowest layer, else 0. Its
    recompute and backward run there with the gradients of the layers above it made, those of the layers below
    and its own not yet (Llama 4 with a dense layer 0: at layer 1, the first MoE one, its expert weights'
    gradients do not exist yet; was +5.3 % on a tiny config under full fine-tuning). The kind whose moment, each
    part its own (``_kind_first_layer``), is the largest; of equal ones the lowest. A kind whose experts its
    recompute reruns counts the larger of that and its backward (the two moments it has there)."""
    values = []
    for name, below in s_.kind_depths:
        layer, parts = s_.layer(name), _kind_first_layer(s_, name, below)
        if _experts_rerun(layer):
            parts["first_layer_backward_temp"] = sp.Max(parts["first_layer_backward_temp"],
                                                        experts_recompute_temp(layer), evaluate=False)
        values.append(sp.Add(*parts.values()))
    return largest_indicators(values)


def liger_chunk(s_: Structure) -> sp.Expr:
    """Liger FLCE's rows per chunk: inc_factor = ⌈V / h⌉, chunk = min(next_pow2(⌈BT / inc_factor⌉), BT)."""
    inc = ceil_div(V, h)
    return sp.Min(pow2_ceil(ceil_div(T, inc)), T, evaluate=False)


# TRL 1.16 kernels/chunked_logprob.py: the projection runs on [TOKEN_CHUNK_SIZE, chunk_size] tiles of one buffer
# (trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE: 32768 columns, whatever the vocabulary)
TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK = 4096, 32768


def _trl_dtypes(s_: Structure) -> tuple[sp.Expr, sp.Expr]:
    """Bytes per element of the hidden states TRL's fused LM head reads (the final norm's output, in the residual
    stream's dtype) and of its tiles (the autocast dtype, else the hidden states')."""
    hidden = residual_bytes(s_)
    return hidden, (b_c if s_.autocast else hidden)


def trl_loss_terms(s_: Structure) -> list[Term]:
    """TRL 1.16 SFTTrainer's fused LM head (``add_fused_lm_head``, always installed): the logits are computed tile by
    tile into one [min(n, 4096), 32768] buffer and folded into per-token statistics; the backward recomputes each
    tile and accumulates the gradients in fp32. n: the positions it scores (``positions.scored``)."""
    hidden, tile = _trl_dtypes(s_)
    T = scored(s_)  # noqa: N806 - the scored tokens, as the SFT formulas below name them
    buffer = tile * sp.Min(T, TRL_TOKEN_CHUNK, evaluate=False) * TRL_VOCAB_CHUNK
    cast_tensors = []
    if s_.autocast and s_.weight_casts:  # weight[start:end].to(compute dtype): one vocabulary chunk at a time
        cast_tensors.append((1, b_c * TRL_VOCAB_CHUNK * h))
    if s_.autocast and (s_.weight_casts or s_.kbit_prepared):  # hidden[chunk].to(compute dtype)
        cast_tensors.append((1, b_c * sp.Min(T, TRL_TOKEN_CHUNK, evaluate=False) * h))
    # the gradients accumulate in fp32 and are cast to their tensor's dtype at the end: a copy unless that is fp32
    # (full fine-tuning: lm_head's [V, h] buffer too; its cast is the gradient the ledger counts already)
    wide = s_.kbit_prepared or s_.weight_casts or s_.compute_fp32  # fp32 hidden states (and weights, but in QLoRA)
    hidden_cast = 0 if wide else hidden * T * h
    # lm_head's fp32 accumulator and its cast to the weight's dtype, both alive as the backward returns (:457)
    accumulator = [(1, b_32 * V * h), (1, b_g * V * h)] if s_.method == "full" and not (
        s_.weight_casts or s_.compute_fp32) else []
    forward = ((1, buffer), (7, b_32 * T), *cast_tensors)
    backward = ((1, buffer), (1, b_32 * T * h), *([(1, hidden * T * h)] if hidden_cast else []), *cast_tensors,
                *accumulator)
    source = "trl 1.16 kernels/chunked_logprob.py ChunkedLogProbFunction"
    return [Term("logits", Role.LOSS_TEMPORARY, sp.Add(*(k * size for k, size in forward)), r"M_{\mathrm{logits}}",
                 "TRL's fused LM head: one [min(T, 4096), 32768] tile buffer in the compute dtype (not clipped to the "
                 "vocabulary) and seven fp32 statistics per token; no logits (modelled from source, not measured here)",
                 source, tensors=forward),
            Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY, sp.Add(*(k * size for k, size in backward)),
                 r"M_{\mathrm{CE}'}", "its backward: the tile buffer again, the hidden states' gradient accumulated in "
                 "fp32" + (" and cast back" if hidden_cast else "")
                 + (", lm_head's gradient accumulated in fp32 and cast back" if accumulator else "")
                 + " (modelled from source)",
                 source, tensors=backward)]


def trl_saved_term(s_: Structure, why: str = "(every position labelled but each row's last, labels[:, 1:]; "
                   "modelled from source, not measured here)") -> Term:
    """What TRL's fused LM head saves for the positions it scores (``positions.scored``): their hidden states' copy,
    labels, log_z, entropy."""
    n = scored(s_)
    tensors = ((1, _trl_dtypes(s_)[0] * n * h), (1, b_id * n), (2, b_32 * n))
    return Term("act_logsoftmax", Role.LOSS_ACTIVATION, sp.Add(*(k * size for k, size in tensors)),
                r"A_{\mathrm{TRL}}", "TRL's fused LM head keeps a copy of the labelled positions' hidden states, their "
                "labels and the fp32 log-sum-exp and entropy per token; no logits survive " + why,
                "trl 1.16 kernels/chunked_logprob.py:386 ChunkedLogProbFunction.forward", tensors=tensors)


UNSLOTH_CE = "unsloth_zoo 2026.10.9 fused_losses/fused_linear.py"
UNSLOTH_CE_MAX_ROWS, UNSLOTH_CE_MIN_LOGITS = 4096, 512 * 151936   # fused_linear.py:71-73 _MAX_ROWS, _MIN_LOGITS
UNSLOTH_CE_BUDGET = 2 * 1024**3   # :69, :119-127 _budget_bytes: min(2 GiB, half the free memory): 2 GiB on a roomy card


def pow2_floor(n: sp.Expr, d: sp.Expr) -> sp.Expr:
    """The largest power of two ≤ n / d for integers n ≥ d > 0: half the next power of two above ⌊n/d⌋, with
    ⌊n/d⌋ + 1 = ⌈(n + 1)/d⌉.

    >>> [pow2_floor(sp.Integer(n), 2) for n in (2, 15, 16, 18)]
    [1, 4, 8, 8]
    """
    return pow2_ceil(ceil_div(n + 1, d)) / 2


def unsloth_ce_rows(s_: Structure) -> sp.Expr:
    """Rows per chunk of Unsloth's fused linear cross-entropy (fused_linear.py:140-154 ``fused_linear_rows``): the
    power of two at or below T·h/V, at least that of 512·151936/V (clamped to [512, 4096]), at most 4096, at most
    what 2 GiB of fp32 logits hold, at most T.

    >>> from symvram.presets import load_model
    >>> from symvram.scenario import Scenario
    >>> sc = Scenario.create(load_model("llama-3.1-8b"), method="lora", stack="unsloth", seq=4096)
    >>> unsloth_ce_rows(sc.structure).subs({sym(k): v for k, v in sc.values().items()})
    512
    """
    min_rows = sp.Min(sp.Max(pow2_floor(UNSLOTH_CE_MIN_LOGITS, V), 512), UNSLOTH_CE_MAX_ROWS)
    rows = sp.Min(sp.Max(pow2_floor(T * h, V), min_rows), UNSLOTH_CE_MAX_ROWS)
    return sp.Min(rows, sp.Max(ceil_div(UNSLOTH_CE_BUDGET // 4 + 1, V) - 1, 2), T)


def unsloth_loss_terms(s_: Structure) -> list[Term]:
    """Unsloth's fused linear cross-entropy (``unsloth_fused_ce_loss`` → ``fused_linear_cross_entropy``, its default
    path: UNSLOTH_CHUNKED_CE and UNSLOTH_FUSED_LINEAR on; fused_linear.py:1286-1378 ``_ce_impl``). The hidden states'
    gradient is allocated (hidden-sized, :1294) and written chunk by chunk in the forward; each chunk of R rows
    projects into one [R, V rounded up to 8] fp32 buffer (:919-927, reused for the chunk's 16-bit logits gradient, an
    fp32 log-prob per token kept). The backward scales the stored gradient (a new tensor). Modelled with the chunked
    buffer: for a frozen head on a card over 24.5 GiB from 4096 tokens (any token count on a smaller card) with
    V > 32768, Unsloth takes its tiled pass instead, which has no [R, V] buffer (:1324-1333): an upper bound there."""
    R = unsloth_ce_rows(s_)
    # V rounded up to a multiple of 8 (Max: one factor, so the buffer stays one tensor in the allocator schedule)
    buffer = b_32 * R * sp.Max(V, 8 * ceil_div(V, 8)) + b_c * R * h + b_32 * T
    return [Term("logits", Role.LOSS_TEMPORARY, buffer, r"M_{\mathrm{logits}}",
                 "Unsloth's fused linear CE: one [R, V] fp32 logits buffer (R = unsloth_ce_rows), a chunk's 16-bit "
                 "hidden gradient and an fp32 log-prob per token — modelled from source, not measured (Triton)",
                 UNSLOTH_CE + ":1294-1378 _ce_impl"),
            Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY, residual_bytes(s_) * T * h, r"M_{\mathrm{CE}'}",
                 "its backward multiplies the stored hidden states' gradient by the incoming scale: a new tensor",
                 "unsloth_zoo 2026.10.9 fused_losses/fused_linear.py backward (grad * scale)")]


def litgpt_loss_terms(s_: Structure, logits_bytes) -> list[Term]:
    """LitGPT's loss. Full fine-tuning (litgpt 0.5.13 finetune/full.py:282-291, utils.py:334-345): fit() keeps the 16-bit
    ``logits`` referenced through the backward, the optimizer step and the next step's forward; ``logits[..., :-1, :]``
    is reshaped (a copy) and cross-entropy runs on 128-row chunks of it. The backward holds, beyond the chunks' saved
    log-softmax (or their gradients), the first chunk's nll and log-softmax gradients at once, or the slice's
    zero-filled gradient of all the logits, whichever is larger.

    Under LoRA (finetune/lora.py:355-359) the model returns the logits as a list of 128-position chunks
    (model.py:177-179, ``lm_head_chunk_size=128``), the last sliced by one position: each chunk is reshaped (the last a
    copy when b > 1), its targets too (int64 copies when b > 1), and cross-entropy runs per chunk (utils.py:315-325).
    Its backward runs every chunk's nll_loss and log_softmax backward before any chunk's reshape backward (these
    were made first, so their sequence numbers are lower): each chunk's log-softmax gradient replaces its saved
    log-softmax, and the peak is one chunk's nll and log-softmax gradients at once, b·min(128, s − 1) rows each. The
    chunks are made while fit() still holds the previous step's logits: where that instant is larger than the loss's
    (one sample; LoRA on lm_head), ``head_chunks`` is the difference.

    >>> from symvram.ledger.structure import Structure
    >>> litgpt_loss_terms(Structure(model_code="litgpt"), sym("bytes_act"))[2].expr
    bytes_act*vocab*Max(batch*seq, 2*Min(128, batch*(seq - 1)))
    >>> litgpt_loss_terms(Structure(model_code="litgpt", method="lora"), sym("bytes_act"))[3].expr.subs(sym("batch"), 1)
    2*bytes_act*vocab*Min(128, seq - 1)
    """
    logits = Term("logits", Role.LOSS_TEMPORARY, logits_bytes * T * V, r"M_{\mathrm{logits}}",
                  "the lm_head output" + " (its 128-position chunks)" * s_.lora + ", which fit()'s loop keeps until "
                  "the next step's forward returns", "litgpt 0.5.13 finetune/" + ("lora.py:355" if s_.lora else
                                                                                   "full.py:282"),
                  lifetime=TRAINING_STEP)
    if s_.lora:
        last = seq - 128 * (ceil_div(seq, 128) - 1)   # the last chunk's positions, one sliced off
        shifted = at_least(b, 2) * b * (logits_bytes * V * (last - 1) + b_id * (seq - 1))
        lsm = logits_bytes * b * (seq - 1) * V        # act_logsoftmax (saved_terms)
        # the head's own instant: the previous step's logits (fit() still holds them) beside this step's chunks so
        # far and, under LoRA on lm_head, the chunk's base output and scaled lora_B output beside the sum
        # (lora.py:165-172): the last chunk's, or the one before when the last is short; and the final norm's output,
        # which forward() holds while it splits it (model.py:170-179; no frozen lm_head saves it)
        extra = 2 if "lm_head" in s_.head_targets else 0
        ahead = logits_bytes * b * V * (seq + sp.Max(extra * last, at_least(ceil_div(seq, 128), 2) * (extra * 128 - last))) \
            + b_c * T * h
        over = sp.Max(0, ahead - lsm - shifted)
        # the backward first reaches its peak at the second chunk it runs (the one before the short last), when the
        # n − 2 chunks before that still keep their targets' int64 copies (b > 1)
        n = ceil_div(seq, 128)
        waiting = at_least(b, 2) * at_least(n, 2) * (n - 2) * b * 128 * b_id
        return [logits,
                Term("logits_shifted", Role.LOSS_TEMPORARY, shifted, r"M_{\mathrm{logits},\ll}",
                     "(b > 1) the reshaped copy of the last chunk, sliced by one position, and each chunk's int64 "
                     "targets, reshaped copies of targets[..., 1:]", "litgpt 0.5.13 finetune/lora.py:357, "
                     "utils.py:316-317"),
                Term("head_chunks", Role.LOSS_TEMPORARY, over, r"M_{\mathrm{head}}",
                     "while the lm_head chunks are made (the previous step's logits still held): this step's chunks so "
                     "far" + " and the chunk's base and scaled LoRA outputs" * bool(extra) + " and the final norm's "
                     "output, beyond what the loss "
                     "then holds (its log-softmax and copies)", "litgpt 0.5.13 model.py:177-179"
                     + ", lora.py:165-172" * bool(extra), tensors=((1, over),)),
                Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY,
                     2 * logits_bytes * V * b * sp.Min(128, seq - 1) + waiting, r"M_{\mathrm{CE}'}",
                     "one chunk's nll_loss and log_softmax gradients at once (the chunks done before have traded "
                     "their saved log-softmax for its gradient), and the int64 targets the chunks not reached yet "
                     "keep", "torch nll_loss_backward, _log_softmax_backward_data; litgpt 0.5.13 utils.py:318-325")]
    return [logits,
            Term("logits_shifted", Role.LOSS_TEMPORARY, (logits_bytes * V + at_least(b, 2) * b_id) * b * (seq - 1),
                 r"M_{\mathrm{logits},\ll}", "logits[..., :-1, :].reshape(-1, V): the copy chunked_cross_entropy splits, "
                 "and (b > 1) targets[..., 1:]'s int64 copy, freed by the first chunk's nll_loss backward",
                 "litgpt 0.5.13 utils.py:334-335"),
            Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY,
                 logits_bytes * V * sp.Max(T, 2 * sp.Min(128, b * (seq - 1))), r"M_{\mathrm{CE}'}",
                 "the first chunk's nll_loss and log_softmax gradients at once, or the slice's zero-filled gradient "
                 "of all the logits beside the chunks' joined gradient", "torch nll_loss_backward, "
                 "_log_softmax_backward_data, SliceBackward")]


def loss_terms(s_: Structure, logits_bytes) -> list[Term]:
    """The loss's transients: the logits (and their fp32 copy) while it is computed, and the start of its
    backward — per implementation (``--loss-impl``)."""
    lm_head_trains = not s_.lora  # full fine-tuning: the lm_head weight's gradient comes out of the loss
    if s_.loss_impl == "liger":
        grad_w = b_g * V * h if lm_head_trains else sp.Integer(0)
        why = ("Liger FLCE: one chunk of logits (chunk = min(next_pow2(⌈T/⌈V/h⌉⌉), T) rows), the gradients it "
               "writes in the forward" + (" (lm_head's weight gradient too)" if lm_head_trains else "")
               + " — modelled from source, not measured here (Triton kernels only)")
        return [Term("logits", Role.LOSS_TEMPORARY, b_c * liger_chunk(s_) * V + grad_w, r"M_{\mathrm{logits}}", why,
                     "liger_kernel ops/fused_linear_cross_entropy.py"),
                Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY, grad_w, r"M_{\mathrm{CE}'}",
                     "Liger's backward returns the gradients stored in the forward (nothing new)",
                     "liger_kernel fused_linear_cross_entropy_backward")]
    if s_.loss_impl == "trl":
        return trl_loss_terms(s_)
    if s_.loss_impl == "unsloth":
        return unsloth_loss_terms(s_)
    if s_.loss_impl == "cce":
        grad_w = b_c * V * h if lm_head_trains else sp.Integer(0)
        return [Term("logits", Role.LOSS_TEMPORARY, b_32 * T, r"M_{\mathrm{logits}}",
                     "Cut Cross-Entropy's forward: an fp32 dot product per token; no logits (modelled from source, "
                     "not measured here)", "cut_cross_entropy cce.py"),
                Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY, b_c * T * h + (b_id + b_i32) * V + grad_w, r"M_{\mathrm{CE}'}",
                     "its backward: the hidden states' gradient, the vocabulary sort (int64 then int32)"
                     + (" and lm_head's gradient" if lm_head_trains else "") + " (modelled from source)",
                     "cut_cross_entropy cce_backward.py")]
    if s_.model_code == "litgpt":
        terms = litgpt_loss_terms(s_, logits_bytes)
        return terms + [lora_head_working_set(s_, logits_bytes)] if "lm_head" in s_.head_targets else terms
    chunks = sym("loss_chunks") if s_.loss_impl == "chunked" else 1
    upcast = s_.forward_logits_upcast   # transformers < 4.45: the forward returns fp32 logits (symvram.versions)
    terms = [
        Term("logits", Role.LOSS_TEMPORARY, (b_32 if upcast else logits_bytes) * T * V, r"M_{\mathrm{logits}}",
             "the lm_head output, alive while the loss is computed"
             + (" (torchtune: the list of c chunks)" if chunks != 1 else "")
             + (", upcast to fp32 by the forward (transformers < 4.45)" if upcast else ""),
             "transformers 4.44.2 models/llama/modeling_llama.py:1209" if upcast else "transformers LlamaForCausalLM"),
        Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY, 2 * b_32 * T * V / chunks, r"M_{\mathrm{CE}'}",
             "the loss backward holds nll_loss's fp32 gradient and log_softmax's fp32 gradient at once"
             + (" — of one chunk at a time" if chunks != 1 else ""),
             "torch nll_loss_backward, _log_softmax_backward_data"),
    ]
    if s_.shift_logits_copy:   # transformers < 4.49 (symvram.versions)
        terms.insert(1, Term("logits_shifted", Role.LOSS_TEMPORARY, b_32 * b * (seq - 1) * V, r"M_{\mathrm{logits},\ll}",
                             "logits[..., :-1, :].contiguous(): the shifted fp32 copy cross-entropy reads "
                             "(transformers < 4.49)", "transformers 4.48.0 loss/loss_utils.py:39 ForCausalLMLoss"))
    if not s_.compute_fp32 and not upcast:
        terms.insert(1, Term("logits_fp32", Role.LOSS_TEMPORARY, b_32 * T * V / chunks, r"M_{\mathrm{logits},32}",
                             "logits.float(): the fp32 copy cross-entropy reads" + (" (one chunk)" if chunks != 1 else ""),
                             "transformers ForCausalLMLoss" if chunks == 1 else "torchtune CEWithChunkedOutputLoss"))
    if "lm_head" in s_.head_targets:
        terms.append(lora_head_working_set(s_, logits_bytes))
    return terms


def lora_head_working_set(s_: Structure, logits_bytes) -> Term:
    """LoRA on lm_head's forward (peft 0.21.2 tuners/lora/layer.py:1100-1113 Linear.forward): the base layer's
    logits, lora_B's vocabulary-wide output and its scaled copy (in the compute dtype under autocast, else the
    adapters'), alive together before the sum, the logits the loss reads, takes lora_B's freed block. No moment lists
    them (the loss's fp32 tensors are larger); the allocation schedule makes and frees them before the logits, so the
    caching allocator keeps their segments (qwen2.5-0.5b LoRA on every linear, embed_tokens and lm_head: its traced
    schedule holds three b·s·V bf16 tensors there, reserved −12.7 % → see tests/test_card_memory.py).
    LitGPT's LoRALinear (litgpt 0.5.13 lora.py:165-172) makes the same three per 128-position chunk of the head
    (model.py:177-179)."""
    lora = matmul_bytes(s_) if s_.autocast else compute_adapter_bytes(s_)
    rows = b * sp.Min(128, seq) if s_.model_code == "litgpt" else T
    return Term("ws_lm_head", Role.HEAD_WORKING_SET, (logits_bytes + 2 * lora) * rows * V, r"W_{\mathrm{head}}",
                "LoRA on lm_head: the base logits, lora_B's output and its scaled copy as the sum is made"
                + " (one 128-position chunk)" * (s_.model_code == "litgpt"),
                "litgpt 0.5.13 lora.py:165-172" if s_.model_code == "litgpt" else
                "peft 0.21.2 tuners/lora/layer.py:1100-1113 Linear.forward")


def dora_weight_norm(s_: Structure, target: str) -> sp.Expr:
    """Bytes one DoRA forward holds at its peak, beyond the tensors alive before: eye(d_in) in the adapter dtype,
    lora_A(eye) and ΔW = lora_B(lora_A(eye)), then inside ``get_weight_norm`` ΔW and W in the adapter dtype (copies
    unless already in it), s·ΔW and W + s·ΔW — each weight-sized. lora_A keeps eye for its weight gradient until
    the forward returns; under autocast it keeps eye's 16-bit cast instead, so eye itself is freed once ΔW exists
    and the peak is the larger of the two phases. A 4-bit base is dequantized first (the weight in the load
    dtype and its fp32 absmax), then copied to the adapter dtype (modelled from PEFT's source, not measured).

    >>> from symvram.ledger.structure import Structure
    >>> s = Structure(method="lora", targets=("down_proj",), dora=True, adapter_upcast=True)
    >>> sp.factor(dora_weight_norm(s, "down_proj").subs({b_a: 4, sym("bytes_weight"): 2}))
    4*intermediate*(4*hidden + intermediate + rank)
    """
    m = s_.arch.linear(target)
    d, n = m.d_in, m.d_in * m.d_out
    b_a = compute_adapter_bytes(s_)   # the adapters as they compute: an FSDP2 policy gathers them in its dtype
    weight_copy = b_a * n if s_.method == "qlora" or (s_.adapter_upcast and not s_.weight_casts) else 0
    if s_.method == "qlora":  # dequantize_module_weight: the 4-bit weight in the load dtype, its fp32 absmax
        weight_copy += b_w * n + b_32 * ceil_div(n, sym("quant_block"))
    if not s_.autocast:
        return b_a * (d**2 + r * d + n) + weight_copy + 2 * b_a * n
    b_mm = matmul_bytes(s_)  # lora_A(eye) and lora_B(...) run in the autocast dtype
    graph = b_mm * (d**2 + r * d + n)  # eye's cast, lora_A(eye), ΔW: kept for the adapters' gradients
    to_adapter = b_a * n if s_.adapter_upcast else 0  # ΔW copied to the adapter dtype
    return sp.Max(graph + b_a * d**2, graph + to_adapter + weight_copy + 2 * b_a * n, evaluate=False)


def dora_forward_temp(s_: Structure) -> sp.Expr:
    """The DoRA weight norm of the layer's last target (the largest for all-linear and MLP targets: down_proj's
    eye(d_ff)), net of that target's own saved tensors, which are made after it (its LoRA result, lora_A's
    output, the weight norm, m/‖W′‖ and m/‖W′‖ − 1: counted among every layer's saved activations), plus what
    the forward holds without saving it: the target's input (and, under autocast, its copy in the adapter dtype),
    the MLP's input and the residual, the position ids —
    and the layer's input and the embedding output (in a plain forward); recomputing under checkpointing, the
    backward has begun the layer: the gradients reaching its output (the residual's and the norm's paths, and
    their sum) and the ops of its last target that need no saved tensor (the output gradient cast to the adapter
    dtype, scaled, and its 16-bit copy)."""
    fam = s_.arch
    last = fam.target_map[[t for t in s_.targets if fam.target_map.get(t) in fam.linears][-1]]
    b_a = compute_adapter_bytes(s_)   # as in dora_weight_norm
    b_lr = matmul_bytes(s_) if s_.autocast else b_a
    own = last.d_out * (b_lr * T + 3 * b_32) + b_lr * T * r
    b_res = residual_bytes(s_)
    live = b_c * T * last.d_in + 2 * b_res * T * h + sym("bytes_index") * seq
    if s_.autocast and s_.adapter_upcast:  # the input cast to the adapter dtype is not what lora_A keeps (its
        live += b_a * T * last.d_in        # 16-bit cast, made after the weight norm)
        own += matmul_bytes(s_) * T * last.d_in
    if s_.grad_checkpointing:
        live += 3 * b_c * T * h + (2 * b_a + b_c) * T * last.d_out
    else:
        live += 2 * b_res * T * h
    return dora_weight_norm(s_, last.name) - own + live


# a recomputed layer lives through its recompute and its backward, for the last and the first layer (not at a layer
# end between them: FSDP2's layer ends count the layers' saved tensors themselves)
RECOMPUTES = (Phase.LAST_LAYER_RECOMPUTE, Phase.LAST_LAYER_BACKWARD, Phase.FIRST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_BACKWARD)


def _gradients_so_far(s_: Structure) -> list[Term]:
    """The gradients that accumulate during backward: a trainable lm_head's (a copy's, or its LoRA's) from the loss
    backward on, all but the first layer's and the embedding's when backward reaches the first layer, and tied
    embeddings' two gradients summed at the end."""
    terms: list[Term] = []
    if "lm_head" in s_.modules_to_save:
        terms.append(Term("head_grad", Role.EARLY_GRADIENT, saved_copy_bytes(s_) * V * h, r"M_{\mathrm{grad},V}",
                          "the trainable lm_head copy's gradient, made by the loss backward, alive through the rest "
                          "of backward", "autograd order"))
    if "lm_head" in s_.head_targets:
        terms.append(Term("lora_head_grad", Role.EARLY_GRADIENT, b_g * r * (h + V), r"M_{\mathrm{grad},V}^{\mathrm{LoRA}}",
                          "lm_head's LoRA gradients (r·(h + V)), made by the loss backward, alive through the rest of "
                          "backward", "autograd order"))
    embed_copy = saved_copy_bytes(s_) * V * h if "embed_tokens" in s_.modules_to_save else 0
    terms.append(Term("grads_before_first_layer", Role.GRADIENTS_SO_FAR,
                      per_trainable(s_, b_g, saved_copy_bytes(s_)) - b_g * _first_layer_params(s_) - embed_copy,
                      r"M_{\mathrm{grad},>0}", "gradients already accumulated when backward reaches the first layer "
                      "(all but the first layer's and the embedding's)", "autograd order"))
    if s_.tied and not s_.lora and not s_.score_head:
        terms.append(Term("tied_grad_sum", Role.BACKWARD_TEMPORARY, 2 * b_g * V * h, r"M_{\mathrm{tied}'}",
                          "tied embeddings: lm_head's gradient and the embedding's are summed at the end of backward, "
                          "both alive beside the sum", "autograd of a shared weight (embedding_dense_backward)",
                          lifetime=(Phase.BACKWARD_END,)))
    return terms


def _recompute_lora_output(s_: Structure) -> list[Term]:
    """Checkpointed LoRA on the MLP's output projection (down_proj): the last layer's recompute peaks inside that
    projection's LoRA forward, after lora_A, with every tensor the layer saves already rebuilt. Alive beside them:
    the projection's input (d_ff wide), its cast to the adapters' dtype (PEFT ``_cast_input_dtype``, a local of
    Linear.forward until it returns), the base layer's result, the MLP's input (the post-attention norm's output,
    held by the decoder layer while its MLP runs) and, from the backward above the layer, the gradient reaching it
    and two more hidden-sized 16-bit products the autograd engine still holds (measured: an ``add`` and a ``mul``).
    Traced on tiny Qwen2 and Qwen2.5-0.5B shapes (bf16 weights, fp32 adapters, autocast bf16); the MLP backward
    (``layer_backward_temp``) is the larger moment whenever 3·d_ff·β_c exceeds this one's.

    >>> [t.key for t in _recompute_lora_output(Structure(method="lora", targets=("down_proj",), grad_checkpointing=True))]
    ['recompute_lora_output']
    """
    out = s_.arch.mlp_output
    if s_.method != "lora" or s_.dora or s_.arch.moe or out is None or out.name not in s_.targets:
        return []
    d_in, d_out = out.d_in, out.d_out
    b_res = residual_bytes(s_)
    if s_.unsloth_kernels:   # LoRA_MLP.forward: matmul_lora(h, down …) — h, the base product, X·A; out.addmm_ in place
        return _unsloth_lora_output(s_)
    cast = compute_adapter_bytes(s_) * T * d_in if s_.adapter_upcast else 0
    source = "peft tuners/lora/layer.py Linear.forward (_cast_input_dtype)"
    if not s_.grad_checkpointing:
        return [_lora_output_forward(s_, cast + b_c * T * d_in + 3 * b_c * T * d_out + 4 * b_res * T * h, source)]
    expr = cast + b_c * T * d_in + b_c * T * d_out + b_res * T * h + 3 * b_res * T * h
    return [Term("recompute_lora_output", Role.RECOMPUTE_TEMPORARY, expr, r"M_{\mathrm{LoRA,out}}",
                 "recomputing a layer's down projection with LoRA (the last layer's, then the first's): its input"
                 + (" and that input cast to the adapters' dtype" if cast != 0 else "") + ", the base result, the "
                 "MLP's input, and the incoming gradient with two hidden-sized products of the backward above",
                 source + "; torch.utils.checkpoint recompute",
                 lifetime=(Phase.LAST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_RECOMPUTE))]


def _unsloth_lora_output(s_: Structure) -> list[Term]:
    """Unsloth's LoRA_MLP forward at its down projection (kernels/fast_lora.py:409-412, utils.py:1855-1900
    matmul_lora): the SwiGLU product h (d_ff wide), the base result and h·A (r wide); lora_B's product is added in
    place, and no input is cast to the adapters' dtype. Beside them what PEFT's path holds there too: the MLP's
    input, and under checkpointing the incoming gradient with two hidden-sized products of the backward above (the
    decoder layer's own torch code), without it the residual sum, the layer's input and the embedding output."""
    out, b_res = s_.arch.mlp_output, residual_bytes(s_)
    expr = b_c * T * out.d_in + b_c * T * out.d_out + b_c * T * r + 4 * b_res * T * h
    source = UNSLOTH_KERNELS.split(";")[0]
    if not s_.grad_checkpointing:
        return [_lora_output_forward(s_, expr, source)]
    return [Term("recompute_lora_output", Role.RECOMPUTE_TEMPORARY, expr, r"M_{\mathrm{LoRA,out}}",
                 "recomputing a layer's LoRA_MLP at its down projection (the last layer's, then the first's): the "
                 "SwiGLU product, the base result, the r-wide product, the MLP's input, and the incoming gradient with "
                 "two hidden-sized products of the backward above (modelled, not measured)", source,
                 lifetime=(Phase.LAST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_RECOMPUTE))]


def _lora_output_forward(s_: Structure, expr: sp.Expr, source: str) -> Term:
    """Without checkpointing the same LoRA forward runs once, in the forward, with every layer's activations saved
    and no loss yet: beside the input (and its cast), the base result, lora_B's output and its scaled copy, the
    MLP's input, the attention's residual sum, the layer's input (the decoder loop's argument) and the embedding's
    output (the model's ``inputs_embeds``), all hidden-sized locals the forward still holds."""
    return Term("lora_output_forward", Role.LORA_FORWARD_TEMPORARY, expr, r"M_{\mathrm{LoRA,out}}",
                "the last layer's down projection's LoRA forward: its input" + (" and its cast to the adapters' dtype"
                if s_.adapter_upcast else "") + ", the base result, lora_B's output and its scaled copy, and the "
                "MLP's input, the residual sum, the layer's input and the embedding's output the forward holds",
                source + "; transformers LlamaModel.forward, LlamaDecoderLayer.forward")


def transient_terms(s_: Structure) -> list[Term]:
    """Tensors alive only at one moment of the step (not part of the ledger sum)."""
    logits_bytes = b_32 if s_.compute_fp32 else b_c
    terms = loss_terms(s_, logits_bytes) + [
        Term("norm_backward_temp", Role.BACKWARD_TEMPORARY, b_c * T * h, r"M_{\mathrm{norm}'}",
             "Unsloth's RMSNorm backward writes the input gradient into one new 16-bit tensor (modelled, not "
             "measured)", "unsloth 2026.10.9 kernels/rms_layernorm.py:990-1001",
             lifetime=(Phase.FINAL_NORM_BACKWARD,)) if s_.unsloth_kernels else
        Term("norm_backward_temp", Role.BACKWARD_TEMPORARY, 5 * b_32 * T * h, r"M_{\mathrm{norm}'}",
             "the final RMSNorm's backward holds five fp32 hidden-sized gradients at once", "autograd of LlamaRMSNorm",
             lifetime=(Phase.FINAL_NORM_BACKWARD,)),
        Term("backward_tail", Role.EMBEDDING_GRADIENT, 2 * b_c * T * h, r"M_{\mathrm{tail}}",
             "the gradient reaching the embedding and its accumulation buffer", "autograd"),
    ]

    temp, why, source = _layer_backward_temp(s_)
    if s_.arch.kinds:   # the last layer's MLP backward and the first's: the larger kind's
        temp = largest_kind(s_, lambda k: _layer_backward_temp(k)[0])
    if s_.kind_depths:   # the first layer's moments: the kind they recompute's own (_reached_kind)
        terms.append(Term("first_layer_backward_temp", Role.BACKWARD_TEMPORARY,
                          _at_reached_kind(s_, "first_layer_backward_temp"), r"M_{\mathrm{mlp}',0}",
                          "the backward (MLP, or output norm where larger) of the lowest layer of the kind the first-layer "
                          "moments recompute",
                          source, lifetime=(Phase.FIRST_LAYER_BACKWARD,), stands_for="layer_backward_temp"))
    terms.append(Term("layer_backward_temp", Role.BACKWARD_TEMPORARY, temp, r"M_{\mathrm{mlp}'}", why, source,
                      **({"lifetime": (Phase.LAST_LAYER_BACKWARD,)} if s_.kind_depths else {})))
    # optimizer in backward: the gradients never accumulate, each is stepped and freed where it is made (when
    # lm_head is, its backward has returned: its saved input is freed and the hidden states' gradient, as large, lives)
    if not s_.optimizer_in_backward:
        terms += _gradients_so_far(s_)
    if s_.method == "qlora":
        terms.append(Term("dequant_temp", Role.BACKWARD_TEMPORARY, b_w * _largest_linear(s_),
                          r"M_{\mathrm{dequant}}", "bitsandbytes dequantizes one 4-bit weight to the load dtype "
                          "for each matmul (the largest is the bound)", "bitsandbytes MatMul4Bit"))
    if s_.dora and any(s_.arch.target_map[t] in s_.arch.linears for t in s_.targets):
        terms.append(Term("dora_weight_norm", Role.FORWARD_TEMPORARY, dora_forward_temp(s_), r"M_{\mathrm{DoRA}}",
                          "one DoRA forward's weight norm: eye(d_in), ΔW = B·A, W in the adapter dtype, s·ΔW and "
                          "W + s·ΔW, weight-sized (the layer's last target), net of what that target saves after it",
                          "peft tuners/lora/dora.py DoraLinearLayer.forward, get_weight_norm",
                          lifetime=(Phase.LAST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_RECOMPUTE) if s_.grad_checkpointing
                          else (Phase.FORWARD,)))
    if s_.arch.extra("experts_dense") and not s_.grad_checkpointing:
        terms.append(Term("experts_forward", Role.EXPERTS_TEMPORARY, _experts_forward_temp(s_),
                          r"M_{\mathrm{exp,fwd}}", "the last layer's dense experts at their down bmm: its E·T-row output, "
                          "the router logits and (frozen experts) the scaled tokens and the SiLU·up product, net of "
                          "the shared expert's saved tensors made after them", LLAMA4))
    if _experts_rerun(s_):
        # the last layer is an MoE one (Llama4TextConfig: layer i is when (i + 1) % interleave_moe_layer_step == 0);
        # the first-layer moments' layer one when it is the lowest MoE layer (_reached_kind) or layer 0 is
        dense = s_.arch.extra("experts_dense")
        terms.append(Term("experts_recompute", Role.EXPERTS_TEMPORARY, experts_recompute_temp(s_),
                          r"M_{\mathrm{exp,re}}", "recomputing a layer's " + (
                              "dense experts, at their down bmm: the forward's working set there, beside the gradient "
                              "reaching the layer and its E·T-row copy" if dense else
                              "routed experts, at their gated product or un-permute: the block's locals, the "
                              "weighted product, the residual sum and the gradient reaching the layer (with its "
                              "T·k_E-row copy where the recompute stops there)"),
                          (LLAMA4 if dense else MOE) + "; torch.utils.checkpoint recompute",
                          tensors=_experts_recompute_tensors(s_),
                          lifetime=(Phase.LAST_LAYER_RECOMPUTE, Phase.FIRST_LAYER_RECOMPUTE)
                          if any(_experts_rerun(s_.layer(k)) for k, _ in s_.kind_depths) or s_.first_layer.arch.moe
                          else (Phase.LAST_LAYER_RECOMPUTE,)))
    terms += layer_working_sets(s_) + _recompute_lora_output(s_)
    one_layer = per_layer_bytes(s_) if s_.grad_checkpointing else _layer_bytes(s_.first_layer)
    if s_.checkpoint_every > 1:   # the last layer is recomputed only when it is one of 0, k, 2k …
        last = checkpointed_layers(s_) - ceil_div(L - 1, s_.checkpoint_every)
        terms.append(Term("last_layer_recomputed", Role.RECOMPUTED_ACTIVATION, last * one_layer, r"M_{\mathrm{layer},L-1}",
                          "the last layer's saved tensors, recomputed when it is checkpointed (k divides L − 1; "
                          "otherwise they are among the layers' saved tensors)", "torch.utils.checkpoint" + EVERY_N,
                          lifetime=RECOMPUTES[:2]))
    if s_.grad_checkpointing:   # the other layers' checkpointed inputs are freed with their backward by then
        # (Unsloth's checkpointer recomputes an offloaded first layer on its staging buffer: only a kept one counts)
        first_kept = unsloth_keeps(s_) if s_.offload_checkpoints and not embedding_leaf(s_) else 1
        # and, where the moment is a higher layer's (_reached_kind), the checkpointed inputs of the layers below it
        below = _at_reached_kind(s_, "first_checkpoint")
        terms.append(Term("first_checkpoint", Role.RECOMPUTED_ACTIVATION,
                          first_kept * residual_bytes(s_) * T * h + below + b_id * seq,
                          r"A_{\mathrm{ckpt},0}", "the first layer's checkpointed input (the embedding output) and the "
                          "position ids, kept until that layer's backward ends" + (", and the checkpointed inputs of "
                          "the layers below the lowest of the kind the first-layer moments recompute" if below != 0
                          else ""), "torch.utils.checkpoint", lifetime=RECOMPUTES[2:]))
    if s_.kind_depths:   # the first layer's recompute: the lowest layer of the kind it is (_reached_kind)
        terms.append(Term("first_layer_recomputed", Role.RECOMPUTED_ACTIVATION,
                          _at_reached_kind(s_, "first_layer_recomputed"), r"M_{\mathrm{layer},0}",
                          "the saved tensors of the lowest layer of the kind the first-layer moments recompute, "
                          "recomputed, alive until its backward ends", "torch.utils.checkpoint", lifetime=RECOMPUTES[2:],
                          stands_for="one_layer"))
    terms.append(Term("one_layer", Role.RECOMPUTED_ACTIVATION, one_layer + sliding_extra(s_), r"M_{\mathrm{layer}}",
                      "one layer's saved tensors (recomputed under checkpointing), alive until its backward ends",
                      "torch.utils.checkpoint / autograd",   # without checkpointing: the first layer's, still saved
                      lifetime=RECOMPUTES[:2] if s_.kind_depths else
                      (RECOMPUTES[2:] if s_.checkpoint_every > 1 else RECOMPUTES) if s_.grad_checkpointing
                      else (Phase.FIRST_LAYER_BACKWARD,)))
    return terms
