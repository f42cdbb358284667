"""GRPO and RLOO with the verifier as reward: TRL's `GRPOTrainer` and `RLOOTrainer`.

    tritonrl rl --run runs/demo --algo grpo [--rl.max_steps 2 ...]   # or --algo rloo

`train(run, config, device, stop)` is called by `tritonrl.train.rl.run_rl`, which owns
the stage's start, failure and interruption. The policy is the run's SFT model or
adapter (`rl.load_policy`); the reward is the verifier through the warm pool as an async
TRL reward function (`make_trl_reward(asynchronous=True)`), scored by `rl.reward_scheme`
(null: `verify.reward_scheme`), each batch recorded by `common.CompletionLog`. Defaults
(SPEC 4, `RlConfig`, `SamplingConfig`): group size 8, temperature 0.8, beta 0 (no
reference model), TRL's `dapo` loss for GRPO (RLOO has its own leave-one-out baseline
and no loss_type).

With `rl.turns` > 1 each prompt's answers are conversations with the verifier's feedback,
every answer a training sample with its discounted return (`tritonrl.train.rl.multiturn`:
TRL's `rollout_func` for GRPO, an override of `_generate` for RLOO); the sampler repeats
each prompt num_generations x turns times. TRL's warning that `rollout_func` is
experimental is left out where we pass ours (nothing else is silenced). With one turn
the trainers are as below.

With `rl.overlap_reward` each step generates the next step's batch before it waits for
its own batch's rewards, verified since the step before (`tritonrl.train.rl.overlap`:
one step off-policy, the ratio corrected by the generating policy's log-probabilities).

With `curriculum.enabled` the trainer's sampler is a `CurriculumSampler` (the layout of
TRL's RepeatSampler, each chunk drawn at the share of the moment); after each optimizer
step the curriculum may grow; its metrics join every log line (`curriculum/...`) and its
state is written into each checkpoint (`curriculum.json`), read back on resume. With
`rl.hierarchical` (GRPO) the trainer is `tritonrl.train.rl.hierarchical`'s subclass.

Departures: TRL refuses a `PeftModel` together with a `peft_config` (it asks to merge
first). Merging the SFT adapter and adding a fresh LoRA would leave the RL adapter on a
merged model that exists nowhere on disk; RL instead trains the SFT adapter on (loaded
trainable), so `rl/adapter` applies to the same base model as `sft/adapter`. A run
without LoRA trains every parameter, as its SFT did.

Generation: vLLM through TRL's `use_vllm` (`rl.vllm`, colocate by default, or a
`trl vllm-serve` server), or transformers' generate; `tritonrl.train.generation` chooses
and the log says which and why. Either samples as the `sampling` section says
(`trainer_args` hands TRL its temperature, top_p, top_k and max_new_tokens, and pins
min_p and repetition_penalty off).

Timing beside training: on CUDA the trainer holds the shared side of its GPU's verifier
gate (`GpuHold`, `tritonrl.verify.pool.gate`) from the start of each optimizer step (the
generation: transformers', or colocated vLLM's `LLM.generate` and the weight push before
it, all inside TRL's `_generate`, called from `training_step`) through the loss, its
backward pass and the optimizer step, and lets go while it waits for the rewards; the
pool's timing phases take the exclusive side, so no kernel is timed beside the trainer's
GPU work (the gate's lock reaches verifiers in other processes on that GPU too). It is
also held while the trainer is built (colocated vLLM starts then: weights, profiling,
CUDA graphs). Each step's seconds, split where the hold changes hands, join the logs
(`StepClock`): `time/generate_s`, `time/reward_wait_s`, `time/update_s` (the rest:
log-probabilities, loss, backward, optimizer) and `time/step_s`; on CUDA with them what
the gate cost the step (`GpuHold.step_metrics`): `time/gpu_wait_s`, the seconds the
trainer waited to take its hold (inside the update's and the reward wait's), and the
verifier's timing windows (`gpu/timing_windows`, `gpu/window_s`, `gpu/timing_held_s`).
With the reward's verifier in a child process (`rl.reward_process`, `reward_verifier`)
the hold is taken in the child's gate (`tritonrl.verify.child.RemoteGate`), as if the
trainer were a holder of the child's process.

Several processes (`accelerate launch --num_processes N -m tritonrl rl --algo grpo ...`):
each rank generates, is rewarded for and trains on its share of every batch, appending
its completions to the one completions.jsonl (whole lines); rank 0 alone writes the run
and syncs it, every rank resumes from the checkpoint rank 0 chose and stops at the same
step (`tritonrl.train.ranks`), and each rank holds the gate of its own GPU (LOCAL_RANK's),
so the trainer's hold covers every GPU it trains on. The curriculum joins every rank's
results at each step's end, so the ranks draw alike; the completion count and mean reward
of the stage info and the result are summed over the ranks.

What it does NOT do: keep other programs' GPU work out of the timing windows (a vLLM
server is one: put it on a GPU of its own, which the trainer's hold does not cover); a
timing phase elsewhere waits for the hold at most the gate's drain (10 s) and then times
anyway, noted in its result (`timing["shared_gpu"]`), so generations longer than that
(transformers' at 1-2k tokens) leave such timings marked, not clean.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from tritonrl.config import Config, VerifyConfig
from tritonrl.reward.adapters import make_trl_reward
from tritonrl.runs import Interrupted, Run, StopSignals, atomic_write_json
from tritonrl.runs.lifecycle import resume_point
from tritonrl.train.callbacks import (
    ManifestCallback,
    ModelCardCallback,
    StopOnSignal,
    TiedWeightsLoad,
    TrainingBar,
    tensorboard,
)
from tritonrl.train.generation import Generator, check_model, choose, warn_shared_server
from tritonrl.train.model_card import rl_card
from tritonrl.train.precision import final_dtype, nonfinite_guard, tf32_arg, tf32_kept
from tritonrl.train.ranks import Ranks
from tritonrl.train.rl.common import (
    COMPLETIONS,
    CURRICULUM_FILE,
    STAGE,
    CompletionLog,
    RlResult,
    load_policy,
    record_info,
)
from tritonrl.train.rl.curriculum import Curriculum, CurriculumSampler
from tritonrl.train.rl.data import rl_prompts
from tritonrl.train.rl.hierarchical import hierarchical_trainer
from tritonrl.train.rl.multiturn import MultiTurn
from tritonrl.train.rl.overlap import in_scoring_thread, overlapped
from tritonrl.train.sft import _reporters, save_final
from tritonrl.train.trl_args import trl_config
from tritonrl.verify.child import RemoteGate, child_service
from tritonrl.verify.client import ENDPOINT_ENV, client_for
from tritonrl.verify.pool.gate import current_gpu, gate_for, visible_gpus

log = logging.getLogger(__name__)
# The start of TRL's warning (GRPOTrainer) when it is given a `rollout_func`.
ROLLOUT_FUNC_WARNING = r"You are using 'rollout_func', which is an experimental feature"
CHILD_LOG = "verifier.log"  # the child verifier's log, in the stage's folder


def trainer_args(config: Config, out_dir: Path, device: str, generator=None):
    """TRL's `GRPOConfig` or `RLOOConfig` from ours (fields the class lacks are left out,
    with a warning: `trl_config`);
    `generator` (`generation.Generator`, None: transformers) sets TRL's vLLM fields."""
    if config.rl.algo == "rloo":
        from trl import RLOOConfig as Args
    else:
        from trl import GRPOConfig as Args
    rl, sampling = config.rl, config.sampling
    wanted = {
        "output_dir": str(out_dir),
        "learning_rate": rl.learning_rate,
        "warmup_steps": rl.warmup_steps,
        "max_steps": rl.max_steps,
        "per_device_train_batch_size": rl.per_device_batch_size,
        "gradient_accumulation_steps": rl.gradient_accumulation,
        "num_generations": rl.num_generations,
        # the `sampling` section, whatever TRL's defaults or the model's generation_config
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,  # vLLM and transformers: 0 is off
        "top_p": sampling.top_p,
        "min_p": None,
        "repetition_penalty": 1.0,
        "max_completion_length": sampling.max_new_tokens,
        "loss_type": rl.loss_type,
        "beta": rl.beta,
        "bf16": rl.bf16,
        "tf32": tf32_arg(rl.tf32, device),
        "use_cpu": device == "cpu",
        "save_strategy": "steps",
        "save_steps": rl.save_steps,
        "save_total_limit": config.run.keep_last,
        "logging_steps": rl.logging_steps,
        "logging_first_step": True,
        "logging_nan_inf_filter": False,  # a NaN loss is logged as NaN (NonFiniteGuard stops)
        "report_to": _reporters(config) or "none",
        "seed": config.run.seed,
        "disable_tqdm": False,
        "ddp_find_unused_parameters": False,  # every trained weight is used (as in SFT)
    }
    if generator is not None and generator.vllm:
        wanted |= {
            "use_vllm": True,
            "vllm_mode": generator.mode,
            "vllm_gpu_memory_utilization": rl.vllm_gpu_memory_utilization,
            "vllm_enable_sleep_mode": rl.vllm_enable_sleep_mode,
            "vllm_server_host": rl.vllm_server_host,
            "vllm_server_port": rl.vllm_server_port,
        }
    return trl_config(Args, wanted, checkpointing=rl.gradient_checkpointing)


