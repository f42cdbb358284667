"""The report: Markdown with tables and PNG plots, from a run's files and eval folders.

    tritonrl report runs/demo                      # -> runs/demo/report/report.md
    tritonrl report evals/base evals/sft evals/rl --out reports/compare
    write_report(["runs/demo"], out_dir)           # the same from Python

Every number and every plot comes from files the stages wrote, never typed in: a run's
manifest (stages, config, versions; the rl stage's info: what the pass-rate filter kept,
the reward's wall clock, `curriculum.retire_after`), `sft/log_history.json` (the loss),
`rl/log_history.json` (reward, verified-correct rate, curriculum share, tasks retired),
`rl/completions.jsonl` (how far each completion got), and an eval folder's
`summary.json` (metrics per level) and `samples.jsonl` (each sample's verdict). A run
whose manifest names an eval folder (stage `eval`, artifact `dir`) gets that
evaluation's sections too. What a source lacks is left out with a line saying so, never
drawn empty.

Plots: the funnel (how many candidates reached each stage of the verifier), the
verified-correct rate by level (one bar per source when several are compared; when every
rate is 0 a line says "no correct kernel" instead of an empty plot), the speedup
distribution of correct kernels, the SFT loss, and the RL reward, correct rate and
curriculum share per step (each series its own marker and line style, so one that equals
another still shows; whole-number steps on the axis). An evaluation's answers cut at the
token limit are said beside its notes. A multi-turn evaluation (`eval --turns`) gets a
table of correct@t, fast_1@t and best speedup@t per turn, and a plot of correct@t: how
much each turn of feedback adds.

What it does NOT do: it computes no metric of its own beyond counting stages and
speedups in the files (the metrics are `tritonrl eval`'s), and it does not read
tensorboard event files (the log histories hold the same numbers).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tritonrl.config import TIMING_KEYS
from tritonrl.config_loader import diff_configs
from tritonrl.evaluate.identity import token_limit
from tritonrl.runs import Run, shown_stages
from tritonrl.verify.result import STAGES

log = logging.getLogger(__name__)

REPORT = "report.md"
FUNNEL = STAGES[:-1]  # extract .. performance; "done" is the end of the last one
METRICS = ("valid", "compiled", "correct", "fast_1", "fast_2", "geomean_speedup")


@dataclass
class Source:
    """One thing reported on: a run directory or an eval folder."""

    path: Path
    name: str
    kind: str  # "run" | "eval"
    manifest: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None  # an evaluation's summary.json
    samples: list[dict] = field(default_factory=list)  # an evaluation's samples


def _jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by a kill: the rest still counts
                    log.warning("%s line %d is not JSON; skipped", path, n)
    return rows


def _read_eval(path: Path) -> tuple[dict | None, list[dict]]:
    summary = (
        json.loads((path / "summary.json").read_text())
        if (path / "summary.json").is_file()
        else None
    )
    samples = _jsonl(path / "samples.jsonl") if (path / "samples.jsonl").is_file() else []
    return summary, samples


def load_source(path: str | Path) -> Source:
    """A run directory (it holds manifest.json) or an eval folder (summary.json or
    samples.jsonl); anything else is a ValueError saying what was expected."""
    p = Path(path).expanduser().resolve()
    if (p / "manifest.json").is_file():
        run = Run.open(p)
        src = Source(p, p.name, "run", manifest=json.loads((p / "manifest.json").read_text()))
        if run.has_artifact("eval", "dir"):
            src.summary, src.samples = _read_eval(run.artifact("eval", "dir"))
        return src
    if (p / "summary.json").is_file() or (p / "samples.jsonl").is_file():
        summary, samples = _read_eval(p)
        name = (summary or {}).get("model") or p.name
        return Source(p, f"{p.name} ({name})" if name != p.name else p.name, "eval",
                      summary=summary, samples=samples)  # fmt: skip
    raise ValueError(
        f"{p}: neither a run directory (manifest.json) nor an eval folder (summary.json, "
        "samples.jsonl): pass what `tritonrl sft/rl --run` or `tritonrl eval --out` wrote"
    )


def _verdict(row: dict) -> dict:
    return row.get("verdict") or row.get("result") or row


def funnel_counts(rows: list[dict]) -> dict[str, int]:
    """How many of `rows` (completions or samples, each with a verdict's `stage`)
    reached each stage of the verifier (a stage is reached when it ran)."""
    index = {s: i for i, s in enumerate(STAGES)}
    reached = [index.get(_verdict(r).get("stage"), 0) for r in rows]
    return {stage: sum(i >= k for i in reached) for k, stage in enumerate(FUNNEL)} | {
        "correct": sum(bool(_verdict(r).get("correct")) for r in rows)
    }


def _history(path: Path) -> list[dict]:
    return json.loads(path.read_text()) if path.is_file() else []


def _series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(h["step"], h[key]) for h in history if key in h and h[key] is not None]
    return [s for s, _ in points], [float(v) for _, v in points]


class _Plots:
    """PNG files in the report's folder, each named once."""

    def __init__(self, out: Path):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt, self.out = plt, out

    def save(self, fig, name: str) -> str:
        fig.tight_layout()
        fig.savefig(self.out / name, dpi=110)
        self.plt.close(fig)
        return name

    def bars(self, name: str, title: str, groups: dict[str, dict[str, float]], ylabel: str):
        """Grouped bars: {series: {category: value}}."""
        cats = list(dict.fromkeys(c for g in groups.values() for c in g))
        fig, ax = self.plt.subplots(figsize=(max(5, 1.2 * len(cats) + 2), 3.6))
        width = 0.8 / max(len(groups), 1)
        for i, (label, values) in enumerate(groups.items()):
            xs = [j + i * width for j in range(len(cats))]
            ax.bar(xs, [values.get(c, 0) for c in cats], width, label=label)
        ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(cats))], cats)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        if len(groups) > 1:
            ax.legend(fontsize=8)
        return self.save(fig, name)

    def lines(self, name: str, title: str, series: dict[str, tuple[list, list]], ylabel: str,
              xlabel: str = "step"):  # fmt: skip
        return self.save(line_figure(self.plt, title, series, ylabel, xlabel), name)

    def histogram(self, name: str, title: str, values: dict[str, list[float]]):
        fig, ax = self.plt.subplots(figsize=(6, 3.6))
        for label, xs in values.items():
            ax.hist(xs, bins=20, alpha=0.6, label=f"{label} ({len(xs)})")
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel("speedup over the reference (x)")
        ax.set_ylabel("correct kernels")
        ax.set_title(title)
        ax.legend(fontsize=8)
        return self.save(fig, name)


