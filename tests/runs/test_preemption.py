"""Pre-emption by signal, with real signals to a real child process: outside the graceful
part a signal interrupts at once; inside it the first only asks for a stop and a second
one interrupts; the old handlers come back afterwards."""

import signal
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from tritonrl.runs import Interrupted, StopSignals

    def wait_for(stop, what):
        print(what, flush=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (what == "graceful" and stop.signal):
            time.sleep(0.01)

    try:
        with StopSignals() as stop:
            if sys.argv[1] == "graceful":
                with stop.graceful():
                    wait_for(stop, "graceful")
                    print("asked", stop.signal, flush=True)
                    wait_for(stop, "again")
            else:
                wait_for(stop, "loading")
    except Interrupted as e:
        print("interrupted", e.signal_name, flush=True)
    print("restored", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    """
)


def _child(mode: str, sig: signal.Signals, waits: list[int]) -> list[str]:
    """Run CHILD; before each signal, read `waits[k]` lines (so it is where it should be)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True)
    lines = []
    for n in waits:
        lines += [proc.stdout.readline().strip() for _ in range(n)]
        proc.send_signal(sig)
    lines += proc.stdout.read().splitlines()
    assert proc.wait(timeout=30) == 0
    return lines


def test_a_signal_outside_the_graceful_part_interrupts_at_once():
    lines = _child("loading", signal.SIGTERM, [1])
    assert lines == ["loading", "interrupted SIGTERM", "restored True"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_inside_it_the_first_signal_asks_and_the_second_interrupts(sig):
    lines = _child("graceful", sig, [1, 2])
    assert lines == ["graceful", f"asked {sig.name}", "again", f"interrupted {sig.name}"] + [
        "restored True"
    ]
