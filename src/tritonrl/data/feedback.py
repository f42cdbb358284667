"""The feedback turn: what the verifier found in an answer, as the next user message.

    messages = [*prompt, {"role": "assistant", "content": answer}, feedback_message(verdict)]

One template, whatever the stage the answer reached:

    Your answer was verified. Result: <headline>.
    <details: one or two lines, only what the model can act on>
    <request: what to do next>, then the whole answer again under the OUTPUT CONTRACT.

By stage (`tritonrl.verify.result.STAGES`):

* extract: no ```python block with `class ModelNew` was found; the extractor's reason.
* static / a run-time cheating finding: each flag by its category and the rule it breaks
  (`RULES`); never the detector's details, so the text says what is not allowed, never
  how a check works or how to slip past it.
* compile: the load or compile error, trimmed (`trim_error`: no file paths, bounded).
* correctness: the input set that failed and what it tests (`INPUT_SETS`), and how: the
  comparison's words (the shape, dtype, count of wrong elements and max error) for wrong
  outputs, the trimmed error for one raised while running, or the sandbox limit that
  stopped the run.
* correct and timed: the speedup over the PyTorch reference with its 95% interval,
  asking for a faster kernel; correct and untimed: correct, no timing here, asking for a
  faster kernel if one can be written.

Whether another turn is asked at all is `goes_on`'s rule, one for evaluation
(`eval --turns`) and multi-turn RL (`rl --turns`): not correct, or correct and timed.

What it does NOT do: it verifies nothing (the verdict is given), and adds no model-specific
wording: SFT, RL and evaluation would all see the same text.
"""

from __future__ import annotations

import re
from typing import Any

from tritonrl.verify.result import CHEAT_FLAGS, VerifyResult

ERROR_CHARS = 400  # the most of an error a feedback message quotes

# Each cheating category as the rule it breaks: what is not allowed, nothing of how the
# check finds it. Flags not named here (a new one) read as a generic rule breach.
RULES = {
    "torch_compile": "torch.compile is not allowed; write the kernel in Triton",
    "hidden_code": "code must be plain source: no exec, eval, compile or encoded code",
    "ctypes": "native libraries and ctypes are not allowed",
    "subprocess": "starting processes is not allowed",
    "threading": "threads and background work are not allowed",
    "introspection": "inspecting or changing the caller, the interpreter or other modules "
    "is not allowed",
    "monkeypatch": "replacing functions of torch, triton or other modules is not allowed",
    "try_except_launch": "no try/except around kernel launches: a launch must work",
    "torch_compute": "the computation must happen inside @triton.jit kernels, not in "
    "torch operations the policy does not allow",
    "nn_compute_layer": "calling nn layers to compute is not allowed; read their weights "
    "and compute in a Triton kernel",
    "io": "reading or writing files, sockets or the environment is not allowed",
    "reference_access": "the reference `Model` and its outputs may not be used",
    "no_triton_kernel": "the answer must define and launch at least one @triton.jit kernel",
    "timing_tamper": "touching timers, synchronisation or the profiler is not allowed",
    "side_stream": "work on other CUDA streams is not allowed",
    "torch_fallback": "the result was computed by torch, not by the Triton kernel",
    "no_launch": "forward never launched a Triton kernel",
    "input_mutation": "forward must not modify its inputs",
    "output_aliases_input": "the output must be a new tensor, not a view of an input",
    "output_type": "forward must return plain torch.Tensor outputs",
    "background_thread": "no work may run after forward returns",
    "timer_tampering": "touching timers or the clock is not allowed",
    "output_caching": "outputs must be computed on every call, not cached or reused",
    "impossible_speed": "the kernel cannot have done the work in the time measured",
    "sandbox_violation": "the answer did something the sandbox forbids",
    "forged_verdict": "the answer interfered with the verifier",
    "timing_phase": "forward must do the same work when it is timed",
}

# What each input set tests (`tritonrl.verify.inputs`); a set not named here is its name.
INPUT_SETS = {
    "tiny": "small shapes",
    "seed_a": "the task's shapes, random values",
    "seed_b": "new values written into the same input buffers",
    "shifted": "values rescaled and sign-flipped (negatives, other magnitudes)",
    "odd": "every size moved to an odd value (tails need masks)",
    "float16": "the inputs in float16",
    "bfloat16": "the inputs in bfloat16",
    "float64": "the inputs in float64",
}

LIMITS = {
    "timeout": "it ran past the time limit (a hang, or far too slow)",
    "memory": "it ran out of host memory",
    "gpu_memory": "it ran out of GPU memory",
    "file_size": "it wrote a file larger than allowed",
    "cpu_time": "it used up its CPU time",
    "processes": "it started too many processes or threads",
    "disk": "the machine's disk was full",
}

# How `tritonrl.verify.compare` says outputs differ (anything else is a run-time error).
_COMPARED = re.compile(r"^(?:output \d+: |expected \d+ outputs|NaN where)")
_CONTRACT = "give the whole kernel again, following the OUTPUT CONTRACT"
# A file path (POSIX, two or more parts): quoted as its last part, never the sandbox's.
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+-]+){2,}/?")


