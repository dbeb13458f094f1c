#!/usr/bin/env bash
# Does an rm export work in the tools people plug reward models into? One venv per client, each installed from
# its full pin list (scripts/clients/locks/NAME.txt: every package of the venv at one version, torch==2.13.0
# included, so a client's transformers is the one its row names), each loading fresh exports (random-init,
# LoRA, local pretrained model whose tokenizer adds BOS; one with attribute outputs beside the reward and its
# reward-only export) and scoring real HH conversations its own way; every output must match `rm score` to 1e-4.
# Plain transformers runs in three versions: 4.57 and 5.x in their own venvs, 4.51 in RewardBench's (its pin).
# Then `rm serve` of each export, called through TRL's and OpenRLHF's own remote-reward paths, verl 0.9's reward
# loop with rm's adapter (scripts/clients/check_verl.py) and vLLM 0.34's pooling request and response classes
# (scripts/clients/check_vllm_bodies.py) (rows "-> rm serve"), held to the same tolerance. Then the end-of-sequence convention (data.eos): TRL's
# RewardTrainer evaluating and training on an export trained with `data.eos: eos` (token ids, eval_accuracy and
# rewards against rm's own), and OpenRLHF's local reward model on PPO-shaped sequences with exports trained with
# `eos` and `space_eos`; the export without it (`random`) beside them, to show the mismatch. Prints three tables:
# the one-output exports, the attribute export and its reward-only export (one column per output; a client that
# refuses a multi-output model is a note), and the EOS checks (scripts/clients/eos_checks.py).
#
#   scripts/check_clients.sh [VENV_DIR]     # default $CLIENT_VENVS, else .venv-clients/ in the repository;
#                                           # `make clients CLIENT_VENVS=DIR`
#
# Refreshing a lock (a newer client, or transformers): delete scripts/clients/locks/NAME.txt and run this script.
# A client without a lock is built from its recipe below (the newest releases that fit it) and its `pip freeze`
# is written as the new lock; read the diff, run the checks, commit the lock. A venv records the lock it was
# built from (VENV/.installed) and is rebuilt when the lock changes; delete VENV_DIR/rm-client-* to force it.
#
# Needs: the real HH-RLHF file harmless-base/test.jsonl.gz where scripts/get_hh_data.py finds it ($RM_HH_DATA,
# data/hh-rlhf after `make data`, or ../shared/data/hh-rlhf beside the clone; the cases
# scripts/clients/make_exports.py scores; it stops at once without it), and about 40 minutes.
# Venvs are reused once built. First run: about 10 minutes of pip.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
VENVS=${1:-${CLIENT_VENVS:-$REPO/.venv-clients}}
LOCKS=$REPO/scripts/clients/locks
PY=${PY:-python3}                           # builds the client venvs
RM_PY=${RM_PY:-$REPO/.venv/bin/python}      # rm's own venv: trains, exports, runs `rm score`
WORK=${WORK:-$(mktemp -d)}
TOL=1e-4
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
HH=$("$RM_PY" -c "import sys; sys.path.insert(0, '$REPO/scripts'); from get_hh_data import hh_data_root; print(hh_data_root())")/harmless-base/test.jsonl.gz   # what make_exports.py reads
[ -f "$HH" ] || { echo "error: $HH not found: the client checks score its real HH conversations (make data, or set RM_HH_DATA)" >&2; exit 1; }
mkdir -p "$VENVS" "$WORK/logs" && VENVS=$(cd "$VENVS" && pwd)

# The recipes a lock is made from. torch==2.13.0 always first: on these machines it is a local CPU build, where a
# bare `torch` would pull a multi-GB CUDA build.
#
# OpenRLHF 0.11.2 pins flash-attn==2.8.3, published as source only; its setup.py imports torch without declaring
# it (pip's build isolation: "No module named 'torch'") and builds a CUDAExtension (without isolation:
# "CUDA_HOME environment variable is not set"), so `pip install openrlhf` fails without CUDA. Its model code is
# installed without dependencies, with what get_llm_for_sequence_regression imports (transformers 5.15.0 as
# pinned, peft, deepspeed built without its CUDA ops), aiohttp (its remote-reward client) and datasets (which
# its RewardDataset's module imports, for eos_checks.py); check_client.py
# stands in for flash_attn's unused import. Its lock is installed the same way: --no-deps, deepspeed's source
# built without isolation and without CUDA ops.
recipe() {  # recipe NAME DIR: install the client's newest fitting releases into venv DIR
  local pip="$2/bin/pip"
  "$pip" install -q torch==2.13.0 || return 1
  case $1 in
    tf4) "$pip" install -q transformers==4.57.6 ;;
    tf5) "$pip" install -q transformers==5.24.0 ;;
    trl) "$pip" install -q trl==1.16.0 transformers==5.24.0 "httpx>=0.27" ;;  # httpx: rm.client, for trl-served
    rewardbench) "$pip" install -q rewardbench==0.1.4 ;;
    verl) "$pip" install -q verl==0.9.1 "httpx>=0.27" ;;  # its reward loop, run on the CPU by check_verl.py
    vllm)  # the pooling protocol classes only (its engine needs CUDA; these modules import on the CPU): vllm
      # declares a torch 2.14 pin and CUDA-only packages, so it goes in without them, with what the modules import
      "$pip" install -q --no-deps vllm==0.34.0 \
        && "$pip" install -q transformers==5.22.2 "fastapi>=0.133,<0.137" cachetools msgspec pybase64 cbor2 pyzmq \
          aiohttp cloudpickle uvloop py-cpuinfo prometheus_client openai oss-harmony psutil requests pillow httpx ;;
    openrlhf)
      "$pip" install -q --no-deps openrlhf==0.11.2 \
        && "$pip" install -q transformers==5.15.0 peft accelerate einops pylatexenc sympy setuptools wheel aiohttp \
          datasets \
        && DS_BUILD_OPS=0 "$pip" install -q --no-build-isolation deepspeed==0.19.6 ;;
  esac
}

