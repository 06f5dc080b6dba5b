"""The parameter side of the ledger: base weights (block 1) and the trainable triple (block 2).

>>> from symvram.ledger.structure import Structure
>>> [t.key for t in trainable_terms(Structure(method="full", master=True))]   # a real model (not nominal)
['grads', 'master', 'optimizer_states', 'optimizer_steps']
"""
from __future__ import annotations

import sympy as sp

from ..symbols import sym
from .architecture import E, L, V, built, expr, h, nh, nkv
from .functions import at_least, ceil_div
from .structure import Structure
from .terms import Phase, Place, Role, Term

P, P_train, P_quant, P_keep, P_lora, P_save = (sym(n) for n in ("P", "P_train", "P_quant", "P_keep", "P_lora", "P_save"))
P_tower, P_lora_tower = sym("tower_params"), sym("P_lora_tower")
b_w, b_g, b_m, b_o, n_o, b_a, b_32 = (sym(n) for n in (
    "bytes_weight", "bytes_grad", "bytes_master", "bytes_state", "states_per_param", "bytes_adapter", "bytes_fp32"))
q, B_q, c_abs, c_abs2, B_q2 = (sym(n) for n in ("quant_bits", "quant_block", "absmax_bits", "dq_absmax_bits", "dq_block"))
dh = sym("head_dim")
n_8, B_o, n_qmap, n_page = (sym(n) for n in ("bnb_min_8bit", "bnb_state_block", "bnb_qmap", "bnb_paged_min"))
BNB = "bitsandbytes optim/optimizer.py Optimizer2State.init_state"


def litgpt_zero_pad_width(s: Structure) -> sp.Expr:
    """The width of LitGPT's LoRAQKVLinear update where it is scattered into the fused qkv: the adapted parts of q
    (n_h·d_h), k and v (n_kv·d_h each) when some but not all three are adapted (zero_pad returns the update itself when
    all are, litgpt 0.5.13 lora.py:309-310), else 0.

    >>> litgpt_zero_pad_width(Structure(method="lora", model_code="litgpt", targets=("q_proj", "v_proj")))
    head_dim*heads + head_dim*kv_heads
    """
    widths = {"q_proj": nh * dh, "k_proj": nkv * dh, "v_proj": nkv * dh}
    on = [t for t in widths if t in s.targets]
    return sp.Add(*(widths[t] for t in on)) if 0 < len(on) < 3 else sp.Integer(0)


def compute_weight_bytes(s: Structure) -> sp.Symbol:
    """Bytes per element of a weight as the modules compute with it: FSDP2's MixedPrecisionPolicy all-gathers
    it in param_dtype (the activations' dtype, ``bytes_act``), otherwise it is used as stored (``bytes_weight``).

    >>> compute_weight_bytes(Structure()), compute_weight_bytes(Structure(zero=3, fsdp_mixed_precision=True))
    (bytes_weight, bytes_act)
    """
    return sym("bytes_act") if s.fsdp_mixed_precision else b_w


def compute_adapter_bytes(s: Structure) -> sp.Symbol:
    """The same for the LoRA adapters: cast with the base by the policy, else in their own dtype."""
    return sym("bytes_act") if s.fsdp_mixed_precision else b_a


def quant_constant_bits(double_quant: bool) -> sp.Expr:
    """Bits of quantization constants per quantized weight: one absmax per block of B_q weights;
    double quantization stores that absmax in 8 bits plus one fp32 constant per B_q2 absmax."""
    if double_quant:
        return c_abs2 / B_q + c_abs / (B_q * B_q2)
    return c_abs / B_q


def nf4_bytes(n: sp.Expr, double_quant: bool) -> tuple[sp.Expr, sp.Expr]:
    """(packed weight, quantization state) bytes of one n-element Linear4bit weight, as bitsandbytes 0.50
    ``quantize_4bit(blocksize=64)`` allocates them: two 4-bit codes per uint8; per block of 64 an absmax —
    with double quantization a uint8 one, plus per 256 of those an fp32 absmax, the 256-entry fp32 code
    (a copy per weight), an fp32 offset and the 16-entry NF4 code; without it an fp32 absmax and the NF4 code."""
    blocks = ceil_div(n, B_q)
    if double_quant:   # a uint8 absmax per block: c_abs2 / 8 bytes
        state = c_abs2 / 8 * blocks + b_32 * ceil_div(blocks, B_q2) + b_32 * n_qmap + b_32 + b_32 * 2**q
    else:
        state = b_32 * blocks + b_32 * 2**q
    return ceil_div(n * q, 8), state   # q = 4 bits per weight: two per byte


KEEP_FP32 = ("transformers modeling_utils.py:3854-3856 _get_dtype_plan (_keep_in_fp32_modules_strict: "
             "modeling_glm4_moe.py:460, modeling_deepseek_v3.py:551)")


