#!/usr/bin/env bash
# Does an rm export work in the tools people plug reward models into? One venv per client, built from the
# package registry (torch==2.13.0 first, as in the Makefile), each loading fresh exports (random-init,
# LoRA, local pretrained model whose tokenizer adds BOS; one with attribute outputs beside the reward and its
# reward-only export) and scoring real HH conversations its own way; every output must match `rm score` to 1e-4.
# Plain transformers runs in three versions: 4.57 and 5.x in their own venvs, 4.51 in RewardBench's (its pin).
# Then `rm serve` of each export, called through TRL's and OpenRLHF's own remote-reward paths (rows
# "-> rm serve"), held to the same tolerance. Prints two tables: the one-output exports, then the attribute
# export and its reward-only export, one column per output (a client that refuses a multi-output model is a note).
#
#   scripts/check_clients.sh [VENV_DIR]     # default /work/venvs (or $CLIENT_VENVS); `make clients`
#
# Needs: the real HH-RLHF file harmless-base/test.jsonl.gz where scripts/get_hh_data.py finds it ($RM_HH_DATA,
# data/hh-rlhf after `make data`, or ../shared/data/hh-rlhf beside the clone; the cases
# scripts/clients/make_exports.py scores; it stops at once without it), and about 35 minutes.
# Venvs are reused once built (delete VENV_DIR/rm-client-* to rebuild). First run: about 10 minutes of pip.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
VENVS=${1:-${CLIENT_VENVS:-/work/venvs}}
PY=${PY:-python3}                           # builds the client venvs
RM_PY=${RM_PY:-$REPO/.venv/bin/python}      # rm's own venv: trains, exports, runs `rm score`
WORK=${WORK:-$(mktemp -d)}
TOL=1e-4
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
HH=$("$RM_PY" -c "import sys; sys.path.insert(0, '$REPO/scripts'); from get_hh_data import hh_data_root; print(hh_data_root())")/harmless-base/test.jsonl.gz   # what make_exports.py reads
[ -f "$HH" ] || { echo "error: $HH not found: the client checks score its real HH conversations (make data, or set RM_HH_DATA)" >&2; exit 1; }
mkdir -p "$VENVS" "$WORK/logs"

# build NAME PIP_ARGS...: a venv with torch pinned first, then the client; a failed install is remembered.
build() {
  local name=$1 dir=$VENVS/rm-client-$1
  shift
  [ -f "$dir/.installed" ] && return 0
  rm -rf "$dir"
  "$PY" -m venv "$dir" && "$dir/bin/pip" install -q torch==2.13.0 && "$dir/bin/pip" install -q "$@" \
    && touch "$dir/.installed"
}

echo "exports and rm score references -> $WORK" >&2
PYTHONPATH=$REPO "$RM_PY" "$REPO/scripts/clients/make_exports.py" "$WORK" > "$WORK/logs/exports.log" 2>&1 \
  || { tail -20 "$WORK/logs/exports.log"; exit 1; }

ROWS=$WORK/rows.jsonl
: > "$ROWS"
check() {  # check CLIENT VENV_NAME [LOG_NAME]
  local log=$WORK/logs/${3:-$2}.log
  "$VENVS/rm-client-$2/bin/python" "$REPO/scripts/clients/check_client.py" "$1" "$WORK" >> "$ROWS" \
    2> "$log" || echo "{\"client\": \"$1\", \"kind\": \"-\", \"path\": \"-\", \"error\": \"crashed, see $log\"}" >> "$ROWS"
}
failed() {  # failed NAME WHY
  echo "{\"client\": \"$1\", \"kind\": \"-\", \"path\": \"-\", \"error\": \"$2\"}" >> "$ROWS"
}

for spec in "tf4 transformers==4.57.6" "tf5 transformers==5.24.0" "trl trl==1.16.0" "rewardbench rewardbench==0.1.4"; do
  set -- $spec
  name=$1
  shift
  echo "client $name: $*" >&2
  if build "$name" "$@" > "$WORK/logs/build-$name.log" 2>&1; then
    case $name in
      tf4|tf5) check transformers "$name" ;;
      rewardbench) check transformers rewardbench transformers-4.51 && check rewardbench rewardbench ;;
      *) check "$name" "$name" ;;
    esac
  else
    failed "$name" "pip install $* failed, see $WORK/logs/build-$name.log"
  fi
done

