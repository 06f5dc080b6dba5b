"""The discrete choices that decide the *shape* of the ledger's expressions.

Numbers (dimensions, batch, rank, bytes per element) are symbols substituted later; everything
here changes which terms exist. A Structure is hashable, so ledgers are built once per structure
and cached.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .architecture import Family, family
from .towers import Tower

# bitsandbytes' AdamW variants → their optim_bits: AdamW8bit, PagedAdamW8bit, PagedAdamW32bit (bitsandbytes 0.50.2
# optim/adamw.py:62 / :229 / :290 run Optimizer2State with optim_bits 8 / 8 / 32; the paged ones is_paged=True)
BNB_OPTIM_BITS = {"adamw8bit": 8, "paged-adamw8bit": 8, "paged-adamw": 32}


@dataclass(frozen=True)
class Structure:
    method: str = "full"              # full | lora | qlora
    params_given: bool = False        # P is a given number (a nominal preset: 7b, 13b, 70b), not derived
    family: str = "llama"             # the decoder family (data/families/<family>.toml)
    first_kind: str = ""              # the layer kind of layer 0 (Family.first_kind; "" the default kind)
    lead_kinds: tuple[str, ...] = ()  # LoRA: the kinds of the layers before the first with a target (they save nothing)
    kind_depths: tuple[tuple[str, tuple[str, ...]], ...] = ()  # checkpointing, layers of several kinds: each kind the
    # model has, with the kinds of the layers below its lowest one (Scenario._kind_depths), layer 0's kind first
    tied: bool = False                # lm_head shares the embedding matrix
    options: tuple[str, ...] = ()     # the family's boolean switches that are on (attention_bias …)
    targets: tuple[str, ...] = ()     # LoRA target modules, canonical order
    head_targets: tuple[str, ...] = ()  # LoRA on embed_tokens (PEFT lora.Embedding) / lm_head (lora.Linear) too
    master: bool = False              # an fp32 master copy of the trainable weights is kept
    optimizer: str = "adamw"          # adamw | sgd | sgd-momentum | lion | adafactor
    optimizer_impl: str = "foreach"   # foreach | fused | forloop
    embed_states_fp32: bool = False   # HF Trainer + bitsandbytes 8-bit: nn.Embedding weights get 32-bit states
    compute_fp32: bool = False        # activations are fp32 (no .float() copy of the logits)
    adapter_upcast: bool = False      # LoRA adapters in a wider dtype than the activations: PEFT casts each target's input
    autocast: bool = False            # a torch.autocast region: linear inputs and fp32 weights are cast per call
    weight_casts: bool = False        # weights stored wider than the autocast dtype: each linear saves a cast copy
    dropout: bool = False             # LoRA dropout p > 0
    device: str = "cuda"              # cuda | cpu: which tensors dropout keeps
    kernels: str = "torch"            # torch | fla: a Gated DeltaNet mixer on transformers' torch path or fla's kernels
    attention: str = "sdpa"           # sdpa | eager
    grad_checkpointing: bool = False  # non-reentrant activation checkpointing of each decoder layer
    double_quant: bool = True         # QLoRA: absmax constants quantized again
    kbit_prepared: bool = False       # QLoRA via peft.prepare_model_for_kbit_training: non-4-bit weights and activations fp32
    dora: bool = False                # PEFT use_dora: a magnitude vector per target and the weight-norm tensors
    modules_to_save: tuple[str, ...] = ()  # PEFT modules_to_save: trainable copies of embed_tokens / lm_head
    param_states: bool = False        # with modules_to_save: states are zeros_like(param), each in its parameter's dtype
    loss_impl: str = "torch"          # torch | chunked (torchtune) | liger (fused linear CE) | cce (Cut Cross-Entropy) | trl
    zero: int = 0                     # ZeRO stage 0-3 (3 = FSDP FULL_SHARD)
    offload: str = "none"             # none | optimizer | optimizer+params
    sequence_parallel: bool = False   # Megatron sequence parallelism with tensor parallelism
    tensor_parallel: bool = False     # tensor parallelism t > 1 (Megatron): weights and activations split
    fsdp_mixed_precision: bool = False  # FSDP2 MixedPrecisionPolicy: fp32 storage gathered in the compute dtype, fp32 reduce
    zero_impl: str = "fsdp2"          # fsdp2 (torch fully_shard) | deepspeed: who implements the ZeRO stage
    params_cast: bool = False         # DeepSpeed's 16-bit engine casts every parameter: from_pretrained's fp32 routers too
    checkpoint_every: int = 1         # checkpointing: layers 0, k, 2k … only (transformers' every_n_layers)
    checkpoint_ops: bool = False      # checkpointing with torchtitan's op-level policy (saves matmul/SDPA outputs)
    offload_activations: bool = False  # TRL's activation offloading: the checkpointed inputs in pinned host memory
    offload_checkpoints: bool = False  # Unsloth's offloaded checkpointer (use_gradient_checkpointing="unsloth")
    unsloth_kernels: bool = False     # Unsloth's fused LoRA QKV / O / MLP and RMSNorm kernels (modelled, not measured)
    liger: bool = False               # Liger's RMSNorm and SwiGLU / GeGLU kernels (Triton: modelled, not measured)
    packed: bool = False              # position ids restart within a row (packing): SDPA gets a block-diagonal mask
    model_code: str = "transformers"  # transformers | torchtune (its own RMSNorm, RoPE cache, attention, label shift) | litgpt (its fused qkv, RoPE buffers, fp32 RMSNorm, chunked loss)
    optimizer_in_backward: bool = False  # each parameter stepped (and its gradient freed) as soon as its gradient exists
    objective: str = "sft"            # sft | dpo (data/objectives.toml): what one optimizer step runs
    reference: str = "none"           # DPO's reference: copy (a second model) | adapters (PEFT, disabled) | precomputed
    old_logps: bool = False           # GRPO: the old policy's log-probs are computed (accumulation not a multiple of k·iterations)
    nll: bool = False                 # ORPO, CPO/SimPO (cpo_alpha > 0): the chosen rows' cross-entropy over the logits
    score_head: bool = False          # a sequence-classification model (reward modelling): an h-wide score head, no lm_head
    bnb_input_saved: bool = False     # QLoRA on bitsandbytes < 0.43.3: each 4-bit linear saves its input (symvram.versions)
    shift_logits_copy: bool = False   # transformers < 4.49: the loss copies the shifted fp32 logits (symvram.versions)
    forward_logits_upcast: bool = False  # transformers < 4.45: the forward returns fp32 logits (symvram.versions)
    tower: Tower | None = None        # a multimodal checkpoint's vision tower, loaded beside the decoder (frozen)
    images: bool = False              # image tokens in each sample (--image-tokens): the tower runs in the forward
    train_vision: bool = False        # the tower takes gradients (its weights under full fine-tuning)
    pixel_cast: bool = False          # the tower's weights are not fp32: it casts the fp32 pixel_values to their dtype

    def keep(self, fields: tuple[str, ...]) -> "Structure":
        """The structure with only ``fields`` kept, the rest at their defaults: the cache key of a ledger
        that reads no other field (structures that differ elsewhere share it).

        >>> Structure(method="lora", zero=3).keep(("method",)) == Structure(method="lora")
        True
        """
        return Structure(**{f: getattr(self, f) for f in fields})

    @property
    def arch(self) -> Family:
        return family(self.family)

    def layer(self, kind: str) -> "Structure":
        """The structure of one layer of the family's kind ``kind`` ("" the default): its family, and the LoRA
        targets that kind has (a dense layer has no experts to target) and those outside the layers (Gemma 4's
        per_layer_model_projection: a layer's per-layer input needs a gradient where it trains).

        >>> Structure(family="llama", targets=("q_proj",)).layer("") == Structure(family="llama", targets=("q_proj",))
        True
        """
        fam = self.arch.kind(kind)
        if fam.key == self.family and not self.first_kind:   # layers all alike: the structure itself
            return self
        return replace(self, family=fam.key, first_kind="", lead_kinds=(), kind_depths=(),
                       targets=tuple(t for t in self.targets if t in fam.linear_map
                                     or t in {m.name for m in self.arch.model_linears}))

    @property
    def layer_kinds(self) -> tuple[tuple, ...]:
        """(how many layers, one layer's structure) per layer kind of the family, the default kind first."""
        return tuple((n, self.layer(k.key.partition(":")[2])) for n, k in self.arch.layer_kinds)

    @property
    def first_layer(self) -> "Structure":
        """Layer 0's structure (its kind)."""
        return self.layer(self.first_kind)

    @property
    def tower_lora_width(self) -> int:
        """Σ copies·(d_in + d_out) of the vision tower's linears LoRA adapts: those whose names the targets match
        (PEFT matches names), or every one when the targets are the family's all-linear (PEFT's all-linear takes
        every nn.Linear); 0 without a tower or LoRA."""
        if not self.lora or self.tower is None:
            return 0
        return self.tower.lora_width(self.targets, self.arch.is_all_linear(self.targets, self.options))

    @property
    def tower_lora(self) -> bool:
        """LoRA adapts some of the tower's linears (adapters that get no gradient on a text-only batch)."""
        return self.tower_lora_width > 0

    @property
    def bnb(self) -> bool:
        """A bitsandbytes optimizer (its step count a Python int: no step tensors; an in-place kernel: no step
        temporaries)."""
        return self.optimizer in BNB_OPTIM_BITS

    @property
    def bnb_8bit(self) -> bool:
        """A bitsandbytes 8-bit optimizer: blockwise int8 states with an fp32 absmax per block, two quantization maps."""
        return BNB_OPTIM_BITS.get(self.optimizer) == 8

    @property
    def paged(self) -> bool:
        """Paged bitsandbytes states (CUDA unified memory; on the CPU bitsandbytes falls back to plain buffers)."""
        return self.optimizer.startswith("paged-") and self.device == "cuda"

    @property
    def lora(self) -> bool:
        return self.method in ("lora", "qlora")
