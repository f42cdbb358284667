"""The worker pool: many candidates verified at once on one machine. `pool.py`
(`VerifierPool`, shared pools) schedules jobs onto lanes (`lane.py`: one sandboxed fork
server each), under the GPU-memory budget (`budget.py`) and the per-GPU gate that keeps
timing apart from other work (`gate.py`); `launchers.py` builds Triton's host-side C
modules once, in trusted code, for every lane.

What it does NOT do: judge a candidate (the funnel does, in the trusted process) or run
one (the worker does, inside the sandbox: `tritonrl.verify.inside`, whose
`launcher_cache` is the worker's side of `launchers.py`). This `__init__` imports
nothing.
"""