def kept_fp32_params(s: Structure) -> sp.Expr:
    """Router weights a 16-bit from_pretrained keeps in fp32 (``extras.router_kept_fp32``: GLM-4.5's and
    DeepSeek-V3's gate.weight, E·h per MoE layer; their e_score_correction_bias buffers too, counted with the
    buffers) — none under DeepSpeed's 16-bit engine, which casts every parameter to its dtype (engine.py
    ``_configure_distributed_model``: ``_cast_module_mixed_precision`` from 0.19.2, ``module.bfloat16()`` before; its
    buffers keep their dtype) and, at stage 3, creates them in it (zero.Init).

    >>> kept_fp32_params(Structure(family="glm4_moe")), kept_fp32_params(Structure(family="glm4_moe", params_cast=True))
    (experts*hidden*(-dense_layers + layers), 0)
    """
    return 0 if s.params_cast else s.arch.over_layers(kind_kept_fp32_params)


def kind_kept_fp32_params(kind) -> sp.Expr:
    """One layer of ``kind``'s router weights kept in fp32 (0 in a dense layer, or where the router is not kept).

    >>> from symvram.ledger.architecture import family
    >>> kind_kept_fp32_params(family("glm4_moe")), kind_kept_fp32_params(family("glm4_moe").kind("dense"))
    (experts*hidden, 0)
    """
    return kind.linear(kind.extra("router")).params if kind.moe and kind.extra("router_kept_fp32") else 0


def kept_fp32_trainable(s: Structure) -> sp.Expr:
    """Trainable elements kept in fp32 whatever the trainable dtype: under full fine-tuning the fp32 routers
    themselves (``kept_fp32_params``); under LoRA the A and B on a targeted fp32 router's weight (PEFT's all-linear
    adds gate.weight as a target parameter, peft utils/transformers_weight_conversion.py:338-343, 369-373), which
    ParamWrapper moves to the parameter's dtype (peft tuners/lora/layer.py:2492, 2499-2519
    _move_adapter_to_device_of_base_layer): their gradients and torch's zeros_like optimizer states are fp32 too.

    >>> kept_fp32_trainable(Structure(family="glm4_moe", method="lora", targets=("q_proj", "gate")))
    rank*(-dense_layers + layers)*(experts + hidden)
    """
    if s.params_given:
        return 0
    if not s.lora:
        return kept_fp32_params(s)
    if s.params_cast:
        return 0
    r = sym("rank")
    return s.arch.over_layers(lambda k: k.lora_params_per_layer((k.extra("router"),), r)
                              if kind_kept_fp32_params(k) != 0 and k.extra("router") in s.targets else 0)


