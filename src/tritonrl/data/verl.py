"""Tasks as verl's RL dataset: one parquet row per task (`tritonrl export-verl`).

A row is what verl's RL dataset reads: `data_source` ("tritonrl"), `prompt` (the chat
messages of the one prompt builder, `data.prompts.build_messages`, under the verifier's
policy), `ability` ("triton"), `reward_model` `{style: "rule", ground_truth}` and
`extra_info` `{task_id, level, split, index}`. The ground truth is what
`tritonrl.reward.compute_score` resolves: a builtin task's id, else the reference source
itself (so the row needs no file on the reward workers).

What it does NOT do: score anything (verl calls `compute_score`), or split tasks into
train and validation (export each split's tasks to its own file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritonrl.config import VerifyConfig
from tritonrl.data.prompts import build_messages, policy_settings
from tritonrl.tasks import Task

DATA_SOURCE = "tritonrl"
ABILITY = "triton"


def ground_truth(task: Task) -> str:
    """What `compute_score` resolves back to the task: a builtin id, else the source."""
    return task.id if task.id.startswith("builtin:") else task.source


def verl_rows(tasks: list[Task], split: str, config: VerifyConfig | None = None) -> list[dict]:
    """One verl row per task, in order; the prompt states `config`'s policy."""
    config = config or VerifyConfig()
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": build_messages(t.source, **policy_settings(config, t.id)),
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": ground_truth(t)},
            "extra_info": {"task_id": t.id, "level": t.level, "split": split, "index": i},
        }
        for i, t in enumerate(tasks)
    ]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """`rows` as one parquet file (pyarrow: the `verl` extra, or `train`'s datasets)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise RuntimeError(
            "writing verl's parquet needs pyarrow: pip install 'tritonrl[verl]'"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