# (marker, line style) per series of a line plot: a series equal to another (a reward
# and a correct rate both 0) still shows, its markers over the other's.
STYLES = (("o", "-"), ("x", "--"), ("^", ":"), ("s", "-."))


def line_figure(plt, title: str, series: dict[str, tuple[list, list]], ylabel: str,
                xlabel: str = "step"):  # fmt: skip
    """A figure of `series` ({label: (steps, values)}) per step (or turn: `xlabel`), steps
    as whole numbers."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = [(label, xs, ys) for label, (xs, ys) in series.items() if xs]
    for i, (label, xs, ys) in enumerate(drawn):
        marker, style = STYLES[i % len(STYLES)]
        ax.plot(xs, ys, linestyle=style, marker=marker if len(xs) < 30 else None,
                markersize=8 - 2 * (i % 3), label=label, zorder=2 + i)  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")[:40] or "source"


def _run_sections(src: Source, plots: _Plots) -> list[str]:
    m, slug = src.manifest, _slug(src.name)
    lines = [f"## Run `{src.name}`", ""]
    rows = [[name, st.get("status"), st.get("step"), (st.get("error") or "")[:80]]
            for name, st in shown_stages(m).items()]  # fmt: skip
    lines += _table(["stage", "status", "step", "error"], rows) + [""]
    lines += _run_files(src)
    sft = _history(src.path / "sft" / "log_history.json")
    if sft:
        curves = {"train loss": _series(sft, "loss"), "eval loss": _series(sft, "eval_loss")}
        name = plots.lines(f"{slug}_sft_loss.png", "SFT loss", curves, "loss")
        lines += ["### SFT", "", f"![SFT loss]({name})", ""]
    else:
        lines += ["No SFT log history in this run (sft/log_history.json).", ""]
    rl = _history(src.path / "rl" / "log_history.json")
    if rl:
        name = plots.lines(f"{slug}_rl_reward.png", "RL: reward, verified-correct rate, "
                           "level-2 share per step", {
            "mean reward": _series(rl, "reward"),
            "verified correct": _series(rl, "verify/correct"),
            "level-2 share (curriculum)": _series(rl, "curriculum/level2_share"),
        }, "value")  # fmt: skip
        lines += ["### RL", "", f"![RL curves]({name})", ""]
    lines += _rl_settings(src.manifest, rl)
    completions = src.path / "rl" / "completions.jsonl"
    if completions.is_file():
        rows = _jsonl(completions)
        counts = funnel_counts(rows)
        name = plots.bars(f"{slug}_rl_funnel.png", "RL completions: stage reached",
                          {src.name: counts}, "completions")  # fmt: skip
        lines += [f"RL completions verified: {len(rows)}.", ""]
        lines += _table(list(counts), [list(counts.values())]) + ["", f"![RL funnel]({name})", ""]
    return lines


def _rl_settings(manifest: dict, history: list[dict]) -> list[str]:
    """What the rl stage's info and log say of its prompts and reward: the pass-rate
    filter's counts, the reward's wall clock, the tasks the curriculum retired."""
    info = (manifest.get("stages", {}).get("rl") or {}).get("info") or {}
    config = info.get("config") or {}
    out = []
    f = info.get("pass_rate_filter")
    if f:
        lo, hi = f.get("range") or [None, None]
        within = f" within [{lo:g}, {hi:g}]" if lo is not None and hi is not None else ""
        out.append(f"- prompts: the pass-rate filter (`{f['file']}`) kept {f['kept']} of "
                   f"{f['tasks']} tasks{within}; {f['below_min']} below, {f['above_max']} "
                   f"above, {f['not_in_file']} not in the file")  # fmt: skip
    timeout = (config.get("rl") or {}).get("verify_timeout_s")
    if timeout is not None:
        shown = f"{timeout:g}" if isinstance(timeout, int | float) else timeout
        out.append(f"- reward wall clock: {shown} s a candidate (`rl.verify_timeout_s`)")
    timing = {k: (config.get("rl") or {}).get(f"timing_{k}") for k in TIMING_KEYS}
    if any(v is not None for v in timing.values()):
        said = ", ".join(f"{k} {v:g}" for k, v in timing.items() if isinstance(v, int | float))
        out.append(f"- reward timing: {said} (`rl.timing_*`; eval times under `verify`)")
    fresh = (config.get("rl") or {}).get("generated_tasks")
    if fresh:
        out.append(f"- fresh generator tasks: up to {fresh} (`rl.generated_tasks`; those equal "
                   "to a training or held-out task left out)")  # fmt: skip
    out += _retired(config.get("curriculum") or {}, history) + _unseen(history)
    return out + [""] if out else []


def _retired(curriculum: dict, history: list[dict]) -> list[str]:
    """The retirement line: tasks set aside as solved and as never solved, at the last
    step that logged a count."""
    right, wrong = curriculum.get("retire_after"), curriculum.get("retire_unsolved_after")
    if not (right or wrong):
        return []
    retired = _series(history, "curriculum/retired")[1]
    unsolved = _series(history, "curriculum/retired_unsolved")[1]
    if not retired:
        return ["- tasks retired: no count logged"]
    n_wrong = unsolved[-1] if unsolved else 0.0
    parts = [f"{retired[-1] - n_wrong:.0f} solved (`curriculum.retire_after` {right}: the "
             f"last {right} answers all correct)"] if right else []  # fmt: skip
    if wrong:
        parts.append(f"{n_wrong:.0f} unsolved (`curriculum.retire_unsolved_after` {wrong}: "
                     f"the last {wrong} all wrong)")  # fmt: skip
    return [f"- tasks retired: {retired[-1]:.0f}, " + "; ".join(parts)]


def _unseen(history: list[dict], n: int = 5) -> list[str]:
    """Correct on tasks no earlier step drew, the first `n` steps that drew any against the
    last `n` (`curriculum/unseen_level*_correct`; -1 means the step drew none)."""
    said = []
    for level in (1, 2):
        rates = [v for v in _series(history, f"curriculum/unseen_level{level}_correct")[1]
                 if v >= 0]  # fmt: skip
        if rates:
            first, last = rates[:n], rates[-n:]
            said.append(f"level {level}{'+' if level == 2 else ''} "
                        f"{100 * sum(first) / len(first):.0f}% -> "
                        f"{100 * sum(last) / len(last):.0f}%")  # fmt: skip
    if not said:
        return []
    return [
        f"- correct on tasks no earlier step drew (sampled before any training on them; "
        f"the first {n} steps that drew some, then the last {n}): " + ", ".join(said)
    ]


def _run_files(src: Source) -> list[str]:
    """Where the run's files are: each stage's artifacts as its manifest names them
    (run-relative), and the stages' logs."""
    lines = [f"Files, relative to the run directory `{src.path}`:", ""]
    for stage, record in src.manifest.get("stages", {}).items():
        for name, rel in (record.get("artifacts") or {}).items():
            lines.append(f"- {stage} {name}: `{rel}`")
    if (src.path / "logs").is_dir():
        lines.append("- the stages' logs: `logs/`")
    return lines + [""] if len(lines) > 2 else []


