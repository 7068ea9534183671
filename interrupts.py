"""
Stopping a run cleanly: the first Ctrl-C or SIGTERM (`kill PID`) during training is a request the
loop honours between steps (it saves a checkpoint, then raises Interrupted), so an interrupted run
resumes exactly with --resume; a second one stops at once. Outside the loop SIGTERM stops as a
Ctrl-C would (Terminated), so every `finally` still runs (the lock released, no temporary file left).
"""

import signal
import sys
from contextlib import contextmanager
from pathlib import Path


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: signum) in the training loop, after the step in flight finished and was
    checkpointed (to `ckpt`)."""

    def __init__(self, message, ckpt=None, signum=signal.SIGINT):
        super().__init__(message)
        self.ckpt, self.signum = ckpt, signum


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`) where it stops at once: outside the training loop, or a second one in it. A
    KeyboardInterrupt, so that every `finally` runs (the lock released, no temporary file left)."""
    signum = signal.SIGTERM


class CtrlC:
    """Turns the first Ctrl-C or SIGTERM during training into a request the loop honours between steps
    (checkpoint, then Interrupted), so an interrupted run resumes exactly; a second one stops at once.
    Single process only: under torchrun the ranks would not agree on the step."""

    def __init__(self, active):
        self.active, self.asked, self.signum, self._old = active, False, None, {}

    def _handler(self, signum, frame):
        if self.asked:
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        self.asked, self.signum = True, signum
        print(f"\n{'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C'}: finishing this step and saving a "
              "checkpoint (Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    def __enter__(self):
        if self.active:
            self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}


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
    ckpt = getattr(e, "ckpt", None) or Path(out) / "ckpt.pt"  # (--baseline: OUT/baseline's)
    if isinstance(e, Interrupted):
        print(f"\ninterrupted after {e}; saved {ckpt}: continue with the same command and --resume", file=sys.stderr)
    elif ckpt.exists():  # (an --out with another run's files is refused before anything starts)
        print(f"\ninterrupted; the last checkpoint is {ckpt}: continue with the same command and --resume",
              file=sys.stderr)
    else:
        print("\ninterrupted before the first step: nothing was saved", file=sys.stderr)
    return 128 + getattr(e, "signum", signal.SIGINT)
