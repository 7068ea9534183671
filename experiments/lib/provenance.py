"""Provenance: which code, command and machine made an experiment's report, and how long it took, summed over the
invocations of a sweep that was interrupted and resumed (OUT/provenance.json; Provenance(out).finish() records one)."""

import contextlib
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

from data.common import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_S = 60.0  # a running invocation rewrites its entry this often: one killed without a signal is kept


def hardware_info():
    """What a report's times were measured on: CPU model and its widest vector instructions (one model name covers
    chips with and without AVX-512, ~2x apart on our fp32 steps), cores, threads, torch, Python, GPU."""
    import torch
    from machine import cpu_info
    name, flags = cpu_info()
    isa = next((f.upper() for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "asimd") if f in flags), None)
    return {"cpu": name or platform.processor() or "CPU", "isa": isa, "cores": os.cpu_count(),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def hardware(info=None):
    """One line of hardware_info() (or of the string an old report kept)."""
    if isinstance(h := info or hardware_info(), str):
        return h
    return (f"{h['cpu']}" + (f" ({h['isa']})" if h.get("isa") else "")
            + f", {h['cores']} cores, torch {h['torch']}, Python {h['python']}"
            + (f", GPU {h['gpu']}" if h.get("gpu") else ""))


def git_state():
    """(commit, dirty: the tracked files that differ from it, [] if none) of the checkout; (None, None) outside one."""
    import subprocess
    try:
        lines = subprocess.run(["git", "status", "--porcelain=v2", "--branch", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return (next((ln.split()[2] for ln in lines if ln.startswith("# branch.oid ")), None),
            sorted(ln.split("\t")[0].split()[-1] for ln in lines if ln[:1] != "#"))


class Provenance:
    """One invocation in OUT/provenance.json, after those before it; finish() adds its wall and CPU seconds (workers'
    too); one stopped by Ctrl-C or an error is recorded by main_guard, one killed as its last heartbeat wrote it."""

    active = None  # the invocation in progress (started, not finished), for main_guard

    def __init__(self, out, argv=None):
        self.path = Path(out) / "provenance.json"
        commit, dirty = git_state()
        self.entry = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit, "dirty": dirty,
                      "command": " ".join(["python", Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None else argv)]),
                      "hardware": hardware_info(), "started": time.time()}
        self._t0, self._cpu0, self.out, self._done = self.entry["started"], self._cpu(), Path(out), threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True).start()
        Provenance.active = self

    @staticmethod
    def _cpu():
        import resource  # the workers reaped (getrusage), and the live ones (/proc)
        s, c, live = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), 0
        for f in Path("/proc").glob("[0-9]*/stat"):  # after the name: state, ppid, ..., utime, stime (ticks) at 11, 12
            with contextlib.suppress(OSError, ValueError, IndexError):
                v = f.read_text().rsplit(")", 1)[1].split()
                live += int(v[11]) + int(v[12]) if int(v[1]) == os.getpid() else 0
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime + live / os.sysconf("SC_CLK_TCK")

    def entries(self):
        return json.loads(self.path.read_text()) if self.path.exists() else []

    def _record(self, runs_trained, stopped, beat=False):
        """This invocation's entry in OUT/provenance.json, appended, then rewritten in its place; none (removed) if it
        trained nothing and was not stopped after its first minute (a wrong start is not a record)."""
        def change(entries):
            at = next((i for i, e in enumerate(entries) if e.get("started") == self.entry["started"]), len(entries))
            if (beat and self._done.is_set()) or not (keep or at < len(entries)):
                return None
            now = dict(wall_seconds=time.time() - self._t0, cpu_seconds=self._cpu() - self._cpu0, runs_trained=runs_trained)
            entries[at:at + 1] = [dict(self.entry, **now, **({"stopped": stopped} if stopped else {}))][:keep]
            return entries
        keep = bool(runs_trained or stopped and time.time() - self._t0 >= 60)
        update_entries(self.path, change)

    def _heartbeat(self):
        while not self._done.wait(HEARTBEAT_S):
            try:  # a failed write (a full disk, a removed OUT) is said and retried at the next beat, not fatal
                self._record(self._runs_done(), "no end recorded (killed, or running): as at its last heartbeat", beat=True)
            except OSError as e:
                print(f"warning: provenance heartbeat could not write {self.path}: {e}; retrying", file=sys.stderr)

    def _runs_done(self):
        return sum(1 for name in ("summary.json", "diverged.json") for f in self.out.rglob(name)
                   if f.stat().st_mtime >= self._t0)

    def finish(self, runs_trained=None, stopped=None):
        """Record this invocation (runs_trained: else those finished since it started); the summary of all."""
        Provenance.active = None
        self._done.set()
        self._record(self._runs_done() if runs_trained is None else runs_trained, stopped)
        return summarize_provenance(self.entries())


def update_entries(path, change):
    """OUT/provenance.json as change(entries) returns it (None: as it is), locked: heartbeats, inherit_invocations."""
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".provenance.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (new := change(json.loads(path.read_text()) if path.exists() else [])) is not None:
            atomic_write_bytes(path, json.dumps(new, indent=1).encode())


def summarize_provenance(entries):
    """report.json's `provenance` from the invocations that trained (see Provenance)."""
    if not entries:
        return None
    last, cpu = entries[-1], [e.get("cpu_seconds") for e in entries]
    return {"commit": last["commit"], "dirty": last["dirty"], "command": last["command"], "hardware": last["hardware"],
            "wall_seconds": sum(e["wall_seconds"] for e in entries), "cpu_seconds": None if None in cpu else sum(cpu),
            "runs_trained": sum(e["runs_trained"] for e in entries), "invocations": entries}


def kept_provenance(out):
    """A rebuild's provenance: OUT/provenance.json's, else OUT/report.json's, else None (never the rebuild's own)."""
    if (path := Path(out) / "provenance.json").exists():
        return summarize_provenance(json.loads(path.read_text()))
    return json.loads(path.read_text()).get("provenance") if (path := Path(out) / "report.json").exists() else None


def inherit_invocations(out, report):
    """OUT/provenance.json with a reused report's invocations first (they made the runs --reuse takes)."""
    old = (report.get("provenance") or {}).get("invocations", [])
    update_entries(Path(out) / "provenance.json", lambda new: old + [e for e in new if e not in old])


def provenance_line(prov):
    """report.md's header line of a report.json `provenance`."""
    if not prov:
        return "Provenance: not recorded."
    machines = list(dict.fromkeys(hardware(e["hardware"]) for e in prov.get("invocations") or [prov]))
    commit = (prov["commit"] or "unknown")[:10] + (" (dirty tree)" if prov.get("dirty") else "")
    return (f"Provenance: commit {commit}; `{prov['command']}`; "
            + (f"{machines[0]}; " if len(machines) == 1 else f"on {len(machines)} machines, {' / '.join(machines)}; ")
            + f"{prov['wall_seconds'] / 60:.1f} min wall, "
            + (f"{prov['cpu_seconds'] / 60:.1f} min CPU" if prov.get("cpu_seconds") is not None else "CPU time not recorded")
            + (f", over {n} invocations (resumed)" if (n := len(prov.get("invocations", []))) > 1 else "")
            + (f". {prov['note'][0].upper()}{prov['note'][1:].rstrip('.')}" if prov.get("note") else "") + ".")
