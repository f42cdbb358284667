"""Static checks, where torch may be used: shape arithmetic in forward, `__init__`,
input helpers and `if __name__ == "__main__":` blocks are not compute offences; code
that runs on import is checked whatever guard it hides behind (`static/scopes.py`).
"""

from __future__ import annotations

import pytest
from static_cases import candidate, flags

from tritonrl.verify.static import static_check


def test_shape_arithmetic_is_not_compute() -> None:
    src = candidate(
        """
        M, K = x.shape
        N = w.shape[1]
        total = M * N + K
        blocks = triton.cdiv(total, 128) * 2 - 1
        stride = x.stride(0) * 4
        if x.numel() > 0 and x.dtype == torch.float32 and w is not None:
            half = -(M // 2)
        """
    )
    assert static_check(src) == []


def test_main_block_and_input_helpers_are_not_checked() -> None:
    src = candidate(
        "",
        epilogue="""

def get_inputs():
    return [torch.randn(4, 4).relu(), torch.rand(4, 4) * 2]


if __name__ == "__main__":
    import time
    t = time.perf_counter()
    print(torch.allclose(ModelNew()(*get_inputs()), torch.zeros(4)))
""",
    )
    assert static_check(src) == []


def test_init_may_use_torch() -> None:
    src = candidate(
        "",
        init="""
        self.w = nn.Parameter(torch.randn(n, m) / n ** 0.5)
        self.b = nn.Parameter(torch.zeros(m))
        nn.init.xavier_uniform_(self.w)
        self.lin = nn.Linear(n, m)
        self.norm = nn.LayerNorm(m)
        self.w_t = self.w.detach().t().contiguous()
        """,
    )
    assert static_check(src) == []


@pytest.mark.parametrize(
    "guard",
    ['if __name__ != "__main__":\n    {}', 'if __name__ == "__main__":\n    pass\nelse:\n    {}'],
)
def test_code_that_runs_on_import_is_checked(guard: str) -> None:
    src = candidate("", epilogue="\n" + guard.format("torch.allclose = print") + "\n")
    assert "monkeypatch" in flags(src)