class GpuHold:
    """The trainer's hold on its GPU's verifier gate: while it holds the shared side, the
    pool's timing phases (the exclusive side) wait, so a kernel is never timed beside
    the trainer's generation or backward pass. Released while the rewards are computed
    (the trainer waits for them then), taken again after: with `exclusive`, the gate's
    exclusive side, so the verifier's correctness runs, reference passes and workers'
    CUDA starts wait too (`rl.update_gpu_alone`).

    `step_metrics()` says what the gate cost the trainer since it was last asked: the
    seconds it waited to take its hold (`time/gpu_wait_s`), and the verifier's timing
    windows (`gpu/timing_windows`, `gpu/window_s` from a first timing phase asking
    until the last left, `gpu/timing_held_s` the phases' holds of the GPU). With
    `exclusive` the trainer's own hold counts as a window too."""

    def __init__(self, gate):
        self.gate, self._cm = gate, None
        self.waited = 0.0
        self._seen = gate.stats()

    @property
    def held(self) -> bool:
        return self._cm is not None

    def take(self, exclusive: bool = False) -> None:
        if self._cm is None:
            cm = self.gate.exclusive if exclusive else self.gate.shared("trainer")
            asked = time.perf_counter()
            cm.__enter__()
            self.waited += time.perf_counter() - asked
            self._cm = cm

    def step_metrics(self) -> dict[str, float]:
        now, seen = self.gate.stats(), self._seen
        metrics = {
            "time/gpu_wait_s": round(self.waited, 3),
            "gpu/timing_windows": now["windows"] - seen["windows"],
            "gpu/window_s": round(now["window_s"] - seen["window_s"], 3),
            "gpu/timing_held_s": round(now["timing_held_s"] - seen["timing_held_s"], 3),
        }
        self.waited, self._seen = 0.0, now
        return metrics

    def release(self) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(None, None, None)


