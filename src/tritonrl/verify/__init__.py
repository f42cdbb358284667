"""Verifier: staged, sandboxed checking of candidate Triton kernels (the reward).

    from tritonrl.verify import verify
    result = verify(task, completion_text)      # -> VerifyResult, never raises

Names are imported lazily so that light modules (`result`, the worker's `guards`) load
without the whole funnel.
"""

__all__ = ["VerifyConfig", "VerifyResult", "verify"]


def __getattr__(name: str):
    if name == "verify":
        from tritonrl.verify.funnel import verify  # lazy: the funnel loads torch

        return verify
    if name == "VerifyResult":
        from tritonrl.verify.result import VerifyResult  # lazy: as every name here

        return VerifyResult
    if name == "VerifyConfig":
        from tritonrl.config import VerifyConfig  # lazy: as every name here

        return VerifyConfig
    raise AttributeError(f"module 'tritonrl.verify' has no attribute {name!r}")