def base_terms(s: Structure) -> list[Term]:
    if s.method == "qlora" and not s.params_given:
        fam = s.arch
        # only the Linear4bit modules the model builds: a switched-off module has no weight and no quantization
        # state (its fixed part, the 256-entry code and offset, is 1 KiB per module)
        model_linears = tuple(m for m in fam.model_linears if built(m, s.options))
        packed = fam.over_layers(lambda k: sp.Add(*(nf4_bytes(m.params, s.double_quant)[0]
                                                   for m in k.active_linears(s.options))))
        states = fam.over_layers(lambda k: sp.Add(*(nf4_bytes(m.params, s.double_quant)[1]
                                                   for m in k.active_linears(s.options))))
        packed += sp.Add(*(nf4_bytes(m.params, s.double_quant)[0] for m in model_linears))   # outside the layers
        states += sp.Add(*(nf4_bytes(m.params, s.double_quant)[1] for m in model_linears))
        b_keep = b_32 if s.kbit_prepared else b_w
        terms = [
            Term("weights_nf4", Role.WEIGHT, packed, r"M_{\mathrm{NF4}}",
                 "each nn.Linear weight of the layers as packed 4-bit NF4 (two per byte; bitsandbytes Params4bit)",
                 "transformers replace_with_bnb_linear; bitsandbytes functional.quantize_4bit"),
            Term("quant_constants", Role.WEIGHT, states, r"M_{\mathrm{absmax}}",
                 "its quantization state per weight: one absmax per 64 weights"
                 + (" in uint8, double-quantized (an fp32 absmax per 256, a 256-entry fp32 code, an offset)"
                    if s.double_quant else " in fp32") + " and the 16-entry NF4 code",
                 "bitsandbytes functional.quantize_4bit(compress_statistics=True)"),
            Term("weights_16bit", Role.WEIGHT, P_keep * b_keep - (b_keep - b_w) * fam.over_layers(lambda k: k.bias_params_per_layer(s.options)),
                 r"M_{16}" if not s.kbit_prepared else r"M_{32}",
                 "embeddings, lm_head, norms, biases (and fused MoE experts, not nn.Linear) stay unquantized"
                 + (": prepare_model_for_kbit_training casts them to fp32 (a Linear4bit's bias goes back to the "
                    "compute dtype at its first forward)" if s.kbit_prepared else ""),
                 "peft prepare_model_for_kbit_training" if s.kbit_prepared else "bitsandbytes Linear4bit replaces nn.Linear only"),
        ]
    elif s.method == "qlora":
        terms = [
            Term("weights_nf4", Role.WEIGHT, P_quant * q / 8, r"M_{\mathrm{NF4}}",
                 "linear-layer weights stored as 4-bit NF4 (bitsandbytes)", "QLoRA paper, Dettmers et al. 2023"),
            Term("quant_constants", Role.WEIGHT, P_quant * quant_constant_bits(s.double_quant) / 8, r"M_{\mathrm{absmax}}",
                 "one absmax per block" + (", double-quantized to 8 bits" if s.double_quant else " in fp32"),
                 "QLoRA paper §3: 0.5 bit/param, 0.127 with double quantization"),
            Term("weights_16bit", Role.WEIGHT, P_keep * b_w, r"M_{16}",
                 "embeddings, lm_head, norms and biases stay in 16-bit", "bitsandbytes Linear4bit replaces nn.Linear only"),
        ]
    else:
        terms = [Term("weights", Role.WEIGHT, P * b_w, r"M_{w}", "every base weight, stored in the weight dtype")]
    if not s.params_given and (kept := kept_fp32_params(s)) != 0:
        b_kept = (b_32 if s.kbit_prepared else b_w) if s.method == "qlora" else b_w   # what the terms above count
        terms.append(Term("weights_fp32", Role.WEIGHT, (b_32 - b_kept) * kept, r"M_{w,32}",
                          "the routers' weights from_pretrained keeps in fp32 (beyond the weight dtype counted above)",
                          KEEP_FP32))
    if not s.params_given:  # an interview preset is P·bytes exactly; real models carry their buffers and counters
        fam = s.arch
        scale = b_w if fam.extra("embed_scale") else 0
        score_bias = fam.over_layers(lambda k: E * (b_32 if k.extra("router_kept_fp32") else b_w)
                                     if k.moe and k.extra("router_score_bias") else 0)
        rope = 0 if fam.extra("no_rope") else (   # Nemotron-H: no position embedding
            b_w * rope_width_sum(fam) if fam.extra("rope_widths") else fam.dim("rope_bases") * b_w * rotary_width(fam))
        if fam.extra("per_layer_embeddings"):   # Gemma 4: each layer's layer_scalar (1,), the per-layer table's scale
            scale += b_w * L + b_w * at_least(sym("ple_dim"), 1)
        if s.model_code == "litgpt":   # GPT's cos and sin buffers, rebuilt at the longest sample (fp32)
            # at the full context (max_seq_length = block_size) nothing is rebuilt: the cache built at init stays as
            # bf16-true's setup_module converted it, in the weights' dtype (model.py:59-60)
            b_rope = b_32 + (b_w - b_32) * at_least(sym("seq"), sym("rope_cache_len"))
            terms.append(Term("rope_cache", Role.BUFFER, 2 * b_rope * sym("seq") * rotary_width(fam),
                              r"M_{\mathrm{rope}}", "LitGPT's RoPE cache: cos and sin [max_seq_length, rope_n_elem] in "
                              "fp32, max_seq_length set to the longest training sample (at the full context the "
                              "cache built at init, in the weights' dtype)", "litgpt 0.5.13 model.py:43-62, "
                              "finetune/full.py:230"))
            if s.method == "lora" and (zero_pad := litgpt_zero_pad_width(s)) != 0:
                terms.append(Term("lora_index", Role.BUFFER, sym("bytes_index") * L * zero_pad, r"M_{\mathrm{LoRA,ind}}",
                                  "each LoRAQKVLinear's _lora_ind, the int64 positions of its adapted q, k, v parts, "
                                  "registered as a buffer at the first forward", "litgpt 0.5.13 lora.py:264-286"))
            return terms + (tower_terms(s) if s.tower is not None else [])
        if s.model_code == "torchtune":   # its own RoPE module, one shared by every layer, in place of transformers'
            terms.append(Term("rope_cache", Role.BUFFER, b_32 * dh / 2 + b_32 * sym("rope_cache_len") * dh,
                              r"M_{\mathrm{rope}}",
                              "torchtune's RoPE buffers: theta (d_head/2) and the cos/sin cache [max_seq_len, "
                              "d_head/2, 2], both fp32 whatever the model's dtype (one module shared by every layer)",
                              "torchtune 0.6.1 models/llama3_1/_position_embeddings.py:66-101 rope_init, "
                              "build_rope_cache"))
            return terms + (tower_terms(s) if s.tower is not None else [])
        # Falcon-H1: each layer's mup_vector (1, 1, in_proj's width), the SSM multipliers per channel
        # (modeling_falcon_h1.py:1039-1041: a buffer that is not saved with the weights)
        mup = fam.over_layers(lambda k: b_w * k.linear("in_proj").d_out) if fam.extra("mup_vector") else 0
        terms.append(Term("buffers", Role.BUFFER, rope + scale + score_bias + mup,
                          r"M_{\mathrm{buf}}",
                          ("no rotary buffers (no position embedding)" if rope == 0 else
                           "rotary inv_freq and original_inv_freq (d_head/2 each, in the weight dtype)")
                          + (" per rotary base" if fam.dim("rope_bases") != 1 else "")
                          + ("; the embedding's √h scale" if scale else "")
                          + ("; each layer's layer_scalar and the per-layer table's scale"
                             if fam.extra("per_layer_embeddings") else "")
                          + ("; each MoE layer's router score bias (E)" if score_bias != 0 else "")
                          + ("; each layer's mup_vector (in_proj's width)" if mup != 0 else ""),
                          "transformers LlamaRotaryEmbedding"))
    return terms + (tower_terms(s) if s.tower is not None else [])


