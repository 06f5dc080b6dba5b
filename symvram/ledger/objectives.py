"""Training objectives (``data/objectives.toml``): what one optimizer step runs besides the model's forward and
backward. SFT is the ledger as it is; a preference objective reshapes it.

DPO (TRL 1.16 ``DPOTrainer``): the chosen and rejected sequences of ``batch`` pairs run as one forward of 2·batch
rows, so every activation-side term holds twice the rows; TRL's fused LM head scores only the completion's
positions (``labels[:, 1:] != -100``: s − max(p, 1) per row); then the reference runs the same rows under
``no_grad``. Its terms (the reference's weights, the policy's per-token outputs, the reference forward) are rows of
the data table, each with its role, so the moments follow from their lifetimes.

>>> from symvram.ledger.structure import Structure
>>> terms = {t.key: t for t in preference_terms(Structure(method="full", objective="dpo", reference="copy",
...                                                       loss_impl="trl"), [])}
>>> sorted(terms)
['dpo_labels', 'dpo_outputs', 'ref_forward', 'ref_weights']
>>> terms["ref_forward"].role.value, [p.name for p in terms["ref_forward"].info.lifetime]
('reference temporary', ['REFERENCE_FORWARD'])
"""
from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..symbols import sym
from .activations import (TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK, _trl_dtypes, norm_saved, residual_bytes, routed_block_live,
                          trl_loss_terms, trl_saved_term)
from .architecture import E, V, L, dh, f, h, nh, nkv
from .positions import objectives, row_positions, rows, scored
from .structure import Structure
from .terms import Phase, Role, Term, span
from .weights import b_w, compute_weight_bytes

b, seq, p, k_g = sym("batch"), sym("seq"), sym("prompt"), sym("steps_per_generation")
b_c, b_32, b_id, b_mask, b_i32 = (sym(n) for n in ("bytes_act", "bytes_fp32", "bytes_index", "bytes_mask", "bytes_int32"))


def _output_bytes(s_: Structure) -> sp.Expr:
    """Bytes per position of the outputs the trainer asks the policy's fused head for: fp32, the top-1 flag bool."""
    return sp.Add(*(b_mask if name == "is_top1" else b_32 for name in objectives()[s_.objective]["outputs"]))


def _head_outputs(s_: Structure) -> tuple[tuple[int, sp.Expr], ...]:
    """What TRL's fused head computes per scored position after its fold, while the tile buffer is still alive
    (kernels/chunked_logprob.py:378-383), tensor by tensor: log_z and the log-probabilities, and for the policy's
    outputs (a PEFT reference is the policy) the entropy and mean logit (fp32) and the top-1 test's three bool
    tensors."""
    extra = [n for n in objectives()[s_.objective]["outputs"] if n != "log_probs"] if s_.reference == "adapters" else []
    n = scored(s_)
    return ((2, b_32 * n), *((3, b_mask * n) if name == "is_top1" else (1, b_32 * n) for name in extra))


def _reference_head(s_: Structure) -> tuple[tuple[int, sp.Expr], ...]:
    """The reference's fused LM head as it returns, tensor by tensor: its final hidden states, the tile buffer,
    seven fp32 statistics per scored position and what it computes from them, the scored hidden states' copy,
    labels and mask."""
    R, n = rows(s_.objective) * b * seq, scored(s_)
    hidden, tile = _trl_dtypes(s_)
    return ((1, residual_bytes(s_) * R * h), (1, tile * sp.Min(n, TRL_TOKEN_CHUNK, evaluate=False) * TRL_VOCAB_CHUNK),
            (7, b_32 * n), *_head_outputs(s_), (1, hidden * n * h), (1, b_id * n), (1, b_mask * row_positions(s_)))


def _reference_forward(s_: Structure) -> sp.Expr:
    """The reference forward's working set beyond what the policy holds: the larger of one decoder layer's MLP
    at its product (SiLU output, up output and their product, d_ff wide, beside the normed input, the residual
    and the RoPE tables) and its fused LM head as it returns (``_reference_head``). A mixture-of-experts layer's
    block is its routed experts' (``_moe_reference``)."""
    R = rows(s_.objective) * b * seq
    block = _moe_reference(s_, R) if s_.arch.moe else 3 * b_c * R * f
    # beside the block: the layer's input and normed input (a MoE block's: also the residual after attention and the
    # model's inputs_embeds, alive in the decoder loop, modeling_mixtral.py MixtralModel.forward) and the RoPE tables
    mlp = block + (4 if s_.arch.moe else 2) * residual_bytes(s_) * R * h + 2 * b_c * seq * dh
    head = sp.Add(*(k * size for k, size in _reference_head(s_)))
    return _adapter_casts(s_) + sp.Max(mlp, head, evaluate=False)


