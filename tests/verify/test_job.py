"""The worker's limits sized to the task's data (`tritonrl.verify.job.sized_config`):
a full-size problem's sets must not be refused for the memory limit or the timeout that
suit a small one, and a job a pool's lanes cannot hold says which limit and how to raise
it. Meta tensors stand in for GB of data: only their sizes are read."""

from pathlib import Path

import pytest
import torch

from tritonrl.config import VerifyConfig
from tritonrl.verify.inputs import InputSet, PreparedSet
from tritonrl.verify.job import WORKER_BASE_MB, file_mb_for, sized_config
from tritonrl.verify.pool.lane import Lane
from tritonrl.verify.session import WorkerError

GB = 1 << 30


def _set(name: str, in_bytes: int, out_bytes: int, state_bytes: int = 0) -> PreparedSet:
    meta = lambda n: torch.empty(n // 4, device="meta")  # noqa: E731 - float32 elements
    state = {"w": meta(state_bytes)} if state_bytes else {}
    return PreparedSet(InputSet(name, "full", 1), [], [meta(in_bytes)], state, meta(out_bytes))


def test_small_sets_keep_the_configured_limits():
    config = VerifyConfig(memory_mb=8192, timeout_s=120)
    sets = [_set("tiny", 1 << 10, 1 << 10), _set("seed_a", 1 << 20, 1 << 20)]
    assert sized_config(config, sets, "cuda") is config


def test_full_size_sets_grow_the_memory_limit_and_the_timeout():
    # KernelBench level 1 19_ReLU at full size: 4096 x 393216 float32, 6.4 GB each way.
    big = 4096 * 393216 * 4
    sets = [_set("tiny", 1 << 10, 1 << 10)] + [
        _set(n, big, big) for n in ("seed_a", "seed_b", "shifted", "odd")
    ]
    config = VerifyConfig(memory_mb=8192, timeout_s=120)
    sized = sized_config(config, sets, "cuda")
    # one set's inputs moved to the device, its outputs as a host copy and dirty pages
    need_mb = WORKER_BASE_MB[True] + 3 * big // (1 << 20)
    assert sized.memory_mb >= need_mb > config.memory_mb
    assert sized.memory_mb < need_mb * 1.3  # sized to the data, not to everything
    assert sized.timeout_s > config.timeout_s + 4 * 2 * big / 1e9  # 2 s per GB moved
    assert file_mb_for(config, sets) >= big >> 20
    # everything else is the user's configuration
    assert sized.policy == config.policy and sized.trials == config.trials


def test_the_configured_limits_are_a_floor():
    sets = [_set("seed_a", 2 * GB, 2 * GB)]
    roomy = VerifyConfig(memory_mb=64 * 1024, timeout_s=900)
    sized = sized_config(roomy, sets, "cuda")
    assert sized.memory_mb == roomy.memory_mb and sized.timeout_s >= 900


def test_the_file_size_limit_is_never_under_verify_max_file_mb():
    small = [_set("seed_a", 1 << 20, 1 << 20)]
    assert file_mb_for(VerifyConfig(), small) == VerifyConfig().max_file_mb
    assert file_mb_for(VerifyConfig(max_file_mb=512), small) == 512
    big = [_set("seed_a", 2 * GB, 2 * GB)]  # the outputs' room wins over the floor
    assert file_mb_for(VerifyConfig(max_file_mb=512), big) > 2 * GB >> 20


def test_a_pool_lane_refuses_a_job_it_cannot_hold_and_names_the_setting(tmp_path: Path):
    config = VerifyConfig(device="cpu", memory_mb=4096)
    lane = Lane(0, tmp_path / "lane", tmp_path / "cache", config, "cpu")
    sized = sized_config(config, [_set("a", GB, 4 * GB)], "cpu")
    with pytest.raises(WorkerError) as err:
        lane(tmp_path, sized, "cpu", 256)
    message = str(err.value)
    assert f"{sized.memory_mb} MB" in message and "4096 MB" in message
    assert "--verify.memory_mb" in message


# The size of KernelBench level 1's element-wise problems: 4096 x 393216 float32, 6.4 GB
# in and 6.4 GB out for each full-size input set (the task is written here).
FULL_SIZE_RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""


@pytest.mark.gpu
@pytest.mark.slow
def test_an_honest_kernel_for_a_full_size_problem_is_not_refused_for_a_limit():
    # With the default limits (8 GB of host memory for the worker): the worker's limits
    # grow with the sets, the inputs are drawn on the GPU and mapped by the worker, its
    # outputs streamed to their files. Before, the worker was killed by the memory limit
    # after the trusted side spent over a minute drawing the sets on the host.
    from tritonrl.tasks import Task, load_builtin
    from tritonrl.verify import verify

    task = Task("full_size_relu", 1, "full_size_relu", FULL_SIZE_RELU, "test_job.py")
    honest = load_builtin("level1/1_ReLU").tasks[0].solution
    r = verify(task, honest, VerifyConfig(ref_time_cache="off"))
    assert r.limit is None and r.correct and not r.cheated, (r.error, r.limit, r.flags)
    assert [s.name for s in r.input_sets if not s.ok] == []
    assert set(r.speedups) == {"device", "launch"}, r.notes
    assert sum(r.stage_times.values()) < 300, r.stage_times


def test_sets_past_the_ahead_budget_are_written_one_at_a_time():
    from tritonrl.verify.job import STAGE_AHEAD_BYTES, plan_staging

    small = [_set("tiny", 1 << 10, 1 << 10), _set("seed_a", 1 << 20, 1 << 20)]
    assert plan_staging(small) == (small, [])
    big = 15 * GB  # a full-size norm problem's set
    sets = [_set("tiny", 1 << 10, 1 << 10)] + [_set(n, big, big) for n in ("seed_a", "seed_b")]
    now, later = plan_staging(sets)
    assert [s.spec.name for s in now] == ["tiny"] and later == sets[1:]
    assert sum(s.inputs[0].numel() * 4 for s in now) <= STAGE_AHEAD_BYTES
    # the sets written while the worker runs are inside its deadline: time for them too
    config = VerifyConfig(memory_mb=8192, timeout_s=120)
    moved, staged = 2 * (2 * big) / 1e9, 2 * big / 1e9  # in and out; written later
    assert sized_config(config, sets, "cuda").timeout_s == round(120 + 2 * moved + 2 * staged)


def test_the_disk_must_hold_the_sets_written_ahead_and_the_largest_later_one(tmp_path, monkeypatch):
    # 45_Average_Pooling_2D needed 85.9 GB of staging disk with every set written at once,
    # against 68.7 GB free: one at a time it needs the largest set; a set that does not
    # fit even alone is the disk limit, before a byte of it is written.
    import errno
    import shutil
    from collections import namedtuple

    from tritonrl.verify.job import write_job

    usage = namedtuple("usage", "total used free")
    free = [40 * GB]
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, free[0]))
    sets = [_set(n, 17 * GB, 2 * GB) for n in ("seed_a", "seed_b", "shifted", "odd", "x")]
    staging = write_job(tmp_path, "code", sets)  # 85 GB in all; 17 GB at a time
    assert list((tmp_path / "sets").iterdir()) == [] and set(staging.pending) == {
        "seed_a",
        "seed_b",
        "shifted",
        "odd",
        "x",
    }
    free[0] = 10 * GB
    with pytest.raises(OSError) as e:
        staging.stage("seed_a")
    assert e.value.errno == errno.ENOSPC and "input set seed_a" in str(e.value)
    with pytest.raises(OSError) as e:
        write_job(tmp_path / "again", "code", sets)
    assert e.value.errno == errno.ENOSPC


def test_a_jobs_gpu_estimate_follows_its_largest_set():
    from tritonrl.verify.job import WORKER_GPU_BASE_BYTES, gpu_estimate

    sets = [_set("tiny", 1 << 10, 1 << 10), _set("seed_a", GB, GB, state_bytes=GB // 2)]
    assert gpu_estimate(sets, 3.0) == WORKER_GPU_BASE_BYTES + int(3.0 * 2.5 * GB)
    assert gpu_estimate(None, 3.0) == 0 and gpu_estimate([], 3.0) == 0
