"""The reward of one GRPO/RLOO batch verified while the trainer updates on the one before.

With `rl.overlap_reward`, each optimizer step generates the *next* step's completions
(its prompts taken one step early from the trainer's data) before it waits for the
rewards of its own, which the verifier has been working on since the step before:

    step s:  generate batch s+1 (weights of step s) -> wait for batch s's rewards
             (the verifier times meanwhile) -> loss, backward, optimizer on batch s

so compiling and checking batch s runs beside step s-1's update and step s's generation
instead of after them. Batch s+1 is one optimizer step stale when it trains: the
generating policy's log-probabilities are taken when it is generated (TRL's
`old_per_token_logps`, forced here where TRL would skip them), so the loss's
clipped ratio corrects for the step, as asynchronous GRPO does. The first step generates
two batches and the last none ahead.

How: TRL's `_generate_and_score_completions` runs whole, in a thread of its own, which
parks where TRL waits for the rewards; the trainer's thread waits for that point
(generation and log-probabilities done) and, a step later, waits for the rewards with
its GPU hold let go (the verifier times then), takes the hold again and lets the thread
finish (TRL's advantages and logs of that batch, with what its reward logged). The two
threads never run the trainer's code at once.

Several ranks: every collective of a rank (TRL's gathers, the update's all-reduce)
runs from one thread at a time, in the same order on every rank. The scoring thread's
own (generation's, and the gather of its batch's rewards across the ranks) run only
while the trainer's thread waits for it: generation's before the thread parks, and the
rewards' gather, which TRL makes as soon as a rank's rewards are in, held back
(`gather_when_claimed`, over the `gather` of TRL's trainer modules) until the trainer's
thread claims the batch.

A stop by signal (SIGTERM), or a failure, waits for the batch verified ahead, which
never trains: its completions stay in completions.jsonl under the step it was for (its
thread ends before TRL's gather, so a rank that stops makes no collective the others
would wait in), and a resumed run generates that step afresh (a checkpoint holds no
batch in flight).

What it does NOT do: multi-turn rollouts (their turns verify inside the generation) or
`rl.hierarchical` (config refuses both); a curriculum sees a step's results one step
later, and draws the next step's prompts one step early.
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict

_local = threading.local()


class Abandoned(Exception):
    """Ends a scoring thread whose batch will never train, before TRL's gather."""


def gather_when_claimed(gather):
    """TRL's `gather` of a batch's rewards across the ranks, made in a scoring thread
    only once the trainer's thread claims the batch (and waits for the thread); the
    rewards count as in before it. A batch abandoned meanwhile ends there."""
    if getattr(gather, "tritonrl_claimed", False):
        return gather

    def claimed_first(tensor):
        scoring = getattr(_local, "scoring", None)
        if scoring is not None and scoring.parked.is_set():  # (before: the trainer waits)
            scoring.rewarded.set()
            scoring.claimed.wait()
            if scoring.abandoned:
                raise Abandoned
        return gather(tensor)

    claimed_first.tritonrl_claimed = True
    return claimed_first


def hold_back_gathers(base: type) -> None:
    """`gather_when_claimed` over the `gather` of each TRL module that `base` (a GRPO or
    RLOO trainer) takes its rewards' computation from."""
    for klass in base.__mro__:
        module = sys.modules.get(klass.__module__)
        if klass.__module__.startswith("trl.") and hasattr(module, "gather"):
            module.gather = gather_when_claimed(module.gather)


def in_scoring_thread() -> bool:
    """True in a batch's scoring thread (the trainer's own bookkeeping is left to its
    thread there: no GPU hold changes hands, no wait is clocked)."""
    return getattr(_local, "scoring", None) is not None


class Scoring:
    """One batch through TRL's `_generate_and_score_completions` (`run(inputs)`) in a
    thread; made once the thread has generated and asked for the rewards, or ended."""

    def __init__(self, run, inputs, device=None):
        self.inputs, self.output, self.error = inputs, None, None
        self.abandoned = False  # it will never train: end before TRL's gather
        # parked: generated, rewards asked for; rewarded: they are in; claimed: the
        # trainer's thread waits for the rest (TRL's advantages and logs)
        self.parked, self.rewarded = threading.Event(), threading.Event()
        self.claimed = threading.Event()
        # what the reward logs through TRL's log_metric / log_extra, kept with the batch
        self.metrics: dict[str, list] = defaultdict(list)
        self.extra: dict[str, list] = defaultdict(list)
        gpu = None  # the trainer's GPU (this thread's current one), not cuda:0
        if device is not None and device.type == "cuda":
            import torch

            gpu = device.index if device.index is not None else torch.cuda.current_device()
        self._thread = threading.Thread(target=self._run, args=(run, gpu), daemon=True,
                                        name="tritonrl-scoring")  # fmt: skip
        self._thread.start()
        self.parked.wait()

    def _run(self, run, gpu) -> None:
        _local.scoring = self
        try:
            if gpu is not None:
                import torch

                torch.cuda.set_device(gpu)
            self.output = run(self.inputs)
        except BaseException as exc:  # raised in the trainer's thread by result()
            self.error = exc
        finally:
            self.parked.set()
            self.rewarded.set()

    def wait(self) -> None:
        """The thread ended (its rewards recorded), whatever it returned: the rest of
        TRL's scoring runs now, while the trainer's thread waits for it."""
        self.claimed.set()
        self._thread.join()

    def abandon(self) -> None:
        """Wait for the batch's rewards (its completions recorded), then end its
        thread before TRL's gather and the rest of its scoring: it never trains."""
        self.abandoned = True
        self.wait()

    def result(self):
        """The batch's TRL inputs to the loss, once its rewards are in."""
        self.wait()
        if self.error is not None:
            raise self.error
        return self.output