def _reference_tensors(s_: Structure) -> tuple[tuple[int, sp.Expr], ...]:
    """The tensors of the reference forward's term (``Term.tensors``): the adapter casts, each one tensor per
    layer, and its fused head's (``_reference_head``); the layers' working sets before the head are the
    schedule's no-grad layer loop (ledger.schedule), which the Max's MLP side stands for in the moment."""
    return (*_adapter_cast_tensors(s_), *_reference_head(s_))


def _moe_reference(s_: Structure, R: sp.Expr) -> sp.Expr:
    """One routed-experts block under no_grad on R tokens (``activations.routed_block_live``): what it holds
    through the block, then the larger of the gated product being made and the un-permuting gather.

    >>> from symvram.ledger.structure import Structure
    >>> e = _moe_reference(Structure(method="lora", family="mixtral", objective="dpo"), sym("batch") * sym("seq"))
    >>> e.subs({sym("batch"): 1, sym("seq"): 1024, sym("experts"): 8, sym("experts_per_token"): 2, sym("hidden"): 4096,
    ...         sym("moe_intermediate"): 14336, sym("bytes_act"): 2, sym("bytes_fp32"): 4, sym("bytes_index"): 8,
    ...         sym("bytes_int32"): 4})   # Mixtral-8x7B, 1024 tokens: the gated product binds
    251748416
    """
    through, gated, unpermute = routed_block_live(s_, R)
    return through + sp.Max(gated, unpermute, evaluate=False)


def _aux_loss(s_: Structure) -> bool:
    """Whether the MoE load-balancing loss is computed: a MoE config (it has ``output_router_logits``, whatever
    its value: TRL's trainers pass output_router_logits=True themselves) whose router_aux_loss_coef is not 0 (trl
    1.16 dpo_trainer.py:895-905, kto_trainer.py:906-916, sft_trainer.py:1195-1211: the trainer's coefficient, else
    the config's). The family's ``router_aux_loss_coef`` option says it (``Scenario._options`` decides it from the
    trainer: SFT outside TRL only when the config asks for router logits)."""
    return s_.arch.moe and "router_aux_loss_coef" in s_.options


def _router_aux(s_: Structure) -> sp.Expr:
    """What the policy's MoE load-balancing loss keeps for its backward (TRL's fused forward calls Mixtral's
    load_balancing_loss_func, trainer/utils.py:1664-1685, when the trainer asks for router logits,
    dpo_trainer.py:1294-1295, sft_trainer.py:1568-1569): each MoE layer's softmax of its [R, E] router logits
    (softmax saves its output: fp32 under CUDA autocast, the logits' dtype under the CPU's) and the attention mask
    cast to fp32, which each layer's masked product keeps (modeling_mixtral.py:517-537 load_balancing_loss_func;
    a padding-free row has no mask: its histc branch, :524-531, keeps nothing more). Their backward runs first and
    leaves each layer's router-logit gradient ([R, E], the logits' dtype) waiting for that layer's backward
    (``router_aux_grads``; traced: all of them alive at the first layer's backward)."""
    R = rows(s_.objective) * b * seq
    probs = b_32 if s_.autocast and s_.device == "cuda" else b_c
    return L * probs * R * E + (0 if s_.packed else b_32 * R)


def _adapter_casts(s_: Structure) -> sp.Expr:
    """Under checkpointing, autocast's cache of every adapter cast to the compute dtype, alive for the whole
    autocast region (the policy's forward and its fused head; DPO's and KTO's reference forwards too); without
    checkpointing they are saved activations already (``act_adapter_casts``)."""
    if not _adapter_cast_tensors(s_):
        return sp.Integer(0)
    return b_c * L * sym("rank") * sp.Add(*(s_.arch.target_map[t].d_in + s_.arch.target_map[t].d_out
                                            for t in s_.targets if s_.arch.target_map[t] in s_.arch.linears))