class StepClock:
    """Wall-clock seconds of one optimizer step, from its first `training_step` to its
    end (after the optimizer), split where the trainer's GPU hold changes hands:
    generating, waiting for the rewards (the verifier), and the rest."""

    def __init__(self):
        self.started: float | None = None
        self.generate = self.reward_wait = 0.0

    def begin(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + time.perf_counter() - t0)

    def end(self) -> dict[str, float]:
        """The step's `time/...` seconds ({} when no step began), and a fresh start."""
        if self.started is None:
            return {}
        step = time.perf_counter() - self.started
        update = step - self.generate - self.reward_wait
        times = {"time/generate_s": self.generate, "time/reward_wait_s": self.reward_wait,
                 "time/update_s": update, "time/step_s": step}  # fmt: skip
        self.__init__()
        return {k: round(v, 3) for k, v in times.items()}


def trainer_gate(device: str, ranks: Ranks | None = None, child: VerifyConfig | None = None):
    """The verifier gate of the GPU this process trains on (None on the CPU: nothing is
    timed): with several ranks, LOCAL_RANK's GPU (where accelerate puts the rank), so
    together the ranks hold every GPU the trainer uses. With `child` (the settings of the
    reward's child service) that GPU's gate in the child's process (`RemoteGate`), whose
    lanes then wait for the trainer, and fill its holds, as for a holder of their own."""
    if device != "cuda":
        return None
    ranks = ranks or Ranks.from_env()
    gpus = visible_gpus()
    gpu = gpus[ranks.local_rank] if ranks.many and ranks.local_rank < len(gpus) else current_gpu()
    return RemoteGate(child, gpu) if child is not None else gate_for(gpu)


