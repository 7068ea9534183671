"""
Checkpoints and the run's record on disk: written to a temporary name and renamed, loaded with
weights_only=True, checked against the model and the flags before anything is reused.

    OUT/ckpt.pt            the run's last state (model, optimizer, RNG, stage, step, summaries, args)
    OUT/stage<i>-<name>.pt each finished stage's weights, what the next stage starts from
    OUT/metrics.jsonl      one JSON event per line (train / eval / stage_end)
    OUT/.lock              "PID START HOST" of the run training into OUT, while it runs (RunLock)

A write that fails leaves no temporary file and the previous file as it was; one that fails for lack of
space (a full disk, a quota) is a DiskFull: one line naming the folder, the space it needs and that
--resume continues once space is freed.
"""

import errno
import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path

import torch

from data.common import UserError, _tmp_name, atomic_write_bytes

# flags that do not change what a run computes: a resumed run may differ in these
RESUMABLE_WITH_OTHER = {"resume", "baseline", "no_progress", "no_plot", "threads", "out", "cache_dir", "data_dir",
                        "compile", "device", "log_interval", "loss_impl"}


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(UserError):
    """A run's file could not be written for lack of space: the previous files are intact."""


def no_space(e):
    """Whether an exception is a write that failed for lack of space (a full disk or quota)."""
    return isinstance(e, OSError) and e.errno in NO_SPACE


def _size(n):
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} kiB"


def disk_full(path, need):
    """The DiskFull of a failed write of `path` that needed about `need` bytes: the folder, its free space,
    the space to free (`need`, or the size of its ckpt.pt, which the run writes again at its next
    checkpoint, if larger), what is kept, and that --resume continues once space is freed."""
    folder, kept = Path(path).parent, Path(path).parent / "ckpt.pt"
    try:
        free = f"{_size(shutil.disk_usage(folder).free)} free"
    except OSError:
        free = "its free space unknown"
    need = max(need, kept.stat().st_size if kept.exists() else 0)
    return DiskFull(f"no space left on the disk of {folder} ({free}) to write {Path(path).name}: free at least "
                    f"{_size(need)} there, then run the same command with --resume to continue "
                    + (f"(the last checkpoint {kept} is kept)" if kept.exists() else "(nothing was saved yet)"))


def _tensor_bytes(obj):
    """The bytes of the tensors in a (nested) checkpoint dict: what torch.save writes, less a little."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


class _Recording:
    """A file as torch.save writes it, keeping the exception of a failed write: torch reports that only
    as RuntimeError('[enforce fail at inline_container.cc] . unexpected pos ...')."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, b):
        try:
            return self.f.write(b)
        except BaseException as e:
            self.error = e
            raise

    def flush(self):
        self.f.flush()


def save_checkpoint(path, obj):
    """torch.save to a temporary name, synced, then renamed over `path`: a reader never sees half a file.
    A failed write removes the temporary file, leaves `path` as it was and raises the OSError of the
    write (which torch.save turns into RuntimeError '... unexpected pos ...')."""
    path, tmp = Path(path), _tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            w = _Recording(f)
            try:
                torch.save(obj, w)
            except RuntimeError:
                if w.error is not None:
                    raise w.error from None
                raise
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_run_checkpoint(path, obj):
    """save_checkpoint of a run's file (OUT/ckpt.pt, OUT/stage<i>-<name>.pt): for lack of space a DiskFull
    naming the space needed (the checkpoint's tensors, or OUT/ckpt.pt's size if larger)."""
    try:
        save_checkpoint(path, obj)
    except OSError as e:
        if no_space(e):
            raise disk_full(path, _tensor_bytes(obj)) from None
        raise


def write_atomic(path, data):
    """atomic_write_bytes for the run's files: a failed write removes its temporary file (the old file
    stays); for lack of space it is a DiskFull."""
    try:
        atomic_write_bytes(path, data)
    except BaseException as e:
        _tmp_name(path).unlink(missing_ok=True)
        if no_space(e):
            raise disk_full(path, len(data)) from None
        raise


# the temporary names of the run's own files (save_checkpoint, write_atomic, train.plot_losses): a process
# killed while writing one leaves it behind
TEMP_FILES = (".ckpt.pt.tmp-*", ".stage*.pt.tmp-*", ".summary.json.tmp-*", ".metrics.jsonl.tmp-*",
              ".loss.png.tmp-*", ".loss.tmp.png")


def remove_stale_temp_files(out):
    """Delete the temporary files a killed run left in `out` (only the run holding its lock calls this, so
    no live process is writing them); says which."""
    gone = sorted({f for pattern in TEMP_FILES for f in Path(out).glob(pattern) if f.is_file()})
    for f in gone:
        f.unlink(missing_ok=True)
    if gone:
        print(f"{out}: removed {len(gone)} temporary file(s) a stopped run left behind "
              f"({', '.join(f.name for f in gone[:3])}{', ...' if len(gone) > 3 else ''})")