def tower_terms(s: Structure) -> list[Term]:
    """A multimodal checkpoint's vision tower and projector, loaded beside the decoder (``ledger.towers``): frozen
    base weights that a text-only batch never runs. QLoRA packs its nn.Linear weights to NF4 like the decoder's
    (transformers' ``get_keys_to_not_convert`` keeps only the lm_head and tied weights); the rest stays 16-bit,
    or fp32 once prepare_model_for_kbit_training has cast it (its Linear4bit biases too: the tower never runs
    the forward that casts them back)."""
    t = s.tower
    why = f"{t.description}, loaded by {t.loader}: " + (
        "trained on the images (--train-vision)" if s.train_vision else
        "frozen; it runs on the images and keeps nothing" if s.images else "frozen; a text-only batch never runs it")
    if s.method == "qlora":
        packed = sp.Add(*(n * nf4_bytes(sp.Integer(e), s.double_quant)[0] for e, n in t.linear_weights))
        states = sp.Add(*(n * nf4_bytes(sp.Integer(e), s.double_quant)[1] for e, n in t.linear_weights))
        packed_elements = sum(e * n for e, n in t.linear_weights)
        b_keep = b_32 if s.kbit_prepared else b_w
        terms = [Term("weights_tower_nf4", Role.WEIGHT, packed + states, r"M_{\mathrm{tower,NF4}}",
                      f"the vision tower's nn.Linear weights as packed NF4 with their quantization states ({why})",
                      "transformers quantizers/base.py get_keys_to_not_convert; bitsandbytes functional.quantize_4bit"),
                 Term("weights_tower", Role.WEIGHT, (P_tower - packed_elements) * b_keep, r"M_{\mathrm{tower}}",
                      "the rest of the vision tower (convolution, position table, norms, biases, projector) unquantized"
                      + ", cast to fp32 by prepare_model_for_kbit_training" * s.kbit_prepared, t.source)]
    else:
        terms = [Term("weights_tower", Role.WEIGHT, P_tower * b_w, r"M_{\mathrm{tower}}",
                      f"every weight of the {why}", t.source)]
    return terms + [Term("buffers_tower", Role.BUFFER, sym("tower_float_buffers") * b_w + sym("tower_index_buffers")
                         * sym("bytes_index"), r"M_{\mathrm{buf,tower}}",
                         "the tower's buffers: floating ones (rotary inv_freq) in the weights' dtype, int64 position ids",
                         t.source)]


def rope_width_sum(fam) -> sp.Expr:
    """Σ over a family's layer types of the rotary width of their heads, for the types that have layers
    (``extras.rope_widths``: [layer count, width] pairs; Gemma 4's sliding layers rotate d_head, its full ones
    global_head_dim: proportional RoPE's inv_freq spans the whole head, modeling_gemma4.py:1092-1101)."""
    return sp.Add(*(at_least(expr(count), 1) * expr(width) for count, width in fam.extra("rope_widths")))


def rotary_width(fam) -> sp.Expr:
    """The rotated width of a head: d_head, or d_rot under partial RoPE (GLM-4.5: half)."""
    return sym("rotary_dim") if any(d[0] == "rotary_dim" for d in fam.dims) else dh


def adafactor_factored(s: Structure) -> sp.Expr:
    """Adafactor keeps a row and a column second-moment vector per matrix (no first moment)."""
    fam = s.arch
    if s.lora:
        heads = len(s.head_targets) * (2 * sym("rank") + V + h) + sp.Add(*(2 * sym("rank") + m.d_in + m.d_out
                                                                          for m in model_lora_linears(s)))
        return fam.over_layers(lambda k: sp.Add(*(2 * sym("rank") + k.linear(t).d_in + k.linear(t).d_out
                                                  for t in s.targets if t in k.linear_map))) + heads
    head = (h + 1) if s.score_head else 0 if s.tied else V + h   # a score head's [1, h] matrix: a row and a column
    return V + h + head + fam.over_layers(lambda k: k.factored_sizes_per_layer(s.options)) + h


