#!/usr/bin/env bash
# One prepared GPU session: real CUDA peaks and step times beside symvram's estimates.
#
#   bash benchmarks/gpu_session.sh OUTDIR [SECONDS_FOR_PEAKS] [SECONDS_FOR_ALLOCATOR]
#
# Needs torch with CUDA, transformers, peft and bitsandbytes (the validate extra) and symvram's core
# dependencies. Writes into OUTDIR, each result saved as soon as it is finished:
#   env.txt                  the GPU, driver and library versions
#   step_time_gpu.json/.log  benchmarks/step_time_gpu.py --large: predicted vs measured seconds per step
#   measurements_cuda.jsonl  benchmarks/cases.jsonl measured with real CUDA tensors, smallest estimate first,
#   measure.log              none started after SECONDS_FOR_PEAKS (default 240); rerun to resume
#   measurements_cuda_fla.jsonl  only where flash-linear-attention and causal-conv1d are installed: the Gated DeltaNet
#                            cases of benchmarks/cases.jsonl on their kernels ("kernels": "fla", symvram's --kernels
#                            fla, modelled from their source); none started after 60 s (then the torch-path rows of
#                            those cases above fail: that box runs fla's kernels, measure._check_kernels)
#   allocator_reserved.jsonl benchmarks/allocator_gpu.py reserved: max_memory_reserved() with the default
#                            allocator and with expandable_segments:True, mem_get_info() (the nvidia-smi
#                            level), beside symvram's replay, for six Llama-3-8B settings (LoRA/QLoRA,
#                            with/without checkpointing)
#   allocator_oom_line.jsonl benchmarks/allocator_gpu.py oom-line: the longest sequence that trains two steps
#                            on 24/40/48/80 GB cards emulated by set_per_process_memory_fraction, bisected,
#                            beside fit's answer (none started after SECONDS_FOR_ALLOCATOR, default 240)
#   moe_kbit.jsonl           benchmarks/moe_kbit_gpu.py: does QLoRA with PEFT's k-bit preparation run on fused-expert
#                            MoE (fp32 experts through grouped_mm)? symvram refuses it until this says (< 1 minute)
# One run stays under 10 minutes (the three budgets). Never in CI.
# Then, on any machine: python benchmarks/accuracy.py --measurements OUTDIR/measurements_cuda.jsonl ...
set -u
out=${1:?usage: gpu_session.sh OUTDIR [SECONDS_FOR_PEAKS] [SECONDS_FOR_ALLOCATOR]}
budget=${2:-240}
allocator_budget=${3:-240}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$py" -c 'import torch, transformers, peft, bitsandbytes, sympy
print("torch", torch.__version__, "cuda", torch.version.cuda, "| transformers", transformers.__version__,
      "| peft", peft.__version__, "| bitsandbytes", bitsandbytes.__version__, "| sympy", sympy.__version__)'
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
timeout 120 "$py" "$here/benchmarks/moe_kbit_gpu.py" --out "$out/moe_kbit.jsonl" 2>&1 | tee "$out/moe_kbit.log"
"$py" "$here/benchmarks/step_time_gpu.py" --large --out "$out/step_time_gpu.json" 2>&1 | tee "$out/step_time_gpu.log"
"$py" "$here/benchmarks/measure_cases.py" "$here/benchmarks/cases.jsonl" --device cuda --smallest-first \
  --max-gib 125 --stop-after "$budget" --out "$out/measurements_cuda.jsonl" 2>&1 | tee "$out/measure.log"
if "$py" -c 'import fla, causal_conv1d' 2>/dev/null; then
  "$py" -c 'import json, sys
for c in map(json.loads, filter(str.strip, open(sys.argv[1]))):
    if c.get("arch", {}).get("model_type") in ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "olmo_hybrid"):
        print(json.dumps({**c, "name": c["name"] + "_fla", "kernels": "fla"}))' "$here/benchmarks/cases.jsonl" \
    >"$out/cases_fla.jsonl"
  "$py" "$here/benchmarks/measure_cases.py" "$out/cases_fla.jsonl" --device cuda --smallest-first --max-gib 125 \
    --stop-after 60 --out "$out/measurements_cuda_fla.jsonl" 2>&1 | tee "$out/measure_fla.log"
fi
"$py" "$here/benchmarks/allocator_gpu.py" reserved --seq 2048 --stop-after "$((allocator_budget / 2))" \
  --out "$out/allocator_reserved.jsonl" 2>&1 | tee "$out/allocator.log"
"$py" "$here/benchmarks/allocator_gpu.py" oom-line --stop-after "$((allocator_budget / 2))" \
  --out "$out/allocator_oom_line.jsonl" 2>&1 | tee -a "$out/allocator.log"