# OpenRLHF 0.11.2 pins flash-attn==2.8.3, published as source only; its setup.py imports torch without
# declaring it (pip's build isolation: "No module named 'torch'") and builds a CUDAExtension (without
# isolation: "CUDA_HOME environment variable is not set"), so `pip install openrlhf` fails without CUDA. Its model code is installed without dependencies, with
# what get_llm_for_sequence_regression imports (transformers 5.15.0 as pinned, peft, deepspeed built
# without its CUDA ops); check_client.py stands in for flash_attn's unused import.
echo "client openrlhf: openrlhf==0.11.2" >&2
ORL=$VENVS/rm-client-openrlhf
if [ ! -f "$ORL/.installed" ]; then
  {
    rm -rf "$ORL" && "$PY" -m venv "$ORL" && "$ORL/bin/pip" install -q torch==2.13.0 \
      && { if "$ORL/bin/pip" install -q openrlhf==0.11.2; then echo "full install worked"; \
           else echo "full install failed (above); installing without dependencies"; fi; } \
      && "$ORL/bin/pip" install -q --no-deps openrlhf==0.11.2 \
      && "$ORL/bin/pip" install -q transformers==5.15.0 peft accelerate einops pylatexenc sympy setuptools wheel aiohttp \
      && DS_BUILD_OPS=0 "$ORL/bin/pip" install -q --no-build-isolation deepspeed==0.19.6 \
      && touch "$ORL/.installed"
  } > "$WORK/logs/build-openrlhf.log" 2>&1
fi
if [ -f "$ORL/.installed" ]; then check openrlhf openrlhf; else failed openrlhf "install failed, see $WORK/logs/build-openrlhf.log"; fi

# rm serve: one server per export on a free loopback port, then each client's own remote-reward path against it:
# TRL's GRPOTrainer._calculate_rewards with rm.client.trl_reward_func (rm.client from the repository on
# PYTHONPATH: it imports no torch and nothing else of rm; it needs httpx), and OpenRLHF's
# SingleTurnAgentExecutor, which posts to /get_reward with aiohttp (a dependency of OpenRLHF's that the
# no-dependencies install above leaves out). Both are added to venvs built before this step existed.
echo "rm serve: TRL's and OpenRLHF's remote-reward paths" >&2
SERVERS=()
stop_servers() {  # SIGTERM: the server finishes what is in flight and exits 0
  local pid
  for pid in "${SERVERS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${SERVERS[@]}"; do wait "$pid" || echo "rm serve (pid $pid) exited $? after SIGTERM" >&2; done
  SERVERS=()
}
trap stop_servers EXIT
wait_url() {  # wait_url LOG: the URL rm serve printed, once its /health answers (3 minutes at most)
  local url i
  for i in $(seq 900); do
    url=$(grep -o 'on http://127\.0\.0\.1:[0-9]*' "$1" | head -1 | cut -c4-)
    if [ -n "$url" ] && "$RM_PY" -c "import httpx, sys; sys.exit(httpx.get('$url/health').status_code != 200)" \
      2> /dev/null; then
      echo "$url"
      return 0
    fi
    sleep 0.2
  done
  return 1
}
SERVED="{"
for kind in random lora bos attributes reward-only; do
  PYTHONPATH=$REPO "$RM_PY" -m rm serve "$WORK/$kind/export" --port 0 --num-threads 1 \
    > "$WORK/logs/serve-$kind.log" 2>&1 &
  SERVERS+=($!)
done
for kind in random lora bos attributes reward-only; do
  url=$(wait_url "$WORK/logs/serve-$kind.log") || { echo "rm serve of $kind did not start:"; tail -20 "$WORK/logs/serve-$kind.log"; exit 1; }
  SERVED="$SERVED\"$kind\": \"$url\", "
done
echo "${SERVED%, }}" > "$WORK/served.json"
if [ -f "$VENVS/rm-client-trl/.installed" ]; then
  "$VENVS/rm-client-trl/bin/python" -c "import httpx" 2> /dev/null \
    || "$VENVS/rm-client-trl/bin/pip" install -q "httpx>=0.27" > "$WORK/logs/build-trl-httpx.log" 2>&1
  PYTHONPATH=$REPO check trl-served trl trl-served
else
  failed trl-served "the TRL venv was not built"
fi
if [ -f "$ORL/.installed" ]; then
  "$ORL/bin/python" -c "import aiohttp" 2> /dev/null \
    || "$ORL/bin/pip" install -q aiohttp > "$WORK/logs/build-openrlhf-aiohttp.log" 2>&1
  check openrlhf-served openrlhf openrlhf-served
else
  failed openrlhf-served "the OpenRLHF venv was not built"
fi
stop_servers

"$RM_PY" "$REPO/scripts/clients/table.py" "$ROWS" "$TOL"