def outer_adapter_sizes(s: Structure) -> list[sp.Expr]:
    """Elements of each LoRA matrix outside the decoder layers: on the model's head modules lm_head's A (r × h) and
    B (V × r) (peft tuners/lora/layer.py Linear.update_layer), the embedding's lora_embedding_A (r × V) and
    lora_embedding_B (h × r) (Embedding.update_layer, layer.py:1241-1244) — r·(V + h) either way —, and on a targeted
    nn.Linear outside the layers (``model_lora_linears``) A (r × d_in) and B (d_out × r).

    >>> outer_adapter_sizes(Structure(method="lora", head_targets=("embed_tokens", "lm_head")))
    [hidden*rank, rank*vocab, hidden*rank, rank*vocab]
    """
    r = sym("rank")
    return [size for _ in s.head_targets for size in (r * h, r * V)] + [
        size for m in model_lora_linears(s) for size in (r * m.d_in, r * m.d_out)]


def model_lora_linears(s: Structure) -> tuple:
    """The LoRA targets that are nn.Linear modules outside the decoder layers (the family's ``model_linears``: Gemma
    4's per_layer_model_projection, which PEFT's all-linear wraps, peft 0.21.2 tuners_utils.py:2430-2490), once each.

    >>> [m.name for m in model_lora_linears(Structure(family="gemma4_text", method="lora",
    ...                                                targets=("q_proj", "per_layer_model_projection")))]
    ['per_layer_model_projection']
    """
    return tuple(m for m in s.arch.model_linears if s.lora and m.name in s.targets)


def layer_lora_params(s: Structure) -> sp.Expr:
    """LoRA elements of one decoder layer: P_LoRA less the head modules' adapters, over the L layers.

    >>> layer_lora_params(Structure(method="lora", head_targets=("lm_head",)))
    (P_lora - hidden*rank - rank*vocab)/layers
    """
    return (P_lora - sp.Add(*outer_adapter_sizes(s))) / L


def trainable_tensor_sizes(s: Structure) -> list[tuple[sp.Expr, sp.Expr, bool]]:
    """Every trainable tensor as (elements, how many such tensors, is an nn.Embedding weight)."""
    fam, r = s.arch, sym("rank")
    if s.lora:
        out = []
        for n, kind in fam.layer_kinds:
            for m in (kind.linear(t) for t in s.targets if t in kind.linear_map):
                k = m.count * m.rank_factor
                out += [(k * r * m.d_in, n, False), (k * r * m.d_out, n, False)]
        out += [(n, sp.Integer(1), False) for n in outer_adapter_sizes(s)]   # lora_embedding_A is no nn.Embedding weight
        return out + [(saved_module_params(name), sp.Integer(1), name == "embed_tokens") for name in s.modules_to_save]
    out = [(V * h, sp.Integer(1), True)] + ([(h, sp.Integer(1), False)] if s.score_head else
                                            [] if s.tied else [(V * h, sp.Integer(1), False)])
    for n, kind in fam.layer_kinds:
        out += [(m.params, n, False) for m in kind.linears + kind.moe_weights]
        out += [(m.d_out, n, False) for m in kind.linears if m.bias in s.options]
        out += [(x.width, n, False) for x in kind.weighted_norms(s.options)]
    return out + [(h, sp.Integer(1), False)]


def bnb_state_bytes(s: Structure, n: sp.Expr, embedding: bool) -> tuple[sp.Expr, sp.Expr]:
    """(allocator-resident, paged) state bytes of one tensor of n elements under a bitsandbytes AdamW
    (optim/optimizer.py:492 Optimizer2State.init_state): 8-bit, n ≥ min_8bit_size: two uint8 states (n each) and
    two fp32 absmax per block of 256; otherwise — 32-bit, smaller tensors, an embedding the HF Trainer overrides
    to 32 bits — two fp32 states. Paged optimizers put the two state buffers of tensors with ≥ 100k elements in
    CUDA unified memory (:383 get_state_buffer; the absmax stay ordinary device tensors, :528)."""
    paged = at_least(n, n_page) if s.paged else 0
    states32 = n_o * b_32 * n
    if not s.bnb_8bit or (embedding and s.embed_states_fp32):
        return states32 * (1 - paged), states32 * paged
    big = at_least(n, n_8)
    return (big * (n_o * b_o * n * (1 - paged) + n_o * b_32 * ceil_div(n, B_o)) + (1 - big) * states32,
            big * n_o * b_o * n * paged)


