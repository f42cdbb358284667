"""One lock for CPython's AST conversions in this process.

CPython 3.11 keeps the recursion depth of its AST conversions (`ast.parse`, and
`compile()` of an AST tree) in state shared by every thread, so two conversions at once
can fail with "SystemError: AST constructor recursion depth mismatch" (gh-106905, fixed
in 3.12). The verifier parses candidates and tasks from many threads (a pool's lanes,
jobs prepared ahead), beside whatever else the process parses: a trainer, or pytest
formatting a traceback. Every conversion tritonrl makes holds `AST_LOCK`; code of ours
that parses beside it (the test suite's report hook) takes it too. It does not guard
conversions made by other libraries without it.
"""

from __future__ import annotations

import threading

AST_LOCK = threading.RLock()
