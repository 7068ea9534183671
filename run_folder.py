"""
The run folder (--out): one live run per folder (OUT/.lock, RunLock), never mixed with another run's
files, and left as it was found by a run that fails before it writes anything (claimed).

    with claimed(args, env, out):   # rank 0 holds OUT/.lock from here to the end, however the run ends
        ...train into out...
"""

import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

import torch.distributed as dist

from checkpoint import run_disk_full
from data.common import UserError, no_space


# the temporary names of the run's own files (save_checkpoint, write_atomic, summary.save_figure): a process
# killed while writing one leaves it behind
TEMP_FILES = (".ckpt.pt.tmp-*", ".stage*.pt.tmp-*", ".summary.json.tmp-*", ".metrics.jsonl.tmp-*",
              ".loss.png.tmp-*", ".loss.tmp.png", ".baseline.png.tmp-*")


def remove_stale_temp_files(out):
    """Delete the temporary files a killed run left in `out` (only the run holding its lock calls this, so
    no live process is writing them); says which."""
    gone = sorted({f for pattern in TEMP_FILES for f in Path(out).glob(pattern) if f.is_file()})
    for f in gone:
        f.unlink(missing_ok=True)
    if gone:
        print(f"{out}: removed {len(gone)} temporary file(s) a stopped run left behind "
              f"({', '.join(f.name for f in gone[:3])}{', ...' if len(gone) > 3 else ''})")


RUN_FILES = ("ckpt.pt", "summary.json", "metrics.jsonl", "loss.png", "baseline.png", "stage*.pt")