def bnb_terms(s: Structure) -> list[Term]:
    resident = paged = sp.Integer(0)
    for n, count, embedding in trainable_tensor_sizes(s):
        inside, outside = bnb_state_bytes(s, n, embedding)
        resident += count * inside
        paged += count * outside
    if s.bnb_8bit:
        qmap = at_least(largest_trainable_matrix(s), n_8) * n_o * b_32 * n_qmap
        why = ("bitsandbytes 8-bit AdamW: m and v in uint8 with an fp32 absmax per 256 elements; tensors under 4096 "
               "elements keep fp32 states; two shared fp32 quantization maps")
        if s.embed_states_fp32:
            why += "; the HF Trainer overrides the embedding to 32-bit states"
        name = r"M_{\mathrm{opt},8}"
    else:  # 32-bit: no quantization maps (fill_qmap runs for uint8 states only, :512)
        qmap, why, name = 0, "bitsandbytes 32-bit AdamW: m and v in fp32 per trainable weight", r"M_{\mathrm{opt}}"
    if s.paged:
        why += "; the states of tensors with ≥ 100k elements are paged (listed apart)"
    terms = [Term("optimizer_states", Role.OPTIMIZER_STATE, resident + qmap, name, why, BNB)]
    if s.paged:
        terms.append(Term("paged_states", Role.OPTIMIZER_STATE, paged, r"M_{\mathrm{paged}}",
                          "paged optimizer states in CUDA unified memory (cudaMallocManaged): on the GPU when paged in, "
                          "but outside torch's allocator — torch.cuda.max_memory_allocated() does not count them "
                          "(modelled, not measured: bitsandbytes pages only CUDA tensors)",
                          "bitsandbytes 0.50.2 functional.py:91 get_paged, optim/optimizer.py:374 get_state_buffer",
                          place=Place.PAGED))
    return terms


def saved_module_params(name: str) -> sp.Expr:
    """Elements of a modules_to_save copy: the embedding's or lm_head's V·h, a reward model's score head's h (PEFT's
    SEQ_CLS task adds it, peft 0.21.2 peft_model.py:1830-1836)."""
    return h if name == "score" else V * h


def saved_copy_bytes(s: Structure) -> sp.Expr:
    """Bytes per element of a modules_to_save copy: a deep copy keeps the module's dtype (fp32 once
    prepare_model_for_kbit_training has cast the embeddings and lm_head)."""
    return b_32 if s.kbit_prepared else b_w


def per_trainable(s: Structure, adapter_bytes: sp.Expr, copy_bytes: sp.Expr) -> sp.Expr:
    """Bytes of one value per trainable weight (a gradient, a state): LoRA's at ``adapter_bytes``, the
    modules_to_save copies' at ``copy_bytes``; full fine-tuning's all at ``adapter_bytes``.

    >>> from symvram.ledger.structure import Structure
    >>> per_trainable(Structure(method="lora", modules_to_save=("lm_head",)), b_g, b_w)
    P_lora*bytes_grad + P_save*bytes_weight
    """
    if not s.modules_to_save:
        return P_train * adapter_bytes
    return P_lora * adapter_bytes + P_save * copy_bytes


def trainable_terms(s: Structure) -> list[Term]:
    terms = []
    if s.lora:
        terms.append(Term("adapters", Role.ADAPTER, P_lora * b_a, r"M_{\mathrm{LoRA}}",
                          "LoRA A and B matrices (PEFT keeps them in fp32 unless told otherwise)"))
    if s.tower_lora:
        terms.append(Term("adapters_tower", Role.ADAPTER, P_lora_tower * b_a, r"M_{\mathrm{LoRA,tower}}",
                          "LoRA A and B on the vision tower's linears the targets match (PEFT matches module names; "
                          "all-linear takes every one): " + ("trained on the images (--train-vision): their gradients "
                          "and states are counted with the decoder's" if s.train_vision else "on a text-only batch or "
                          "a frozen tower they get no gradient and the optimizer no state for them"), "peft tuners/tuners_utils.py "
                          "_maybe_include_all_linear_layers; torch/optim/adamw.py _init_group skips grad None"))
    if s.modules_to_save:
        terms.append(Term("saved_modules", Role.TRAINABLE_COPY, P_save * saved_copy_bytes(s), r"M_{\mathrm{save}}",
                          f"modules_to_save ({', '.join(s.modules_to_save)}): a trainable deep copy of each, in its "
                          "dtype, beside the frozen original (tied embeddings: each copy is its own V·h matrix)",
                          "peft utils/other.py ModulesToSaveWrapper.update"))
    if s.optimizer_in_backward:
        terms.append(Term("grads", Role.GRADIENT, b_g * largest_trainable_matrix(s), r"M_{\mathrm{grad},1}",
                          "optimizer in backward: one parameter's gradient at a time, stepped and freed by its "
                          "post-accumulate-grad hook (the largest: " + ("lm_head's, then the embedding's)"
                                                                        if not s.lora else "an adapter matrix)"),
                          IN_BACKWARD, lifetime=in_backward_phases(s)))
    else:
        terms.append(Term("grads", Role.GRADIENT, per_trainable(s, b_g, saved_copy_bytes(s)), r"M_{\mathrm{grad}}",
                          "one gradient per trainable weight, in the trainable weight's dtype"))
    kept = kept_fp32_trainable(s)   # the fp32 routers train under full fine-tuning, their LoRA pairs under LoRA
    whose = "the LoRA pairs on the fp32 routers'" if s.lora else "the fp32 routers'"
    if kept != 0 and s.lora:
        terms.append(Term("adapters_fp32", Role.ADAPTER, (b_32 - b_a) * kept, r"M_{\mathrm{LoRA},32}",
                          f"{whose} weights are fp32, as the weight they adapt (beyond the adapter dtype counted above)",
                          "peft tuners/lora/layer.py:2499-2519 ParamWrapper._move_adapter_to_device_of_base_layer"))
    if kept != 0 and not s.optimizer_in_backward:
        terms.append(Term("grads_fp32", Role.GRADIENT, (b_32 - b_g) * kept, r"M_{\mathrm{grad},32}",
                          f"{whose} gradients are fp32 (beyond the gradient dtype counted above)", KEEP_FP32))
    if s.master:
        terms.append(Term("master", Role.MASTER, P_train * b_m, r"M_{\mathrm{master}}",
                          "fp32 master copy the optimizer updates; needed for fp16, optional for bf16",
                          "ZeRO paper (Rajbhandari et al. 2020) mixed-precision recipe"))
    if s.bnb:
        return terms + bnb_terms(s)  # the step count is a Python int: no step tensors
    if s.optimizer == "adafactor":
        expr, why = adafactor_factored(s) * b_o, "Adafactor's factored second moment: a row and a column vector per matrix"
    else:
        expr = n_o * per_trainable(s, b_o, saved_state_bytes(s))
        why = f"{s.optimizer} keeps n_o states per trainable weight (AdamW: m and v)"
    terms.append(Term("optimizer_states", Role.OPTIMIZER_STATE, expr, r"M_{\mathrm{opt}}", why))
    if kept != 0 and s.optimizer != "adafactor":   # torch's states are zeros_like(p): fp32 for the fp32 routers
        terms.append(Term("optimizer_states_fp32", Role.OPTIMIZER_STATE, n_o * (b_32 - b_o) * kept,
                          r"M_{\mathrm{opt},32}", f"{whose} optimizer states are fp32 (beyond the state dtype "
                          "counted above)", KEEP_FP32))
    if s.optimizer == "adamw" and not s.params_given:
        terms.append(Term("optimizer_steps", Role.STEP_COUNT, b_32 * trainable_tensors(s), r"M_{\mathrm{steps}}",
                          "torch AdamW keeps its step count as a 0-d fp32 tensor per parameter tensor",
                          "torch/optim/adamw.py _init_group"))
    return terms