from_lock() {  # from_lock NAME DIR LOCK: every package at its locked version
  local pip="$2/bin/pip"
  "$pip" install -q -c "$3" torch==2.13.0 || return 1
  if [ "$1" = openrlhf ] || [ "$1" = vllm ]; then  # installed without the dependencies they declare (recipe)
    "$pip" install -q -c "$3" setuptools wheel \
      && DS_BUILD_OPS=0 "$pip" install -q --no-deps --no-build-isolation -r "$3"
  else
    "$pip" install -q -r "$3"
  fi
}

# build NAME: the client's venv, from its lock (or from its recipe, writing the lock); a failed install is remembered
build() {
  local name=$1 dir=$VENVS/rm-client-$1 lock=$LOCKS/$1.txt
  [ -f "$lock" ] && cmp -s "$lock" "$dir/.installed" && return 0
  rm -rf "$dir"
  "$PY" -m venv "$dir" || return 1
  if [ -f "$lock" ]; then
    from_lock "$name" "$dir" "$lock" || return 1
  else
    echo "no lock $lock: building $name from its recipe and writing the lock" >&2
    recipe "$name" "$dir" || return 1
    mkdir -p "$LOCKS"
    { echo "# $name: pip freeze of a venv built by scripts/check_clients.sh's recipe; refresh: see that script's header"
      "$dir/bin/pip" freeze --all | grep -v '^pip==' | sed 's/^torch==\(.*\)+cpu$/torch==\1/'
    } > "$lock"
  fi
  cp "$lock" "$dir/.installed"
}

CLIENTS=(tf4 tf5 trl rewardbench openrlhf verl vllm)
declare -A BUILT
for name in "${CLIENTS[@]}"; do
  echo "client $name: $([ -f "$LOCKS/$name.txt" ] && echo "from its lock" || echo "from its recipe")" >&2
  build "$name" > "$WORK/logs/build-$name.log" 2>&1 && BUILT[$name]=1
done
if [ -n "${BUILD_ONLY:-}" ]; then  # BUILD_ONLY=1: build (or refresh) the venvs and their locks, and stop
  for name in "${CLIENTS[@]}"; do
    if [ -n "${BUILT[$name]:-}" ]; then echo "$name: built"; else echo "$name: failed, see $WORK/logs/build-$name.log"; fi
  done
  exit 0
fi

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

for name in "${CLIENTS[@]}"; do
  if [ -z "${BUILT[$name]:-}" ]; then
    failed "$name" "installing its venv failed, see $WORK/logs/build-$name.log"
    continue
  fi
  case $name in
    tf4|tf5) check transformers "$name" ;;
    rewardbench) check transformers rewardbench transformers-4.51 && check rewardbench rewardbench ;;
    verl|vllm) ;;  # called against rm serve below
    *) check "$name" "$name" ;;
  esac
done

# The EOS convention: TRL's RewardTrainer and OpenRLHF's local reward model on the exports trained with
# data.eos (rows of their own, with "eos_check"; scripts/clients/eos_checks.py).
EOS_ROWS=$WORK/eos_rows.jsonl
: > "$EOS_ROWS"
for name in trl openrlhf; do
  log=$WORK/logs/eos-$name.log
  if [ -n "${BUILT[$name]:-}" ]; then
    "$VENVS/rm-client-$name/bin/python" "$REPO/scripts/clients/eos_checks.py" "$name" "$WORK" >> "$EOS_ROWS" 2> "$log" \
      || echo "{\"client\": \"$name\", \"kind\": \"-\", \"path\": \"-\", \"error\": \"crashed, see $log\"}" >> "$EOS_ROWS"
  else
    echo "{\"client\": \"$name\", \"kind\": \"-\", \"path\": \"-\", \"error\": \"its venv was not built\"}" >> "$EOS_ROWS"
  fi
done

# rm serve: one server per export on a free loopback port, then each client's own remote-reward path against it:
# TRL's GRPOTrainer._calculate_rewards with rm.client.trl_reward_func (rm.client from the repository on
# PYTHONPATH: it imports no torch and nothing else of rm; it needs httpx), and OpenRLHF's
# SingleTurnAgentExecutor, which posts to /get_reward with aiohttp (installed by its recipe: the no-dependencies
# install of OpenRLHF leaves it out).
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
if [ -n "${BUILT[trl]:-}" ]; then PYTHONPATH=$REPO check trl-served trl trl-served; else failed trl-served "the TRL venv was not built"; fi
if [ -n "${BUILT[openrlhf]:-}" ]; then check openrlhf-served openrlhf openrlhf-served; else failed openrlhf-served "the OpenRLHF venv was not built"; fi
served() {  # served NAME SCRIPT: a client script of its own (verl's reward loop, vLLM's bodies) against rm serve
  local log=$WORK/logs/$1-served.log
  if [ -z "${BUILT[$1]:-}" ]; then failed "$1-served" "the $1 venv was not built"; return; fi
  PYTHONPATH=$REPO "$VENVS/rm-client-$1/bin/python" "$REPO/scripts/clients/$2" "$WORK" >> "$ROWS" 2> "$log" \
    || failed "$1-served" "crashed, see $log"
}
served verl check_verl.py
served vllm check_vllm_bodies.py
stop_servers

"$RM_PY" "$REPO/scripts/clients/table.py" "$ROWS" "$TOL"
status=$?
echo
"$RM_PY" "$REPO/scripts/clients/eos_table.py" "$EOS_ROWS" || status=1
exit $status
