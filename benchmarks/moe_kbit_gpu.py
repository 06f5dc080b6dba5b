"""Does a QLoRA step with PEFT's k-bit preparation run on fused-expert MoE on this GPU? (a GPU-session check)

    python benchmarks/moe_kbit_gpu.py --out results.jsonl

symvram estimates `--method qlora --kbit-prep peft` on the grouped_mm MoE families from source:
prepare_model_for_kbit_training casts the fused experts, which bitsandbytes leaves unquantized, to fp32, and torch's
CUDA grouped_mm takes its per-group fallback for fp32 (symvram/validate/grouped_mm.py: the CPU trace allocates what
that fallback allocates; modelled, not measured on CUDA). This is the CUDA check of that assumption: it builds a
small random Qwen3-MoE (real module classes, small widths), loads it in 4 bits, prepares it, adds LoRA and runs one
training step. One JSON line: whether
it ran, the experts' dtype, the error if any, and max_memory_allocated. Needs CUDA, transformers, peft, bitsandbytes.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import traceback
from pathlib import Path


def one_step() -> dict:
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Qwen3MoeConfig

    config = Qwen3MoeConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                            num_experts=8, num_experts_per_tok=2, tie_word_embeddings=False)
    with tempfile.TemporaryDirectory() as tmp:
        AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(tmp)
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(tmp, quantization_config=quant, dtype=torch.bfloat16,
                                                     device_map={"": 0})
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
    experts = {str(p.dtype) for n, p in model.named_parameters() if ".experts." in n}
    model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    torch.cuda.reset_peak_memory_stats()
    ids = torch.randint(0, 1024, (2, 128), device="cuda")
    row = {"model": "qwen3_moe tiny (h 256, 8 experts, 2 layers)", "experts_dtype": sorted(experts)}
    try:
        model(input_ids=ids, labels=ids).loss.backward()
        row.update(ran=True, error=None)
    except Exception as e:  # noqa: BLE001 - the question is whether it fails, and how
        row.update(ran=False, error=f"{type(e).__name__}: {e}".splitlines()[0][:300],
                   where=traceback.format_exc().splitlines()[-3][:300])
    row["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    row["torch"] = torch.__version__
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="a JSONL file the result line is appended to")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("moe_kbit_gpu: no CUDA device here; this check runs in a GPU session only")
        return 2
    row = one_step()
    print(json.dumps(row))
    with Path(a.out).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
