"""Which verifier a caller gets for `verify.backend`: this machine's worker pool
("local", `tritonrl.verify.pool.pool`) or the actors of a Ray cluster ("ray",
`tritonrl.verify.ray_backend`). Both offer `submit`, `submit_many`, `verify_many`,
`imap_unordered` and `close`, with the same verdicts.

    verifier = shared_verifier(config, workers)          # process-wide: reward, eval
    with open_verifier(config, workers) as verifier:     # the caller's own: verify --batch
        results = verifier.verify_many(pairs, config)

`workers` is the pool's lanes, with Ray each actor's (None: the default).

What it does NOT do: choose the HTTP service (`verify.endpoint`: the reward adapters ask
`client.client_for` first), or import Ray before the Ray backend is asked for.
"""

from __future__ import annotations

from tritonrl.config import VerifyConfig
from tritonrl.verify.pool.pool import VerifierPool, shared_pool
from tritonrl.verify.ray_backend import RayVerifier, shared_ray_verifier

Verifier = VerifierPool | RayVerifier


def open_verifier(config: VerifyConfig, workers: int | None = None) -> Verifier:
    """A new verifier for `config.backend`, for the caller to close."""
    if config.backend == "ray":
        return RayVerifier(config, workers)
    return VerifierPool(config, workers)


def shared_verifier(config: VerifyConfig, workers: int | None = None) -> Verifier:
    """The process-wide verifier for `config.backend` and these settings, created on first
    use and closed at exit."""
    if config.backend == "ray":
        return shared_ray_verifier(config, workers)
    return shared_pool(config, workers)
