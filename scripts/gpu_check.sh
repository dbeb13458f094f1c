#!/usr/bin/env bash
# bash scripts/gpu_check.sh   (one CUDA GPU; under 5 minutes on one H200)
# 1. pytest -m gpu: the shared layout is as exact as the padded one in bf16 with SDPA and with
#    FlexAttention, and a bf16 LoRA run with gradient checkpointing trains (tests/training/test_gpu.py);
# 2. scripts/bench_layout.py: shared vs padded training throughput on a random-init ~0.5B Llama in
#    bf16, SDPA and FlexAttention; its table is printed last.
# Needs a CUDA build of torch and rm's dependencies (pip install -e .). Exit status: the tests'
# (0 when they pass), or 2 when there is no GPU or a dependency is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
PY="${PYTHON:-python}"

"$PY" - <<'PYEOF' || exit 2
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "accelerate", "peft", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing {missing}: pip install -e '.[dev]' (with a CUDA build of torch)")
import torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device")
print(f"gpu_check: torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16 {torch.cuda.is_bf16_supported()}")
PYEOF

started=$SECONDS
timeout 110 "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs tests/
tests=$?
[ $tests -eq 124 ] && echo "gpu_check: the GPU tests ran out of their 110 s"
echo "gpu_check: tests took $((SECONDS - started)) s (exit $tests)"

# The benchmark keeps to --budget itself (configurations it cannot reach are listed as skipped);
# the timeout is only a safety net.
timeout 170 "$PY" scripts/bench_layout.py --budget 130 --seconds 8 --json "${OUT:-/tmp}/bench_layout.json"
[ $? -eq 124 ] && echo "gpu_check: the benchmark ran out of its 170 s"
echo "gpu_check: $((SECONDS - started)) s in all"
exit $tests
