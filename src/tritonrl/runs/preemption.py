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

Another thread asks for the same stop with `stop.notice(name, detail)` (the AWS spot
notice: `runs/spot.py`'s `watch_spot(stop)` calls `stop.notice("spot-notice", ...)`):
while graceful it sets `stop.signal = name`, so the trainer checkpoints at the next step
boundary; before (still loading) it sends SIGTERM to the main thread, whose handler raises
`Interrupted(name)` there at once. A notice is not a signal: a real SIGTERM after it (a
node drained on the same notice) still only asks, and a second real one insists.

What it does NOT do: it does not poll the AWS spot notice itself (`runs/spot.py`) or sync
to a store (`runs/sync.py`), and it installs nothing outside the main thread (there Python
cannot take signals): a notice to a StopSignals without handlers only sets `signal`.
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
    """SIGTERM/SIGINT handlers for one stage, and `notice` for other threads; see the
    module docstring."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._graceful = False
        self._previous: dict[int, object] = {}
        self._pending: str | None = None  # a notice sent to the main thread as SIGTERM
        self._signalled = False  # a real signal came while graceful: the next one insists
        self._closing = False  # in __exit__: a notice arriving now only sets `signal`
        self._lock = threading.Lock()  # handlers installed <-> a notice may send SIGTERM

    def _handle(self, signum: int, frame) -> None:
        noticed, self._pending = self._pending, None
        name = noticed or signal.Signals(signum).name
        if (self._graceful or self._closing) and noticed:
            self.signal = self.signal or name  # notice() logged it
            return
        if self._graceful and not self._signalled:
            self._signalled = True
            if self.signal is None:
                self.signal = name
                log.warning("%s received: checkpointing at the next step, then stopping", name)
            else:
                log.warning("%s received: already stopping at the next step (%s)", name,
                            self.signal)  # fmt: skip
            return
        raise Interrupted(self.signal or name)

    def notice(self, name: str, detail: str | None = None) -> None:
        """From any thread: ask for the stop a SIGTERM gives, recorded as `name` (e.g.
        "spot-notice"; `detail` is only logged). A stop already asked for is kept."""
        with self._lock:
            if self.signal is not None or self._pending is not None:
                return
            why = f"{name} ({detail})" if detail else name
            if self._graceful or self._closing or not self._previous:
                self.signal = name
                log.warning("%s: checkpointing at the next step, then stopping", why)
                return
            log.warning("%s while loading: stopping", why)
            self._pending = name
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

    @contextlib.contextmanager
    def graceful(self) -> Iterator[None]:
        self._graceful = True
        try:
            yield
        finally:
            self._graceful = False

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            with self._lock:
                self._closing = False
                for sig in SIGNALS:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self._closing = True
        with self._lock:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous.clear()
            self._pending = None
