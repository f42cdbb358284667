#!/usr/bin/env bash
# Separate verifier processes on one GPU at once: does each still time its candidates
# alone (tritonrl.verify.pool.gate's lock across processes)? Each GROUP (a quoted list of
# --match patterns) goes to its own `bench/kernelbench_fullsize.py` process, which
# verifies its problems one at a time; the rows of all go to OUT.jsonl, and the speedups
# a copy of the reference earned (1.0 is right) are printed with the problem-seconds.
#
#   bash bench/verify_processes.sh KernelBench OUT "GROUP 1" "GROUP 2" ...
#
# To compare with other code, run it with PYTHONPATH naming that code's src.
set -uo pipefail
root=$1 out=$2
shift 2
rm -f "$out".[0-9]*.jsonl  # kernelbench_fullsize.py appends
k=0
for group in "$@"; do
  k=$((k + 1))
  # shellcheck disable=SC2086 # a group is a list of patterns
  python3 bench/kernelbench_fullsize.py "$root" --match $group --out "$out.$k.jsonl" \
    > "$out.$k.log" 2>&1 &
done
wait
cat "$out".[0-9]*.jsonl > "$out.jsonl"
python3 - "$out.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
timed = [r for r in rows if r.get("speedups")]
for measure in ("device", "launch"):
    s = [r["speedups"][measure] for r in timed if measure in r["speedups"]] or [None]
    print(f"{measure}: min {min(s)}, median {statistics.median(s)}, max {max(s)}" if s[0]
          else f"{measure}: nothing timed")
print(len(rows), "problems, verdicts", sorted({r["verdict"] for r in rows}),
      "below 0.9 in one measure:", sum(min(r["speedups"].values()) < 0.9 for r in timed),
      "problem-seconds:", round(sum(r["seconds"] for r in rows), 1))
PY
