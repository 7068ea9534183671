"""What every experiment records beside its numbers (experiments/lib/provenance.py): provenance over
resumed invocations, and the plans' measured pace. The reading rule: tests/test_claims.py."""
import json
import os
import subprocess
import sys
import time

import pytest

from experiments.lib import common, provenance


def test_provenance_sums_every_invocation_that_trained(tmp_path):
    first = provenance.Provenance(tmp_path, argv=["--seeds", "3"])
    first.finish(runs_trained=2)
    provenance.Provenance(tmp_path, argv=["--report-only"]).finish(runs_trained=0)  # a rebuild records nothing
    again = provenance.Provenance(tmp_path, argv=["--seeds", "3"]).finish(runs_trained=1)  # a resumed sweep
    entries = json.loads((tmp_path / "provenance.json").read_text())
    assert len(entries) == 2 and again["runs_trained"] == 3 and len(again["invocations"]) == 2
    assert again["wall_seconds"] == pytest.approx(sum(e["wall_seconds"] for e in entries))
    assert again["command"].endswith("--seeds 3") and set(again["hardware"]) >= {"cpu", "cores", "torch", "gpu"}
    assert provenance.kept_provenance(tmp_path) == again
    line = provenance.provenance_line(again)
    assert "over 2 invocations (resumed)" in line and "min wall" in line


def test_the_line_names_each_machine_a_resumed_sweep_ran_on(monkeypatch):
    """The CPU's widest vector instructions are part of its name (one "AMD EPYC" ran a step 2.3x faster than
    another), and a sweep resumed on another machine lists both."""
    cpuinfo = "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma\n"
    monkeypatch.setattr(provenance.Path, "read_text", lambda self, *a, **k: cpuinfo)
    h = provenance.hardware_info()
    assert (h["cpu"], h["isa"]) == ("AMD EPYC", "AVX2") and provenance.hardware(h).startswith("AMD EPYC (AVX2), ")
    cpuinfo = cpuinfo.replace("avx2", "avx2 avx512f avx512_bf16")
    fast = provenance.hardware_info()
    assert fast["isa"] == "AVX512_BF16"
    old = dict(fast, isa=None)  # a record from before the field: no ISA in its name
    prov = {"commit": "abc", "command": "python x", "hardware": h, "wall_seconds": 60.0, "cpu_seconds": 1.0,
            "invocations": [{"hardware": old}, {"hardware": old}, {"hardware": h}]}
    line = provenance.provenance_line(prov)
    assert f"; on 2 machines, {provenance.hardware(old)} / {provenance.hardware(h)}; " in line
    assert provenance.hardware(old).startswith("AMD EPYC, ") and "over 3 invocations" in line
    assert "machines" not in provenance.provenance_line(dict(prov, invocations=[{"hardware": h}] * 2))


def test_kept_provenance_falls_back_to_the_reports_own(tmp_path):
    prov = {"commit": "abc", "dirty": None, "command": "python x", "hardware": "AMD EPYC, 2 cores",
            "wall_seconds": 60.0, "cpu_seconds": None, "note": "reconstructed from the notes"}
    (tmp_path / "report.json").write_text(json.dumps({"provenance": prov}))
    assert provenance.kept_provenance(tmp_path) == prov
    assert provenance.provenance_line(prov).endswith("CPU time not recorded. Reconstructed from the notes.")
    assert provenance.kept_provenance(tmp_path / "none") is None


def test_a_stopped_invocation_is_recorded_unless_it_was_a_wrong_start(tmp_path):
    """main_guard records an invocation that Ctrl-C or an error stopped (Provenance.stop): with
    the runs finished since it started; one that finished nothing in its first minute is not kept."""
    def stopped_main(finish_a_run, error):
        def main():
            provenance.Provenance(tmp_path, argv=["--seeds", "3"])
            if finish_a_run:
                (tmp_path / "runs" / "a").mkdir(parents=True)
                (tmp_path / "runs" / "a" / "summary.json").write_text("{}")
                t0 = provenance.Provenance.active._t0  # (the file's time from the kernel's coarse clock can fall
                os.utime(tmp_path / "runs" / "a" / "summary.json", (t0, t0))  # a tick before t0: pin it)
            raise error
        with pytest.raises(SystemExit) as e:
            common.main_guard(main)
        return e.value.code
    assert stopped_main(False, KeyboardInterrupt()) == 130 and not (tmp_path / "provenance.json").exists()
    assert stopped_main(True, KeyboardInterrupt()) == 130
    assert stopped_main(False, common.UserError("a run failed")) == 2  # adds nothing: no run since it started
    (entry,) = json.loads((tmp_path / "provenance.json").read_text())
    assert entry["stopped"] == "interrupted" and entry["runs_trained"] == 1 and entry["command"].endswith("--seeds 3")
    assert provenance.Provenance.active is None