def _adapter_cast_tensors(s_: Structure) -> tuple[tuple[int, sp.Expr], ...]:
    """``_adapter_casts`` tensor by tensor: lora_A's and lora_B's casts of each target, one each per layer."""
    if not (s_.lora and s_.autocast and s_.adapter_upcast and s_.grad_checkpointing):
        return ()
    return tuple((1, b_c * L * sym("rank") * d) for t in s_.targets if s_.arch.target_map[t] in s_.arch.linears
                 for d in (s_.arch.target_map[t].d_in, s_.arch.target_map[t].d_out))


def _generation_rows() -> sp.Expr:
    """GRPO's generation batch on one GPU: batch × steps_per_generation completions (grpo_config.py:1099-1116)."""
    return b * k_g


def _kv_per_position() -> sp.Expr:
    """One row's keys and values of one position in every layer, in the weights' dtype: transformers'
    ``DynamicCache`` (cache_utils.py:136-137); generate runs outside autocast (grpo_trainer.py:1861-1875)."""
    return 2 * L * nkv * dh * b_w


def _generation_batch(s_: Structure) -> sp.Expr:
    """The buffered generation batch: prompt and completion ids and masks (int64), the advantages and
    ``num_items_in_batch``; the old policy's and the reference's per-token log-probs (fp32) when computed."""
    n, completion = _generation_rows(), seq - p
    logps = (1 if s_.old_logps else 0) + (1 if s_.reference != "none" else 0)
    return 2 * b_id * n * seq + b_32 * n + b_id + logps * b_32 * n * completion


def _prefill_forward(s_: Structure) -> sp.Expr:
    """generate's first forward over the n·p prompt tokens (no grad, the weights' dtype) at the last layer's up
    projection: the MLP's activation and the up projection's base result (d_ff wide); a LoRA up projection with
    fp32 adapters adds lora_B's fp32 output and its scaled copy and the input cast to fp32 (peft 0.21.2
    tuners/lora/layer.py Linear.forward: the result is cast back only after the sum); beside them the embedding
    output, the layer's input, its residual after attention and the normed input, and the RoPE tables."""
    R = _generation_rows() * p
    mlp = 2 * b_w * R * f
    up = s_.arch.linear_map.get("up_proj")
    if s_.lora and up is not None and "up_proj" in s_.targets and s_.adapter_upcast:
        mlp += 2 * b_32 * R * f + b_32 * R * h + b_32 * R * sym("rank")
    else:
        mlp += b_w * R * f   # the activation times the up projection
    return mlp + 4 * b_w * R * h + 2 * b_w * R * dh + b_id * R   # + generate's copy of the prompt ids


def _decode_step(s_: Structure) -> sp.Expr:
    """The last decoding step beside the full cache, at the larger of its two instants (transformers 5.24
    generation/utils.py ``_sample``; cache_utils.py:136-137): the last layer's value concatenation — its values
    one position shorter, the previous step's fp32 next-token logits and softmax ([n, V] each), one token's hidden
    states, queries and keys, the sequences and attention mask (int64, s - 1 wide) — or the step's end — the
    logits ([n, 1, V] in the weights' dtype) and their fp32 copy beside the previous step's copy and softmax, the
    sequences before and after the new token (int64, s - 1 and s wide). Both hold three int64 [n] vectors (the
    unfinished flags and their arithmetic)."""
    n = _generation_rows()
    attention = (n * nkv * dh * (seq - 2) * b_w + 2 * b_32 * n * V + 3 * b_w * n * h + b_w * n * (nh + nkv) * dh
                 + 2 * b_id * n * (seq - 1))
    end = n * V * (b_w + 3 * b_32) + b_id * n * (2 * seq - 1)
    return sp.Max(attention, end, evaluate=False) + 3 * b_id * n


