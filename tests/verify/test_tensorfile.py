"""Tensors through the work dir (`tritonrl.verify.tensorfile`): large tensors as raw bytes
beside a small header, rebuilt exactly (mapped or read), and a forged file from the
worker refused with an error rather than trusted."""

import pytest
import torch

from tritonrl.verify import tensorfile


def _sample():
    big = torch.randn(600, 1000)  # 2.4 MB: raw
    return {
        "inputs": [big, torch.arange(10), (big[:, :3].bfloat16(), 2.5)],
        "state_dict": {"w": torch.randn(2048, 256, dtype=torch.float64)},
        "seed": 7,
        "dtype": None,
        "mask": torch.rand(1200, 1000) > 0.5,
    }


@pytest.mark.parametrize("mmap", [False, True])
def test_a_saved_object_comes_back_exactly(tmp_path, mmap):
    obj = _sample()
    path = tmp_path / "set.pt"
    tensorfile.save(obj, path)
    assert len(tensorfile.parts(path)) == 3  # the three tensors of at least 1 MB
    back = tensorfile.load(path, mmap=mmap)
    assert back["seed"] == 7 and back["dtype"] is None
    assert torch.equal(back["inputs"][0], obj["inputs"][0])
    assert torch.equal(back["inputs"][1], obj["inputs"][1])
    got, scale = back["inputs"][2]
    assert scale == 2.5 and got.dtype == torch.bfloat16
    assert torch.equal(got, obj["inputs"][2][0])  # a strided view comes back contiguous
    assert torch.equal(back["state_dict"]["w"], obj["state_dict"]["w"])
    assert torch.equal(back["mask"], obj["mask"]) and back["mask"].dtype == torch.bool
    if mmap:  # the mapping outlives the names, as the worker unlinks them
        for p in [path, *tensorfile.parts(path)]:
            p.unlink()
        assert float(back["inputs"][0].sum()) == pytest.approx(float(obj["inputs"][0].sum()))


def test_a_truncated_raw_part_is_refused(tmp_path):
    path = tmp_path / "out.pt"
    tensorfile.save(torch.randn(1 << 20), path)
    part = tensorfile.parts(path)[0]
    part.write_bytes(part.read_bytes()[:100])
    with pytest.raises(ValueError, match="expected"):
        tensorfile.load(path)


@pytest.mark.parametrize(
    "mark",
    [
        {"__tritonrl_raw__": 5, "shape": [4], "dtype": "float32"},  # no such part
        {"__tritonrl_raw__": 0, "shape": [-4], "dtype": "float32"},
        {"__tritonrl_raw__": 0, "shape": [4], "dtype": "object"},
        {"__tritonrl_raw__": "../../etc/passwd", "shape": [4], "dtype": "float32"},
    ],
)
def test_a_forged_header_is_refused(tmp_path, mark):
    path = tmp_path / "out.pt"
    (tmp_path / "out.pt.0").write_bytes(b"\0" * 16)
    torch.save({"header": mark, "raw": 1}, path)
    with pytest.raises(ValueError):
        tensorfile.load(path)


def test_a_plain_torch_file_is_refused(tmp_path):
    path = tmp_path / "out.pt"
    torch.save(torch.ones(3), path)
    with pytest.raises(ValueError, match="not a tensor file"):
        tensorfile.load(path)


def test_a_lazy_output_is_compared_a_chunk_at_a_time(tmp_path, monkeypatch):
    from tritonrl.verify import compare

    monkeypatch.setattr(compare, "COMPARE_CHUNK", 70000)  # five chunks, one partial
    expected = torch.randn(100000, 3)  # 1.2 MB: a raw part
    path = tmp_path / "out.pt"
    tensorfile.save([expected.clone(), 3], path)
    got = tensorfile.load(path, lazy=True)
    assert isinstance(got[0], tensorfile.RawTensor) and got[0].shape == expected.shape
    assert compare.compare_outputs([expected, 3], got) is None
    wrong = expected.clone()
    wrong[99000, 2] += 1.0  # in the last, partial chunk
    tensorfile.save([wrong, 3], path)
    reason = compare.compare_outputs([expected, 3], tensorfile.load(path, lazy=True))
    assert reason and "1 of 300000 elements differ" in reason
    part = tensorfile.parts(path)[0]
    part.write_bytes(part.read_bytes()[:-8])  # the worker cut its file after the header
    with pytest.raises(ValueError):
        compare.compare_outputs([expected, 3], tensorfile.load(path, lazy=True))