def load_checkpoint(path, map_location="cpu"):
    return torch.load(path, map_location=map_location, weights_only=True)


def read_checkpoint(path, flag, map_location="cpu"):
    """load_checkpoint for a path the user gave (`flag` names where): a missing file or one that
    is not a prelude checkpoint is a UserError that says so, not a traceback."""
    path = Path(path)
    if path.is_dir():
        found = sorted(f.name for f in path.glob("*.pt"))
        raise UserError(f"{flag} {path} is a folder; it wants a checkpoint file: "
                        + (f"one of {', '.join(str(path / f) for f in found[:6])}{', ...' if len(found) > 6 else ''}"
                           if found else "this folder holds no .pt files (give OUT/stage<i>-<name>.pt or OUT/ckpt.pt)"))
    if not path.is_file():
        raise UserError(f"{flag} {path}: no such file; give a checkpoint written by train.py "
                        "(OUT/stage<i>-<name>.pt or OUT/ckpt.pt)")
    try:
        ck = load_checkpoint(path, map_location)
    except Exception as e:  # a legacy pickle of any content fails in any of many ways (KeyError, IndexError, ...)
        raise UserError(f"{flag} {path}: not a readable PyTorch checkpoint ({type(e).__name__}); give a "
                        "checkpoint written by train.py (OUT/stage<i>-<name>.pt or OUT/ckpt.pt)") from None
    if not isinstance(ck, dict) or not isinstance(ck.get("model"), dict):
        raise UserError(f"{flag} {path}: a PyTorch file but not a prelude checkpoint (no 'model' weights); "
                        "give OUT/stage<i>-<name>.pt or OUT/ckpt.pt of a train.py run")
    return ck


def stage_file(out, index, name):
    return Path(out) / f"stage{index}-{re.sub(r'[^A-Za-z0-9_-]+', '_', name)}.pt"


def read_summary(folder):
    """A finished run's OUT/summary.json (train.py writes it last), or None while it has not finished."""
    path = Path(folder) / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def load_state_checked(model, state):
    """load_state_dict that names every tensor whose shape does not fit, and why."""
    own = model.state_dict()
    bad = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
           for k, v in state.items() if k in own and own[k].shape != v.shape]
    missing = [k for k in own if k not in state]
    if bad or missing:
        raise UserError("checkpoint does not fit this model (were --n-layer/--n-embd/--n-head/--block-size, "
                        "--mir/--objective or the stages changed?): " + "; ".join(bad + [f"{k}: missing" for k in missing]))
    model.load_state_dict(state)


# GPTConfig fields that are the machine's choice, not the model's (train.resolve_dtype, --loss-impl):
# a checkpoint does not carry them, so a model trained on one machine loads with another's policy
MACHINE_POLICY = ("head_dtype", "loss_impl")


def model_config(cfg):
    """What a checkpoint keeps of a GPTConfig: everything that defines the model's weights and
    function, nothing of the machine's policy (MACHINE_POLICY)."""
    from dataclasses import asdict
    return {k: v for k, v in asdict(cfg).items() if k not in MACHINE_POLICY}


def load_model(source, device="cpu", **policy):
    """(GPT in eval mode, checkpoint dict) from a checkpoint path or an already loaded dict:
    the one place that rebuilds a model from `model_config` and its weights (shapes checked).
    policy: MACHINE_POLICY fields for this machine (e.g. loss_impl="standard")."""
    from model import GPT, GPTConfig
    ck = read_checkpoint(source, "checkpoint", device) if not isinstance(source, dict) else source
    if "model_config" not in ck:
        raise UserError("checkpoint has no model_config (a merge without a base model?); give a stage "
                        "checkpoint written by train.py")
    cfg = {k: v for k, v in ck["model_config"].items() if k not in MACHINE_POLICY}
    model = GPT(GPTConfig(**cfg, **policy))
    load_state_checked(model, ck["model"])
    return model.to(device).eval(), ck


def same_prores(key, saved, now):
    """Whether two runs differ in a ProRes flag that changes nothing: every --prores-* flag when neither
    run has --prores; --prores-scope fresh (the default now) and stage (the default before)
    in a run of one stage from scratch, where both warm that stage up. So a run written before the
    default changed still resumes, and a finished one is still recognised by the experiments' sweeps."""
    if not key.startswith("prores_") or key == "prores":
        return False
    if not saved.get("prores") and not now.get("prores"):
        return True
    one_fresh_stage = "," not in str(now.get("stages")) and not now.get("init_from")
    return key == "prores_scope" and one_fresh_stage and {saved[key], now[key]} <= {"fresh", "stage"}