EXPRESSIONS = {
    "ref_weights": lambda s_, base: sp.Add(*(t.expr for t in base)),
    "outputs": lambda s_, base: _output_bytes(s_) * row_positions(s_),
    "labels": lambda s_, base: b_id * rows(s_.objective) * b * seq,
    "kl_logps": lambda s_, base: 2 * b_32 * b,
    "ref_forward": lambda s_, base: _reference_forward(s_),
    "router_aux": lambda s_, base: _router_aux(s_) if _aux_loss(s_) else None,
    "router_aux_grads": lambda s_, base: b_c * L * rows(s_.objective) * b * seq * E if _aux_loss(s_) else None,
    # GRPO (trl 1.16 GRPOTrainer, transformers' generation)
    "adapter_casts": lambda s_, base: _adapter_casts(s_) or None,   # None: no such tensors in this run
    "head_input": lambda s_, base: residual_bytes(s_) * b * seq * h,
    "head_outputs": lambda s_, base: _output_bytes(s_) * scored(s_),
    "attention_mask": lambda s_, base: b_id * b * seq,
    "generation_batch": lambda s_, base: _generation_batch(s_),
    "kv_cache": lambda s_, base: _generation_rows() * p * _kv_per_position(),
    "kv_cache_completion": lambda s_, base: _generation_rows() * (seq - p - 1) * _kv_per_position(),
    "generation_inputs": lambda s_, base: 3 * b_id * _generation_rows() * p,
    "prefill_forward": lambda s_, base: _prefill_forward(s_),
    "decode_step": lambda s_, base: _decode_step(s_),
}
# the terms whose expression's monomials are not their tensors (Term.tensors)
TENSORS = {"ref_forward": _reference_tensors, "adapter_casts": _adapter_cast_tensors}
# made once the policy's head returns, freed when the DPO loss is computed (before its backward)
LIFETIMES = {"outputs": (Phase.REFERENCE_FORWARD,), "labels": (Phase.LOSS, Phase.REFERENCE_FORWARD),
             "kl_logps": (Phase.REFERENCE_FORWARD,)}


def preference_terms(s_: Structure, base: list[Term]) -> list[Term]:
    """The objective's own terms (``base``: the policy's parameter-side terms, which a reference copy repeats)."""
    entry = objectives()[s_.objective]
    out = []
    for key, row in entry.get("terms", {}).items():
        if s_.reference not in row["reference"]:
            continue
        name = key if key.startswith("ref_") else f"{s_.objective}_{key}"   # dpo_outputs, kto_labels …
        lifetime = span(*(Phase[name] for name in row["lifetime"])) if "lifetime" in row else LIFETIMES.get(key)
        expr = EXPRESSIONS[key](s_, [t for t in base if t.role in (Role.WEIGHT, Role.BUFFER)])
        if expr is None:   # a term of settings this run does not have
            continue
        out.append(Term(name, Role(row["role"]), expr, row["label"], row["why"], row["source"], lifetime=lifetime,
                        tensors=TENSORS[key](s_) if key in TENSORS else ()))
    return out


# the roles of a vocabulary head's loss: a sequence-classification model runs the score head's instead
HEAD_LOSS_ROLES = (Role.LOSS_ACTIVATION, Role.LOSS_TEMPORARY, Role.LOSS_BACKWARD_TEMPORARY)
SCORE_SOURCE = "transformers 5.24 modeling_layers.py:167-190 GenericForSequenceClassification.forward"


def score_terms(s_: Structure) -> dict[str, Term]:
    """A reward model's head and loss (TRL 1.16 ``RewardTrainer.compute_loss``, reward_trainer.py:778-797): the
    score head's one logit per position, the last non-padding position found with two int32 [2b, s] tensors
    (``(input_ids != pad) * arange``, its argmax), the scores gathered there; the Bradley-Terry loss reads the
    b chosen-minus-rejected margins. Its backward scatters the two scores' gradient into a zero [2b, s] tensor.

    >>> from symvram.ledger.structure import Structure
    >>> sorted(score_terms(Structure(method="full", objective="reward", score_head=True)))
    ['act_logsoftmax', 'act_tokens', 'logits', 'loss_backward_temp']
    """
    n, R = rows(s_.objective) * b, rows(s_.objective) * b * seq
    entry = objectives()[s_.objective]
    return {"act_logsoftmax": Term("act_logsoftmax", Role.LOSS_ACTIVATION, 2 * b_id * n + b_c * b, r"A_{\mathrm{score}}",
                                   "the gather's two int64 index vectors (rows, last non-padding positions) and the "
                                   "margins logsigmoid keeps", SCORE_SOURCE),
            "logits": Term("logits", Role.LOSS_TEMPORARY, b_c * R + 2 * b_i32 * R, r"M_{\mathrm{score}}",
                           "the score head's output, one logit per position, and the int32 non-padding mask and "
                           "its product with the positions", SCORE_SOURCE),
            "loss_backward_temp": Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY, b_c * R,
                                       r"M_{\mathrm{score}'}", "the gathered scores' gradient scattered into a "
                                       "zero tensor of every position's", "torch index backward (index_put)"),
            "act_tokens": Term("act_tokens", Role.STEP_INPUT, entry["inputs"] * b_id * R, r"A_{\mathrm{ids}}",
                               entry["inputs_why"], entry["inputs_source"])}