def saved_state_bytes(s: Structure) -> sp.Expr:
    """Bytes per optimizer state of a modules_to_save copy: the copy's own dtype where the optimizer keeps
    states like its parameter (torch's zeros_like), else the state dtype."""
    return saved_copy_bytes(s) if s.param_states else b_o


def trainable_tensors(s: Structure) -> sp.Expr:
    """How many trainable tensors (not elements): LoRA has an A and a B per target and layer (and one per
    modules_to_save copy)."""
    fam = s.arch
    if s.lora:   # A, B (and DoRA's m) per target; --train-vision: per tower linear adapted (all-linear: each)
        return (3 if s.dora else 2) * fam.over_layers(lambda k: sum(t in k.linear_map for t in s.targets)) \
            + len(outer_adapter_sizes(s)) + len(s.modules_to_save) \
            + (2 * sum(n for *_, n, _ in s.tower.linears) if s.train_vision else 0)
    return ((1 if s.tied and not s.score_head else 2) + fam.over_layers(lambda k: k.tensors_per_layer(s.options)) + 1
            + fam.model_weight_tensors(s.options) + (sym("tower_tensors") if s.train_vision else 0))


def largest_trainable_matrix(s: Structure) -> sp.Expr:
    """Elements of the largest trainable tensor (a for-loop optimizer's temporaries are that size)."""
    kinds = [k for _, k in s.arch.layer_kinds]
    if s.lora:
        r = sym("rank")
        mats = [k.linear(t) for k in kinds for t in s.targets if t in k.linear_map]
        tower = {r * d for _, i, o, *_ in s.tower.linears for d in (i, o)} if s.train_vision else set()
        return sp.Max(*{r * m.d_out for m in mats} | {r * m.d_in for m in mats} | set(outer_adapter_sizes(s)) | tower,
                      evaluate=False)  # SymPy's pairwise comparison of symbolic sizes is slow and decides nothing here
    tower = {sp.Integer(i * o) for _, i, o, *_ in s.tower.linears} if s.train_vision else set()
    return sp.Max(V * h, *{m.params for k in kinds for m in k.linears + k.moe_weights} | tower, evaluate=False)


IN_BACKWARD = ("torch optimizer-in-backward recipe (Tensor.register_post_accumulate_grad_hook: one optimizer per "
               "parameter, step and zero_grad in the hook); torchtune optimizer_in_bwd")


def in_backward_phases(s: Structure) -> tuple[Phase, ...]:
    """Where the largest parameter is stepped under optimizer in backward: full fine-tuning's lm_head right after the
    loss backward, its embedding at the very end (V·h each, larger than any layer matrix once V ≥ d_ff); LoRA's
    adapters inside their layer's backward."""
    if s.lora:
        return (Phase.LAST_LAYER_BACKWARD, Phase.FIRST_LAYER_BACKWARD)
    return (Phase.HEAD_BACKWARD, Phase.BACKWARD_END)


