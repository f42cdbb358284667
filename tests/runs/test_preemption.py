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


# A notice from another thread (the spot watcher's): the same stop a SIGTERM gives.
NOTICE_CHILD = textwrap.dedent(
    """
    import signal, sys, threading, time
    from tritonrl.runs import Interrupted, StopSignals

    def notice(stop):
        t = threading.Thread(target=stop.notice, args=("spot-notice", "terminate at T"))
        t.start()
        t.join()

    mode = sys.argv[1]
    began = time.monotonic()
    try:
        if mode == "unentered":
            stop = StopSignals()
            notice(stop)
            print("asked", stop.signal, flush=True)
        with StopSignals() as stop:
            if mode == "graceful":
                with stop.graceful():
                    notice(stop)
                    print("asked", stop.signal, flush=True)
                    notice(stop)  # a second notice changes nothing
                    print("again", flush=True)  # the parent sends SIGTERM: still only asks
                    while not stop._signalled and time.monotonic() - began < 30:
                        time.sleep(0.01)
                    print("asked", stop.signal, flush=True)
                    print("insist", flush=True)  # and a second SIGTERM interrupts
                    time.sleep(30)
            elif mode == "loading":
                threading.Timer(0.2, stop.notice, args=("spot-notice",)).start()
                time.sleep(30)  # blocked in a system call: woken at once
    except Interrupted as e:
        print("interrupted", e.signal_name, round(time.monotonic() - began) < 5, flush=True)
    print("restored", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    """
)


def _notice_child(mode: str, signal_after: tuple[str, ...] = ()) -> list[str]:
    """Run NOTICE_CHILD; send SIGTERM after each line named in `signal_after`."""
    proc = subprocess.Popen(
        [sys.executable, "-c", NOTICE_CHILD, mode], stdout=subprocess.PIPE, text=True
    )
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if lines[-1] in signal_after:
            proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    return lines


def test_a_notice_while_graceful_asks_for_a_checkpoint_and_a_stop():
    lines = _notice_child("graceful", signal_after=("again", "insist"))
    assert lines == [
        "asked spot-notice",
        "again",
        "asked spot-notice",  # the SIGTERM after the notice did not interrupt
        "insist",
        "interrupted spot-notice True",
        "restored True",
    ]


def test_a_notice_while_loading_interrupts_the_main_thread_at_once():
    assert _notice_child("loading") == ["interrupted spot-notice True", "restored True"]


def test_a_notice_without_handlers_only_asks():
    lines = _notice_child("unentered")
    assert lines == ["asked spot-notice", "restored True"]
