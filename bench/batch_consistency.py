"""Does a busy batch give an honest kernel the verdict a single `verify` gives it?

    python bench/batch_consistency.py [--rounds 2] [--hostile 8] [--json OUT.json]

A 60-case mixed batch: every builtin level-2 task's shipped Triton solution twice (two
textually different copies, so the pool verifies both), plus hostile kernels from the
test suite, through the worker pool as `tritonrl verify --batch` runs it, `--rounds`
times, each with a cold reference-time cache (a fresh file). Each honest case's verdict
(correct, flags) is compared with a single `verify` of the same kernel (a fresh worker
each, `--single-threads` at a time). Prints the
disagreements and a summary line; exit status 1 if any honest case disagrees. CUDA by
default (`--device cpu` to try the script).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin, load_source
from tritonrl.verify import verify
from tritonrl.verify.pool.pool import VerifierPool

HOSTILE = Path(__file__).resolve().parent.parent / "tests" / "verify" / "hostile"


def _hostile_cases(n: int) -> list:
    cases = []
    for path in sorted(HOSTILE.glob("c*.py")):
        text = path.read_text(encoding="utf-8")
        m = re.search(r"^Expect: task=(\S+)", text, re.MULTILINE)
        if not m or "hang" in path.name or "bomb" in path.name:
            continue  # hangs cost their whole timeout: not what this measures
        cases.append((load_source(m.group(1)).tasks[0], text, path.stem))
        if len(cases) == n:
            break
    return cases


def _verdict(r) -> dict:
    return {"correct": r.correct, "flags": sorted(r.flags), "error": r.error}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hostile", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--single-threads", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    honest = [(t, t.solution) for t in load_builtin("level2").tasks if t.solution]
    cases = [(t, code, f"{t.name} copy 1") for t, code in honest]
    cases += [(t, code + "\n# copy 2\n", f"{t.name} copy 2") for t, code in honest]
    cases += _hostile_cases(args.hostile)
    config = VerifyConfig(device=args.device, ref_time_cache="off")
    with ThreadPoolExecutor(args.single_threads) as ex:  # each its own fresh worker
        verdicts = ex.map(lambda pair: _verdict(verify(pair[0], pair[1], config)), honest)
        single = {t.id: v for (t, _), v in zip(honest, verdicts, strict=True)}
    print(f"{len(single)} single verifies: {sum(v['correct'] for v in single.values())} correct")
    report, bad = {"single": single, "rounds": []}, 0
    for rnd in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            cold = VerifyConfig(device=args.device, ref_time_cache=str(Path(tmp) / "ref.json"))
            started = time.perf_counter()
            with VerifierPool(cold, workers=args.workers) as pool:
                results = pool.verify_many([(t, c) for t, c, _ in cases], cold)
            seconds = time.perf_counter() - started
        rows = []
        for (task, _, label), r in zip(cases, results, strict=True):
            row = {"case": label, "task": task.id, **_verdict(r)}
            rows.append(row)
            want = single.get(task.id) if "copy" in label else None
            if want and (want["correct"], want["flags"]) != (row["correct"], row["flags"]):
                bad += 1
                print(f"round {rnd}: {label}: batch {row} single {want}")
        report["rounds"].append({"seconds": seconds, "rows": rows})
        agree = sum(1 for (t, _, lbl), r in zip(cases, results, strict=True) if "copy" in lbl)
        print(f"round {rnd}: {len(cases)} cases in {seconds:.1f} s; {agree} honest cases compared")
    hostile_ok = all(
        not row["correct"] for rnd in report["rounds"] for row in rnd["rows"]
        if "copy" not in row["case"]
    )  # fmt: skip
    print(f"{bad} honest verdicts differ from a single verify; every hostile case refused: "
          f"{hostile_ok}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