def check_resume_args(saved, args, path):
    """A resumed run must be the run that wrote the checkpoint: every flag that changes what is
    computed must match, else a UserError listing each difference (flag, now, then)."""
    now = vars(args)
    diff = [f"--{k.replace('_', '-')} {now[k]!r} (the checkpoint's run: {saved.get(k)!r})"
            for k in sorted(now) if k not in RESUMABLE_WITH_OTHER and k in saved and saved[k] != now[k]
            and not same_prores(k, saved, now)]
    if diff:
        raise UserError(f"--resume: {path} was written by a run with other flags: {'; '.join(diff)}. "
                        "Use the same flags to resume it, or another --out for a new run")


def trim_metrics(path, resume):
    """Start metrics.jsonl afresh, or on resume keep only the events up to the checkpoint
    (a killed run may have logged steps after it; the resumed run logs them again). A last line
    cut off (a run killed, or a disk filled, while writing it) is dropped with a warning; a damaged
    line before it is a UserError naming the line."""
    if resume is None:
        Path(path).unlink(missing_ok=True)
        return
    if not Path(path).exists():
        return
    lines = [ln for ln in Path(path).read_bytes().decode("utf-8", "replace").splitlines(keepends=True) if ln.strip()]
    keep = []
    for n, line in enumerate(lines, 1):
        try:
            e = json.loads(line)
            assert isinstance(e, dict) and "event" in e
        except (ValueError, AssertionError):
            if n < len(lines):
                raise UserError(f"--resume: {path} line {n} is not a JSON event, and lines follow it: the log is "
                                "damaged there; delete that line (the log loses that event) and run the same "
                                "command again, or give a fresh --out") from None
            print(f"warning: {path}: its last line is cut off (the run was stopped while writing it); dropped it",
                  file=sys.stderr)
            break
        si, it = e.get("stage_index", -1), e.get("iter", 0)
        if si < resume["stage_index"] or (si == resume["stage_index"] and e["event"] != "stage_end"
                                          and it <= resume["iter"]):
            keep.append(line if line.endswith("\n") else line + "\n")
    write_atomic(path, "".join(keep).encode())


def check_device(name, flag="--device"):
    """A device the user named must exist here: a UserError of one line naming the fix, not a
    RuntimeError (or a misleading 'not a readable checkpoint') later."""
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise UserError(f"{flag} {name!r}: not a device; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"{flag} {name}: torch sees no CUDA device; use {flag} cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"{flag} {name}: torch sees {torch.cuda.device_count()} CUDA device(s); use cuda:0 .. "
                            f"cuda:{torch.cuda.device_count() - 1} or cpu")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise UserError(f"{flag} {name}: torch sees no MPS device; use {flag} cpu")
    elif dev.type != "cpu":
        raise UserError(f"{flag} {name}: not a supported device; use cpu, cuda or cuda:N")
    return dev


# ---------------------------------------------------------------------------------------------
# the run folder: one live run per --out, nothing left behind by a run that failed before it wrote

RUN_FILES = ("ckpt.pt", "summary.json", "metrics.jsonl", "loss.png", "stage*.pt")


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
    run); a lock whose process is gone (killed with -9, a crash) is taken over, saying so; a live
    one is a UserError naming its PID. release() removes it only if it is still this process's.
    A lock that cannot be written for lack of space is a DiskFull of one line (the empty file removed):
    the run is refused, not run unlocked, since it could save no checkpoint either; --resume continues it
    once space is freed."""

    def __init__(self, out):
        self.out, self.path, self.mine = Path(out), Path(out) / ".lock", None

    def acquire(self):
        me = f"{os.getpid()} {_start_time(os.getpid()) or ''} {socket.gethostname()}\n"
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
                    print(f"{self.out}: taking over the lock of run PID {pid or '?'}, which is no longer running")
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
            return
        raise UserError(f"--out {self.out}: other processes keep taking and dropping its lock {self.path}; "
                        "give another --out")

    def _cannot_write(self, e):
        """The UserError of a lock that cannot be written. On a full disk the run is refused rather than
        run unlocked: it could save no checkpoint either; once space is freed --resume continues it."""
        if no_space(e):
            return disk_full(self.path, 2**20)
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


class MetricsLog:
    """OUT/metrics.jsonl, one JSON event a line (rank 0 only). Opened at the first event or
    checkpoint, not before: a run that fails before it has anything to record leaves no file.
    Opening starts the file afresh, or on --resume keeps the events up to the checkpoint."""

    def __init__(self, path, resume, active):
        self.path, self.resume, self.active, self.f = path, resume, active, None

    def open(self):
        if self.active and self.f is None:
            trim_metrics(self.path, self.resume)
            self.f = open(self.path, "a")

    def write(self, event):
        if self.active:
            self.open()
            try:
                self.f.write(json.dumps(event) + "\n")
                self.f.flush()
            except OSError as e:  # (a line cut off by it is dropped on --resume: trim_metrics)
                if no_space(e):
                    raise disk_full(self.path, 2**20) from None  # (a MiB of events, or the next checkpoint)
                raise

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None