def _split_final_norm(head: Term, s_: Structure, twice: dict) -> list[Term]:
    """A score head's saved input (and, training the norm's weight, the normalized tensor its product keeps) lives
    until the head's backward and the norm's multiply backward; the final norm's own fp32 input and 1/rms until the
    norm's backward — which SFT never sees as a peak, beside the vocabulary's gradients."""
    kept = norm_saved(s_, 1, h).xreplace(twice)
    return [Term(head.key, head.role, kept, r"A_{\mathrm{norm}}", "the final norm's fp32 input and 1/rms, kept for "
                 "its backward", head.source, head.place, head.lifetime, rows=head.rows),
            Term("act_score_input", head.role, sp.expand(head.expr - kept), r"A_{\mathrm{score,in}}",
                 "the score head's input (the final norm's output), kept for its weight gradient"
                 + (", and the normalized tensor the norm weight's product keeps" if not s_.lora else ""),
                 head.source, head.place, span(Phase.LOSS, Phase.HEAD_BACKWARD), rows=head.rows)]


def reshape(s_: Structure, activation_terms: list[Term]) -> list[Term]:
    """The SFT activation-side terms for the objective's rows (batch → rows·batch), with TRL's fused-head terms
    for the positions it scores (a reward model: its score head's)."""
    if s_.objective == "sft":
        return activation_terms
    twice = {b: rows(s_.objective) * b}   # (KTO: once)
    if s_.score_head:
        head = score_terms(s_)
        out = []
        for t in activation_terms:   # the LM head's loss terms: the score head's where it has one, else gone
            if t.key in head:
                out.append(head[t.key])
            elif t.key == "act_final_norm":   # the score head's input is freed by its backward, before the norm's
                out += _split_final_norm(_rows(t, twice), s_, twice)
            elif t.role not in HEAD_LOSS_ROLES:
                out.append(_rows(t, twice))
        return out
    if objectives()[s_.objective].get("logits"):
        return logits_terms(s_, [_rows(t, twice) for t in activation_terms])
    fused = {t.key: t for t in trl_loss_terms(s_)}
    mask = b_mask * row_positions(s_)   # labels != -100, kept by the index and the scatter for backward
    saved = trl_saved_term(s_, "(the completion's positions)")
    fused["act_logsoftmax"] = Term(saved.key, saved.role, saved.expr + mask, saved.label,
                                   saved.why + " and the positions' mask", saved.source,
                                   tensors=(*saved.tensors, (1, mask)))
    back = fused["loss_backward_temp"]   # and the log-probs' gradient, gathered from the scatter (masked_select)
    fused["loss_backward_temp"] = Term(back.key, back.role, back.expr + b_32 * scored(s_), back.label,
                                       back.why + "; the scored positions' log-prob gradient", back.source,
                                       tensors=(*back.tensors, (1, b_32 * scored(s_))))
    entry = objectives()[s_.objective]
    fused["act_tokens"] = Term("act_tokens", Role.STEP_INPUT, entry["inputs"] * b_id * rows(s_.objective) * b * seq,
                               r"A_{\mathrm{ids}}", entry["inputs_why"], entry["inputs_source"])
    norm = next((t for t in activation_terms if t.key == "act_final_norm"), None)
    if norm is not None and not s_.lora:   # the compact head indexes the scored rows' copy: the norm's output goes
        normed = (b_c if s_.weight_casts else compute_weight_bytes(s_)) * b * seq * h
        fused[norm.key] = Term(norm.key, norm.role, sp.expand(norm.expr - normed).xreplace(twice), norm.label,
                               norm.why.replace(" and the normed tensor", "") + " (the fused head keeps its own copy "
                               "of the scored positions' normed states)", norm.source, norm.place, norm.lifetime,
                               rows=rows(s_.objective))
    return [fused[t.key] if t.key in fused else _rows(t, twice) for t in activation_terms]


