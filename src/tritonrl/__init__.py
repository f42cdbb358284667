"""tritonrl: train language models to write correct, fast Triton kernels, and verify them
honestly. See README.md for the two commands that run everything.

Imported before torch, it makes idle OpenMP threads sleep rather than spin
(`OMP_WAIT_POLICY=PASSIVE`, unless the environment sets it): the process that verifies
runs many small CPU tensor operations beside busy GPU workers, and on the H100 its
spinning threads took a core per candidate from the workers (docs/benchmarks.md); and
it puts torch's large host allocations in transparent huge pages where the kernel allows
them (`THP_MEM_ALLOC_ENABLE=1`): copying a full-size problem's 6.4 GB outputs off the
GPU took 2.4 s instead of 5.4 s on the H100 machine, most of it page faults. Neither
changes anything once torch is imported, or anything a user set.
"""

import os
import sys

if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