def trim_error(text: str | None, limit: int = ERROR_CHARS) -> str:
    """An error as a model should read it: file paths cut to their last part (no sandbox
    or temporary paths), blank lines gone, at most `limit` characters (the start and the
    end, where a traceback keeps the exception, kept)."""
    if not text:
        return "no message"
    text = _PATH.sub(lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1], text)
    text = "\n".join(line.rstrip() for line in text.strip().splitlines() if line.strip())
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} ... {text[-(limit - head - 5) :]}"


def _as_dict(verdict: VerifyResult | dict[str, Any]) -> dict[str, Any]:
    if isinstance(verdict, VerifyResult):
        return verdict.to_dict()
    if isinstance(verdict, dict) and "stage" in verdict:
        return verdict
    raise TypeError(f"feedback needs a VerifyResult or its to_dict(), not {type(verdict).__name__}")


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _cheating(flags: list[str]) -> str:
    found = [f for f in flags if f in CHEAT_FLAGS]
    return "\n".join(f"- {f}: {RULES.get(f, 'the answer breaks the rules')}." for f in found)


def _failed_set(v: dict) -> dict | None:
    return next((s for s in v.get("input_sets") or [] if not s.get("ok")), None)


def _set_words(name: str) -> str:
    what = INPUT_SETS.get(name)
    return f"input set `{name}` ({what})" if what else f"input set `{name}`"


def _speedup_line(v: dict) -> str:
    ci = v.get("speedup_ci")
    interval = f" (95% interval {_x(ci[0])} to {_x(ci[1])})" if ci else ""
    times = ""
    if v.get("runtime_ms") is not None and v.get("ref_runtime_ms") is not None:
        times = f": {v['runtime_ms']:.3g} ms against the reference's {v['ref_runtime_ms']:.3g} ms"
    return f"Speedup over the PyTorch reference: {_x(v['speedup'])}{interval}{times}."


def _parts(v: dict) -> tuple[str, str, str]:
    """(headline, details, request) for verdict `v`."""
    stage, error = v.get("stage"), v.get("error")
    flags = [f for f in v.get("flags") or [] if f in CHEAT_FLAGS]
    if v.get("correct"):
        if v.get("speedup") is not None:
            return (
                "correct on every input set",
                _speedup_line(v),
                "Write a faster kernel (better tiling, fewer passes over memory, fused "
                f"work) that stays correct, and {_CONTRACT}",
            )
        return (
            "correct on every input set",
            "It was not timed here, so no speedup is known.",
            f"If you can make it faster while keeping it correct, do so; {_CONTRACT}",
        )
    if stage == "extract":
        return (
            "no code could be read from the answer",
            f"Reason: {trim_error(error)}.",
            "Put the whole solution, `class ModelNew` included, in exactly one final "
            f"```python block; {_CONTRACT}",
        )
    if flags:
        when = "before it ran" if stage == "static" else "while it ran"
        return (
            f"rejected: it breaks the rules ({when})",
            f"What is not allowed:\n{_cheating(flags)}",
            f"Rewrite it within the rules, the computation in Triton kernels; {_CONTRACT}",
        )
    limit = v.get("limit")
    if limit:
        where = f" on {_set_words(s['name'])}" if (s := _failed_set(v)) else ""
        return (
            f"stopped by a limit{where}",
            f"{LIMITS.get(limit, limit).capitalize()}.",
            f"Make it finish quickly within the limits; {_CONTRACT}",
        )
    if stage == "compile":
        return (
            "it did not compile or load",
            f"Error:\n{trim_error(error)}",
            f"Fix the error; {_CONTRACT}",
        )
    failed = _failed_set(v)
    if failed is not None:
        detail = trim_error(failed.get("detail"))
        if _COMPARED.match(detail):  # the comparison's words: it ran, the values are wrong
            return (
                f"wrong output on {_set_words(failed['name'])}",
                f"How it differed: {detail}.",
                f"Find and fix the bug (indexing, masks, strides, dtypes, numerics); {_CONTRACT}",
            )
        return (
            f"it failed while running on {_set_words(failed['name'])}",
            f"Error:\n{detail}",
            f"Fix the error; {_CONTRACT}",
        )
    return (
        f"it failed at the {stage} stage",
        f"Error:\n{trim_error(error)}",
        f"Fix it; {_CONTRACT}",
    )


def feedback_text(verdict: VerifyResult | dict[str, Any]) -> str:
    """The feedback on one verified answer, in the module's template."""
    headline, details, request = _parts(_as_dict(verdict))
    return f"Your answer was verified. Result: {headline}.\n{details}\n{request}."


def feedback_message(verdict: VerifyResult | dict[str, Any]) -> dict[str, str]:
    """The next user turn of a conversation whose last answer got `verdict`."""
    return {"role": "user", "content": feedback_text(verdict)}


def goes_on(verdict: VerifyResult | dict[str, Any]) -> bool:
    """Whether a conversation whose last answer got `verdict` is asked another turn: not
    correct (the feedback says what failed), or correct and timed (it asks for a faster
    kernel); a correct answer without a speedup (not timed) ends it."""
    v = _as_dict(verdict)
    return not v.get("correct") or v.get("speedup") is not None
