"""Pre-emption by signal: SIGTERM (a spot reclaim, `kill`, a scheduler) and SIGINT (Ctrl-C).

    with StopSignals() as stop:          # handlers installed, the old ones restored after
        load_everything()                # a signal here raises Interrupted at once
        with stop.graceful():
            train()                      # a first signal only sets stop.signal; the trainer
                                         # checkpoints at the next step boundary and stops
        if stop.signal:
            raise Interrupted(stop.signal)

A second signal while graceful raises `Interrupted` at once (the user insists). The stage
that catches `Interrupted` marks itself interrupted in the manifest, with the signal
(`Run.interrupt_stage`), and the same command resumes it from its last checkpoint.

What it does NOT do: it does not poll the AWS spot notice or sync to a store (the store
issue), and it installs nothing outside the main thread (there Python cannot take signals).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):  # noqa: N818 - it is not an error: a stop was asked for
    """A stage stopped by a signal; `signal_name` is e.g. 'SIGTERM'. A BaseException,
    like KeyboardInterrupt, so that no `except Exception` swallows it."""

    def __init__(self, signal_name: str):
        super().__init__(f"interrupted by {signal_name}")
        self.signal_name = signal_name


class StopSignals:
    """SIGTERM/SIGINT handlers for one stage; see the module docstring."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._graceful = False
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self._graceful and self.signal is None:
            self.signal = name
            log.warning("%s received: checkpointing at the next step, then stopping", name)
            return
        raise Interrupted(self.signal or name)

    @contextlib.contextmanager
    def graceful(self) -> Iterator[None]:
        self._graceful = True
        try:
            yield
        finally:
            self._graceful = False

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