@contextlib.contextmanager
def _rollout_func_on_purpose(hooks: dict) -> Iterator[None]:
    """TRL's warning that `rollout_func` is experimental left out while the trainer that
    takes ours (multi-turn GRPO) is built: we use it on purpose, and the user can do
    nothing about it. Every other warning, and this one anywhere else, still shows."""
    if "rollout_func" not in hooks:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=ROLLOUT_FUNC_WARNING, category=UserWarning)
        yield


def _trainer_class(config: Config, curriculum, task_ids: list[str], gate=None, multiturn=None):
    """TRL's trainer with our bar, model card, curriculum sampler, logs, state and step
    times (`StepClock`), (with `gate`) its GPU work kept out of the verifier's timing
    windows (`GpuHold`), and (with `multiturn`, a `MultiTurn`) multi-turn batches: each
    prompt repeated num_generations x turns times, the batch's rows kept for the rollout,
    RLOO's generation replaced by it."""
    from transformers import ProgressCallback, TrainerCallback
    from trl.trainer.utils import RepeatSampler

    if config.rl.algo == "rloo":
        from trl import RLOOTrainer as Base
    else:
        from trl import GRPOTrainer as Base

    class StepEnd(TrainerCallback):
        """After the optimizer step: the hold let go, the step's times logged."""

        def __init__(self, trainer):
            self.trainer = trainer

        def on_step_end(self, args, state, control, **kwargs):
            hold, times = self.trainer._gpu_hold, self.trainer._clock.end()
            if hold is not None:
                hold.release()
                if times:
                    times |= hold.step_metrics()
            for key, seconds in times.items():
                self.trainer._metrics["train"][key].append(seconds)

        def on_train_end(self, args, state, control, **kwargs):
            if self.trainer._gpu_hold is not None:
                self.trainer._gpu_hold.release()

    class Trainer(TiedWeightsLoad, Base):
        def __init__(self, *args, **kwargs):
            self._gpu_hold = None if gate is None else GpuHold(gate)
            self._clock = StepClock()
            if self._gpu_hold is not None:
                self._gpu_hold.take()  # the model to the GPU; colocated vLLM starts
            try:  # colocated vLLM starts in here, and would turn TF32 off
                with tf32_kept(kwargs["args"].tf32):
                    super().__init__(*args, **kwargs)
            finally:
                if self._gpu_hold is not None:
                    self._gpu_hold.release()
                    self._gpu_hold.step_metrics()  # the build's wait is no step's
            self.remove_callback(ProgressCallback)
            self.add_callback(StepEnd(self))

        def create_model_card(self, *args, **kwargs) -> None:
            return None

        def training_step(self, *args, **kwargs):
            self._clock.begin()
            if self._gpu_hold is None:
                return super().training_step(*args, **kwargs)
            self._gpu_hold.take()  # generation, the loss and backward; let go at the step's end
            try:
                return super().training_step(*args, **kwargs)
            except BaseException:
                self._gpu_hold.release()
                raise

        @contextlib.contextmanager
        def verifying(self) -> Iterator[None]:
            """Waiting for the verifier: timed as such, the GPU hold let go meanwhile (the
            verifier times while the trainer waits for it); taken again for the update,
            alone with `rl.update_gpu_alone`."""
            if in_scoring_thread():  # verified ahead: the trainer's thread waits later
                yield
                return
            hold = self._gpu_hold
            let_go = hold is not None and hold.held
            with self._clock.part("reward_wait"):
                if let_go:
                    hold.release()
                try:
                    yield
                finally:
                    if let_go:
                        hold.take(exclusive=config.rl.update_gpu_alone)

        def _generate(self, prompts):
            waited = self._clock.reward_wait
            with self._clock.part("generate"):
                if multiturn is not None and config.rl.algo == "rloo":
                    out = multiturn.rloo_generate(prompts, self)
                else:
                    out = super()._generate(prompts)
            self._clock.generate -= self._clock.reward_wait - waited  # verified in a rollout
            return out

        def _generate_and_score_completions(self, inputs):
            if multiturn is not None:
                self._turn_inputs = inputs  # the rows (task ids) the rollout reads
            return super()._generate_and_score_completions(inputs)

        def _calculate_rewards(self, *args, **kwargs):
            with self.verifying():
                return super()._calculate_rewards(*args, **kwargs)

        def _get_train_sampler(self, dataset=None):
            span = self.num_generations * (1 if multiturn is None else multiturn.turns)
            if curriculum is None:
                if multiturn is None:
                    return super()._get_train_sampler(dataset)
                return RepeatSampler(
                    data_source=self.train_dataset if dataset is None else dataset,
                    mini_repeat_count=span,
                    batch_size=self.args.generation_batch_size // span,
                    repeat_count=self.num_iterations * self.args.steps_per_generation,
                    shuffle=self.shuffle_dataset,
                    seed=self.args.seed,
                )

            return CurriculumSampler(
                curriculum,
                task_ids,
                mini_repeat_count=span,
                batch_size=self.args.generation_batch_size // span,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
            )

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if curriculum is not None:
                logs = {**logs, **curriculum.metrics()}
            super().log(logs, start_time)

        def _save_checkpoint(self, model, trial):
            super()._save_checkpoint(model, trial)
            if curriculum is not None and self.args.should_save:
                folder = Path(self._get_output_dir(trial=trial))
                path = folder / f"checkpoint-{self.state.global_step}" / CURRICULUM_FILE
                atomic_write_json(path, curriculum.state_dict())

    if config.rl.hierarchical:
        return hierarchical_trainer(Trainer, config.rl)
    return overlapped(Trainer) if config.rl.overlap_reward else Trainer


