"""The adaptive curriculum (extension 3): which level the next RL prompt comes from.

    cur = Curriculum(config.curriculum, {task_id: level, ...}, seed=0)
    ids = cur.sample(8)                    # distinct task ids, each level 2 at cur.share
    cur.observe(task_id, correct)          # every verified completion
    grew = cur.end_step(step)              # after each optimizer step (or sampling round)
    grew = cur.end_step(step, gather)      # several ranks: every rank's results, the same
    cur.metrics()                          # logged every step
    cur.state_dict() / cur.load_state_dict(d)   # saved with each checkpoint

The share of level-2 prompts starts at `curriculum.start` (0.1) and grows by
`curriculum.step` (0.1) up to `curriculum.end` (0.5). It grows at a step's end when the
rolling verified-correct rate of the last `curriculum.window` level-1 completions passes
`curriculum.trigger` (0.4); the window then starts afresh, so the next growth is earned
at the new mix rather than carried over from the old one. Tasks of level 3 and 4 count
with level 2 (the "harder" pool); a run with no level-1 or no harder task samples what
it has, uniformly, and never grows (said once in the log).

Retirement (`curriculum.retire_after` N > 0): a task whose last N verified completions
were all correct is drawn no more, since its groups would all earn one reward and carry
no signal (the static `rl.pass_rates` filter is outgrown as the policy learns its tasks);
with `curriculum.retire_unsolved_after` M > 0, a task whose last M were all wrong is
drawn no more either (a pool of fresh tasks no pass rate was measured for holds such
tasks). A pool whose every task is retired draws from all of them again. Joined at
`end_step`, like the rate, so every rank retires the same tasks.

Tasks not seen before: `curriculum/unseen_level1_correct` and `unseen_level2_correct`
are a step's verified-correct rate on the tasks no earlier step of the run drew (-1 when
it drew none of that level). Their answers were sampled before the policy ever trained
on them, so with a large pool (`rl.generated_tasks`) this is a learning curve on new
tasks, step by step; it is not the held-out evaluation (`tritonrl eval`), whose tasks RL
never draws.

`CurriculumSampler` is the curriculum as a torch `Sampler` for TRL's trainers: the same
layout as TRL's `RepeatSampler` (each drawn prompt repeated `mini_repeat_count` times for
its group, each chunk `repeat_count` times), but each chunk is drawn when the trainer
reaches it, at the share of that moment.

With several training processes each rank sees the results of its own share of the
completions; `end_step(step, gather)` (`gather`: `Ranks.gather`) joins every rank's results
of the step, in rank order, into the window on every rank, so the ranks' curricula (and
the samplers that draw from them, seeded alike) stay the same.

What it does NOT do: it does not verify anything (the reward calls `observe`) and it
does not replay a resumed run's draws: it continues with the same share, window,
transitions, retirements, tasks drawn so far and random state, and draws from there.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tritonrl.config import CurriculumConfig

log = logging.getLogger(__name__)


class Curriculum:
    def __init__(self, config: CurriculumConfig, levels: Mapping[str, int], seed: int = 0):
        self.config = config
        self.levels = dict(levels)
        self.easy = sorted(t for t, lv in self.levels.items() if lv <= 1)
        self.hard = sorted(t for t, lv in self.levels.items() if lv >= 2)
        self.share = config.start
        self.window: deque[bool] = deque(maxlen=config.window)
        # (task id, correct) since the last end_step, not yet joined
        self.pending: list[tuple[str, bool]] = []
        # each task's last results, as many as the longer retirement count needs
        self.recent: dict[str, deque[bool]] = {}
        self.retired: set[str] = set()
        self.unsolved: set[str] = set()  # those of `retired` retired as never right
        self.drawn: set[str] = set()  # tasks with results joined at an earlier step
        self.unseen: dict[int, list[int]] = {}  # the last step's {level: [correct, answers]}
        self.transitions: list[dict[str, Any]] = []
        self.rng = random.Random(seed)
        self.adaptive = config.enabled and bool(self.easy) and bool(self.hard)
        if not self.levels:
            raise ValueError("curriculum: no tasks to sample from")
        if config.enabled and not self.adaptive:
            log.info(
                "curriculum: %d level-1 and %d harder tasks: sampling uniformly, no growth",
                len(self.easy),
                len(self.hard),
            )

    def _draw(self, taken: set[str]) -> str:
        if not self.adaptive:
            pool = self.easy + self.hard
        else:
            pool = self.hard if self.rng.random() < self.share else self.easy
        live = self._live(pool)
        fresh = [t for t in live if t not in taken] if taken else live
        return self.rng.choice(fresh or live)

    def _live(self, pool: list[str]) -> list[str]:
        """`pool` less its retired tasks; all of it when every one is retired."""
        live = [t for t in pool if t not in self.retired] if self.retired else pool
        return live or pool

    def sample(self, n: int) -> list[str]:
        """`n` task ids, each level 2+ with probability `share`; distinct while the pool
        drawn from has tasks not yet drawn in this call (a call is one step's prompts)."""
        taken: set[str] = set()
        ids = []
        for _ in range(n):
            ids.append(self._draw(taken))
            taken.add(ids[-1])
        return ids

    def observe(self, task_id: str, correct: bool) -> None:
        """One verified completion; level-1 ones enter the rolling rate, and every one
        the task's retirement count."""
        self.pending.append((task_id, bool(correct)))

    def _level1(self, results) -> list[bool]:
        return [ok for task, ok in results if self.levels.get(task, 1) <= 1]

    def _seen(self) -> list[bool]:
        """The window as it stands with the results not yet joined."""
        return (list(self.window) + self._level1(self.pending))[-self.config.window :]

    @property
    def rolling_correct(self) -> float | None:
        seen = self._seen()
        return sum(seen) / len(seen) if seen else None

    def end_step(self, step: int, gather: Callable[[list[bool]], list] | None = None) -> bool:
        """Grow the share when the full window's rate passes the trigger; True if it grew.
        `gather` (several ranks) gives every rank's results of the step, by rank."""
        parts = gather(self.pending) if gather is not None else [self.pending]
        self.pending = []
        joined = [(str(task), bool(ok)) for part in parts for task, ok in part]
        self._count_unseen(joined)
        for part in parts:
            results = [(str(task), bool(ok)) for task, ok in part]
            self.window.extend(self._level1(results))
            self._count(results, step)
        rate = self.rolling_correct
        if not self.adaptive or self.share >= self.config.end:
            return False
        if len(self.window) < self.config.window or rate is None or rate <= self.config.trigger:
            return False
        before = self.share
        self.share = round(min(self.config.end, self.share + self.config.step), 6)
        self.transitions.append({"step": step, "from": before, "to": self.share, "rate": rate})
        self.window.clear()
        log.info(
            "curriculum: level-1 correct %.2f > %.2f at step %d: level-2 share %.2f -> %.2f",
            rate,
            self.config.trigger,
            step,
            before,
            self.share,
        )
        return True

    def _count_unseen(self, results: list[tuple[str, bool]]) -> None:
        """The step's results on tasks no earlier step drew, by level (1, or 2 for 2+)."""
        self.unseen = {}
        for task, ok in results:
            if task in self.drawn:
                continue
            counts = self.unseen.setdefault(min(2, self.levels.get(task, 1)), [0, 0])
            counts[0] += ok
            counts[1] += 1
        self.drawn.update(task for task, _ in results)

    def _keep(self) -> int:
        """The results kept per task: the longer of the two retirement counts (0: none)."""
        return max(self.config.retire_after, self.config.retire_unsolved_after)

    def _count(self, results: list[tuple[str, bool]], step: int) -> None:
        """Each task's last results; retire those whose last `retire_after` were all
        correct or whose last `retire_unsolved_after` were all wrong."""
        right, wrong = self.config.retire_after, self.config.retire_unsolved_after
        if not (right or wrong):
            return
        for task, ok in results:
            if task not in self.levels or task in self.retired:
                continue
            recent = self.recent.setdefault(task, deque(maxlen=self._keep()))
            recent.append(ok)
            last = list(recent)
            if right and len(last) >= right and all(last[-right:]):
                why = f"its last {right} completions were correct"
            elif wrong and len(last) >= wrong and not any(last[-wrong:]):
                why = f"its last {wrong} completions were wrong"
                self.unsolved.add(task)
            else:
                continue
            self.retired.add(task)
            del self.recent[task]
            log.info("curriculum: %s retired at step %d: %s (%d retired)",
                     task, step, why, len(self.retired))  # fmt: skip

    def metrics(self) -> dict[str, float]:
        """What is logged every step (the rolling rate is -1 before any level-1 result)."""
        rate = self.rolling_correct
        out = {
            "curriculum/level2_share": self.share,
            "curriculum/level1_correct": -1.0 if rate is None else rate,
            "curriculum/transitions": float(len(self.transitions)),
        }
        for level in (1, 2):
            right, n = self.unseen.get(level, (0, 0))
            out[f"curriculum/unseen_level{level}_correct"] = right / n if n else -1.0
        if self.config.retire_after or self.config.retire_unsolved_after:
            out["curriculum/retired"] = float(len(self.retired))
        if self.config.retire_unsolved_after:
            out["curriculum/retired_unsolved"] = float(len(self.unsolved))
        return out

    def state_dict(self) -> dict[str, Any]:
        state = self.rng.getstate()
        return {
            "share": self.share,
            "window": [int(x) for x in self.window],
            "pending": [[task, int(ok)] for task, ok in self.pending],
            "transitions": list(self.transitions),
            "recent": {task: [int(x) for x in r] for task, r in sorted(self.recent.items())},
            "retired": sorted(self.retired),
            "unsolved": sorted(self.unsolved),
            "drawn": sorted(self.drawn),
            "rng": [state[0], list(state[1]), state[2]],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.share = float(state["share"])
        self.window = deque((bool(x) for x in state["window"]), maxlen=self.config.window)
        # older states: no pending, or level-1 results without their task
        self.pending = [(x[0], bool(x[1])) if isinstance(x, list) else ("", bool(x))
                        for x in state.get("pending", [])]  # fmt: skip
        self.transitions = list(state["transitions"])
        n = self._keep() or None
        self.recent = {task: deque((bool(x) for x in r), maxlen=n)
                       for task, r in state.get("recent", {}).items()}  # fmt: skip
        self.retired = set(state.get("retired", []))
        self.unsolved = set(state.get("unsolved", []))
        self.drawn = set(state.get("drawn", []))  # older states: every task counts as new
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


class CurriculumSampler:
    """A torch Sampler of dataset row indices, drawn by a `Curriculum` over task ids."""

    def __init__(
        self,
        curriculum: Curriculum,
        task_ids: Sequence[str],
        mini_repeat_count: int,
        batch_size: int,
        repeat_count: int,
    ):
        self.curriculum = curriculum
        self.rows: dict[str, list[int]] = {}
        for i, task_id in enumerate(task_ids):
            self.rows.setdefault(task_id, []).append(i)
        missing = set(curriculum.levels) - set(self.rows)
        if missing:
            raise ValueError(f"curriculum: {len(missing)} task(s) have no prompt row")
        self.num_samples = len(task_ids)
        self.mini_repeat_count = mini_repeat_count
        self.batch_size = batch_size
        self.repeat_count = repeat_count

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.num_samples // self.batch_size):
            chunk = [self.curriculum.rng.choice(self.rows[t])
                     for t in self.curriculum.sample(self.batch_size)]  # fmt: skip
            for _ in range(self.repeat_count):
                for index in chunk:
                    yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        chunks = self.num_samples // self.batch_size
        return chunks * self.batch_size * self.mini_repeat_count * self.repeat_count
