"""The processes of one multi-GPU training (`accelerate launch`, `torchrun`): which one
this is, and what they must agree on.

    ranks = Ranks.from_env()              # RANK, LOCAL_RANK, WORLD_SIZE from the launcher
    run = ranks.from_leader(lambda: open_run(path), share=False)  # rank 0 opens or creates
    run = run or Run.open(path, readonly=True)                     # the others: read-only
    files = ranks.from_leader(lambda: sft_data_files(run, config), run)  # rank 0's, on all
    name = ranks.agree_stop(stop.signal, device)   # at every step end, on every rank
    parts = ranks.gather(mine)                     # every rank's value, by rank

Rank 0 (the main process) alone writes the run: its manifest, data files, model card,
log history and final model directory, and it alone syncs to the store; the other ranks
open the run read-only (`Run(readonly=True)`). Every rank trains, saves its part of each
checkpoint (DeepSpeed and FSDP shard them; HF's Trainer calls every rank into a save) and
resumes from the checkpoint rank 0 chose, which `from_leader` hands to all. A failure in
rank 0's part is raised on every rank (`LeaderFailed` on the others), so none waits for
a value that never comes.

A stop (SIGTERM, SIGINT, the AWS spot notice) reaches one rank, or all at different
moments; `agree_stop` at every step end (an all-reduce of one small integer) gives every
rank the same answer at the same step, so all save that step's checkpoint together and
leave, and no rank waits in a collective for one that has gone.

One process without a launcher is rank 0 of 1: every call is then free (no collective,
no torch.distributed).

What it does NOT do: it does not launch processes (`accelerate launch` does) or choose
the backend (accelerate: NCCL on GPUs, gloo on the CPU). A rank stopped while still
loading (before the trainer's first step) leaves at once, and the others wait in their
next collective until the launcher (torch elastic) ends them; the run then resumes from
the last checkpoint as after any stop.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tritonrl.runs import Run

log = logging.getLogger(__name__)
T = TypeVar("T")

# The stops a rank can ask for, as the small integers an all-reduce compares (0: none).
STOPS = ("SIGINT", "SIGTERM", "spot-notice")


class LeaderFailed(RuntimeError):
    """Rank 0 failed in a part the other ranks waited for; the message is its error."""


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    local_rank: int = 0
    world: int = 1

    @classmethod
    def from_env(cls) -> Ranks:
        """This process's place, as `accelerate launch` and `torchrun` set it (RANK,
        LOCAL_RANK, WORLD_SIZE); rank 0 of 1 without them. A bad value is a ValueError."""
        try:
            world = int(os.environ.get("WORLD_SIZE", "1"))
            rank = int(os.environ.get("RANK", "0"))
            local = int(os.environ.get("LOCAL_RANK", str(rank)))
        except ValueError as e:
            raise ValueError(
                f"RANK, LOCAL_RANK and WORLD_SIZE must be integers ({e}); they are set by "
                "`accelerate launch` or `torchrun`: unset them to train in one process"
            ) from None
        if world < 1 or not 0 <= rank < world or local < 0:
            raise ValueError(
                f"RANK={rank}, LOCAL_RANK={local}, WORLD_SIZE={world} do not describe a rank "
                "of the world; they are set by `accelerate launch` or `torchrun`: unset "
                "them to train in one process"
            )
        return cls(rank, local, world)

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def many(self) -> bool:
        return self.world > 1

    def _group(self, device: str | None = None) -> None:
        """The process group, made by accelerate as the trainer will use it (the device
        of LOCAL_RANK set on CUDA), unless one is already up."""
        import torch.distributed as dist

        if not dist.is_initialized():
            from accelerate import PartialState

            PartialState(cpu=device == "cpu")
            # Left up at exit, gloo's threads can abort the process ("terminate called
            # without an active exception", exit status -6) after its work is done.
            atexit.register(_leave_group)

    def barrier(self, device: str | None = None) -> None:
        if self.many:
            import torch.distributed as dist

            self._group(device)
            dist.barrier()

    def broadcast(self, value: object = None, device: str | None = None) -> object:
        """Rank 0's `value` on every rank (picklable)."""
        if not self.many:
            return value
        import torch.distributed as dist

        self._group(device)
        box = [value if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: object, device: str | None = None) -> list:
        """Every rank's `value` (picklable), by rank, on every rank. A collective."""
        if not self.many:
            return [value]
        import torch.distributed as dist

        self._group(device)
        values: list = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def from_leader(self, work: Callable[[], T], run: Run | None = None,
                    device: str | None = None, share: bool = True) -> T | None:  # fmt: skip
        """`work()` on rank 0; its value on every rank (None on the others when not
        `share`: a value that is not to be pickled). The others do not run `work`, and
        wait for it; `run`, read-only there, is read again to see what rank 0 recorded.
        A failure of `work` is re-raised on rank 0 and raised as `LeaderFailed` on the
        others."""
        if not self.many:
            return work()
        if self.main:
            try:
                value = work()
            except BaseException as e:
                self.broadcast((False, f"{type(e).__name__}: {e}"), device)
                raise
            self.broadcast((True, value if share else None), device)
            return value
        ok, value = self.broadcast(None, device)
        if not ok:
            raise LeaderFailed(f"rank 0 failed: {value}")
        if run is not None:
            run.reload()
        return value

    def agree_stop(self, asked: str | None, device) -> str | None:
        """The stop asked on any rank (the latest in `STOPS` when they differ), on every
        rank; None when none asked. A collective: every rank calls it at the same point."""
        if not self.many:
            return asked
        import torch
        import torch.distributed as dist

        code = 0 if asked is None else STOPS.index(asked) + 1 if asked in STOPS else 2
        flag = torch.tensor([code], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        agreed = int(flag.item())
        return None if agreed == 0 else STOPS[agreed - 1]


def _leave_group() -> None:
    """Take this process out of its process group at exit, if it is still in one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
