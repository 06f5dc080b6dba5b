"""The communication ledger: bytes one GPU sends per step, and the memory-bound work of the step.

Conventions (ring collectives, what NCCL does on one node): an all-gather or a reduce-scatter of a
tensor of S bytes over n ranks sends (n − 1)/n · S from each rank; an all-reduce sends 2 (n − 1)/n · S.

* DDP: the gradients are all-reduced (β_g per trainable parameter);
* ZeRO-1/2: the gradients are reduce-scattered, the updated trainable weights all-gathered;
* ZeRO-3 / FSDP2 (one unit per decoder layer, the root — embeddings, lm_head, final norm — kept
  gathered from forward to backward): every layer's stored weights are all-gathered in forward and
  again in backward, the root's once; the trainable gradients are reduce-scattered;
* tensor parallelism (Megatron): two all-reduces of the b·s·h activations per layer in forward, two in
  backward (and two more in a checkpointed layer's recompute); sequence parallelism replaces each by an
  all-gather plus a reduce-scatter, the same bytes;
* offload (``host`` block): ``optimizer`` sends the gradients to the CPU and takes the updated weights
  back; ``optimizer+params`` also fetches the weights for forward and for backward.

The offloaded optimizer's update (``cpu`` block, bytes read + written in host memory): DeepSpeed's CPU
Adam reads the fp32 master shard, its fp32 gradient and both fp32 moments and writes back the master and
the moments (csrc/adam/cpu_adam_impl.cpp, ``Adam_Optimizer::Step_1(float* _params, float* grads, float*
_exp_avg, float* _exp_avg_sq, …)``, vectorized with AVX): memory-bound, like the update on the GPU.

Memory-bound work (``hbm`` block, bytes read + written in HBM): the optimizer's update on the GPU
(weights, gradients, states, master), and QLoRA's dequantization of every NF4 weight in each pass.

>>> from symvram.ledger.structure import Structure
>>> c = build_comm(Structure(method="full", params_given=True, zero=3))
>>> [x.key for x in c.block_terms("network")]
['allgather_forward', 'allgather_backward', 'reduce_scatter_grads']
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import sympy as sp

from ..symbols import sym
from .architecture import L, h
from .sharding import all_layer_bytes, root_bytes
from .structure import Structure
from .terms import STAGE_NAMES, Role, Term
from .weights import quant_constant_bits

N, t = sym("gpus"), sym("tp")
P, P_train, P_quant = sym("P"), sym("P_train"), sym("P_quant")
b, seq = sym("batch"), sym("seq")
b_w, b_g, b_c, b_s, b_m, b_a, b_32 = (sym(n) for n in ("bytes_weight", "bytes_grad", "bytes_act", "bytes_state",
                                                        "bytes_master", "bytes_adapter", "bytes_fp32"))
states, q = sym("states_per_param"), sym("quant_bits")
RING = (N - 1) / N
NCCL = "ring collectives (NCCL): (n − 1)/n · S per all-gather / reduce-scatter, twice that per all-reduce"
BLOCKS = ("network", "host", "hbm", "cpu")


@dataclass(frozen=True)
class CommLedger:
    terms: tuple[Term, ...]

    def block_terms(self, block: str) -> tuple[Term, ...]:
        return tuple(x for x in self.terms if x.block == block)

    def block_expr(self, block: str) -> sp.Expr:
        return sp.Add(*(x.expr for x in self.block_terms(block)))

    @cached_property
    def by_key(self) -> dict[str, Term]:
        return {x.key: x for x in self.terms}


def stored_weight_bytes(s_: Structure) -> sp.Expr:
    """Bytes of every stored weight (with adapters; NF4 and constants under QLoRA): what ZeRO-3 gathers."""
    return root_bytes(s_) + all_layer_bytes(s_)


# the only fields the communication ledger reads (the stored weights' among them)
COMM_FIELDS = ("method", "family", "options", "tied", "double_quant", "master", "zero", "offload",
               "grad_checkpointing", "tensor_parallel", "fsdp_mixed_precision", "head_targets", "score_head",   # its all-gathers in the compute dtype
               "targets", "dora")   # a layer kind's adapters, gathered with it


def build_comm(s_: Structure) -> CommLedger:
    """Bytes one GPU sends per step (network: GPU to GPU; host: PCIe to the CPU) and the HBM traffic of
    the memory-bound work, for one structure (built once per ``COMM_FIELDS`` and cached); with activation
    offloading also what the saved tensors' copies move over PCIe."""
    comm = _build_comm(s_.keep(COMM_FIELDS))
    if not (s_.offload_activations or s_.offload_checkpoints):
        return comm
    from .activations import offload_traffic, unsloth_traffic

    return CommLedger((*comm.terms, offload_traffic(s_) if s_.offload_activations else unsloth_traffic(s_)))


