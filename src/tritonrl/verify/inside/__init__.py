"""What runs inside the sandbox: the worker that imports and runs a candidate
(`worker.py`, `python -m tritonrl.verify.inside.worker`), the pool's fork server that
starts workers (`zygote.py`), the timing loop (`timing.py`) and its statistics
(`stats.py`), and the guards the worker installs before the candidate loads (`guards/`).

Nothing here is trusted with a verdict: the trusted side (`tritonrl.verify`: funnel,
job, timing phase) re-derives or bounds what the worker reports. The trusted side may
import these modules (the reference's own timing uses `timing.Timer`); they import
nothing from the trusted side but what the worker shares with it (`findings`,
`tensorfile`, the pool's launcher store, and `tritonrl.config.op_key`, the one reading
of an allowed op's name). This `__init__` imports nothing, so that
importing one of them loads no more than it needs.
"""
