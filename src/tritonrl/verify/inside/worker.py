"""The verifier's worker: runs ONE candidate inside the sandbox, driven by the trusted
side one command at a time.

    python -m tritonrl.verify.inside.worker       (cwd = the work dir the sandbox confines)

The work dir holds `candidate.py` and `sets/<name>.pt` (init inputs, inputs, reference
parameters, seed) written by the trusted side. Commands arrive as JSON lines on stdin;
each gets one JSON line back on a private copy of the original stdout (the candidate's
own prints go to stderr):

    {"op": "load", "device": "cpu", "policy": "strict", "allowed": []}
    {"op": "run", "set": "seed_b", "refill_of": "seed_a", "staged": false}
         -> outputs in out/<set>.pt
    {"op": "time_prep", "set": "seed_a",
     "reference": {"path": "reference.py", "overrides": {...}, "origin": ...}}
         (CUDA only) -> the reference built, the timer's buffers made, each called once
    {"op": "time", "options": {...}}  -> interleaved times (the GPU should be quiet)
    {"op": "time_check", "check": "timing_check", "staged": false} -> out/timed.pt (the
         last timed output), out/timing_check.pt (a call on the check set under the
         guards) and out/graph_check.pt (the captured graph replayed on the check set)
    {"op": "exit"}

Sets written before the worker starts are read (mapped) and their files deleted by
`load`, before the candidate is imported. A full-size problem's sets are too large to
be on disk all at once: the trusted side writes each of those just before the command
that uses it (`"staged": true`), and the worker takes it (maps it, deletes its files)
first thing in that command, before any candidate code of that command runs
(`tritonrl.verify.job.Staging`); the audit hook flags a read of a staged file by
anything else (`reference_access`).

GPU memory: the worker keeps on the device only what later commands use. A set's inputs
are copied from their mapped files (never held twice on the device: the input snapshot
compares against the mapped host copy, a refill copies straight from the host), a set
not needed again is dropped with its model and outputs and the CUDA cache emptied, the
timing phase's reference inputs exist only while `time_prep` and `time` run and only the
candidate's last timed output outlives `time`. CUDA replies carry `gpu` (MB allocated and
peak during the command) and `ooms`, the allocations the CUDA caching allocator refused
during the command (a library such as cuDNN may catch one and compute another way: the
trusted side then reads a wrong output as the GPU's memory, not as a cheat).

The guards (`tritonrl.verify.inside.guards`) are installed BEFORE the candidate is imported.
What this worker reports is NOT trusted: the candidate shares its process and could
forge any reply. Correctness is decided by the trusted side from the saved outputs and
reference outputs that never enter this process; the guard findings here are a second
line behind the static checks, which flag the introspection and monkeypatching a forger
would need. The reference `Model` is loaded here only for the timing phase (its source
is written into the work dir after correctness was decided), to be timed beside the
candidate under the same conditions; the trusted side bounds its effect with a reference
time measured alone (`tritonrl.verify.refcache`).

Findings are also written, the moment a guard sees them, to the findings log
`findings.log` in the work dir (`tritonrl.verify.findings`), opened append-only before
any command: audit-hook findings (ctypes, escapes, introspection, thread starts), each
torch op or host round-trip that breaks the policy (recorded BEFORE the call runs, so a
`.numpy()` or a ctypes read that then crashes on a CUDA tensor is in the log), compiler
calls, and every flag of every reply. The trusted side reads it back when the worker
dies or times out before replying. The candidate can delete or truncate that file; that
only ever drops the flags of a worker that then dies without a reply, whose verdict is a
crash, never a correct one. A forward that raises still reports the torch and host
round-trips it made before raising (but not `no_launch`: it may have failed before its
first launch).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tritonrl.verify.findings import FINDINGS_NAME, FindingsLog

_BLOCK_LIMIT: list[int] = []  # verify.max_block_elements, once `load` has applied it


def _reply(channel, _dumps=json.dumps, **payload: Any) -> None:
    # json.dumps is bound when this module loads, before any candidate code.
    channel.write(_dumps(payload) + "\n")
    channel.flush()


def _short_error(e: BaseException) -> str:
    """`Type: message` plus the candidate's innermost line, never a whole traceback."""
    frames = [
        f for f in traceback.extract_tb(e.__traceback__) if f.filename.endswith("candidate.py")
    ]
    where = f" (candidate.py line {frames[-1].lineno})" if frames else ""
    text = _compile_error_text(e) if _kernel_compile_error(e) else str(e)[:300]
    return f"{type(e).__name__}: {_block_hint(text)}{where}"