def _rows(t: Term, twice: dict) -> Term:
    """An SFT term for the objective's rows (``twice``: batch → rows·batch), its declared tensors too; each of its
    tensors holds the forward's rows·batch rows (``Term.rows``: trl 1.16 dpo_trainer.py concatenated_forward
    concatenates the chosen and rejected ids into one batch, so every activation is one tensor of 2·batch rows)."""
    return replace(t, expr=t.expr.xreplace(twice), tensors=tuple((n, size.xreplace(twice)) for n, size in t.tensors),
                   rows=t.rows * int(twice[b] / b))


LOGITS_SOURCE = "trl 1.16 experimental/orpo/orpo_trainer.py:745-822 (cpo/cpo_trainer.py:792-863) concatenated_forward"


def logits_terms(s_: Structure, activation_terms: list[Term]) -> list[Term]:
    """ORPO's and CPO's loss on the model's logits (TRL 1.16 ``concatenated_forward``), for R = 2b rows of s
    positions. accelerate's mixed-precision forward returns the lm_head's 16-bit logits as an fp32 copy
    (accelerate operations.py:889-948); the chosen rows' NLL (ORPO; CPO unless cpo_alpha = 0) copies their shifted
    logits (``.contiguous()``) and keeps cross-entropy's fp32 log-softmax (b·(s−1) × V each); the average log-probs
    come from TRL's Triton log-prob kernel (kernels/logprob_entropy.py:146-246), which saves the logits. In the
    backward the two branches' gradients are scattered back into [R, s, V] fp32 tensors and summed: three at once
    (with the NLL), else the kernel's [R, s−1, V] gradient beside the logits it saved. Beside them the concatenated ids, mask and
    labels (int64 [R, s]) and, with the NLL, the labels it masks and shifts. No saved loss activation outlives the
    loss's backward."""
    R, entry = rows(s_.objective) * b, objectives()[s_.objective]
    b_l = b_32 if s_.autocast else compute_weight_bytes(s_)   # without mixed precision: the lm_head's own dtype
    logits = b_l * R * seq * V
    ids = b_id * 3 * R * seq   # concatenated_inputs: input ids, attention mask, labels
    if s_.nll:   # at cross_entropy: its contiguous copy and log-softmax, the labels torch.where masks, shifted
        loss = logits + 2 * b_l * b * (seq - 1) * V + ids + b_id * (R * seq + b * (seq - 1)) + 2 * b_l
        back = 3 * logits
        why = ("the fp32 logits, the chosen rows' shifted copy and cross-entropy's fp32 log-softmax, the int64 "
               "concatenated batch and labels")
        back_why = "the NLL's and the log-prob kernel's logits gradients, each scattered into [2b, s, V] fp32, and their sum"
    else:        # as accelerate converts them: the lm_head's 16-bit logits and their fp32 copy
        loss = logits + (b_c * R * seq * V if s_.autocast else 0) + ids
        back = logits + b_l * R * (seq - 1) * V + (b_id + 3 * b_32) * R * (seq - 1)   # + its saved labels,
        # log_z and expected logit, and the log-probs' gradient
        why = "the lm_head's 16-bit logits and their fp32 copy (accelerate's convert_outputs_to_fp32), the int64 concatenated batch"
        back_why = ("the log-prob kernel's backward: the fp32 logits it saved, their gradient [2b, s-1, V], its saved "
                    "labels and statistics")
    own = {"logits": Term("logits", Role.LOSS_TEMPORARY, loss, r"M_{\mathrm{logits}}", why, LOGITS_SOURCE),
           "loss_backward_temp": Term("loss_backward_temp", Role.LOSS_BACKWARD_TEMPORARY, back + 2 * b_32,
                                      r"M_{\mathrm{CE}'}", back_why + ", beside the loss and its gradient (fp32)",
                                      "torch slice_backward; trl 1.16 kernels/logprob_entropy.py:211"),
           "act_tokens": Term("act_tokens", Role.STEP_INPUT, entry["inputs"] * b_id * R * seq
                              + entry["prompt_inputs"] * b_id * b * p, r"A_{\mathrm{ids}}", entry["inputs_why"],
                              entry["inputs_source"])}
    return [own.get(t.key, t) for t in activation_terms if t.key not in ("logits_fp32", "act_logsoftmax")]