def _metrics_rows(sources: list[Source]) -> list[list[Any]]:
    rows = []
    for s in sources:
        overall = (s.summary or {}).get("metrics", {}).get("overall", {})
        passes = {k: v for k, v in overall.items() if k.startswith("pass@")}
        rows.append([s.name, overall.get("n"), *(overall.get(k) for k in METRICS),
                     ", ".join(f"{k} {v:.3g}" for k, v in passes.items()) or None])  # fmt: skip
    return rows


def _eval_sections(sources: list[Source], plots: _Plots) -> list[str]:
    evals = [s for s in sources if s.summary is not None or s.samples]
    if not evals:
        return []
    lines = ["## Evaluation", ""]
    lines += _table(["source", "samples", *METRICS, "pass@k"], _metrics_rows(evals)) + [""]
    for s in evals:
        for note in (s.summary or {}).get("notes", []):
            lines.append(f"- {s.name}: {note}")
        cut = _cut(s)
        if cut:
            lines.append(f"- {s.name}: {cut}")
    lines.append("")
    lines += _turn_section(evals, plots)
    funnels = {s.name: funnel_counts(s.samples) for s in evals if s.samples}
    if funnels:
        name = plots.bars("eval_funnel.png", "Samples: stage reached", funnels, "samples")
        lines += ["### Funnel", "", f"![funnel]({name})", ""]
    by_level = {}
    for s in evals:
        levels = (s.summary or {}).get("metrics", {}).get("levels", {})
        if levels:
            by_level[s.name] = {f"level {k}": v.get("correct") or 0.0 for k, v in levels.items()}
    if by_level and not any(v for rates in by_level.values() for v in rates.values()):
        lines += ["### Correct rate by level", "", "No correct kernel at any level: every "
                  "verified-correct rate is 0 (nothing to plot).", ""]  # fmt: skip
    elif by_level:
        name = plots.bars("correct_by_level.png", "Verified-correct rate by level", by_level,
                          "correct rate")  # fmt: skip
        lines += ["### Correct rate by level", "", f"![correct by level]({name})", ""]
    speedups = {}
    for s in evals:
        xs = [float(_verdict(r)["speedup"]) for r in s.samples
              if _verdict(r).get("correct") and _verdict(r).get("speedup") is not None]  # fmt: skip
        if xs:
            speedups[s.name] = xs
    if speedups:
        name = plots.histogram("speedups.png", "Speedup of correct kernels", speedups)
        lines += ["### Speedups", "", f"![speedups]({name})", ""]
    else:
        correct = sum(1 for s in evals for r in s.samples if _verdict(r).get("correct"))
        why = (
            "no sample was correct"
            if not correct
            else f"{correct} correct samples but none was timed (timing needs CUDA)"
        )
        lines += [f"No speedup distribution: {why}.", ""]  # fmt: skip
    return lines


