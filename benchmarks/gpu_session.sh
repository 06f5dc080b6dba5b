#!/usr/bin/env bash
# One prepared GPU session: real CUDA peaks and step times beside symvram's estimates.
#
#   bash benchmarks/gpu_session.sh OUTDIR [SECONDS_FOR_PEAKS]
#
# Needs torch with CUDA, transformers, peft and bitsandbytes (the validate extra) and symvram's core
# dependencies. Writes into OUTDIR, each result saved as soon as it is finished:
#   env.txt                  the GPU, driver and library versions
#   step_time_gpu.json/.log  benchmarks/step_time_gpu.py --large: predicted vs measured seconds per step
#   measurements_cuda.jsonl  benchmarks/cases.jsonl measured with real CUDA tensors, smallest estimate first,
#   measure.log              none started after SECONDS_FOR_PEAKS (default 240); rerun to resume
# Then, on any machine: python benchmarks/accuracy.py --measurements OUTDIR/measurements_cuda.jsonl ...
set -u
out=${1:?usage: gpu_session.sh OUTDIR [SECONDS_FOR_PEAKS]}
budget=${2:-240}
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
"$py" "$here/benchmarks/step_time_gpu.py" --large --out "$out/step_time_gpu.json" 2>&1 | tee "$out/step_time_gpu.log"
"$py" "$here/benchmarks/measure_cases.py" "$here/benchmarks/cases.jsonl" --device cuda --smallest-first \
  --max-gib 125 --stop-after "$budget" --out "$out/measurements_cuda.jsonl" 2>&1 | tee "$out/measure.log"
