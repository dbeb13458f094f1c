#!/usr/bin/env bash
# bash scripts/gpu_check.sh   (one CUDA GPU; checks 2-3 and 5 are new and not yet timed; about 5 minutes without them)
# 1. pytest -m gpu: the shared layout is as exact as the padded one in bf16 with SDPA and with
#    FlexAttention, and a bf16 LoRA run with gradient checkpointing trains (tests/training/test_gpu.py);
# 2. QLoRA (needs bitsandbytes): a random-init ~0.5B Llama and a BPE tokenizer saved first, 10 steps
#    in 4-bit NF4, a checkpoint, and the export refused with the documented warning;
# 3. sharding on one GPU, fp32 (DeepSpeed ZeRO-3 needs deepspeed): ZeRO-3 and FSDP2 each train the tiny
#    quickstart 20 steps, checkpoint at step 10, resume from it, and export the weights of a plain
#    one-GPU run (max difference printed; at most 1e-3). DeepSpeed does not run on the CPU here, and
#    FSDP2 on the CPU is tested by tests/training/test_fsdp.py;
# 4. scripts/bench_layout.py: rm's layouts (padded, padded-grouped, packed, shared) at equal pairs per
#    micro-batch, training throughput on a random-init ~0.5B Llama in
#    bf16, SDPA and FlexAttention; its table is printed last;
# 5. vLLM 0.34.0 (VLLM_PYTHON=, or pip-installed into a venv of its own) serving the plain run's export of check 3
#    with --runner pooling --convert classify --dtype float32: its /classify against `rm score` (1e-5), printed.
# Needs a CUDA build of torch and rm's dependencies (pip install -e .). Exit status: 0 when the tests
# and checks 2-3 and 5 pass (a check whose package is missing is skipped, and says so), 1 when one fails, or 2
# when there is no GPU or a dependency is missing.
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

work="${OUT:-/tmp}/gpu_check_runs"
rm -rf "$work" && mkdir -p "$work"
checks=0
fail() { echo "gpu_check: FAILED: $*"; checks=1; }
# The tiny quickstart of the CPU tests (tests/conftest.py TINY), fp32, no periodic eval.
TINY="data.synthetic.n_train=240 data.synthetic.n_eval=61 model.random_init.hidden_size=32
 model.random_init.intermediate_size=64 model.random_init.num_hidden_layers=1 tokenizer.vocab_size=300
 train.batch_size=8 train.eval_batch_size=16 train.eval_steps=0 train.log_steps=1 train.lr=3e-3
 train.report_to=[] train.mixed_precision='no'"  # quoted: a bare no is YAML's false

if "$PY" -c "import bitsandbytes" 2>/dev/null; then
  "$PY" - "$work/base-0.5b" <<'PYEOF' || fail "QLoRA: building the 0.5B base model"
import sys

import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from rm.data import synthetic
from rm.data.load import load_pairs
from rm.tokens.tokenizer import train_bpe

out = sys.argv[1]
pairs = load_pairs(str(synthetic.write_dataset(out + "-data", n_train=2000, n_eval=10, seed=0)), "train", [])
tok = train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], vocab_size=1024)
cfg = LlamaConfig(
    vocab_size=len(tok), hidden_size=1024, intermediate_size=4096, num_hidden_layers=28, num_attention_heads=16,
    max_position_embeddings=512, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, num_labels=1,
)
torch.manual_seed(0)
model = LlamaForSequenceClassification(cfg).to(torch.bfloat16)
model.save_pretrained(out)
tok.save_pretrained(out)
print(f"gpu_check: QLoRA base: random-init Llama, {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters")
PYEOF
  "$PY" -m rm train configs/quickstart.yaml $TINY model.name_or_path="$work/base-0.5b" model.lora.qlora=true \
    model.lora.r=8 train.max_steps=10 train.save_steps=10 train.mixed_precision=bf16 output_dir="$work/qlora" \
    >"$work/qlora.log" 2>&1 || fail "QLoRA run (log: $work/qlora.log)"
  grep -q "export skipped: merging LoRA into 4-bit weights loses precision" "$work/qlora.log" \
    || fail "QLoRA: no 'export skipped' warning in $work/qlora.log"
  [ ! -e "$work/qlora/export" ] || fail "QLoRA: an export/ was written"
  [ -f "$work/qlora/checkpoints/step-10/adapter_config.json" ] || fail "QLoRA: no checkpoint step-10 with its adapter"
  [ $checks -eq 0 ] && echo "gpu_check: QLoRA: 10 steps in 4-bit, checkpoint kept, export refused as documented"
else
  echo "gpu_check: QLoRA skipped: pip install bitsandbytes"
fi

# Sharded: 20 steps with a checkpoint at 10, then resumed from it; the export against a plain run's.
"$PY" -m rm train configs/quickstart.yaml $TINY train.max_steps=20 output_dir="$work/plain" \
  >"$work/plain.log" 2>&1 || fail "plain one-GPU run (log: $work/plain.log)"