def check_out_folder(args, out):
    """A run never mixes with another: --out must be a folder that holds no other run's files,
    unless --resume continues the run whose checkpoint is there."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; give a folder for the run's files")
    found = sorted({f.name for pattern in RUN_FILES for f in out.glob(pattern)}) if out.is_dir() else []
    if not found:
        return
    if not args.resume:
        raise UserError(f"--out {out} holds another run's files ({', '.join(found[:4])}"
                        f"{', ...' if len(found) > 4 else ''}); continue that run with --resume, or give a fresh "
                        f"--out (e.g. --out {out}-2)")
    if "ckpt.pt" not in found and ({"summary.json"} & set(found) or any(f.startswith("stage") for f in found)):
        raise UserError(f"--resume: {out} holds a run's files ({', '.join(found[:4])}) but no ckpt.pt to continue "
                        "from; give a fresh --out for a new run")


class RunLock:
    """OUT/.lock: one live run per folder. acquire() creates it atomically (O_CREAT|O_EXCL) holding
    "PID START HOST" (START: the process's start time, so a reused PID is not mistaken for the
    run); a lock whose process is gone (killed with -9, a crash) is taken over, saying so (once the lock is
    this process's: of two processes racing for it, only the winner says it); a live
    one is a UserError naming its PID. release() removes it only if it is still this process's.
    A lock that cannot be written for lack of space is a DiskFull of one line (the empty file removed):
    the run is refused, not run unlocked, since it could save no checkpoint either; --resume continues it
    once space is freed."""

    def __init__(self, out):
        self.out, self.path, self.mine = Path(out), Path(out) / ".lock", None

    def acquire(self):
        me = f"{os.getpid()} {_start_time(os.getpid()) or ''} {socket.gethostname()}\n"
        took_over = None  # the PID of the stale lock this process removed: said once the lock is this process's
        for _ in range(10):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._read()
                if holder is None:  # released in between: try again
                    continue
                pid, start, host = (holder.split() + ["", "", ""])[:3]
                if _alive(pid, start, host):
                    elsewhere = bool(host) and host != socket.gethostname()
                    raise UserError(
                        f"--out {self.out} is in use by a run still going (PID {pid}"
                        f"{' on host ' + host if elsewhere else ''}); wait for it to end or stop it, or give "
                        "another --out" + (f" (delete {self.path} if that run is gone)" if elsewhere else ""))
                if self._remove_stale(holder):
                    took_over = pid or "?"
                continue
            except OSError as e:
                raise self._cannot_write(e) from None
            try:
                os.write(fd, me.encode())
            except OSError as e:  # (a full disk: an empty lock would only be taken over as stale)
                self._unlink_own(fd)
                raise self._cannot_write(e) from None
            finally:
                os.close(fd)
            self.mine = me
            if took_over is not None:  # (a process that lost the race to another run says nothing of it)
                print(f"{self.out}: taking over the lock of run PID {took_over}, which is no longer running")
            return
        raise UserError(f"--out {self.out}: other processes keep taking and dropping its lock {self.path}; "
                        "give another --out")

    def _cannot_write(self, e):
        """The UserError of a lock that cannot be written. On a full disk the run is refused rather than
        run unlocked: it could save no checkpoint either; once space is freed --resume continues it."""
        if no_space(e):
            return run_disk_full(self.path, 2**20)
        return UserError(f"--out {self.out}: cannot write in this folder ({e.strerror}); give a folder you can "
                         "write to")

    def _unlink_own(self, fd):
        """Remove the lock file this process created (fd), unless another process has replaced it since."""
        try:
            if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                self.path.unlink()
        except OSError:
            pass

    def release(self):
        if self.mine is not None and self._read(wait=False) == self.mine:
            self.path.unlink(missing_ok=True)
        self.mine = None

    def _read(self, wait=True):
        """The lock's text ("" if it stays empty: its writer died between create and write), None if gone."""
        for _ in range(10 if wait else 1):
            try:
                text = self.path.read_text()
            except FileNotFoundError:
                return None
            if text.strip():
                return text
            time.sleep(0.05)
        return ""

    def _remove_stale(self, holder):
        """Move the stale lock aside and delete it, unless another process replaced it meanwhile."""
        aside = self.path.with_name(f".lock.stale-{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        if aside.read_text() == holder:
            aside.unlink()
            return True
        try:  # a fresh lock of another process, moved by mistake: put it back
            os.link(aside, self.path)
        except OSError:
            pass
        aside.unlink()
        return False


def _start_time(pid):
    """The start time of process pid in clock ticks since boot (/proc/PID/stat), "" where unknown;
    None if /proc says there is no such process (or only its zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None if Path("/proc/self/stat").exists() else ""
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2:].split()  # after "PID (name) ": state, ppid, ... starttime
    return None if fields[0] in "ZX" else fields[19]


def _alive(pid, start, host):
    """Whether the process of a lock ("PID START HOST") still runs; another host's cannot be told: yes."""
    if host and host != socket.gethostname():
        return True
    if not pid.isdigit():
        return False
    now = _start_time(int(pid))
    if now is None:
        return False
    if now and start:
        return now == start
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def claim_out_folder(args, out, lock):
    """Create --out, take its lock, check it holds no other run's files (check_out_folder), and delete
    the temporary files a killed run of it left (remove_stale_temp_files). Returns the folders this made
    (deepest first), which a run that fails before it writes anything removes again (remove_empty)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; give a folder for the run's files")
    made = [d for d in (out, *out.parents) if not d.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {out}: cannot create this folder ({e.strerror}); give a folder you can write "
                        "to") from None
    try:
        lock.acquire()
        check_out_folder(args, out)
        remove_stale_temp_files(out)
    except BaseException:
        lock.release()
        remove_empty(made)
        raise
    return made


def remove_empty(folders):
    """rmdir each folder in turn (deepest first), stopping at the first that is not empty."""
    for d in folders:
        try:
            d.rmdir()
        except OSError:
            break


@contextmanager
def claimed(args, env, out):
    """--out claimed for the block (claim_on_rank0): its lock released at the end, however the block ends,
    and the folders this made removed again when it fails before it has written anything."""
    lock = RunLock(out)
    made = claim_on_rank0(args, env, out, lock)
    finished = False
    try:
        yield
        finished = True
    finally:
        lock.release()
        if not finished:
            remove_empty(made)


def claim_on_rank0(args, env, out, lock):
    """Rank 0 claims --out (claim_out_folder); under torchrun every other rank learns of a refusal
    and stops with the same error, instead of waiting at the first collective for a rank 0 that has gone."""
    made, refusal = [], None
    if env.master:
        try:
            made = claim_out_folder(args, out, lock)
        except UserError as e:
            refusal = e
    if env.world > 1:
        box = [None if refusal is None else str(refusal)]
        dist.broadcast_object_list(box, src=0)
        refusal = refusal or (box[0] and UserError(f"rank 0 refused --out: {box[0]}"))
    if refusal:
        raise refusal
    return made
