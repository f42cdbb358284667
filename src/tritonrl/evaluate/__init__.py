"""Evaluation: a model's kernels measured by the verifier (`tritonrl eval`) and the
report (`tritonrl report`) made from a run's files and eval folders."""
