"""tritonrl: train language models to write correct, fast Triton kernels, and verify them
honestly. See README.md for the two commands that run everything."""

__version__ = "0.1.0"