def _compile_error_text(e: BaseException) -> str:
    """Triton's CompilationError says where (`at L:C:`, then the kernel's source down to
    that line and a caret) and keeps why in its chain of causes: the position, the line
    it points at and the innermost cause's message, each bounded (the source in between
    would crowd out the reason)."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    parts = [lines[0][:40]] if lines else []
    if len(lines) >= 2 and lines[-1].strip() == "^":
        parts.append(f"`{lines[-2].strip()[:160]}`")
    reason, cause = "", e
    for _ in range(16):  # the chain, bounded
        if cause is None:
            break
        if _kernel_compile_error(cause):
            message = getattr(cause, "error_message", None)
            reason = str(message) if message else reason
        else:
            reason = f"{type(cause).__name__}: {cause}"
        cause = cause.__cause__
    return " ".join(parts + ([reason[:240]] if reason else []))


def _block_hint(text: str) -> str:
    """Triton's refusal of a block over verify.max_block_elements, with the key named and
    what to do (the interpreter raises it at the launch, the compiler at compile time)."""
    if not (_BLOCK_LIMIT and "maximum tensor numel" in text):
        return text
    return (
        f"{text} (verify.max_block_elements = {_BLOCK_LIMIT[0]}: a block this large "
        "spills registers and compiles for minutes; use smaller tiles and loop)"
    )


def _limit_blocks(limit: int) -> None:
    """Triton's largest block lowered to `limit` elements for this candidate: every block
    type Triton makes (an `arange`, a broadcast, a load's tile) checks the module global
    `triton._utils.TRITON_MAX_TENSOR_NUMEL` when it is made, so a larger tile fails to
    compile at once instead of compiling past the wall clock. A Triton without that
    global keeps its own limit."""
    import triton._utils as tu  # the worker's own Triton (the zygote imported it)

    if isinstance(getattr(tu, "TRITON_MAX_TENSOR_NUMEL", None), int):
        tu.TRITON_MAX_TENSOR_NUMEL = min(limit, tu.TRITON_MAX_TENSOR_NUMEL)
        _BLOCK_LIMIT[:] = [tu.TRITON_MAX_TENSOR_NUMEL]


def _kernel_compile_error(e: BaseException) -> bool:
    """Whether `e` is Triton failing to compile a kernel (its JIT, at the first launch of a
    specialisation). Read from the loaded module, never importing Triton for it; a
    candidate raising the class itself only loses its own credit."""
    errors = sys.modules.get("triton.compiler.errors")
    return errors is not None and isinstance(e, errors.CompilationError)


def _plain(obj: Any) -> Any:
    """An output as it is written for the trusted side: exact tensors detached (a host
    copy of a device tensor is not made here: `tensorfile` streams it to the file), a
    host tensor copied (a plain copy cannot carry lazy behaviour); anything else None."""
    import torch

    if isinstance(obj, torch.Tensor):
        if type(obj) is not torch.Tensor:  # exact type is checked before this
            return None
        t = obj.detach()
        return t if t.device.type != "cpu" else torch.Tensor(t.clone())
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    return obj


def _take_set(path: Path) -> dict:
    """One set file, mapped, and its files deleted. Mapped, not read: a full-size set's
    GB stay file pages until moved to the device (the mapping outlives the unlinked name,
    and so does its disk space: it is freed when the set's host tensors are dropped)."""
    from tritonrl.verify import tensorfile  # lazy: torch loads after the worker starts
    from tritonrl.verify.inside import guards  # lazy: torch loads after the worker starts

    with guards.taking_sets():
        data = tensorfile.load(path, mmap=True)
        for name in [path, *tensorfile.parts(path)]:
            name.unlink()
    return data


def _take_sets() -> dict[str, dict]:
    return {path.stem: _take_set(path) for path in sorted(Path("sets").glob("*.pt"))}


# The functions the worker frees and measures GPU memory with, bound by `load` before the
# candidate is imported (a candidate that replaces torch's later does not reach them).
_MEMORY: dict[str, Any] = {}


def _bind_memory_functions() -> None:
    import gc

    import torch

    cuda = torch.cuda
    _MEMORY.update(
        collect=gc.collect, initialized=cuda.is_initialized, empty_cache=cuda.empty_cache,
        stats=cuda.memory_stats, allocated=cuda.memory_allocated,
        peak=cuda.max_memory_allocated, reset_peak=cuda.reset_peak_memory_stats,
    )  # fmt: skip


def _gpu_memory(reset: bool = False) -> dict[str, float] | None:
    """This process's CUDA memory: MB allocated now, peak since the last reset, and the
    allocations the caching allocator refused so far (`ooms`); None without CUDA (or
    before `load`). `reset`: the peak starts again from now (after reading)."""
    if not _MEMORY or not _MEMORY["initialized"]():
        return None
    try:  # a failure here says nothing, and what it reports can only lower the verdict
        now = {
            "allocated_mb": round(_MEMORY["allocated"]() / 2**20, 1),
            "peak_mb": round(_MEMORY["peak"]() / 2**20, 1),
            "ooms": int(_MEMORY["stats"]().get("num_ooms", 0)),
        }
        if reset:
            _MEMORY["reset_peak"]()
    except Exception:  # noqa: BLE001
        return None
    return now


def _nbytes(obj: Any) -> int:
    """Bytes of the tensors in `obj` (nested lists and tuples)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(x) for x in obj)
    return 0


def _release(big: bool = True) -> None:
    """Hand what this process no longer uses back to the device: tensors in reference
    cycles collected (when `big`: a collection costs milliseconds), the CUDA cache
    emptied. The trusted side's reference passes and other lanes' workers share the GPU."""
    if not _MEMORY:
        return
    if big:
        _MEMORY["collect"]()
    if _MEMORY["initialized"]():
        _MEMORY["empty_cache"]()


BIG_BYTES = 64 << 20  # a set whose inputs are this large is worth a collection when dropped


def _big(inputs: Any) -> bool:
    """Whether a set's `inputs` are large enough to be worth a collection when dropped."""
    return _nbytes(inputs) >= BIG_BYTES


def _copies(inputs: list) -> list:
    """The reference's own copy of the candidate's inputs (tensors cloned)."""
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


class Worker:
    def __init__(self, channel, findings: FindingsLog | None = None):
        self.channel = channel
        self.findings = findings
        self.module = None
        self.device = "cpu"
        self.policy = "strict"
        self.allowed: frozenset[str] = frozenset()
        self.cache: dict[str, tuple[Any, list]] = {}  # set name -> (model, input buffers)
        self.timer = None  # the calibrated timer, built by `time_prep`
        self.timed: dict[str, Any] | None = None  # time_prep's callables
        self.measured: dict[str, Any] | None = None  # the last `time`'s measurement

    # -- commands ---------------------------------------------------------------------
    def load(self, cmd: dict) -> dict:
        from tritonrl.verify.inside import guards  # lazy: torch loads after the worker starts

        self.device = cmd.get("device", "cpu")
        self.policy = cmd.get("policy", "strict")
        self.allowed = frozenset(cmd.get("allowed", ()))
        if cmd.get("max_block_elements"):  # before any kernel of the candidate is made
            _limit_blocks(int(cmd["max_block_elements"]))
        if self.findings is not None:  # every finding reaches the log as it happens
            guards.SINKS.append(self.findings.write)
        store = os.environ.get("TRITONRL_LAUNCHERS")
        if store and self.device == "cuda":  # a pool job: Triton's C modules, pre-built
            from tritonrl.verify.inside import launcher_cache  # lazy: a CUDA pool job's only

            launcher_cache.install(store, str(Path(launcher_cache.REQUESTS).resolve()))
        if self.device == "cuda":  # the context now, while the pool's GPU gate is not held
            import torch

            try:
                torch.empty(1, device="cuda")
            except Exception as e:  # noqa: BLE001 - the machine's fault, said as such
                return {"ok": False, "error": f"the worker has no usable GPU: {_short_error(e)}"}
        # Everything a candidate could tamper with is captured before it is imported.
        _bind_memory_functions()
        self.timers = guards.capture_timers()
        self.launches = guards.LaunchCounter()
        self.launches.install()
        self.compile_calls: list[str] = []
        self._ban_compilers()
        self.threads = guards.thread_snapshot()
        # The input sets are read now and their files deleted, before any candidate code
        # runs: one that could read them would compute the answers at import or in
        # __init__, where the op audit does not look (docs/hacks.md #15).
        self.sets = _take_sets()
        start = time.perf_counter()
        try:
            spec = importlib.util.spec_from_file_location(
                "candidate", Path("candidate.py").resolve()
            )
            module = importlib.util.module_from_spec(spec)
            sys.modules["candidate"] = module
            spec.loader.exec_module(module)
        except BaseException as e:  # noqa: BLE001 - any failure to import is the verdict
            return {"ok": False, "error": _short_error(e)}
        if not isinstance(getattr(module, "ModelNew", None), type):
            return {"ok": False, "error": "the code defines no class ModelNew"}
        self.module = module
        flags = self._common_flags()
        return {"ok": True, "seconds": time.perf_counter() - start, "flags": flags}

    def run(self, cmd: dict) -> dict:
        name = cmd["set"]
        try:
            data = self._set(name, cmd.get("staged"))
        except Exception as e:  # noqa: BLE001 - a set file that cannot be read: a verdict
            return {"ok": False, "error": f"input set {name}: {_short_error(e)}"}
        keep = cmd.get("keep", True)  # a later set is refilled into it, or it is timed
        big = _big(data.get("inputs"))
        try:
            return self._run(name, data, cmd.get("refill_of"), keep)
        finally:
            if not keep:  # its memory (and its file's disk space) is free for the next set
                self.sets.pop(name, None)
            elif self.device != "cpu":  # on the device now: the mapped host copy goes
                data["inputs"] = None
            del data
            if self.device != "cpu":
                _release(big)

    def _set(self, name: str, staged: bool | None) -> dict:
        """Set `name`'s data: its file taken now when the trusted side staged it just
        before this command (before any candidate code of the command runs), else what
        `load` took."""
        if staged:
            data = _take_set(Path("sets") / f"{name}.pt")
            if not isinstance(data, dict):  # not the trusted side's (it was replaced)
                raise ValueError("the set file holds no set")
            self.sets[name] = data
        return self.sets[name]

    def _run(self, name: str, data: dict, refill_of: str | None, keep: bool) -> dict:
        import torch

        from tritonrl.tasks.runtime import to_device  # lazy: torch loads after the worker starts
        from tritonrl.verify import tensorfile  # lazy: torch loads after the worker starts
        from tritonrl.verify.inside import guards  # lazy: torch loads after the worker starts

        audit = None
        try:
            if refill_of:
                model, inputs = self.cache[refill_of]
                guards.refill_(inputs, data["inputs"])  # straight from the mapped file
            else:
                model = self._build(data)
                inputs = to_device(data["inputs"], self.device)
            # On a GPU the mapped host copy is the snapshot: the inputs are not held twice
            # on the device while the candidate runs.
            host = data["inputs"] if self.device != "cpu" else None
            before = guards.snapshot_inputs(inputs, host)
            self.launches.reset()
            audit = guards.OpAudit(self.launches, policy=self.policy, allowed=self.allowed)
            with torch.no_grad(), audit:
                out = model(*inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001 - a crashing forward is a verdict
            # Findings stand even when forward then fails: the host round-trips and torch
            # compute it did first (a `.numpy()` that raises on a CUDA tensor is recorded
            # before it runs), a banned compiler, an escape. Not `no_launch`: forward may
            # have failed before its first launch.
            flags = self._fallback_flags(audit)
            flags.update(self._common_flags())
            return {"ok": False, "error": _short_error(e), "flags": flags,
                    "kernel_compile": _kernel_compile_error(e)}  # fmt: skip
        flags: dict[str, str] = {}
        if self.launches.count == 0:
            flags["no_launch"] = "forward launched no Triton kernel"
        flags.update(self._fallback_flags(audit))
        mutated = guards.inputs_mutated(before, inputs)
        del before
        if mutated:
            flags["input_mutation"] = "; ".join(mutated)
        for problem in guards.check_output_types(out, inputs):
            key = "output_aliases_input" if "alias" in problem else "output_type"
            flags[key] = problem
        flags.update(self._common_flags())
        if keep:
            self.cache[name] = (model, inputs)
        Path("out").mkdir(exist_ok=True)
        if "output_type" not in flags:
            tensorfile.save(_plain(out), Path("out") / f"{name}.pt")
        return {"ok": True, "launches": self.launches.count, "flags": flags}

    def time_prep(self, cmd: dict) -> dict:
        """Ready the timing phase: the reference built with the candidate's parameters,
        the timer built from the timers captured before the import, and one call of each
        (first calls load libraries and kernels). Nothing here is timed, so the pool runs
        it while other lanes use the GPU. The reference's inputs are a copy made for the
        call and dropped after it (`time` makes its own)."""
        import torch

        name = cmd["set"]
        model, inputs = self.cache[name]
        try:
            reference = self._reference(cmd["reference"], self.sets[name])
            if self.timer is None:
                t = self.timers  # the loop as imported before the candidate loaded
                self.timer = t["tritonrl.verify.inside.timing.Timer"](
                    t["torch.cuda.Event"], t["torch.cuda.synchronize"], t["time.perf_counter"],
                    t["torch.cuda._sleep"], cpu_clock=t["time.thread_time"],
                )  # fmt: skip
            with torch.no_grad():
                model(*inputs)
                reference(*_copies(inputs))
            self.timer.sync()
        except BaseException as e:  # noqa: BLE001 - a failure while timing is a verdict
            return {"ok": False, "error": _short_error(e), "flags": self._common_flags()}
        finally:
            _release(_big(inputs))  # the timing windows wait for this side
        self.timed, self.measured = {"set": name, "reference": reference}, None
        return {"ok": True, "flags": self._common_flags()}

    def time(self, cmd: dict) -> dict:
        """Time the candidate and the reference interleaved (after `time_prep`), the
        reference on a copy of the inputs made for this measurement. Only the candidate's
        last output outlives it (`time_check` saves it): the trusted side times the
        reference alone next, on the same GPU, and a full-size problem's copies and
        outputs are GBs each."""
        import torch

        if self.timed is None:
            return {"ok": False, "error": "time before time_prep", "flags": {}}
        model, inputs = self.cache[self.timed["set"]]
        reference = self.timed["reference"]
        self.measured = None  # a second measurement's outputs replace the first's
        try:
            options = self.timers["tritonrl.verify.inside.timing.TimingOptions"](
                **cmd.get("options", {})
            )
            ref_inputs = _copies(inputs)
            fns = {"new": lambda: model(*inputs), "ref": lambda: reference(*ref_inputs)}
            with torch.no_grad():
                m = self.timer.measure(fns, options, watch=("new",), keep=("new",))
        except BaseException as e:  # noqa: BLE001 - a failure while timing is a verdict
            _release()
            return {"ok": False, "error": _short_error(e), "flags": self._common_flags()}
        graphed = sorted(m["graphed"])
        # The reference's copies and graph (and the outputs it holds) go; the
        # candidate's graph is replayed on the check set (`time_check`).
        m["graphed"] = {k: v for k, v in m["graphed"].items() if k == "new"}
        fns = ref_inputs = None  # noqa: F841 - the closures' copies are freed now
        # Still inside the GPU's timing window: a collection (tens of ms) only where the
        # copies were large enough for the reference's time alone to need their memory.
        _release(_big(inputs))
        self.measured = m
        series = {
            k: {"times_ms": v["times_ms"], "off_stream": v["off_stream"], "lag_us": v["lag_us"]}
            for k, v in m["series"].items()
        }
        launch = m.get("launch") or {"series": {}, "interrupted": 0}
        return {
            "ok": True,
            "series": series,
            "launch": {
                k: {"times_ms": v["times_ms"], "off_stream": v.get("off_stream", False)}
                for k, v in launch["series"].items()
            },
            "launch_interrupted": launch["interrupted"],
            "notes": m["notes"],
            "graphed": graphed,
            "preroll_us": m["preroll_us"],
            "rerun": m["rerun"],
            "interrupted": m["interrupted"],
            "sync_us": m["sync_us"],
            "flags": self._common_flags(),
        }

    def time_check(self, cmd: dict) -> dict:
        """Save the last timed output, then refill the inputs with the fresh `check` set
        and run once more under the guards (and replay the graph, if one was timed), so
        what was timed is shown to compute the right thing."""
        import torch

        from tritonrl.verify import tensorfile  # lazy: torch loads after the worker starts
        from tritonrl.verify.inside import guards  # lazy: torch loads after the worker starts

        m, timed = self.measured, self.timed
        if m is None or timed is None:
            return {"ok": False, "error": "time_check before time", "flags": {}}
        flags: dict[str, str] = {}
        try:
            Path("out").mkdir(exist_ok=True)
            last = m["last"].pop("new", None)
            tensorfile.save(_plain(last), Path("out") / "timed.pt")
            del last  # saved: its device memory is free for the check call
            check = self._set(cmd["check"], cmd.get("staged")) if cmd.get("check") else None
            if check is not None:
                model, inputs = self.cache[timed["set"]]
                guards.refill_(inputs, check["inputs"])  # straight from the mapped file
                self.launches.reset()
                audit = guards.OpAudit(self.launches, policy=self.policy, allowed=self.allowed)
                with torch.no_grad(), audit:
                    out = model(*inputs)
                torch.cuda.synchronize()
                if self.launches.count == 0:
                    flags["no_launch"] = "the call after timing launched no Triton kernel"
                flags.update(self._fallback_flags(audit))
                tensorfile.save(_plain(out), Path("out") / "timing_check.pt")
                del out
                if "new" in m["graphed"]:  # what was timed is the graph: replay it too
                    out = m["graphed"]["new"]()
                    torch.cuda.synchronize()
                    tensorfile.save(_plain(out), Path("out") / "graph_check.pt")
                    del out
        except BaseException as e:  # noqa: BLE001 - a failure while checking is a verdict
            return {"ok": False, "error": _short_error(e), "flags": self._common_flags()}
        finally:
            _release(_big(self.cache[timed["set"]][1]))
        flags.update(self._common_flags())
        return {"ok": True, "flags": flags}

    def _reference(self, spec: dict, data: dict):
        """The task's reference `Model` (its source written by the trusted side only for
        the timing phase) with the same parameters the candidate got."""
        import torch

        from tritonrl.tasks.shapes import build_module  # lazy: torch loads after the worker starts

        source = Path(spec["path"]).read_text(encoding="utf-8")
        overrides = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in (spec.get("overrides") or {}).items()
        }
        module = build_module(source, overrides, spec.get("origin", "<task>"))
        torch.manual_seed(data["seed"])
        reference = module.Model(*data["init_inputs"])
        reference.load_state_dict(data["state_dict"])
        if data.get("dtype") is not None:
            reference = reference.to(getattr(torch, data["dtype"]))
        return reference.to(self.device)

    # -- helpers ----------------------------------------------------------------------
    def _build(self, data: dict):
        import torch

        torch.manual_seed(data["seed"])
        model = self.module.ModelNew(*data["init_inputs"])
        if not isinstance(model, torch.nn.Module):
            raise TypeError("ModelNew(...) is not a torch.nn.Module")
        ref_state = data["state_dict"]
        own = model.state_dict()
        # Same parameter layout as the reference: load its values so both compute with
        # identical weights (seeding alone breaks when the layouts differ).
        if set(own) == set(ref_state) and all(own[k].shape == ref_state[k].shape for k in own):
            model.load_state_dict(ref_state)
        dtype = data.get("dtype")
        if dtype is not None:
            model = model.to(getattr(torch, dtype))
        return model.to(self.device)

    def _fallback_flags(self, audit: Any) -> dict[str, str]:
        """`torch_fallback` for the policy violations the op audit recorded, if any."""
        ops = audit.violations(self.policy, self.allowed) if audit is not None else []
        if not ops:
            return {}
        return {"torch_fallback": "torch computed inside forward: " + ", ".join(sorted(ops)[:8])}

    def _common_flags(self) -> dict[str, str]:
        from tritonrl.verify.inside import guards  # lazy: torch loads after the worker starts

        flags: dict[str, str] = {}
        tampered = guards.timers_intact(self.timers)
        if tampered:
            flags["timer_tampering"] = "; ".join(tampered)
        threads = guards.new_threads(self.threads)
        if threads:
            flags["background_thread"] = "; ".join(threads)
        if self.compile_calls:
            flags["torch_compile"] = "called " + ", ".join(sorted(set(self.compile_calls)))
        # Escape attempts, raw memory, gc scans, threads started (the audit hook's log).
        for problem in guards.audit_findings():
            flag, _, detail = problem.partition(": ")
            flags[flag] = f"{flags[flag]}; {detail}" if flag in flags else detail
        return flags

    def _ban_compilers(self) -> None:
        """Compiler as author (docs/hacks.md #20): the compiler entry points record the
        call and fail."""
        import torch
        import torch._dynamo

        def banned(name: str):
            def call(*args, **kwargs):
                self.compile_calls.append(name)
                if self.findings is not None:
                    self.findings.write(f"torch_compile: called {name}")
                raise RuntimeError(f"{name} is not allowed: the kernel must be written in Triton")

            return call

        torch.compile = banned("torch.compile")
        torch._dynamo.optimize = banned("torch._dynamo.optimize")


def main() -> None:
    # Replies go to a private copy of stdout; fd 1 becomes stderr so that anything the
    # candidate prints cannot be mistaken for a reply.
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # The same neutral argv for every call: the install path (which may hold words like
    # "check" or "test") tells the candidate nothing about the phase (docs/hacks.md #16).
    sys.argv = ["tritonrl-worker"]
    # Opened before any candidate code: findings reach it even if the worker then dies.
    findings = FindingsLog(FINDINGS_NAME)
    worker = Worker(channel, findings)
    handlers = {
        "load": worker.load, "run": worker.run, "time_prep": worker.time_prep,
        "time": worker.time, "time_check": worker.time_check,
    }  # fmt: skip
    # Local references: a candidate that rebinds the module's globals (`__main__._reply`)
    # does not reach the reply path (docs/hacks.md #13, #14).
    reply, log_flags = _reply, findings.write_flags
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("op") == "exit":
            break
        handler = handlers.get(cmd.get("op"))
        if handler is None:
            reply(channel, ok=False, error=f"unknown op {cmd.get('op')!r}")
            continue
        if cmd.get("op") != "load" and worker.module is None:
            reply(channel, ok=False, error="no candidate loaded")
            continue
        before = _gpu_memory(reset=True)
        answer = handler(cmd)
        after = _gpu_memory()
        if after is not None:  # what the command cost the GPU, and allocations refused
            answer["gpu"] = {k: after[k] for k in ("allocated_mb", "peak_mb")}
            answer["ooms"] = after["ooms"] - (before["ooms"] if before else 0)
        log_flags(answer.get("flags") or {})
        reply(channel, **answer)
    channel.close()


if __name__ == "__main__":
    main()
