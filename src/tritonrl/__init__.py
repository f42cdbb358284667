"""tritonrl: train language models to write correct, fast Triton kernels, and verify them
honestly. See README.md for the two commands that run everything.

Imported before torch, it makes idle OpenMP threads sleep rather than spin
(`OMP_WAIT_POLICY=PASSIVE`, unless the environment sets it): the process that verifies
runs many small CPU tensor operations beside busy GPU workers, and on the H100 its
spinning threads took a core per candidate from the workers (docs/benchmarks.md). It
changes nothing once torch is imported, and nothing a user set.
"""

import os
import sys

if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