def _turn_section(evals: list[Source], plots: _Plots) -> list[str]:
    """Per-turn metrics of the multi-turn evaluations, a table and a correct@t plot."""
    by_source = {s.name: (s.summary or {}).get("metrics", {}).get("turns") for s in evals}
    by_source = {name: turns for name, turns in by_source.items() if turns}
    if not by_source:
        return []
    rows = [[name, int(t), m.get("answered"), m.get("correct"), m.get("fast_1"),
             m.get("best_speedup"), m.get("repeated")]
            for name, turns in by_source.items() for t, m in turns.items()]  # fmt: skip
    lines = ["### By turn", "", "Each metric is by turn t: the best of a conversation's "
             "answers up to t (the verifier's feedback before each further turn); "
             "repeated: the share of turn t's answers repeating an earlier kernel of "
             "their conversation.", ""]  # fmt: skip
    lines += _table(["source", "turn", "asked", "correct@t", "fast_1@t", "best speedup@t",
                     "repeated"], rows) + [""]  # fmt: skip
    series = {name: ([int(t) for t in turns], [m.get("correct") or 0.0 for m in turns.values()])
              for name, turns in by_source.items()}  # fmt: skip
    name = plots.lines("correct_by_turn.png", "Correct by turn (correct@t)", series,
                       "correct rate", "turn")  # fmt: skip
    return lines + [f"![correct by turn]({name})", ""]


