#!/usr/bin/env bash
# Does an rm export work in the tools people plug reward models into? One venv per client, built from the
# package registry (torch==2.13.0 first, as in the Makefile), each loading fresh exports (random-init,
# LoRA, local pretrained model whose tokenizer adds BOS) and scoring real HH conversations its own way;
# every reward must match `rm score` to 1e-4. Prints one table.
#
#   scripts/check_clients.sh [VENV_DIR]     # default /work/venvs (or $CLIENT_VENVS); `make clients`
#
# Venvs are reused once built (delete VENV_DIR/rm-client-* to rebuild). First run: about 10 minutes of pip.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
VENVS=${1:-${CLIENT_VENVS:-/work/venvs}}
PY=${PY:-python3}                           # builds the client venvs
RM_PY=${RM_PY:-$REPO/.venv/bin/python}      # rm's own venv: trains, exports, runs `rm score`
WORK=${WORK:-$(mktemp -d)}
TOL=1e-4
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
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
check() {  # check CLIENT VENV_NAME
  "$VENVS/rm-client-$2/bin/python" "$REPO/scripts/clients/check_client.py" "$1" "$WORK" >> "$ROWS" \
    2> "$WORK/logs/$2.log" || echo "{\"client\": \"$2\", \"kind\": \"-\", \"path\": \"-\", \"error\": \"crashed, see $WORK/logs/$2.log\"}" >> "$ROWS"
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
    case $name in tf4|tf5) check transformers "$name" ;; *) check "$name" "$name" ;; esac
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
      && "$ORL/bin/pip" install -q transformers==5.15.0 peft accelerate einops pylatexenc sympy setuptools wheel \
      && DS_BUILD_OPS=0 "$ORL/bin/pip" install -q --no-build-isolation deepspeed==0.19.6 \
      && touch "$ORL/.installed"
  } > "$WORK/logs/build-openrlhf.log" 2>&1
fi
if [ -f "$ORL/.installed" ]; then check openrlhf openrlhf; else failed openrlhf "install failed, see $WORK/logs/build-openrlhf.log"; fi

"$RM_PY" "$REPO/scripts/clients/table.py" "$ROWS" "$TOL"
