#!/usr/bin/env bash
# SmolLM2-135M-Instruct before and after training, measured by the product's own commands
# on one GPU: the base (a GGUF converted), then `tritonrl pipeline` on configs/smollm2-1gpu
# (builtin + generator SFT, GRPO, eval of the RL model on the run's held-out tasks, report),
# `tritonrl eval` of the base and of the SFT model on the same held-out tasks (each started
# beside the pipeline as soon as its model exists), and `tritonrl eval --compare` of the
# three.
#
#   bash bench/smollm2_compare.sh MODEL.gguf OUT [--section.key VALUE ...]
#
# The overrides go to the pipeline and every eval (e.g. --rl.max_steps 4). Writes into OUT:
# compare.md (the --compare table), compare.json, the three summary.json files, the
# pipeline's report.md and each command's log. The GGUF reaches a device machine in parts
# with bench/carry_model.sh. Measures; asserts nothing.
set -euo pipefail
gguf=${1:?MODEL.gguf} out=${2:?OUT}
shift 2
work=${WORK:-/tmp/smollm2-compare}
mkdir -p "$work" "$out"
t=(python3 -m tritonrl)
cfg=(--config smollm2-1gpu)
run=$work/run
stamp() { date +%s; }
start=$(stamp)
"${t[@]}" convert-gguf "$gguf" --out "$work/base" --overwrite > "$out/convert.log" 2>&1
"${t[@]}" pipeline "${cfg[@]}" --run-dir "$run" --model.name_or_path "$work/base" "$@" \
  > "$out/pipeline.log" 2>&1 &
pipe=$!
samples=$(python3 -c "
from tritonrl.config_loader import load_config
print(load_config('smollm2-1gpu', cuda_available=True).pipeline.eval_samples)")
done_stage() {  # wait for the pipeline's stage $1 to be done (1 if the pipeline ended first)
  until python3 -c "
import sys
from tritonrl.runs import Run
sys.exit(0 if Run.open('$run').status('$1') == 'done' else 1)" 2>/dev/null; do
    kill -0 "$pipe" 2>/dev/null || return 1
    sleep 5
  done
}
evaluate() {  # the base (after prepare: the held-out tasks exist) or the SFT model, beside
  local name=$1 model
  shift
  done_stage "$([[ $name == base ]] && echo prepare || echo sft)" || return 1
  model=$work/base
  [[ $name == sft ]] && model=$(python3 -c "
from tritonrl.runs import Run
r = Run.open('$run')
print(r.artifact('sft', 'adapter' if r.has_artifact('sft', 'adapter') else 'model'))")
  "${t[@]}" eval --model "$model" --tasks "run:$run" --samples "$samples" \
    --out "$work/eval-$name" "${cfg[@]}" "$@" > "$out/eval-$name.log" 2>&1
  cp "$work/eval-$name/summary.json" "$out/summary-$name.json"
  echo "eval $name: $(( $(stamp) - start )) s"
}
shift_args=("$@")
evaluate base "${shift_args[@]}" & base_job=$!
evaluate sft "${shift_args[@]}" & sft_job=$!
wait "$pipe" || { tail -40 "$out/pipeline.log"; tail -60 "$run"/logs/*.log; exit 1; }
echo "pipeline: $(( $(stamp) - start )) s"
wait "$base_job" || { tail -40 "$out/eval-base.log"; exit 1; }
wait "$sft_job" || { tail -40 "$out/eval-sft.log"; exit 1; }
cp "$run/eval/summary.json" "$out/summary-rl.json"
cp "$run/report/report.md" "$out/report.md"
"${t[@]}" eval --compare "$work/eval-base" "$work/eval-sft" "$run/eval" > "$out/compare.md"
"${t[@]}" eval --compare "$work/eval-base" "$work/eval-sft" "$run/eval" --json > "$out/compare.json"
"${t[@]}" status "$run" --json > "$out/status.json"
echo "all: $(( $(stamp) - start )) s"
cat "$out/compare.md"