def overlapped(base: type) -> type:
    """A subclass of `base` (our GRPO or RLOO trainer, whose `verifying()` lets its GPU
    hold go and clocks the wait) that verifies each batch during the step before."""
    hold_back_gathers(base)

    class RewardOverlap(base):
        def __init__(self, *args, **kwargs):
            self._pending: Scoring | None = None
            self._ahead_of = None  # the epoch iterator _next_batch was taken from
            self._next_batch = None
            super().__init__(*args, **kwargs)

        def get_batch_samples(self, epoch_iterator, num_batches, device):
            """This step's batches, and the next step's first (its prompts generate
            now): taken from the same iterator one step early."""
            if epoch_iterator is not self._ahead_of:  # a new epoch, or a resumed run
                self._next_batch, self._ahead_of = None, epoch_iterator
            batches = [] if self._next_batch is None else [self._next_batch]
            while len(batches) < num_batches:
                try:
                    batches.append(next(epoch_iterator))
                except StopIteration:
                    break
            self._next_batch = next(epoch_iterator, None)  # None: the epoch's last step
            return batches, self._get_num_items_in_batch(batches, device)

        def _score(self, inputs, step: int) -> Scoring:
            """`inputs` generated now and verified in a thread; its rows carry `rl_step`
            (the optimizer step it trains), which the reward's completion log records."""
            for row in inputs:
                row["rl_step"] = step
            device = getattr(self.accelerator, "device", None)
            scoring = Scoring(self._score_in_thread, inputs, device)
            if scoring.error is not None:  # failed before it asked for rewards
                scoring.result()
            return scoring

        def _score_in_thread(self, inputs):
            # TRL takes the generating policy's log-probabilities only where generation
            # and the optimizer step are misaligned (or vLLM's are to be corrected): a
            # batch trained a step later is misaligned, so TRL is told so, until it asks
            # for the rewards (the trainer's thread reads num_iterations only then).
            _local.num_iterations = self.num_iterations
            self.num_iterations = self.args.gradient_accumulation_steps + 1
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self._restore_iterations()

        def _restore_iterations(self) -> None:
            kept = getattr(_local, "num_iterations", None)
            if kept is not None:
                self.num_iterations, _local.num_iterations = kept, None

        def _generate_and_score_completions(self, inputs):
            if not self.model.training or in_scoring_thread():
                return super()._generate_and_score_completions(inputs)
            pending, self._pending = self._pending, None
            if pending is None or pending.inputs is not inputs:  # first step, or resumed
                if pending is not None:
                    pending.wait()
                pending = self._score(inputs, self.state.global_step + 1)
            last = self.state.global_step + 1 >= self.state.max_steps
            if self._next_batch is not None and not last:
                try:
                    self._pending = self._score(self._next_batch, self.state.global_step + 2)
                except BaseException:  # the next batch failed: this one's thread ends too
                    pending.abandon()
                    raise
            with self.verifying():  # the hold let go while the verifier finishes
                pending.rewarded.wait()
            return pending.result()  # TRL's advantages (GPU work): inside the hold

        def _calculate_rewards(self, *args, **kwargs):
            scoring = getattr(_local, "scoring", None)
            if scoring is None:
                return super()._calculate_rewards(*args, **kwargs)
            self._restore_iterations()
            scoring.parked.set()  # generated: the trainer's thread goes on
            try:  # (TRL's gather at its end waits for the claim: gather_when_claimed)
                rewards = super()._calculate_rewards(*args, **kwargs)
            finally:
                scoring.rewarded.set()
            scoring.claimed.wait()  # TRL's advantages and logs: in the step that trains
            for name, values in scoring.metrics.items():
                self._pending_metrics[name].extend(values)
            for column, values in scoring.extra.items():
                self._pending_extra_logs[column].extend(values)
            return rewards

        # The reward's log_metric and log_extra (TRL hands them over as it asks for the
        # rewards): a batch verified ahead keeps its own until the step that trains on it.
        @property
        def _log_metric(self):
            scoring = getattr(_local, "scoring", None)
            if scoring is None:
                return base._log_metric.__get__(self)
            return lambda name, value: scoring.metrics[name].append(value)

        @property
        def _log_completion_extra(self):
            scoring = getattr(_local, "scoring", None)
            if scoring is None:
                return base._log_completion_extra.__get__(self)
            return lambda column, values: scoring.extra[column].extend(values)

        def finish_overlap(self) -> None:
            """The batch verified ahead, if any, waited for (the verifier's pool is
            not closed under it); its completions are recorded, it never trains."""
            pending, self._pending = self._pending, None
            if pending is not None:
                pending.abandon()

    return RewardOverlap