def _cut(src: Source) -> str | None:
    """How many of an evaluation's answers stopped at the token limit, when any did."""
    summary = src.summary or {}
    cut = summary.get("truncated")
    if cut is None:
        cut = sum(bool(r.get("truncated")) for r in src.samples)
    if not cut:
        return None
    n = (summary.get("metrics", {}).get("overall", {}).get("n")) or len(src.samples)
    limit = token_limit(summary)
    at = f" ({limit} new tokens)" if limit else ""
    return (f"{cut} of {n} answers stopped at the token limit{at} before they ended: "
            "each verdict judges a cut answer (`eval --max-tokens` raises the limit)")  # fmt: skip


def _provenance(sources: list[Source]) -> list[str]:
    lines = ["## Config and versions", ""]
    for s in sources:
        config = s.manifest.get("config") or (s.summary or {}).get("config")
        versions = s.manifest.get("versions") or (s.summary or {}).get("versions")
        lines.append(f"### {s.name}")
        lines.append("")
        if versions:
            lines.append(", ".join(f"{k} {v}" for k, v in versions.items() if v))
            lines.append("")
        if config:
            lines += ["```yaml", yaml.safe_dump(config, sort_keys=False).rstrip(), "```", ""]
        for stage, record in (s.manifest.get("stages") or {}).items():
            ran = (record.get("info") or {}).get("config")  # what a later stage ran with
            if not (config and isinstance(ran, dict)):
                continue
            changes = diff_configs({k: config.get(k) or {} for k in ran}, ran)
            if changes:
                lines += [f"{stage} ran with, where it differs from the config above:", "",
                          *(f"- `{c}`" for c in changes), ""]  # fmt: skip
    return lines


def write_report(paths: list[str | Path], out: str | Path | None = None) -> Path:
    """Write report.md and its PNGs for `paths` (runs and eval folders) into `out`
    (default: `report/` in the first one); returns the Markdown file's path."""
    if not paths:
        raise ValueError("report: name at least one run directory or eval folder")
    sources = [load_source(p) for p in paths]
    out_dir = Path(out) if out is not None else sources[0].path / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = _Plots(out_dir)
    title = ", ".join(s.name for s in sources)
    lines = [f"# tritonrl report: {title}", ""]
    for s in sources:
        if s.kind == "run":
            lines += _run_sections(s, plots)
    lines += _eval_sections(sources, plots)
    lines += _provenance(sources)
    path = out_dir / REPORT
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)
    log.info("report written to %s", path)
    return path
