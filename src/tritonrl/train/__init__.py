"""Training: the tiny from-scratch model, SFT (and, beside them, RL and the curriculum).

Each stage reads its inputs from the run manifest and records what it writes there."""