def _callbacks(run: Run, config: Config, stop: StopSignals, card, curriculum, ranks: Ranks) -> list:
    from transformers import TrainerCallback

    class GrowCurriculum(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            # several ranks: each saw its share of the results; all join them alike
            gather = (lambda part: ranks.gather(part, args.device.type)) if ranks.many else None
            curriculum.end_step(state.global_step, gather)

    callbacks = [
        nonfinite_guard(config, "rl", run, STAGE),  # first: before saves, records
        ModelCardCallback(card),
        ManifestCallback(run, STAGE, ranks),
        StopOnSignal(stop, ranks),
    ]
    if curriculum is not None:
        callbacks.insert(0, GrowCurriculum())  # before the checkpoint's state is written
    callbacks.append(TrainingBar())
    if "tensorboard" in config.run.report_to and ranks.main:
        callbacks.append(tensorboard(run, STAGE))
    return callbacks


def _curriculum(config: Config, tasks: dict, resume: str | None):
    if not config.curriculum.enabled:
        return None

    curriculum = Curriculum(
        config.curriculum, {t: task.level for t, task in tasks.items()}, config.run.seed
    )
    state = Path(resume) / CURRICULUM_FILE if resume else None
    if state is not None and state.is_file():
        curriculum.load_state_dict(json.loads(state.read_text()))
        log.info("curriculum restored from %s: level-2 share %.2f", state, curriculum.share)
    return curriculum


def turns_generator(config: Config, generator: Generator) -> Generator:
    """`generator`, or transformers for multi-turn RLOO (TRL's RLOO asks vLLM for
    num_generations answers of each distinct prompt, and later turns' prompts are each
    conversation's own): with `rl.vllm auto` it falls back, with `on` it is refused."""
    if config.rl.turns == 1 or config.rl.algo != "rloo" or not generator.vllm:
        return generator
    if config.rl.vllm == "on":
        raise ValueError(
            f"rl.vllm is 'on' but rl.turns {config.rl.turns} with --algo rloo generates with "
            "transformers only (TRL's RLOO asks vLLM for num_generations answers of each "
            "distinct prompt, and later turns' prompts are each conversation's own): set "
            "rl.vllm auto or off, or use --algo grpo, whose multi-turn rollout runs on vLLM"
        )
    return Generator(False, None, "rl.turns > 1 with --algo rloo: RLOO's multi-turn rollout "
                     "generates with transformers")  # fmt: skip


def _multiturn(config: Config, verifier) -> MultiTurn | None:
    """The multi-turn rollout (`rl.turns` > 1) over `verifier`'s scorer, or None."""
    return MultiTurn(config, verifier.scorer) if config.rl.turns > 1 else None


def reward_in_child(config: Config, device: str) -> bool:
    """Whether the reward's verifier runs in a child service (`rl.reward_process`): `auto`
    takes it where the reward is verified beside the update (rl.overlap_reward) on CUDA
    on this machine's pool; a service elsewhere (verify.endpoint) is never replaced."""
    choice, verify = config.rl.reward_process, config.rl_verify
    if client_for(verify) is not None:
        if choice == "child":
            log.warning("rl.reward_process child: verify.endpoint (or $%s) names a service "
                        "already; the reward goes there", ENDPOINT_ENV)  # fmt: skip
        return False
    if choice == "auto":  # (child with another backend is refused by check_config)
        return device == "cuda" and config.rl.overlap_reward and verify.backend == "local"
    return choice == "child"


@contextlib.contextmanager
def reward_verifier(config: Config, device: str, stage_dir: Path) -> Iterator[VerifyConfig]:
    """The verify settings the reward takes: RL's (`config.rl_verify`), in a child
    service started here and stopped on leaving when `reward_in_child` says so."""
    verify = config.rl_verify
    if not reward_in_child(config, device):
        yield verify
        return
    ranks = Ranks.from_env()
    log_path = stage_dir / (CHILD_LOG if not ranks.many else f"verifier.rank{ranks.rank}.log")
    with child_service(verify, config.rl.reward_lanes, log_path) as served:
        log.info("the reward is verified by a child process (rl.reward_process %s) at %s; "
                 "its log: %s", config.rl.reward_process, served.endpoint, log_path)  # fmt: skip
        yield served


def train(run: Run, config: Config, device: str, stop: StopSignals) -> RlResult:
    """GRPO or RLOO (`config.rl.algo`) in `run`'s stage `rl`; see the module docstring."""
    with contextlib.ExitStack() as stack:  # the reward's child verifier, if any, ends last
        return _train(run, config, device, stop, stack)


def _train(
    run: Run, config: Config, device: str, stop: StopSignals, stack: contextlib.ExitStack
) -> RlResult:
    started = time.monotonic()
    ranks = Ranks.from_env()
    generator = choose(config, device)  # rl.vllm on where it cannot run fails here
    generator = turns_generator(config, generator)
    prompts, tasks, source = rl_prompts(run, config)  # fails fast, before models
    stage_dir = run.stage_dir(STAGE)
    verify = stack.enter_context(reward_verifier(config, device, stage_dir))
    log_path = stage_dir / COMPLETIONS

    def recorded() -> str | None:
        log_path.touch()
        run.add_artifact(STAGE, "completions", log_path)
        return resume_point(run, STAGE, log)

    resume = ranks.from_leader(recorded, run, device)  # rank 0's choice, on every rank
    curriculum = _curriculum(config, tasks, resume)
    levels = {t: task.level for t, task in tasks.items()}
    recorder = CompletionLog(log_path, levels, curriculum)
    verifier = make_trl_reward(tasks, verify, asynchronous=True, memo=config.rl.reward_memo,
                               workers=config.rl.reward_lanes)  # fmt: skip
    multiturn = _multiturn(config, verifier)  # a bad length fails before the models load
    reward = recorder.trl_reward(verifier) if multiturn is None else multiturn.reward(recorder)
    model, tokenizer = load_policy(run, config, device)
    generator = check_model(generator, config, model.name_or_path)
    log.info("%s: %s", config.rl.algo.upper(), generator.line)
    child = verify.endpoint != config.rl_verify.endpoint
    where = "child" if child else "service" if client_for(verify) else "trainer"
    run.set_info(STAGE, generation=generator.info(), reward_process=where)
    if generator.mode == "server" and ranks.main:
        warn_shared_server(config, len(visible_gpus()))
    lora = run.has_artifact("sft", "adapter")
    card = rl_card(run, config, source, len(prompts))
    gate = trainer_gate(device, ranks, verify if child else None)
    hooks = {"rollout_func": multiturn} if multiturn and config.rl.algo == "grpo" else {}
    with _rollout_func_on_purpose(hooks):
        trainer = _trainer_class(config, curriculum, list(prompts["task_id"]), gate, multiturn)(
            model=model,
            reward_funcs=[reward],
            args=trainer_args(config, stage_dir / "checkpoints", device, generator),
            train_dataset=prompts,
            processing_class=tokenizer,
            callbacks=_callbacks(run, config, stop, card, curriculum, ranks),
            **hooks,
        )
    try:
        with stop.graceful():
            trainer.train(resume_from_checkpoint=resume)
        # a signal after the last step's agreement: every rank stops, or none
        stop.signal = ranks.agree_stop(stop.signal, trainer.args.device) or stop.signal
    finally:
        if trainer._gpu_hold is not None:  # held past a failure in the optimizer step
            trainer._gpu_hold.release()
        if config.rl.overlap_reward:  # the batch verified ahead, before the pool closes
            trainer.finish_overlap()
    if stop.signal:
        raise Interrupted(stop.signal)
    if ranks.main:
        atomic_write_json(stage_dir / "log_history.json", trainer.state.log_history)
        run.add_artifact(STAGE, "log_history", stage_dir / "log_history.json")
    steps = trainer.state.global_step
    if ranks.many:  # every rank's completions count, in the stage info and the result
        counts = ranks.gather((recorder.rows, recorder.total), trainer.args.device.type)
        recorder.rows, recorder.total = (sum(c[i] for c in counts) for i in (0, 1))
    final = save_final(run, trainer, tokenizer, lora, card(steps), stage=STAGE,
                       dtype=final_dtype(config.rl.bf16), ranks=ranks)  # fmt: skip
    run.set_step(STAGE, steps)
    record_info(run, config, recorder, curriculum, data_source=source, prompts=len(prompts),
                device=device)  # fmt: skip
    return RlResult(
        run_dir=run.path,
        output=final,
        lora=lora,
        steps=steps,
        completions=recorder.rows,
        mean_reward=recorder.mean_reward,
        seconds=time.monotonic() - started,
        resumed_from=run.relpath(resume) if resume else None,
    )
