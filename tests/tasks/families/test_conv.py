"""The convolution family: 1-D and 2-D direct and transposed convolutions and depthwise
2-D ones, with and without bias, pass the solution check; samples pass the verifier; the
draws cover groups, dilation, strides, asymmetric kernels and output padding."""

import pytest
import torch

from tritonrl.tasks.families import draw_one, family_task
from tritonrl.tasks.runtime import import_source

SIGNATURES = [
    f"conv:{dims}:{kind}:{bias}"
    for dims, kind in [("1d", "conv"), ("1d", "transposed"), ("2d", "conv"),
                       ("2d", "transposed"), ("2d", "depthwise")]
    for bias in ("bias", "nobias")
]  # fmt: skip


def test_every_signature_is_drawn():
    assert {draw_one("conv", s).signature for s in range(200)} == set(SIGNATURES)


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_solution_check(signature, solution_passes):
    solution_passes("conv", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature",
    ["conv:2d:transposed:bias", pytest.param("conv:1d:conv:nobias", marks=pytest.mark.slow)],
)
def test_a_sample_passes_the_verifier(signature, verifier_passes):
    verifier_passes("conv", lambda sig: sig == signature)


@pytest.mark.slow
@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_verifier(signature, verifier_passes):
    verifier_passes("conv", lambda sig: sig == signature)


def test_the_draws_cover_the_layer_options():
    # what KernelBench's convolutions vary: each option drawn both ways somewhere
    sources = [draw_one("conv", s).source for s in range(300)]
    for wanted in ("groups = 2", "groups = 4", "dilation = 2", "stride = 2",
                   "output_padding = 1", "kernel_size = (", "kernel_size = 1\n"):  # fmt: skip
        assert any(wanted in src for src in sources), wanted


@pytest.mark.parametrize(
    "layer",
    [
        lambda: torch.nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                                groups=2),
        lambda: torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0),
                                         output_padding=(1, 2), dilation=(1, 2), groups=2),
        lambda: torch.nn.ConvTranspose1d(3, 4, 5, stride=3, padding=2, output_padding=1,
                                         dilation=2, bias=False),
    ],
)  # fmt: skip
def test_the_kernels_match_pytorch_on_layers_the_draws_rarely_give(layer, tmp_path):
    # asymmetric everything, groups and output padding at once, through the solution of
    # the matching signature with its layer swapped for this one
    torch.manual_seed(0)
    ref = layer()
    dims = "1d" if isinstance(ref, torch.nn.ConvTranspose1d) else "2d"
    kind = "conv" if type(ref) is torch.nn.Conv2d else "transposed"
    sig = f"conv:{dims}:{kind}:{'bias' if ref.bias is not None else 'nobias'}"
    seed = next(s for s in range(300) if draw_one("conv", s, small=True).signature == sig)
    solution = import_source(family_task("conv", seed, small=True).solution, "conv_sol", tmp_path)
    model = solution.ModelNew.__new__(solution.ModelNew)
    torch.nn.Module.__init__(model)
    model.conv = ref
    x = torch.randn(2, ref.in_channels, *((9, 7) if dims == "2d" else (11,)))
    torch.testing.assert_close(model(x), ref(x), atol=1e-5, rtol=1e-5)


def test_every_kind_compiles_for_an_sm90_gpu(compiles_for_sm90):
    tiles = [{"BLOCK_O": o, "BLOCK_CO": c, "BLOCK_H": h, "BLOCK_W": w, "K": 3, "STRIDE": 2,
              "PAD": 1, "DIL": 2, "KH": 3, "KW": 2, "SH": 2, "SW": 1, "PH": 1, "PW": 0,
              "DH": 1, "DW": 2}
             for o, c, h, w in [(128, 32, 16, 64), (16, 4, 1, 8)]]  # fmt: skip
    solutions = []
    for sig in SIGNATURES:
        seed = next(s for s in range(300) if draw_one("conv", s).signature == sig)
        solutions.append((family_task("conv", seed).solution, tiles))
    assert compiles_for_sm90(solutions) == []
