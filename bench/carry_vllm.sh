#!/usr/bin/env bash
# Take vLLM (and what `from vllm import LLM` needs beyond the GPU image) to the device
# machine, whose calls carry at most 64 MiB each: packed here, in parts, one call a part.
#
#   bash bench/carry_vllm.sh pack [PARTS]     # here: wheels -> one site folder -> .tar.xz
#                                             # -> .carry-1 ... .carry-PARTS
#   bash bench/carry_model.sh receive .carry-K   # there, one call a part (as for a model)
#   bash bench/carry_vllm.sh unpack           # there, in the last call: join, check the
#                                             # sha256, extract; prints the site folder
#
# 2 parts (of an 87 MB .tar.xz) travel beside .whl:
#   run(carry=[".carry-1", ".whl"], command="bash bench/carry_model.sh receive .carry-1")
#   run(carry=[".carry-2", ".whl"], command="bash bench/carry_model.sh receive .carry-2 &&
#       S=$(bash bench/carry_vllm.sh unpack | tail -1) && export PYTHONPATH=$S:... &&
#       VLLM_USE_FLASHINFER_SAMPLER=0 python3 -m pytest -m gpu tests/evaluate -k vllm")
#
# Then `export PYTHONPATH=$(that folder):$PYTHONPATH VLLM_USE_FLASHINFER_SAMPLER=0` and
# vLLM runs there (FlashInfer is not carried: vLLM's sampler imports it unless that
# variable is 0, and then samples top-k/top-p in PyTorch). The image
# holds torch 2.11.0+cu130, which is the torch vLLM 0.26.0 pins. What is left out of the
# vllm wheel, to make it travel: the FlashAttention-2 binary (Hopper runs FlashAttention-3,
# which is kept, and vLLM falls back to its Triton attention where neither serves), the
# fused-MoE binary (imported only when present; dense models do not use it), the vllm-rs
# front end, and the DeepGEMM and SM100 FMHA source trees (FP8 and Blackwell paths). The
# parts, their sha256 and how to receive them work as in bench/carry_model.sh.
set -euo pipefail
VLLM=${VLLM_VERSION:-0.26.0}
# What `import vllm.entrypoints.llm` and the V1 engine import beyond the image (found by
# importing them in a fresh environment), the versions vLLM pins, what `vllm serve` (under
# `trl vllm-serve`, GRPO's server mode) imports beyond those, and trl/datasets for the
# tests' fixtures.
DEPS=(
  "vllm==$VLLM" apache-tvm-ffi==0.1.10 xgrammar==0.2.7 "llguidance<1.8,>=1.7"
  outlines_core==0.2.14 lark==1.2.2 lm-format-enforcer==0.11.3 interegular
  compressed-tensors==0.17.0 depyf==0.20.0 astor "fastapi<0.137,>=0.133" starlette
  openai openai-harmony anthropic httpx2 httpcore2 truststore sniffio jiter distro
  docstring-parser cachetools cbor2 msgspec pyzmq pybase64 blake3 partial-json-parser
  setproctitle python-json-logger ijson watchfiles prometheus-fastapi-instrumentator
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection
  uvicorn model-hosting-container-standards jmespath supervisor
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
)
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux1_x86_64)
DROP=(vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/_moe_C_stable_libtorch.abi3.so
  vllm/vllm-rs vllm/third_party/deep_gemm vllm/third_party/fmha_sm100)
SITE=${TRITONRL_VLLM_SITE:-/tmp/tritonrl-vllm-site}

pack() {
  local parts=${1:-3} tmp
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$tmp/wheels" "${DEPS[@]}"
  mkdir -p "$tmp/site"
  for w in "$tmp"/wheels/*.whl; do
    python3 -m zipfile -e "$w" "$tmp/site"
  done
  (cd "$tmp/site" && rm -rf "${DROP[@]}")
  tar -C "$tmp/site" -cf - . | xz -9 -T0 > "$tmp/vllm-site.tar.xz"
  ls -l "$tmp/vllm-site.tar.xz"
  bash "$(dirname "$0")/carry_model.sh" split "$tmp/vllm-site.tar.xz" "$parts"
  rm -rf "$tmp"
}

unpack() {
  local archive
  archive=$(bash "$(dirname "$0")/carry_model.sh" join | tail -1)
  rm -rf "$SITE" && mkdir -p "$SITE"
  xz -dc "$archive" | tar -C "$SITE" -xf -
  chmod +x "$SITE"/bin/* 2>/dev/null || true
  echo "$SITE"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  unpack) unpack ;;
  *) echo "usage: $0 pack [PARTS] | unpack" >&2; exit 2 ;;
esac
