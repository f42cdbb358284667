#!/usr/bin/env bash
# The whole chain in one command, from a checkout: prepare -> tiny model -> SFT -> RL ->
# eval -> report, each stage skipped when the run's manifest says it is done.
#
#   ./run_pipeline.sh [--config FILE|NAME] [--run-dir DIR] [--store URL] [--section.key VALUE ...]
#
# The arguments go to `tritonrl pipeline` unchanged (with none: the embedded tiny-cpu
# default, the run in ./runs/pipeline). It uses the `tritonrl` of the active environment,
# else the checkout's .venv; with neither, it makes .venv as the README's first command
# does: the CPU build of torch, unless python3 already imports a torch (a CUDA build you
# installed), which the venv then shares. It does not install CUDA builds itself. The exit
# status is the pipeline's: 0 when every stage is done, 1 naming the stage that failed
# and its log, 2 for bad arguments.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if command -v tritonrl > /dev/null; then
  exec tritonrl pipeline "$@"
fi
if [ ! -x "$here/.venv/bin/tritonrl" ]; then
  echo "run_pipeline.sh: no tritonrl found; installing it into $here/.venv" >&2
  if python3 -c "import torch" 2> /dev/null; then
    python3 -m venv --system-site-packages "$here/.venv"
  else
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/pip" install torch==2.13.0
  fi
  "$here/.venv/bin/pip" install -e "$here[train,report]"
fi
exec "$here/.venv/bin/tritonrl" pipeline "$@"