def stepping_impl(s: Structure) -> str:
    """The AdamW implementation that steps: offloaded, the states and the master are CPU tensors, and torch's
    default picks foreach only when every parameter is on a foreach device such as CUDA (torch 2.13
    torch/optim/optimizer.py:178-185 ``_default_to_fused_or_foreach``): the for-loop, one parameter's two
    temporaries at a time, on the host. (DeepSpeed's CPU Adam has no torch step: sharding.deepspeed_terms.)

    >>> stepping_impl(Structure(zero=3, offload="optimizer")), stepping_impl(Structure(zero=3))
    ('forloop', 'foreach')
    """
    return "forloop" if s.offload != "none" and s.optimizer_impl == "foreach" else s.optimizer_impl


def optimizer_temp_terms(s: Structure) -> list[Term]:
    """Temporaries inside optimizer.step(): torch's foreach AdamW materialises sqrt(v) for every
    parameter at once; the for-loop version one parameter at a time (two buffers); fused none. Optimizer in
    backward steps one parameter at a time: the largest one's, where it is stepped."""
    if s.optimizer != "adamw" or s.optimizer_impl == "fused":
        return []
    if s.optimizer_in_backward:
        per = 1 if s.optimizer_impl == "foreach" else 2
        return [Term("optimizer_temp", Role.OPTIMIZER_STEP_TEMPORARY, per * b_o * largest_trainable_matrix(s),
                     r"M_{\mathrm{step},1}", f"{s.optimizer_impl} AdamW stepping one parameter in its hook: "
                     + ("sqrt(v)" if per == 1 else "sqrt(v) and its scaled copy") + ", the largest parameter's",
                     IN_BACKWARD, lifetime=in_backward_phases(s))]
    if stepping_impl(s) == "foreach":
        return [Term("optimizer_temp", Role.OPTIMIZER_STEP_TEMPORARY, per_trainable(s, b_o, saved_state_bytes(s)), r"M_{\mathrm{step}}",
                     "foreach AdamW: _foreach_sqrt(exp_avg_sq) allocates one state-sized buffer for all parameters",
                     "torch/optim/adamw.py _multi_tensor_adamw")]
    return [Term("optimizer_temp", Role.OPTIMIZER_STEP_TEMPORARY, 2 * largest_trainable_matrix(s) * b_o, r"M_{\mathrm{step}}",
                 "for-loop AdamW: sqrt(v) and its scaled copy, for the largest parameter",
                 "torch/optim/adamw.py _single_tensor_adamw")]


def dora_magnitude(fam, targets: tuple[str, ...]) -> sp.Expr:
    """DoRA's magnitude vectors of one layer: d_out per target it has."""
    return sp.Add(*(fam.linear(t).d_out for t in targets if t in fam.linear_map))


def kind_adapter_params(kind, targets: tuple[str, ...], dora: bool) -> sp.Expr:
    """The adapter elements of one layer of ``kind`` (a Family or one of its layer kinds): LoRA's r (d_in + d_out)
    per target it has (``lora_params_per_layer``) and, with DoRA, its magnitude vectors.

    >>> from symvram.ledger.architecture import family
    >>> kind_adapter_params(family("llama"), ("v_proj",), dora=True)
    head_dim*kv_heads + rank*(head_dim*kv_heads + hidden)
    """
    return kind.lora_params_per_layer(targets, sym("rank")) + (dora_magnitude(kind, targets) if dora else 0)


def definitions(s: Structure) -> list[tuple[sp.Symbol, sp.Expr]]:
    """Derived quantities, in dependency order."""
    fam = s.arch
    defs: list[tuple[sp.Symbol, sp.Expr]] = []
    if not s.params_given:
        defs.append((P, fam.total_params(s.tied, s.options, s.score_head)))
    if s.method == "qlora":
        defs.append((P_keep, fam.kept_16bit_params(s.tied, s.options, s.score_head)))
        defs.append((P_quant, P - P_keep))
    if s.lora:
        magnitude = fam.over_layers(lambda k: dora_magnitude(k, s.targets)) if s.dora else 0
        defs.append((P_lora, fam.lora_params(s.targets, sym("rank")) + magnitude + sp.Add(*outer_adapter_sizes(s))))
        if s.modules_to_save:
            defs.append((P_save, sp.Add(*(saved_module_params(name) for name in s.modules_to_save))))
        if s.tower_lora:
            defs.append((P_lora_tower, sym("rank") * s.tower_lora_width))
        # --train-vision: the adapters PEFT put on the tower's linears train too
        defs.append((P_train, P_lora + (P_save if s.modules_to_save else 0)
                     + (P_lora_tower if s.train_vision and s.tower_lora else 0)))
    else:   # --train-vision: the tower's weights train beside the decoder's
        defs.append((P_train, P + P_tower if s.train_vision else P))
    return defs


__all__ = ["base_terms", "trainable_terms", "optimizer_temp_terms", "definitions"]