@lru_cache(maxsize=256)
def _build_comm(s_: Structure) -> CommLedger:
    split = 1 / t if s_.tensor_parallel else sp.Integer(1)   # each tensor-parallel rank holds 1/t of the weights
    grads = P_train * b_g * split
    terms: list[Term] = []
    stage = STAGE_NAMES[s_.zero]
    if s_.zero == 0:
        terms.append(Term("allreduce_grads", Role.NETWORK_TRAFFIC, 2 * RING * grads, r"C_{\mathrm{AR}}",
                          "DDP all-reduces every trainable gradient (2 (N−1)/N of them per GPU)", NCCL))
    elif s_.zero in (1, 2):
        terms.append(Term("reduce_scatter_grads", Role.NETWORK_TRAFFIC, RING * grads, r"C_{\mathrm{RS}}",
                          f"{stage}: each GPU reduces its shard of the gradients", NCCL))
        terms.append(Term("allgather_params", Role.NETWORK_TRAFFIC, RING * P_train * b_g * split, r"C_{\mathrm{AG}}",
                          f"{stage}: the updated trainable weights are all-gathered after the step", NCCL))
    else:
        stored = stored_weight_bytes(s_) * split
        layers = all_layer_bytes(s_) * split
        terms.append(Term("allgather_forward", Role.NETWORK_TRAFFIC, RING * stored, r"C_{\mathrm{AG,fwd}}",
                          "ZeRO-3: every stored weight is all-gathered for forward (per layer unit, and the root)",
                          "torch FSDP2 fully_shard per decoder layer"))
        terms.append(Term("allgather_backward", Role.NETWORK_TRAFFIC, RING * layers, r"C_{\mathrm{AG,bwd}}",
                          "and each layer's again for backward (the root stays gathered)",
                          "torch FSDP2: reshard_after_forward, except at the root"))
        terms.append(Term("reduce_scatter_grads", Role.NETWORK_TRAFFIC, RING * grads, r"C_{\mathrm{RS}}",
                          "the trainable gradients are reduce-scattered", NCCL))
    if s_.tensor_parallel:
        passes = 2 + (1 if s_.grad_checkpointing else 0)      # forward, backward, recompute
        terms.append(Term("tp_activations", Role.NETWORK_TRAFFIC, passes * 2 * 2 * (t - 1) / t * L * b * seq * h * b_c,
                          r"C_{\mathrm{TP}}",
                          "tensor parallel: two all-reduces of b·s·h activations per layer and pass (sequence "
                          "parallel: all-gather + reduce-scatter, the same bytes)", "Megatron-LM (Korthikanti et al. 2022)"))
    if s_.offload != "none":
        shard = 1 / N
        terms.append(Term("offload_grads", Role.HOST_TRAFFIC, P_train * b_g * shard * split, r"C_{\mathrm{host},g}",
                          "the gradient shard goes to the CPU, whose optimizer updates it", "DeepSpeed ZeRO-Offload"))
        terms.append(Term("offload_params_back", Role.HOST_TRAFFIC, P_train * b_g * shard * split, r"C_{\mathrm{host},w}",
                          "the updated weights come back", "DeepSpeed ZeRO-Offload"))
        if s_.offload == "optimizer+params":
            terms.append(Term("offload_params", Role.HOST_TRAFFIC, 2 * stored_weight_bytes(s_) * shard * split,
                              r"C_{\mathrm{host},P}", "the weight shards are fetched for forward and for backward",
                              "DeepSpeed ZeRO-Infinity"))
    if s_.offload == "none":   # the update runs on the GPU: read weight, grad, states (master); write them back
        per_param = 2 * b_g + b_g + 2 * states * b_s + (2 * b_m if s_.master else 0)
        shard = 1 / N if s_.zero >= 1 else sp.Integer(1)
        terms.append(Term("optimizer_update", Role.HBM_TRAFFIC, P_train * per_param * shard * split, r"M_{\mathrm{opt}}",
                          "the optimizer reads and writes every trainable weight, its states (and master), reads its gradient",
                          "elementwise: memory-bound"))
    else:   # the update runs on the CPU, on fp32 master, gradient and moments
        per_param = 2 * (b_m if s_.master else b_32) + b_32 + 2 * states * b_s
        terms.append(Term("cpu_optimizer_update", Role.CPU_TRAFFIC, P_train * per_param / N * split, r"M_{\mathrm{cpu}}",
                          "the CPU optimizer reads its fp32 master shard, gradient and moments and writes back the master "
                          "and the moments", "DeepSpeed CPU Adam (cpu_adam_impl.cpp Step_1): memory-bound"))
    if s_.method == "qlora":
        passes = 2 + (1 if s_.grad_checkpointing else 0)
        nf4 = P_quant * (q + quant_constant_bits(s_.double_quant)) / 8
        terms.append(Term("dequantize", Role.HBM_TRAFFIC, passes * (nf4 + 2 * P_quant * b_c) * split, r"M_{\mathrm{dq}}",
                          "QLoRA dequantizes every NF4 weight to 16 bits in each pass (read NF4, write and read back 16-bit)",
                          "bitsandbytes dequantize_4bit"))
    return CommLedger(tuple(terms))
