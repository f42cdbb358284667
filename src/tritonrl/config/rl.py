"""The sections of RL: sampling (shared with evaluation and distillation), rl, best_of_n and
curriculum, with the names their fields take.

What it does NOT do: check RL against the machine or the other sections
(`tritonrl.config.check_config`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tritonrl.config.stages import DEVICES, need
from tritonrl.config.verify import REWARD_SCHEMES

# rl.timing_<name> -> the verify field it stands in for in the reward (Config.rl_verify)
TIMING_KEYS = {"trials": "trials", "max_trials": "max_trials", "target_rse": "target_rse",
               "max_seconds": "timing_max_seconds"}  # fmt: skip


@dataclass
class SamplingConfig:
    """How a model is sampled, by everything that samples one: GRPO and RLOO's generation
    (TRL's, on vLLM or transformers), best-of-n and rwsft's rounds, evaluation (every
    backend; one answer a task is greedy instead) and distillation's teacher. The
    defaults sample the model's whole distribution at `temperature` (top_p 1, top_k off),
    as TRL's GRPO does; min_p and the repetition penalty stay off everywhere, whatever a
    model's generation_config.json says (tritonrl.models.sampling)."""

    temperature: float = 0.8
    top_p: float = 1.0  # nucleus sampling: the smallest set of tokens holding this mass
    top_k: int = 0  # only the k likeliest tokens; 0 is off
    # New tokens per completion (RL, best-of-n, evaluation; `eval --max-tokens`): a
    # kernel with its plan needs about 1-2k. A teacher's answers have `distill --max-tokens`.
    max_new_tokens: int = 2048

    def __post_init__(self):
        need(self.temperature > 0, "sampling.temperature must be positive")
        need(
            0 < self.top_p <= 1,
            f"sampling.top_p must be in (0, 1] (1: off), not {self.top_p}",
        )
        need(self.top_k >= 0, f"sampling.top_k must be >= 0 (0: off), not {self.top_k}")
        need(self.max_new_tokens >= 1, "sampling.max_new_tokens must be >= 1")

    @property
    def whole_distribution(self) -> bool:
        """Whether nothing narrows the distribution (top_p 1, top_k off)."""
        return self.top_p == 1.0 and self.top_k == 0

    def describe(self) -> str:
        """`temperature 0.8`, or `temperature 0.8, top_p 0.95, top_k 20`."""
        return describe_sampling(self.temperature, self.top_p, self.top_k)


def describe_sampling(temperature: float | None, top_p: float | None = 1.0,
                      top_k: int | None = 0) -> str:  # fmt: skip
    """The sampling in words, as a model card and an evaluation name it: `greedy` for no
    temperature; top_p and top_k only where they narrow the distribution."""
    if temperature is None:
        return "greedy"
    narrowed = [f"top_p {top_p}"] if top_p not in (None, 1.0) else []
    narrowed += [f"top_k {top_k}"] if top_k else []
    return ", ".join([f"temperature {temperature}", *narrowed])


RL_ALGOS = ("grpo", "rloo", "best-of-n", "rwsft")
# TRL 1.16's GRPOConfig.loss_type values that need no other option set with them
# (luspo and vespo need sequence-level importance sampling, which we do not expose).
RL_LOSS_TYPES = ("dapo", "dr_grpo", "grpo", "bnpo", "cispo", "sapo")
VLLM_CHOICES = ("auto", "on", "off")
VLLM_MODES = ("colocate", "server")
REWARD_PROCESSES = ("auto", "child", "trainer")


@dataclass
class RlConfig:
    """The `rl` stage (`tritonrl rl`): starts from the run's SFT model, the verifier as
    reward (SPEC 4). Batch rule (TRL's): per_device_batch_size x gradient_accumulation
    completions are generated at a time, in whole groups of num_generations."""

    algo: str = "grpo"  # grpo | rloo (TRL's trainers) | best-of-n | rwsft (best_of_n section)
    device: str = "auto"  # auto | cpu | cuda
    max_steps: int = 200
    num_generations: int = 8  # the group size: completions per prompt
    learning_rate: float = 1e-6
    # Steps of linear warm-up (GRPO, RLOO): AdamW's first update moves every weight by
    # about the learning rate whatever its gradient, and RL starts a fresh optimizer on a
    # fine-tuned model (docs/benchmarks.md: at 1e-5 one such step broke a 0.5B model).
    warmup_steps: int = 0
    # "dapo", TRL 1.16's default: token losses summed over the whole accumulated batch
    # and divided by its number of completion tokens. "grpo" (the paper's) averages per
    # sequence first, which favours short right answers and long wrong ones; "dr_grpo"
    # divides by a constant (sampling.max_new_tokens) and so scales with it. Kernels vary
    # in length a lot, so the length-unbiased default stays.
    loss_type: str = "dapo"
    beta: float = 0.0  # KL to the reference; 0 needs no reference model (TRL's default)
    # A scheme of tritonrl.reward.schemes (staged | tritonrl | kevin); None takes
    # verify.reward_scheme.
    reward_scheme: str | None = None
    # The reward's wall clock for one candidate (None: verify.timeout_s). A kernel that
    # hangs holds its whole step until it is killed, so RL wants less than eval's limit.
    verify_timeout_s: float | None = None
    # The reward's timing of a correct answer (None: the verify section's value). Timing
    # holds the GPU alone, one answer at a time, while the step waits; a reward weighs
    # the speedup lightly (tritonrl: 0.1 a unit), so RL can take fewer trials and a
    # looser relative-standard-error target than eval, which keeps verify's.
    timing_trials: int | None = None  # verify.trials: the minimum
    timing_max_trials: int | None = None  # verify.max_trials
    timing_target_rse: float | None = None  # verify.target_rse
    timing_max_seconds: float | None = None  # verify.timing_max_seconds
    # GRPO/RLOO: the verdicts of the last N programs the reward verified, each under its
    # task, kept for later steps (a policy whose entropy has fallen samples the same
    # programs again; tritonrl.reward.adapters); 0: every step verifies afresh
    reward_memo: int = 4096
    per_device_batch_size: int = 8
    gradient_accumulation: int = 1
    bf16: bool = True
    tf32: bool = True  # as sft.tf32
    gradient_checkpointing: bool = True  # memory for time, as TRL's GRPO default
    save_steps: int = 50  # SPEC 6: a checkpoint every 50 steps, run.keep_last kept
    logging_steps: int = 1
    # Hierarchical reward decomposition (TritonRL; GRPO only): the plan/reasoning tokens
    # (before the first code fence) take the advantage of the speedup term
    # hierarchical_speedup_weight * min(speedup, hierarchical_speedup_clip) of correct
    # kernels, the code tokens that of correctness (1 when correct), each normalized in
    # its group (tritonrl.train.rl.hierarchical).
    hierarchical: bool = False
    hierarchical_speedup_weight: float = 0.1
    hierarchical_speedup_clip: float = 2.0
    # Generation in GRPO and RLOO (TRL's use_vllm; tritonrl.train.rl.grpo): `auto` takes
    # vLLM where it is installed and RL runs on CUDA, else transformers' generate (the
    # log says which, and why); `on` takes vLLM or stops; `off` takes transformers. Both
    # sample as the `sampling` section says. `colocate` runs vLLM in the
    # trainer's process on its GPU, with `vllm_gpu_memory_utilization` of the GPU's
    # memory (the trainer keeps the rest); `vllm_enable_sleep_mode` frees that memory
    # between generations (slower: the weights are pushed again each time). `server` asks
    # a `trl vllm-serve` at vllm_server_host:vllm_server_port, started beforehand on a GPU
    # of its own (README).
    vllm: str = "auto"  # auto | on | off
    vllm_mode: str = "colocate"  # colocate | server
    vllm_gpu_memory_utilization: float = 0.3
    vllm_enable_sleep_mode: bool = False
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    # Multi-turn RL (GRPO, RLOO; `tritonrl rl --turns T`, tritonrl.train.rl.multiturn):
    # each of a prompt's num_generations conversations answers, is verified and gets the
    # feedback as its next user turn, up to `turns` answers (ended early as `eval --turns`
    # ends one). Every answer is a training sample whose return is its reward plus
    # `turn_gamma` times the next answer's return (Kevin found 0.4 best; 1.0 sums them);
    # advantages are taken inside each (prompt, turn) group. 1: single-turn RL as before.
    turns: int = 1
    turn_gamma: float = 0.4
    # The most a later answer whose kernel repeats an earlier answer of its conversation
    # scores (extract.kernel_key: the same code once comments, formatting, docstrings
    # and the names it binds are set aside); its conversation ends there. A copy of a
    # correct kernel scores it, a copy of a wrong one its own 0. Without it a model right
    # once earns its full reward again by copying itself, and multi-turn GRPO teaches
    # copying; at 0 a copy of a correct kernel scored as a wrong one, and the 0.5B fell
    # below its SFT model (benchmarks.md). 0.5: below any new correct kernel under the
    # tritonrl scheme the real-model configs train on (1 or more), above a wrong one (0).
    # null: scored as any answer, the conversation going on as any would.
    turn_repeat_reward: float | None = 0.5
    # Tokens a later turn's prompt plus its answer (sampling.max_new_tokens) may take: the
    # oldest earlier answers and their feedback are dropped to fit. null: sft.max_length.
    turn_max_length: int | None = None
    # GRPO/RLOO: verify each batch while the trainer updates on the one before and
    # generates the next (tritonrl.train.rl.overlap): the step waits only for what the
    # verifier has left, at the price of training each batch one optimizer step after
    # it was generated (the loss's clipped ratio corrects for it). Single-turn only.
    overlap_reward: bool = False
    # With rl.overlap_reward: the update (loss, backward, optimizer) has the GPU alone: the
    # verifier's correctness runs, reference passes and workers' CUDA starts wait for it
    # (its compiles go on), and run beside the next batch's generation instead.
    update_gpu_alone: bool = False
    # The reward verifier's lanes (GRPO, RLOO; each a worker process with a
    # CUDA context of its own). null: one per CPU core, at most 16 a GPU. Fewer leave
    # cores to the trainer, whose update runs beside the verifier's compiles with
    # rl.overlap_reward.
    reward_lanes: int | None = None
    # Where GRPO's and RLOO's reward verifier runs (tritonrl.verify.child): `child`, a
    # `tritonrl serve` the stage starts beside the trainer (loopback, a fresh token, the
    # same GPUs and settings) and stops after, so the verifier's trusted side shares
    # neither the trainer's interpreter lock nor its CUDA streams; `trainer`, threads of
    # the trainer's own process; `auto`, child where the reward is verified beside the
    # update (rl.overlap_reward) on CUDA, else trainer. verify.endpoint, when set, wins.
    reward_process: str = "auto"  # auto | child | trainer
    # The reward verifier's CPU priority (verify.nice, 0-19) while the trainer runs in the
    # same process: its lanes' compiles and checks yield the cores to the trainer's own
    # threads (kernel launches, vLLM's scheduler), which rl.overlap_reward runs beside
    # them. null: verify.nice.
    reward_nice: int | None = 10
    # Only the tasks the starting policy solves sometimes (tritonrl.train.rl.data): an eval
    # folder of it on the run's training tasks (`tritonrl eval --model RUN/sft/final
    # --tasks train:RUN --samples 4 --out DIR`, its samples.jsonl); the tasks whose
    # verified-correct share there lies within [pass_rate_min, pass_rate_max] are kept
    # (groups all right or all wrong teach GRPO nothing). null: every training task.
    pass_rates: str | None = None
    pass_rate_min: float = 0.01  # the defaults keep "sometimes but not always" for up
    pass_rate_max: float = 0.99  # to 99 answers a task
    # Fresh generator tasks for RL alone (SFT never sees them; tritonrl.train.rl.data): N
    # tasks from `generator_seed` (null: past the seeds data.generated_tasks can use), none
    # equal to a training task, a task of data.decontaminate_against or one the run holds
    # out (such a draw is replaced by the next seed's, up to 10 x N more seeds). The
    # pass-rate filter keeps those its file does not name (it filters the others).
    # `fresh_source` draws them: the task generator, or the task families' training
    # split (`families`, or `families:matmul,norms` for those only; seeds from 100000
    # unless generator_seed says).
    generated_tasks: int = 0
    generator_seed: int | None = None
    fresh_source: str = "generator"

    def __post_init__(self):
        need(
            0 <= self.pass_rate_min <= self.pass_rate_max <= 1,
            f"rl.pass_rate_min and rl.pass_rate_max must satisfy 0 <= min <= max <= 1 "
            f"(shares of correct answers), not {self.pass_rate_min} and {self.pass_rate_max}",
        )
        need(self.algo in RL_ALGOS, f"rl.algo must be one of {RL_ALGOS}, not {self.algo!r}")
        need(
            isinstance(self.generated_tasks, int) and self.generated_tasks >= 0,
            f"rl.generated_tasks must be >= 0 (fresh generator tasks for RL; 0: none), not "
            f"{self.generated_tasks!r}",
        )
        need(
            self.generator_seed is None or self.generator_seed >= 0,
            f"rl.generator_seed must be >= 0 or null, not {self.generator_seed!r}",
        )
        need(
            self.fresh_source in ("generator", "families")
            or (self.fresh_source.startswith("families:") and self.fresh_source[9:]),
            f"rl.fresh_source must be generator, families or families:NAME[,NAME...] (where "
            f"rl.generated_tasks' fresh tasks come from), not {self.fresh_source!r}",
        )
        need(
            isinstance(self.turns, int) and self.turns >= 1,
            f"rl.turns must be 1 or more (answers per conversation), not {self.turns!r}",
        )
        need(
            0 <= self.turn_gamma <= 1,
            f"rl.turn_gamma must be in [0, 1] (the discount of later turns' rewards), "
            f"not {self.turn_gamma}",
        )
        need(
            self.turn_repeat_reward is None or math.isfinite(self.turn_repeat_reward),
            f"rl.turn_repeat_reward must be a finite number or null (scored as any "
            f"answer), not {self.turn_repeat_reward}",
        )
        need(
            self.turn_max_length is None or self.turn_max_length >= 64,
            f"rl.turn_max_length must be >= 64 tokens or null (sft.max_length), "
            f"not {self.turn_max_length}",
        )
        need(
            self.turns == 1 or self.algo in ("grpo", "rloo"),
            f"rl.turns {self.turns} needs rl.algo grpo or rloo (TRL's trainers); "
            f"{self.algo} samples single answers: set rl.turns 1",
        )
        need(
            not self.overlap_reward
            or (self.turns == 1 and not self.hierarchical and self.algo in ("grpo", "rloo")),
            "rl.overlap_reward verifies a single-turn GRPO or RLOO batch during the step "
            "before; multi-turn rollouts verify inside the generation and rl.hierarchical "
            "splits the rewards: set rl.overlap_reward false, or rl.turns 1, "
            "rl.hierarchical false and rl.algo grpo or rloo",
        )
        need(
            self.overlap_reward or not self.update_gpu_alone,
            "rl.update_gpu_alone keeps the verifier's GPU work out of the update that "
            "rl.overlap_reward runs beside it: set rl.overlap_reward true, or "
            "rl.update_gpu_alone false",
        )
        need(
            self.reward_process in REWARD_PROCESSES,
            f"rl.reward_process must be one of {REWARD_PROCESSES}, not {self.reward_process!r}",
        )
        need(
            self.reward_lanes is None or self.reward_lanes >= 1,
            f"rl.reward_lanes must be >= 1 or null (one per core), not {self.reward_lanes}",
        )
        need(
            self.reward_nice is None or 0 <= self.reward_nice <= 19,
            f"rl.reward_nice must be from 0 to 19 (as nice(1)) or null (verify.nice), "
            f"not {self.reward_nice}",
        )
        need(
            self.turns == 1 or not self.hierarchical,
            "rl.hierarchical splits one answer's reward and takes no rl.turns > 1: set "
            "rl.turns 1 or rl.hierarchical false",
        )
        need(self.device in DEVICES, f"rl.device must be one of {DEVICES}, not {self.device!r}")
        need(
            self.loss_type in RL_LOSS_TYPES,
            f"rl.loss_type must be one of {RL_LOSS_TYPES}, not {self.loss_type!r}",
        )
        need(
            self.reward_scheme is None or self.reward_scheme in REWARD_SCHEMES,
            f"rl.reward_scheme must be one of {REWARD_SCHEMES} (or null: verify.reward_scheme), "
            f"not {self.reward_scheme!r}",
        )
        need(
            self.verify_timeout_s is None
            or (math.isfinite(self.verify_timeout_s) and self.verify_timeout_s > 0),
            "rl.verify_timeout_s must be a positive, finite number of seconds (or null: "
            f"verify.timeout_s), not {self.verify_timeout_s!r}",
        )
        for name in TIMING_KEYS:
            value = getattr(self, f"timing_{name}")
            need(
                value is None or (math.isfinite(value) and value > 0),
                f"rl.timing_{name} must be positive (or null: verify.{TIMING_KEYS[name]}), "
                f"not {value!r}",
            )
        need(
            self.reward_memo >= 0,
            f"rl.reward_memo must be >= 0 (0: no memo), not {self.reward_memo!r}",
        )
        need(self.num_generations >= 2, "rl.num_generations must be >= 2 (GRPO compares a group)")
        for name in ("max_steps", "per_device_batch_size", "gradient_accumulation", "save_steps"):
            need(getattr(self, name) >= 1, f"rl.{name} must be >= 1")
        need(self.logging_steps >= 1, "rl.logging_steps must be >= 1")
        need(self.learning_rate > 0, "rl.learning_rate must be positive")
        need(self.warmup_steps >= 0, "rl.warmup_steps must be >= 0")
        need(self.beta >= 0, "rl.beta must be >= 0")
        need(self.hierarchical_speedup_weight >= 0, "rl.hierarchical_speedup_weight must be >= 0")
        need(self.hierarchical_speedup_clip > 0, "rl.hierarchical_speedup_clip must be positive")
        need(self.vllm in VLLM_CHOICES, f"rl.vllm must be one of {VLLM_CHOICES}, not {self.vllm!r}")
        need(
            self.vllm_mode in VLLM_MODES,
            f"rl.vllm_mode must be one of {VLLM_MODES}, not {self.vllm_mode!r}",
        )
        need(
            0 < self.vllm_gpu_memory_utilization <= 1,
            "rl.vllm_gpu_memory_utilization must be in (0, 1]: the share of the GPU's memory "
            "vLLM takes",
        )
        need(bool(self.vllm_server_host), "rl.vllm_server_host must name a host")
        need(0 < self.vllm_server_port < 65536, "rl.vllm_server_port must be in 1-65535")
        batch = self.per_device_batch_size * self.gradient_accumulation
        need(
            batch % self.num_generations == 0,
            f"rl.per_device_batch_size x rl.gradient_accumulation ({batch}) must be a multiple "
            f"of rl.num_generations ({self.num_generations}): completions come in whole groups",
        )
        slots = self.num_generations * self.turns
        need(
            batch % slots == 0,
            f"rl.per_device_batch_size x rl.gradient_accumulation ({batch}) must be a multiple "
            f"of rl.num_generations x rl.turns ({slots}): each prompt's conversations take a "
            "slot per turn",
        )


@dataclass
class BestOfNConfig:
    """Sampling-based RL (`rl.algo` best-of-n or rwsft, SPEC 4): each round samples
    `samples` completions per task, verifies them, and fine-tunes on what it keeps.
    best-of-n keeps the top `keep` of each task whose reward is above `min_reward`;
    rwsft (reward-weighted SFT) keeps every sample with a positive reward, its loss
    weighted by that reward."""

    samples: int = 10  # N completions per task and round
    keep: int = 3  # K best kept per task (best-of-n)
    min_reward: float = 0.3  # kept only above this (best-of-n): compiling is not enough
    learning_rate: float = 5e-6
    rounds: int = 1  # sample -> verify -> fine-tune, repeated
    tasks: int = 100  # prompts drawn per round (SPEC: 100 fusion tasks)
    level: int | None = 2  # only tasks of this level (null: any); curriculum overrides
    epochs: int = 1  # fine-tuning epochs over each round's kept set
    generation_batch_size: int = 16  # prompts generated together

    def __post_init__(self):
        for name in ("samples", "keep", "rounds", "tasks", "epochs", "generation_batch_size"):
            need(getattr(self, name) >= 1, f"best_of_n.{name} must be >= 1")
        need(self.keep <= self.samples, "best_of_n.keep must be <= best_of_n.samples")
        need(self.learning_rate > 0, "best_of_n.learning_rate must be positive")
        need(self.level in (None, 1, 2, 3, 4), "best_of_n.level must be 1-4 or null")


@dataclass
class CurriculumConfig:
    """The adaptive curriculum (extension 3; tritonrl.train.rl.curriculum): the share of
    level-2 prompts starts at `start` and grows by `step` up to `end`, one growth each
    time the rolling verified-correct rate of level-1 completions (the last `window`)
    passes `trigger` (then the window starts afresh, so each growth is earned at the new
    mix). `retire_after` > 0 sets aside a task once its last that many completions were
    all verified correct, `retire_unsolved_after` > 0 once they were all wrong. Feeds
    every RL algorithm when enabled."""

    enabled: bool = True
    start: float = 0.1  # initial share of level-2 prompts
    end: float = 0.5  # final share
    trigger: float = 0.4  # rolling level-1 verified-correct rate that grows the share
    window: int = 64  # level-1 completions in the rolling rate
    step: float = 0.1  # growth of the share each time the trigger is passed
    # a task whose last `retire_after` completions were all verified correct is drawn no
    # more (its groups would carry no signal); 0: never
    retire_after: int = 0
    # the same for a task whose last `retire_unsolved_after` completions were all wrong
    # (a large pool of fresh tasks, `rl.generated_tasks`, has many); 0: never
    retire_unsolved_after: int = 0

    def __post_init__(self):
        need(
            0.0 <= self.start <= self.end <= 1.0,
            "curriculum.start and curriculum.end need 0 <= start <= end <= 1",
        )
        need(0.0 < self.trigger < 1.0, "curriculum.trigger must be in (0, 1)")
        need(self.window >= 1, "curriculum.window must be >= 1")
        need(0.0 < self.step <= 1.0, "curriculum.step must be in (0, 1]")
        need(
            self.retire_after >= 0,
            f"curriculum.retire_after must be >= 0 (0: never), not {self.retire_after!r}",
        )
        need(
            self.retire_unsolved_after >= 0,
            "curriculum.retire_unsolved_after must be >= 0 (0: never), not "
            f"{self.retire_unsolved_after!r}",
        )