def test_an_invocation_killed_without_a_signal_is_kept_as_its_heartbeat_wrote_it(tmp_path, monkeypatch):
    """A session's end kills a sweep without a signal: its entry is the one its last heartbeat wrote, in
    its place among the others; finish() rewrites that entry, and removes it if there is nothing to keep."""
    monkeypatch.setattr(provenance, "HEARTBEAT_S", 0.02)
    provenance.Provenance(tmp_path, argv=["--first"]).finish(runs_trained=1)
    killed = provenance.Provenance(tmp_path, argv=["--seeds", "3"])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary.json").write_text("{}")
    os.utime(tmp_path / "r" / "summary.json", (killed._t0, killed._t0))
    for _ in range(500):
        if len(killed.entries()) == 2:
            break
        time.sleep(0.02)
    killed._done.set()  # what SIGKILL leaves: the entry of its last heartbeat, no finish()
    provenance.Provenance.active = None
    first, entry = killed.entries()
    assert first["command"].endswith("--first") and entry["command"].endswith("--seeds 3")
    assert entry["stopped"].startswith("no end recorded") and entry["runs_trained"] == 1 and entry["wall_seconds"] > 0
    after = provenance.Provenance(tmp_path, argv=["--last"])
    after.finish(runs_trained=2)
    assert [e["command"].split()[-1] for e in after.entries()] == ["--first", "3", "--last"]
    assert provenance.kept_provenance(tmp_path)["runs_trained"] == 4
    for runs, kept in ((0, 3), (1, 5)):  # a heartbeat wrote it (past its first minute); then it trained runs
        beat = provenance.Provenance(tmp_path, argv=["--more"])
        beat._t0 -= 120
        for _ in range(500):
            if len(beat.entries()) == 4:
                break
            time.sleep(0.02)
        assert beat.entries()[-1]["stopped"].startswith("no end recorded")
        if runs:  # --reuse puts a report's invocations first: the entry is found by its start, not its place
            provenance.inherit_invocations(tmp_path, {"provenance": {"invocations": [dict(first, command="old")]}})
        prov = beat.finish(runs_trained=runs)
        assert len(prov["invocations"]) == kept and "stopped" not in prov["invocations"][-1]
    assert [e["command"].split()[-1] for e in prov["invocations"]] == ["old", "--first", "3", "--last", "--more"]


def test_the_cpu_time_counts_live_workers(tmp_path):
    """A heartbeat comes while the workers train: getrusage counts a child only once it is reaped, /proc the
    live ones."""
    cpu0 = provenance.Provenance._cpu()
    burn = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
            "print(1, flush=True)\ntime.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()
        assert provenance.Provenance._cpu() - cpu0 >= 0.5
    finally:
        child.kill()
        child.wait()


def test_pace_line_scales_the_rest_by_the_finished_runs_measured_time(tmp_path):
    runs = [common.Run(f"r{i}", tmp_path / f"r{i}", []) for i in range(3)]
    estimate = {"r0": 100.0, "r1": 300.0, "r2": 600.0}
    assert common.pace_line(runs, lambda r: estimate[r.name], 600.0, 2) == ""  # nothing finished yet
    for r, seconds in ((runs[0], 300.0), (runs[1], 900.0)):  # 3x their estimates of 100 and 300 s
        r.folder.mkdir()
        (r.folder / "summary.json").write_text(json.dumps({"seconds": seconds}))
    line = common.pace_line(runs, lambda r: estimate[r.name], 600.0, 2)
    assert "the 2 finished run(s) took 20 min, 3.00x their estimate" in line
    assert line.endswith("the rest at that pace ~15 min with --jobs 2")  # 3 x 600 s / 2 jobs


def test_a_heartbeat_that_cannot_write_warns_and_beats_again(tmp_path, monkeypatch, capsys):
    """A failed write (a full disk) does not stop the heartbeat: it says so, and the next beat writes the entry."""
    monkeypatch.setattr(provenance, "HEARTBEAT_S", 0.02)
    real, failed = provenance.update_entries, []

    def flaky(path, change):
        if not failed:
            failed.append(1)
            raise OSError(28, "No space left on device")
        real(path, change)
    monkeypatch.setattr(provenance, "update_entries", flaky)
    beat = provenance.Provenance(tmp_path, argv=["--seeds", "3"])
    beat._t0 -= 120  # past its first minute: a heartbeat keeps it
    for _ in range(500):
        if beat.entries():
            break
        time.sleep(0.02)
    beat._done.set()
    provenance.Provenance.active = None
    assert failed and beat.entries()[0]["stopped"].startswith("no end recorded")
    err = capsys.readouterr().err
    assert "provenance heartbeat could not write" in err and "No space left on device" in err


def test_git_state_names_the_tracked_files_that_differ_from_the_commit(tmp_path, monkeypatch):
    """A dirty run says which files were not its commit's (a report that does not reproduce can be traced to them);
    untracked files are not part of the checkout's state."""
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path,  # noqa: E731
                                    check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    (tmp_path / "a.py").write_text("1\n")
    (tmp_path / "b.py").write_text("1\n")
    git("add", "a.py", "b.py")
    git("commit", "-qm", "x")
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    assert provenance.git_state() == (git("rev-parse", "HEAD"), [])
    (tmp_path / "b.py").write_text("2\n")
    (tmp_path / "new.py").write_text("untracked\n")
    git("mv", "a.py", "c.py")
    assert provenance.git_state() == (git("rev-parse", "HEAD"), ["b.py", "c.py"])
    prov = provenance.Provenance(tmp_path / "out", argv=["--x"])
    assert prov.entry["dirty"] == ["b.py", "c.py"] and prov.entry["command"].endswith(" --x")
    prov.finish(runs_trained=0)
