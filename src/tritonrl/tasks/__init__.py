"""Tasks in the KernelBench format: the model, loaders, builtin suite, size scaling,
generator and difficulty labels."""

from tritonrl.tasks.loaders import LoadReport, load_builtin, load_source, load_tasks
from tritonrl.tasks.task import Task, TaskLoadError

__all__ = ["LoadReport", "Task", "TaskLoadError", "load_builtin", "load_source", "load_tasks"]
