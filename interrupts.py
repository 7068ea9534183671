"""
Stopping a run cleanly: the first Ctrl-C or SIGTERM (`kill PID`) during training is a request the
loop honours between steps (it saves a checkpoint, then raises Interrupted), so an interrupted run
resumes exactly with --resume; a second one stops at once. A request is honoured in bounded time: a
step (with its evaluation) that has not finished --stop-grace seconds after it is abandoned
(StepAbandoned), the last checkpoint kept as it was. Outside the loop SIGTERM stops as a Ctrl-C would
(Terminated), so every `finally` still runs (the lock released, no temporary file left).
"""

import os
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

# after the grace period, how long the main thread may take to act on it before the process leaves without it
# (it is then inside one long native call, which no Python handler can interrupt)
FORCE_AFTER = 10.0


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: signum) in the training loop, after the step in flight finished and was
    checkpointed (to `ckpt`)."""

    def __init__(self, message, ckpt=None, signum=signal.SIGINT):
        super().__init__(message)
        self.ckpt, self.signum = ckpt, signum


class StepAbandoned(KeyboardInterrupt):
    """A stop request (Ctrl-C or SIGTERM: signum) whose step had not finished within --stop-grace seconds:
    the step was abandoned, the last checkpoint (`ckpt`) is as it was."""

    def __init__(self, grace, ckpt=None, signum=signal.SIGINT):
        super().__init__(f"the step in flight had not finished {grace:g} s after the "
                         f"{'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C'} (--stop-grace), so it was abandoned")
        self.ckpt, self.signum = ckpt, signum


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`) where it stops at once: outside the training loop, or a second one in it. A
    KeyboardInterrupt, so that every `finally` runs (the lock released, no temporary file left)."""
    signum = signal.SIGTERM


class CtrlC:
    """Turns the first Ctrl-C or SIGTERM during training into a request the loop honours between steps
    (checkpoint, then Interrupted), so an interrupted run resumes exactly; a second one stops at once.
    A request is honoured in bounded time: `grace` seconds after it arrives (a watchdog thread learns of it
    through signal.set_wakeup_fd, even while the main thread is inside one long native call, where no Python
    handler runs) a timer sends the signal again and the handler raises StepAbandoned (`ckpt`, the last
    checkpoint, kept); should the main thread not act within FORCE_AFTER seconds more, the timer's thread ends
    the process, saying the same. Single process only: under torchrun the ranks would not agree on the step."""

    def __init__(self, active, grace=30.0, ckpt=None):
        self.active, self.grace, self.ckpt = active, grace, ckpt
        self.asked, self.signum, self.expired, self._old, self._timers = False, None, False, {}, []
        self._lock, self._timing, self._over, self._wakeup = threading.Lock(), False, False, None

    def _handler(self, signum, frame):
        if self.expired:
            raise StepAbandoned(self.grace, self.ckpt, self.signum)
        if self.asked:
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        self.asked = True
        self._grace_from(signum)
        print(f"\n{'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C'}: finishing this step and saving a "
              f"checkpoint (within --stop-grace {self.grace:g} s, else the step is abandoned and the last checkpoint "
              "kept; Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    def _grace_from(self, signum):  # (the main thread's handler, or the watchdog: whichever learns first)
        with self._lock:
            if not (self._timing or self._over):
                self._timing, self.signum = True, signum
                self._after(self.grace, self._expire)

    def _watch(self, wakeup):  # (the watchdog's thread) each signal the process receives, as one byte
        while data := wakeup.recv(64):
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._grace_from(signum)
        wakeup.close()

    def _after(self, seconds, then):
        t = threading.Timer(seconds, then)
        t.daemon = True
        self._timers.append(t)
        t.start()

    def _expire(self):  # (the timer's thread) the step is late: the main thread's handler abandons it
        with self._lock:
            if self._over:
                return
            self.expired = True
            self._after(FORCE_AFTER, self._leave)
            os.kill(os.getpid(), self.signum)

    def _leave(self):  # (the timer's thread) the main thread is stuck in one native call: exit without it
        with self._lock:
            if not self._over:
                code = exit_code(StepAbandoned(self.grace, self.ckpt, self.signum), None)
                sys.stderr.flush()
                os._exit(code)

    def stop_requested(self):
        """Whether a stop was asked; the loop asks once the step (and its evaluation) is done, so the grace
        period ends here and the checkpoint the loop then saves is not cut short."""
        if self.asked:
            self._cancel()
        return self.asked

    def _cancel(self):
        with self._lock:
            self._over = True
            for t in self._timers:
                t.cancel()

    def __enter__(self):
        if self.active:
            self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
            wakeup, self._wakeup = socket.socketpair()
            self._wakeup.setblocking(False)
            self._old_wakeup_fd = signal.set_wakeup_fd(self._wakeup.fileno(), warn_on_full_buffer=False)
            threading.Thread(target=self._watch, args=(wakeup,), daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._cancel()
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}
        if self._wakeup is not None:  # (closing its end ends the watchdog)
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self._wakeup.close()
            self._wakeup = None


def terminate(signum, frame):
    """train.py's SIGTERM outside the training loop (where CtrlC takes it): stop as a Ctrl-C would."""
    raise Terminated


@contextmanager
def sigterm_stops():
    """SIGTERM raises Terminated while the block runs (where it can be set: the main thread)."""
    try:
        old = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread: signals stay as they are
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def exit_code(e, out):
    """Say on stderr how an interrupted run (the KeyboardInterrupt e, into --out `out`) resumes; returns the
    exit code, 128 + the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    ckpt = Path(getattr(e, "ckpt", None) or Path(out or ".") / "ckpt.pt")  # (--baseline: OUT/baseline's)
    resume = "continue with the same command and --resume"
    if isinstance(e, Interrupted):
        print(f"\ninterrupted after {e}; saved {ckpt}: {resume}", file=sys.stderr)
    elif isinstance(e, StepAbandoned):
        print(f"\n{e}; " + (f"the last checkpoint is {ckpt} (as it was): {resume}" if ckpt.exists() else
                            "no checkpoint had been saved yet: nothing to resume"), file=sys.stderr)
    elif ckpt.exists():  # (an --out with another run's files is refused before anything starts)
        print(f"\ninterrupted; the last checkpoint is {ckpt}: {resume}", file=sys.stderr)
    else:
        print("\ninterrupted before the first step: nothing was saved", file=sys.stderr)
    return 128 + getattr(e, "signum", signal.SIGINT)