for launcher in deepspeed-zero3 fsdp; do
  if [ $launcher = deepspeed-zero3 ] && ! "$PY" -c "import deepspeed" 2>/dev/null; then
    echo "gpu_check: ZeRO-3 skipped: pip install deepspeed"; continue
  fi
  launch=("$PY" -m accelerate.commands.launch --config_file "configs/accelerate/$launcher.yaml" --num_processes 1
    --mixed_precision no -m rm train configs/quickstart.yaml $TINY train.max_steps=20 train.save_steps=10
    output_dir="$work/$launcher")
  "${launch[@]}" >"$work/$launcher.log" 2>&1 || { fail "$launcher run (log: $work/$launcher.log)"; continue; }
  cp "$work/$launcher/export/model.safetensors" "$work/$launcher-straight.safetensors"
  "${launch[@]}" train.resume="$work/$launcher/checkpoints/step-10" >"$work/$launcher-resumed.log" 2>&1 \
    || { fail "$launcher resume (log: $work/$launcher-resumed.log)"; continue; }
  "$PY" - "$work" "$launcher" <<'PYEOF' || fail "$launcher: export differs from the plain run's"
import sys

from safetensors.torch import load_file

work, name = sys.argv[1:]
want = load_file(f"{work}/plain/export/model.safetensors")
for run in (f"{work}/{name}-straight.safetensors", f"{work}/{name}/export/model.safetensors"):
    got = load_file(run)
    diff = max((got[k].float() - want[k].float()).abs().max().item() for k in want)
    print(f"gpu_check: {name}: {run.rsplit('/', 1)[-1]} vs the plain run: max difference {diff:.2g}")
    if got.keys() != want.keys() or diff > 1e-3:
        sys.exit(1)
PYEOF
done
echo "gpu_check: checks took $((SECONDS - started)) s in all so far (exit $checks)"

# vLLM itself (0.34.0, the release rm/serve/vllm_api/ answers the bodies of) serving the plain run's export as a
# classify model in float32: its /classify `probs` against `rm score` (identity activation: rm exports are
# problem_type regression). Not run on this project's lent machines: they reach no package index, and vLLM's wheel
# (with its CUDA dependencies, GBs) cannot travel with the tree. $VLLM_PYTHON names a python that has vLLM 0.34.0;
# without it the check installs vLLM into $work/vllm-venv, and is skipped (and says so) when that install fails.
vllm_py="${VLLM_PYTHON:-$work/vllm-venv/bin/python}"
if [ -z "${VLLM_PYTHON:-}" ] && ! { "$PY" -m venv "$work/vllm-venv" && "$work/vllm-venv/bin/pip" install -q vllm==0.34.0; } \
  >"$work/vllm-install.log" 2>&1; then
  echo "gpu_check: vLLM skipped: pip install vllm==0.34.0 failed (no package index here?), see $work/vllm-install.log"
elif [ ! -f "$work/plain/export/config.json" ]; then
  fail "vLLM: no export of the plain run to serve"
else
  "$PY" - "$work/vllm-texts.jsonl" <<'PYEOF'
import json, sys
asks = ["What is 2 plus {}?", "Name a colour of the sky at hour {}.", "How do I steal car number {}?"]
answers = [" It is {}.", " Sorry, I can't help with that ({}).", " Sure! Do it when nobody watches ({})."]
texts = [f"\n\nHuman: {q.format(i)}\n\nAssistant:{a.format(i + 2)}" for i in range(4) for q in asks for a in answers]
open(sys.argv[1], "w").write("".join(json.dumps({"text": t}) + "\n" for t in texts))
PYEOF
  "$PY" -m rm score --model "$work/plain/export" --input "$work/vllm-texts.jsonl" --out "$work/vllm-rm-score.jsonl" \
    --overwrite >"$work/vllm-rm-score.log" 2>&1 || fail "vLLM: rm score of the texts (log: $work/vllm-rm-score.log)"
  "$vllm_py" -m vllm.entrypoints.cli.main serve "$work/plain/export" --runner pooling --convert classify \
    --dtype float32 --port 8391 --max-model-len 128 --gpu-memory-utilization 0.3 >"$work/vllm-serve.log" 2>&1 &
  vllm_pid=$!
  "$PY" - "$work" <<'PYEOF' || fail "vLLM: /classify against rm score (log: $work/vllm-serve.log)"
import json, sys, time

import httpx

work = sys.argv[1]
texts = [json.loads(line)["text"] for line in open(f"{work}/vllm-texts.jsonl")]
want = [json.loads(line)["reward"] for line in open(f"{work}/vllm-rm-score.jsonl")]
for _ in range(600):  # start-up: model load and CUDA graph capture
    try:
        if httpx.get("http://127.0.0.1:8391/health", timeout=2).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    time.sleep(1)
else:
    sys.exit("gpu_check: vLLM did not start within 600 s")
got = httpx.post("http://127.0.0.1:8391/classify", json={"input": texts}, timeout=120).json()
probs = [d["probs"][0] for d in got["data"]]
diff = max(abs(a - b) for a, b in zip(probs, want, strict=True))
print(f"gpu_check: vLLM 0.34.0 /classify vs rm score on {len(texts)} texts: max |difference| {diff:.2g} "
      f"(rewards {min(want):.4f} to {max(want):.4f}; num_classes {got['data'][0]['num_classes']})")
sys.exit(0 if diff <= 1e-5 else 1)
PYEOF
  kill "$vllm_pid" 2>/dev/null
  wait "$vllm_pid" 2>/dev/null
fi

# The benchmark keeps to --budget itself (configurations it cannot reach are listed as skipped);
# the timeout is only a safety net.
timeout 230 "$PY" scripts/bench_layout.py --budget 180 --seconds 8 --json "${OUT:-/tmp}/bench_layout.json"
[ $? -eq 124 ] && echo "gpu_check: the benchmark ran out of its 230 s"
echo "gpu_check: $((SECONDS - started)) s in all"
[ $tests -ne 0 ] && exit $tests
exit $checks
