"""
Provenance: which code, command and machine made an experiment's report, and how long it took, summed
over the invocations of a sweep that was interrupted and resumed (OUT/provenance.json).

    prov = Provenance(out)                    # at the start of main(): commit, dirty, command, hardware
    report["provenance"] = prov.finish(runs_trained=n)
    provenance_line(report["provenance"])     # report.md's header line
"""

import json
import os
import platform
import sys
import time
from pathlib import Path

from data.common import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[2]


def hardware_info():
    """What a report's times were measured on: CPU model and its widest vector instructions (one model name covers
    chips with and without AVX-512, ~2x apart on our fp32 steps), cores, threads, torch, Python, GPU."""
    import torch
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
    flags = next((set(ln.split(":", 1)[1].split()) for ln in lines if ln.startswith(("flags", "Features"))), set())
    isa = next((f.upper() for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "asimd") if f in flags), None)
    return {"cpu": names[0] if names else platform.processor() or "CPU", "isa": isa, "cores": os.cpu_count(),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def hardware(info=None):
    """One line of hardware_info() (or of the string an old report kept)."""
    h = info or hardware_info()
    if isinstance(h, str):
        return h
    return (f"{h['cpu']}" + (f" ({h['isa']})" if h.get("isa") else "")
            + f", {h['cores']} cores, torch {h['torch']}, Python {h['python']}"
            + (f", GPU {h['gpu']}" if h.get("gpu") else ""))


def git_state():
    """(commit, dirty: untracked files aside) of the checkout; (None, None) outside a git checkout."""
    import subprocess
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout
        return commit, bool(status.strip())
    except (OSError, subprocess.CalledProcessError):
        return None, None


class Provenance:
    """One invocation of an experiment in OUT/provenance.json, appended to those before it (a sweep
    resumed over several sessions is several invocations): Provenance(out) at the start of main()
    (commit, dirty, command, hardware), finish(runs_trained=n) at its end (wall and CPU seconds,
    workers included); one stopped by Ctrl-C or an error is recorded by main_guard (stop()).
    summary(): the latest invocation's commit, command and hardware, times summed over all."""

    active = None  # the invocation in progress (started, not finished), for main_guard

    def __init__(self, out, argv=None):
        self.path = Path(out) / "provenance.json"
        commit, dirty = git_state()
        self.entry = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit, "dirty": dirty,
                      "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + list(
                          sys.argv[1:] if argv is None else argv)),
                      "hardware": hardware_info()}
        self._t0, self._cpu0, self.out = time.time(), self._cpu(), Path(out)
        Provenance.active = self

    @staticmethod
    def _cpu():
        import resource
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    def entries(self):
        return json.loads(self.path.read_text()) if self.path.exists() else []

    def finish(self, runs_trained, stopped=None):
        """Append this invocation if it trained anything or was stopped; return summary()."""
        Provenance.active = None
        if runs_trained or stopped:
            self.entry.update(wall_seconds=time.time() - self._t0, cpu_seconds=self._cpu() - self._cpu0,
                              runs_trained=runs_trained, **({"stopped": stopped} if stopped else {}))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.path, json.dumps(self.entries() + [self.entry], indent=1).encode())
        return self.summary()

    def stop(self, why):
        """Append this invocation, stopped before finish(), with the runs finished under OUT since it
        started, unless it finished nothing within its first minute (a wrong start is not a record)."""
        done = sum(1 for name in ("summary.json", "diverged.json") for f in self.out.rglob(name)
                   if f.stat().st_mtime >= self._t0)
        if done or time.time() - self._t0 >= 60:
            return self.finish(done, stopped=why)
        Provenance.active = None
        return self.summary()

    def summary(self):
        return summarize_provenance(self.entries())


def summarize_provenance(entries):
    """report.json's `provenance` from the invocations that trained (see Provenance)."""
    if not entries:
        return None
    last = entries[-1]
    cpu = [e.get("cpu_seconds") for e in entries]
    return {"commit": last["commit"], "dirty": last["dirty"], "command": last["command"],
            "hardware": last["hardware"], "wall_seconds": sum(e["wall_seconds"] for e in entries),
            "cpu_seconds": None if None in cpu else sum(cpu),
            "runs_trained": sum(e["runs_trained"] for e in entries), "invocations": entries}


def kept_provenance(out):
    """The provenance of a report rebuilt without training: OUT/provenance.json, else the one OUT/report.json
    keeps, else None; never the rebuild's own time or machine."""
    out = Path(out)
    if (out / "provenance.json").exists():
        return summarize_provenance(json.loads((out / "provenance.json").read_text()))
    if (out / "report.json").exists():
        return json.loads((out / "report.json").read_text()).get("provenance")
    return None


def inherit_invocations(out, report):
    """OUT/provenance.json with a reused report's invocations first (they made the runs --reuse takes)."""
    path, old = Path(out) / "provenance.json", (report.get("provenance") or {}).get("invocations", [])
    new = json.loads(path.read_text()) if path.exists() else []
    atomic_write_bytes(path, json.dumps(old + [e for e in new if e not in old], indent=1).encode())


def provenance_line(prov):
    """report.md's header line of a report.json `provenance`."""
    if not prov:
        return "Provenance: not recorded."
    machines = list(dict.fromkeys(hardware(e["hardware"]) for e in prov.get("invocations") or [prov]))
    commit = (prov["commit"] or "unknown")[:10] + (" (dirty tree)" if prov.get("dirty") else "")
    n = len(prov.get("invocations", [])) or 1
    return (f"Provenance: commit {commit}; `{prov['command']}`; "
            + (f"{machines[0]}; " if len(machines) == 1 else f"on {len(machines)} machines, {' / '.join(machines)}; ")
            + f"{prov['wall_seconds'] / 60:.1f} min wall, "
            + (f"{prov['cpu_seconds'] / 60:.1f} min CPU" if prov.get("cpu_seconds") is not None else "CPU time not recorded")
            + (f", over {n} invocations (resumed)" if n > 1 else "")
            + (f". {prov['note'][0].upper()}{prov['note'][1:].rstrip('.')}" if prov.get("note") else "") + ".")
