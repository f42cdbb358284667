"""Verifier: staged, sandboxed checking of candidate Triton kernels (the reward).

    from tritonrl.verify import verify
    result = verify(task, completion_text)      # -> VerifyResult, never raises
"""

from tritonrl.config import VerifyConfig
from tritonrl.verify.funnel import verify
from tritonrl.verify.result import VerifyResult

__all__ = ["VerifyConfig", "VerifyResult", "verify"]
