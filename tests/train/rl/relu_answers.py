"""Answers to the builtin ReLU task that the RL tests hand the trainer: the task's own
solution (verified correct) and one that lets torch do the work (flagged, scored 0)."""

from tritonrl.tasks import load_builtin

RELU = load_builtin("level1/1_ReLU").tasks[0]
HONEST = f"```python\n{RELU.solution}```"
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip
QUIET = ["--run.report_to", "[none]"]  # no tensorboard for a test's run
