"""experiments/data_constrained.py end to end at a tiny size (a folder of tiny paragraphs, CPU, no network,
an empty cache; a preset of the tests' own in PRESETS): its files, that its statistics follow from its runs,
that its verdicts are the paired t-tests and slopes scipy gives on runs.csv, resume, --report-only and --reuse;
the scan's rule; the power rule behind the seeds at small U; the committed reports rebuilt byte for byte."""
import csv
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import scaling
from experiments import data_constrained as dc
from experiments.lib.common import main_guard

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results"
SIZES, BUDGETS = ["L1d8", "L2d16"], [128, 256, 512, 1024]
# 3 seeds at the smallest U, 2 above; MDLM at 0.01 and the tuned decay, 2 seeds, 4 epochs; an evaluation every 4 steps
TINY = dict(dc.AUTHORS, scan=False, tie=True, sizes=",".join(SIZES), budgets=",".join(map(str, BUDGETS)), epochs=1, seeds=2,
            sweep_seeds=1, decays="0.1,1.0", block_size=16, batch_size=4, laws="chinchilla,softq", mdlm_epochs=4,
            mdlm_budgets=1, grid_hours=None, seeds_small_u=3, small_u=128, mdlm_seeds=2, weak_decay=0.01,
            train_args="--eval-interval 4")
N_PAIRS = 3 + 2 * (len(BUDGETS) - 1)  # wd / wd+mir pairs per size


def argv(text_dir, out):
    return ["--preset", "tiny", "--stage", f"text:{text_dir}", "--jobs", "1", "--threads", "1", "--out", str(out)]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """One tiny experiment, shared by the tests of this file (its own cache and text folder)."""
    from conftest import write_paragraphs
    base = tmp_path_factory.mktemp("dc")
    old = os.environ.get("PRELUDE_CACHE")
    os.environ["PRELUDE_CACHE"] = str(base / "cache")
    dc.PRESETS["tiny"] = (TINY, TINY)
    try:
        text_dir = write_paragraphs(base / "texts")
        dc.main(argv(text_dir, base / "out"))
    finally:
        dc.PRESETS.pop("tiny")
    try:
        yield text_dir, base / "out", json.loads((base / "out" / "report.json").read_text())
    finally:
        os.environ.pop("PRELUDE_CACHE") if old is None else os.environ.__setitem__("PRELUDE_CACHE", old)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_files_and_runs_csv(result):
    _, out, rep = result
    for name in ("report.md", "report.json", "runs.csv", "runs-wd.csv", "runs-wd_mir.csv", *dc.rep.FIGURES):
        assert (out / name).exists(), name
    assert rep["figures"] == dc.rep.FIGURES
    rows = read_csv(out / "runs.csv")
    assert list(rows[0]) == ["N", "U", "D", "loss", "method", "seed"]
    scaling.read_runs(out / "runs.csv")  # the format scaling.py reads
    done = [r for r in rep["runs"] if r["status"] == "done"]
    assert len(rows) == len(done) == len(rep["runs"])
    for row, r in zip(rows, done):  # every row is its run: the full-validation loss, N and D from its summary
        s = json.loads((out / "runs" / r["name"] / "summary.json").read_text())
        e = json.loads((out / "runs" / r["name"] / "val_eval.json").read_text())
        assert float(row["loss"]) == pytest.approx(e["loss"], abs=1e-6)
        assert int(row["N"]) == s["params"] and int(row["D"]) == s["stages"][0]["tokens"]
        assert int(row["U"]) == s["stages"][0]["unique_tokens"] == r["U"]  # the first U tokens of a text stage
        assert e["kind"] == ("nll bound" if r["method"].startswith("mdlm") else "nll")
    seeds = lambda m, size, u: sorted(r["seed"] for r in done if (r["method"], r["size"], r["U"]) == (m, size, u))  # noqa
    assert seeds("wd", "L2d16", 1024) == seeds("wd+mir", "L1d8", 256) == [0, 1]
    assert seeds("wd", "L1d8", 128) == seeds("wd+mir", "L2d16", 128) == [0, 1, 2]  # seeds_small_u at U <= small_u
    assert seeds("mdlm-weak", "L1d8", 128) == [0, 1] and seeds("mdlm-tuned", "L1d8", 256) == []  # the smallest U only
    assert all(r["wd"] == 0.01 for r in done if r["method"] == "mdlm-weak")
    assert {r["lr"] for r in done if r["method"].startswith("mdlm")} == {0.0006}  # the AR lr x mdlm_lr_ratio
    for r in done:  # the change of the validation loss per epoch over the last evaluation interval, from metrics.jsonl;
        ev = [json.loads(x) for x in open(out / "runs" / r["name"] / "metrics.jsonl")]  # and from half-way to the end
        ev = [e for e in ev if e.get("event") == "eval"]
        mid = min(ev, key=lambda e: abs(e["iter"] - r["steps"] / 2))
        assert r["second_half_change"] == (pytest.approx(ev[-1]["val_loss"] - mid["val_loss"], rel=1e-9)
                                           if len(ev) > 2 else None)
        ev = ev[-2:]
        if len(ev) < 2:  # one evaluation (runs of <= 4 steps): no change to read
            assert r["last_epoch_change"] is None and r["steps"] <= 4
            continue
        per_epoch = r["epochs"] / r["steps"] * (ev[1]["iter"] - ev[0]["iter"])
        assert r["last_epoch_change"] == pytest.approx((ev[1]["val_loss"] - ev[0]["val_loss"]) / per_epoch, rel=1e-9)
    assert all(r["last_epoch_change"] is not None for r in done if r["method"].startswith("mdlm"))
    text = (out / "report.md").read_text()
    for part in ("## The paper's claims", "| the paper's claim |", "## Setup", "## Weight-decay sweep",
                 "## Scaling laws", "## Where MIR's gain", "## AR vs masked diffusion", "Provenance: commit"):
        assert part in text, part


def test_strong_decay_is_the_lowest_sweep_loss_at_u0(result):
    _, _, rep = result
    for size in SIZES:
        sw = [r for r in rep["sweep"] if r["size"] == size]
        assert len(sw) == 2 and all(r["U"] == 128 for r in sw)  # the smallest budget
        assert rep["strong"][size]["wd"] == min(sw, key=lambda r: r["loss"])["wd"]
        for r in rep["runs"]:
            if r["size"] == size and r["method"] in ("wd", "wd+mir", "mdlm-tuned"):
                assert r["wd"] == rep["strong"][size]["wd"] != TINY["weak_decay"]


def cells_of(rows, method):
    by = {}
    for r in rows:
        if r["method"] == method:
            by.setdefault((float(r["N"]), float(r["U"])), []).append((float(r["D"]), float(r["loss"])))
    keys = sorted(by)
    return (np.array([k[0] for k in keys]), np.array([k[1] for k in keys]),
            np.array([np.mean([d for d, _ in by[k]]) for k in keys]), np.array([np.mean([x for _, x in by[k]]) for k in keys]))


def test_fits_errors_and_multipliers_follow_from_the_runs(result):
    """The laws' RMSE and MAE are their parameters' errors on the seed-averaged cells; law_errors are those
    errors cell by cell; the multiplier is scaling's under the baseline's SoftQ fit (tied head: MIR's N is wd's)."""
    _, out, rep = result
    rows = read_csv(out / "runs.csv")
    for method in ("wd", "wd+mir"):
        N, U, D, L = cells_of(rows, method)
        for law in ("chinchilla", "softq"):
            f = rep["fits"][method]["laws"][law]
            err = scaling.predict(law, f["params"], N, U, D) - L
            assert f["rmse"] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-6)
            assert f["mae"] == pytest.approx(np.mean(np.abs(err)), rel=1e-6)
            assert [c[law] for c in rep["law_errors"][method]["in_sample"]] == pytest.approx(list(np.abs(err)))
            held = scaling.predict(law, f["extrapolation"]["params"], N, U, D) - L
            assert [c[law] for c in rep["law_errors"][method]["extrapolation"]] == pytest.approx(
                list(np.abs(held[U == U.max()])))
        assert rep["fits"][method]["fan_out_data"] == pytest.approx(scaling.fan_out(N, U, L))
    N, U, D, L = cells_of(rows, "wd+mir")
    want = scaling.effective_data_multiplier("softq", rep["fits"]["wd"]["laws"]["softq"]["params"], N, U, L, D)
    got = [c["multiplier"] for c in rep["multipliers"]["softq"]["wd+mir"]["cells"]]
    assert np.allclose(np.nan_to_num(got, nan=-1), np.nan_to_num(want, nan=-1))


def test_verdicts_are_scipys_on_runs_csv(result):
    """Independently of the claim table's records: MIR against wd per size is ttest_rel over the (U, seed)
    pairs of runs.csv; its gain against log10 N and log10 U is linregress over every pair; MIR's log multipliers
    against ln 1.3 are ttest_1samp, their geometric mean's 95% CI t.interval; MDLM at the tuned decay against the
    weak one is ttest_rel by (size, U, seed), and its gap to wd against half the weak decay's gap too."""
    _, out, rep = result
    rows = read_csv(out / "runs.csv")
    loss = {(r["method"], int(r["N"]), int(r["U"]), int(r["seed"])): float(r["loss"]) for r in rows}
    v = {e["claim"]: e for e in rep["verdicts"]}
    cells = v["MIR lowers the validation loss at every size"]["cells"]
    size_of = {r["N"]: r["size"] for r in rep["runs"] if r["method"] == "wd"}  # a tied head: MIR's N is wd's
    pairs = {}
    for (m, n, u, s), x in sorted(loss.items()):
        if m == "wd" and ("wd+mir", n, u, s) in loss:
            pairs.setdefault(n, []).append((loss[("wd+mir", n, u, s)], x, u))
    assert sorted(c["cell"] for c in cells) == sorted(SIZES)
    for c in cells:
        n = next(n for n, size in size_of.items() if size == c["cell"])
        t = stats.ttest_rel(*list(zip(*pairs[n]))[:2])
        assert c["p"] == pytest.approx(t.pvalue, rel=1e-9) and c["n"] == len(pairs[n]) == N_PAIRS
        assert c["verdict"] == ("reproduces" if t.pvalue < 0.05 and t.statistic < 0 else "opposite" if t.pvalue < 0.05
                                else "no clear difference")
    every = [(n, u, b - m) for n in pairs for m, b, u in pairs[n]]
    for claim, x in (("MIR's gain grows with model size", 0), ("MIR helps most where unique data is scarcest (its gain "
                                                                 "falls as U grows)", 1)):
        fit, c = stats.linregress([math.log10(e[x]) for e in every], [e[2] for e in every]), v[claim]["cells"][0]
        assert c["slope"] == pytest.approx(fit.slope, rel=1e-9) and c["p"] == pytest.approx(fit.pvalue, rel=1e-9)
        clear = fit.pvalue < 0.05 and len(every) >= 4
        assert v[claim]["verdict"] == ("no clear difference" if not clear else "reproduces"
                                       if (fit.slope < 0) == (x == 1) else "opposite")
    logm = [math.log(c["multiplier"]) for c in rep["multipliers"]["softq"]["wd+mir"]["cells"] if 0 < c["multiplier"] < math.inf]
    c = v["MIR is worth at least the paper's ~1.3x more unique data"]["cells"][0]
    assert c["n"] == len(logm) and c["p"] == pytest.approx(stats.ttest_1samp(logm, math.log(1.3)).pvalue, rel=1e-9)
    lo, hi = np.exp(stats.t.interval(0.95, len(logm) - 1, np.mean(logm), stats.sem(logm)))
    assert f"(95% CI {lo:.2f}-{hi:.2f}x) over MIR's {len(logm)} cells" in v["MIR is worth at least the paper's ~1.3x more "
                                                                          "unique data"]["ours"]
    key = [(n, s) for (m, n, u, s) in loss if (m, u) == ("mdlm-tuned", 128)]
    tuned, weak, wd = ([loss[(m, n, 128, s)] for n, s in key] for m in ("mdlm-tuned", "mdlm-weak", "wd"))
    c = v["strong decay tuned for AR improves the masked-diffusion model"]["cells"][0]
    assert c["n"] == len(key) == 2 * len(SIZES) and c["p"] == pytest.approx(stats.ttest_rel(tuned, weak).pvalue, rel=1e-9)
    c = v["strong decay closes most of the AR-MDLM gap"]["cells"][0]
    half = [(w - a) / 2 for w, a in zip(weak, wd)]
    assert c["p"] == pytest.approx(stats.ttest_rel([t - a for t, a in zip(tuned, wd)], half).pvalue, rel=1e-9)
    assert rep["source"]["arxiv"] == "2606.06888" and rep["regime"] and rep["figures"][0] == "mir_gain.png"
    assert rep["provenance"]["runs_trained"] == len({r["name"] for r in rep["runs"] + rep["sweep"]})


def test_per_token_analysis_adds_up(result):
    _, _, rep = result
    tok = rep["per_token"]
    pairs = [r for r in rep["runs"] if r["method"] == "wd+mir"]
    n_targets = next(r["val_tokens"] for r in rep["runs"] if r["method"] == "wd")
    buckets = tok["buckets"]["all"]
    assert tok["pairs"] == len(pairs) and sum(b["targets_per_pair"] for b in buckets) == pytest.approx(n_targets)
    assert sum(b["gain_per_pair"] for b in buckets) == pytest.approx(tok["total_gain_per_pair"], abs=1e-6)
    # the summed per-token gain is the difference of the runs' mean losses times the targets
    by = {(r["size"], r["U"], r["seed"], r["method"]): r["loss"] for r in rep["runs"]}
    want = np.mean([(by[(r["size"], r["U"], r["seed"], "wd")] - r["loss"]) * n_targets for r in pairs])
    assert tok["total_gain_per_pair"] == pytest.approx(want, rel=1e-3, abs=1e-3)
    gains = [t["gain_per_pair"] for t in tok["top_tokens"]]
    assert gains == sorted(gains, reverse=True) and all(isinstance(t["token"], str) for t in tok["top_tokens"])


def test_report_only_and_rerun(result, capsys, monkeypatch):
    """report.json alone (the run folders gone) rebuilds the report byte for byte; a rerun trains nothing
    and reads the same losses back; --plan counts the phases' runs."""
    text_dir, out, rep = result
    body = {f: (out / f).read_bytes() for f in ("report.md", "report.json", "runs.csv")}
    bare = out.parent / "bare"
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("runs", "provenance.json"))
    dc.main(["--report-only", "--out", str(bare)])
    assert {f: (bare / f).read_bytes() for f in body} == body
    stamp = {p: p.stat().st_mtime for p in (out / "runs").glob("*/summary.json")}
    monkeypatch.setitem(dc.PRESETS, "tiny", (TINY, TINY))
    dc.main(argv(text_dir, out) + ["--laws", "chinchilla"])
    assert "already finished (skipped)" in capsys.readouterr().out
    assert {p: p.stat().st_mtime for p in (out / "runs").glob("*/summary.json")} == stamp
    again = json.loads((out / "report.json").read_text())
    assert [r["loss"] for r in again["runs"]] == [r["loss"] for r in rep["runs"]] and set(again["fits"]["wd"]["laws"]) == {"chinchilla"}
    assert [v["verdict"] for v in again["verdicts"][:4]] == [v["verdict"] for v in rep["verdicts"][:4]]  # no law in them
    plan = dc.plan(dc.parse_args(argv(text_dir, out) + ["--plan"]))
    n_grid = len(SIZES) * (2 * N_PAIRS + 2 * 2)  # wd, wd+mir; MDLM: 2 arms x 2 seeds at the smallest U
    assert "phase 1, decay sweep: 4 runs" in plan and f"phase 2, grid: {n_grid - 2} runs" in plan  # less the sweep's 2


def test_reuse_trains_only_what_the_report_lacks(result, tmp_path, monkeypatch):
    """--reuse DIR: the runs DIR/report.json holds are taken from it (not trained: no folder, DIR's loss), the ones
    it lacks train (the same loss as in the first experiment), OUT's provenance starts with DIR's invocations, the
    per-token sums cover the pairs with folders here; a DIR made with another block size is refused."""
    from data.common import UserError
    text_dir, out, rep = result
    monkeypatch.setitem(dc.PRESETS, "tiny", (TINY, TINY))
    lack = {r["name"]: r for r in rep["runs"] if (r["size"], r["U"], r["seed"]) == ("L2d16", 1024, 1)
            or (r["method"], r["size"], r["seed"]) == ("mdlm-weak", "L1d8", 1)}
    old = dict(rep, runs=[r for r in rep["runs"] if r["name"] not in lack])
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "report.json").write_text(json.dumps(old))
    reuse = argv(text_dir, tmp_path / "new") + ["--reuse", str(tmp_path / "dir"), "--laws", "chinchilla"]
    assert ", 3 to train" in dc.plan(dc.parse_args(reuse + ["--plan"])).splitlines()[-2]
    dc.main(reuse)
    assert sorted(p.name for p in (tmp_path / "new" / "runs").iterdir()) == sorted(lack) and len(lack) == 3
    new = json.loads((tmp_path / "new" / "report.json").read_text())
    for r in new["runs"]:
        assert ("reused" in r) == (r["name"] not in lack)
        assert r["loss"] == pytest.approx(lack[r["name"]]["loss"] if r["name"] in lack else next(
            o["loss"] for o in old["runs"] if o["name"] == r["name"]), rel=1e-6)
    prov = new["provenance"]
    assert prov["invocations"][:-1] == rep["provenance"]["invocations"] and prov["runs_trained"] == rep["provenance"][
        "runs_trained"] + 3
    assert new["per_token"]["pairs"] == 1 and new["per_token"]["pairs_of"] == rep["per_token"]["pairs"]
    bad = dict(old, settings=dict(old["settings"], block_size=32))
    (tmp_path / "dir" / "report.json").write_text(json.dumps(bad))
    with pytest.raises(UserError, match="block_size 32 \\(here 16\\)"):
        dc.parse_args(reuse)


def test_reuse_of_the_committed_report_plans_only_the_new_runs():
    """--reuse experiments/results/data_constrained: its scan and sweep are taken whole (the scan chooses as it did),
    its grid runs under the same names; what trains is only what it lacks."""
    committed = json.loads((RESULTS / "data_constrained" / "report.json").read_text())
    a = dc.parse_args(["--reuse", str(RESULTS / "data_constrained"), "--plan"])
    text = dc.plan(a)
    scan = dc.choose(a, dc.scan_runs(a))
    assert scan["choice"] == tuple(committed["scan"]["choice"]) and scan["sizes"] == committed["scan"]["sizes"]
    sweep = dc.sweep_runs(a)
    grid = {r.name for r in dc.unique(dc.grid_runs(a, dc.pick_strong(a, sweep)))} - {r.name for r in sweep}
    kept = grid & {r["name"] for r in committed["runs"]}
    assert "phase 0, scan: 33 runs, 33 of them reused" in text and "phase 1, decay sweep: 36 runs, 36 of them" in text
    assert f"phase 2, grid: {len(grid)} runs" + (f", {len(kept)} of them reused" if kept else "") + (
        f", {len(grid) - len(kept)} to train") in text
    a.max_budget = 474_978  # as check_budgets lowers it to music's whole training set: the same choice and grid
    low = dc.choose(a, dc.scan_runs(a))
    assert (low["choice"], low["sizes"], low["budgets"]) == (scan["choice"], scan["sizes"], committed["scan"]["budgets"])
    assert {(c["epochs"], c["U0"]): c["n_budgets"] for c in low["candidates"]}[(32.0, 64000)] == 3
    assert "3 budget(s)" in next(c["why"] for c in low["candidates"] if (c["epochs"], c["U0"]) == (32.0, 64000))


def test_the_power_rule_behind_the_seeds_at_small_u():
    """The claims module's rule, by a power computation of its own (the noncentral t): per size, the pairs a
    paired t-test needs for 80% power at alpha 0.05 at the mean / sd of MIR's gain over the 2-seed runs at
    U <= 64k; the most over the 2 budgets, capped at 8, at least 4, is the authors preset's seeds_small_u."""
    def pairs_needed(dz):  # the smallest n whose two-sided paired t-test has power >= 0.8 at effect dz
        n = 2
        while True:
            df, crit = n - 1, stats.t.ppf(0.975, n - 1)
            if stats.nct.sf(crit, df, dz * n ** 0.5) + stats.nct.cdf(-crit, df, dz * n ** 0.5) >= 0.8:
                return n
            n += 1
    assert pairs_needed(1.0) == 10 and pairs_needed(0.5) == 34  # the textbook values (Cohen's dz)
    runs = json.loads((RESULTS / "data_constrained" / "report.json").read_text())["runs"]
    loss = {(r["method"], r["size"], r["U"], r["seed"]): r["loss"] for r in runs if r["seed"] < 2 and r["U"] <= 64000}
    need = {}
    for size in ("L2d32", "L3d48", "L4d64", "L4d96"):
        d = [loss[("wd",) + k[1:]] - x for k, x in loss.items() if k[:2] == ("wd+mir", size)]
        need[size] = pairs_needed(np.mean(d) / np.std(d, ddof=1))
    assert need == {"L2d32": 10, "L3d48": 10, "L4d64": 21, "L4d96": 8}  # as the claims module's docstring says
    assert dc.AUTHORS["seeds_small_u"] == min(8, max(4, math.ceil(max(need.values()) / 2))) == 8
    assert dc.AUTHORS["small_u"] == 64000


def test_errors_are_one_line(result, capsys, monkeypatch):
    text_dir, out, _ = result
    monkeypatch.setitem(dc.PRESETS, "tiny", (TINY, TINY))
    with pytest.raises(SystemExit) as e:
        main_guard(lambda: dc.main(argv(text_dir, out.parent / "big") + ["--budgets", "128,256,99999"]))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "99,999" in err
    with pytest.raises(SystemExit) as e:
        main_guard(lambda: dc.main(argv(text_dir, out.parent / "r") + ["--reuse", str(out.parent / "nowhere")]))
    assert e.value.code == 2 and "no report.json" in capsys.readouterr().err
    for bad in (["--sizes", "4x64"], ["--sizes", "L1d10h3"], ["--methods", "wd,nope"], ["--budgets", "256"]):
        with pytest.raises(SystemExit) as e:
            dc.parse_args(["--preset", "tiny"] + bad)
        assert e.value.code == 2


def test_token_names_of_the_music_vocabulary():
    """The per-token analysis names MIDI event tokens through the codec's layout (data/midi.py)."""
    from types import SimpleNamespace
    from data import midi
    from experiments.lib.data_constrained_tokens import token_name
    music = SimpleNamespace(info={"tokenizer": "midi-events-160"}, decode=None)
    assert token_name(music, 0) == "PAD"
    assert token_name(music, midi.NOTE_OFFSET + 60 - midi.MIN_PITCH) == "NOTE C4"
    assert token_name(music, midi.VELOCITY_OFFSET + 2) == "VELOCITY 2"
    assert token_name(music, midi.SHIFT_OFFSET) == f"SHIFT {midi.SHIFT_BINS[0] * 10} ms"
    assert token_name(music, midi.DURATION_OFFSET) == f"DURATION {midi.DURATION_BINS[0] * 10} ms"
    assert token_name(music, midi.VOCAB_SIZE) == "[MASK]"


def test_claim_records_of_a_made_up_report():
    """records(): the baseline's N for every size; the fan-out gap per (size, seed) at the smallest and largest
    U; MDLM per (size, U, seed) at the weak decay and at the size's AR-tuned one (any method's name, one record
    where two name the same run; no cell where both decays are one), with its gap to wd and half the weak one's;
    log multipliers (only finite, positive ones) beside the paper's ln 1.3; law errors flattened by law."""
    from experiments.lib.data_constrained_claims import CLAIMS, records
    run = lambda m, size, N, U, seed, wd, loss: dict(status="done", method=m, size=size, N=N, U=U, seed=seed,  # noqa
                                                     wd=wd, loss=loss)
    runs = [run("wd", "S", 100, u, s, 0.4, 3 - u / 1000 + s) for u in (1000, 2000) for s in (0, 1)]
    runs += [run("wd", "T", 200, 1000, 0, 0.1, 1.5), run("mdlm-weak", "T", 208, 1000, 0, 0.1, 3.0),
             run("mdlm-tuned", "T", 208, 1000, 0, 0.1, 3.0)]  # T's tuned decay is the weak one: no contrast
    runs += [run("wd+mir", "S", 108, 1000, 0, 0.4, 2.5), run("ar-weak", "S", 100, 1000, 0, 0.1, 2.1),
             run("mdlm-weak", "S", 108, 1000, 0, 0.1, 3.5), run("mdlm-tuned", "S", 108, 1000, 0, 0.4, 3.4),
             run("mdlm-strong", "S", 108, 1000, 0, 0.4, 3.4), run("mdlm-strong", "S", 108, 2000, 0, 3.2, 3.3)]
    rep = {"runs": runs, "law_errors": {"wd": {"in_sample": [dict(size="S", U=1000, softq=0.1, chinchilla=0.2)]}},
           "multipliers": {"softq": {"wd+mir": {"cells": [dict(size="S", U=1000, multiplier=2.0),
                                                          dict(size="S", U=2000, multiplier=math.nan)]}}}}
    recs = records(rep)
    assert {r["N"] for r in recs if r["kind"] == "run" and r["size"] == "S"} == {100}  # MIR's, MDLM's [MASK] row
    assert sorted((r["seed"], r["gap"]) for r in recs if r["kind"] == "fan_gap" and r["size"] == "S") == [(0, 1.0),
                                                                                                       (1, 1.0)]
    mdlm = {r["arm"]: r for r in recs if r["kind"] == "mdlm"}  # mdlm-strong at 3.2: neither arm; at 0.4: tuned
    assert len([r for r in recs if r["kind"] == "mdlm"]) == 3 and {r["size"] for r in mdlm.values()} == {"S"}
    assert mdlm["tuned"]["loss"] == 3.4 and mdlm["tuned"]["gap"] == pytest.approx(3.4 - 2.0)  # wd at (S, 1000, 0)
    assert mdlm["weak"]["gap"] == pytest.approx(3.5 - 2.0) and mdlm["half-weak"]["gap"] == pytest.approx(0.75)
    assert sorted((r["arm"], r["log_m"]) for r in recs if r["kind"] == "multiplier") == [
        ("paper", math.log(1.3)), ("wd+mir", math.log(2.0))]
    assert sorted((r["law"], r["abs_err"]) for r in recs if r["kind"] == "law_error") == [("chinchilla", 0.2),
                                                                                        ("softq", 0.1)]
    assert len({c.claim for c in CLAIMS}) == len(CLAIMS)


def assert_json_close(a, b, where="report.json"):
    """Equal JSON, floats to 1e-9 relative (the law fits' last bits differ between CPUs)."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b)), (where, a, b)
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_json_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_json_close(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


@pytest.mark.parametrize("folder,runs_trained,commit", [("data_constrained", 257, "0751a55"),
                                                         ("data_constrained-earlier", 135, "51f75e6")])
def test_committed_report_rebuilds_byte_identical(tmp_path, folder, runs_trained, commit):
    """The committed reports have no run folders: --report-only rebuilds report.md and runs.csv from report.json
    alone, byte for byte, and report.json with the same keys, values and text (floats to 1e-9 relative)."""
    out = tmp_path / folder
    shutil.copytree(RESULTS / folder, out)
    dc.main(["--report-only", "--out", str(out)])
    for f in ("report.md", "runs.csv"):
        assert (out / f).read_bytes() == (RESULTS / folder / f).read_bytes(), f
    assert_json_close(json.loads((out / "report.json").read_text()), json.loads((RESULTS / folder / "report.json").read_text()))
    prov = json.loads((out / "report.json").read_text())["provenance"]
    assert prov["runs_trained"] == runs_trained and prov["commit"].startswith(commit)


def test_committed_report_is_the_authors_baseline_in_the_fan_out_regime():
    """The default's committed report (--preset authors): their baseline (dropout 0.1 at the attention output,
    an untied head); the sweep with >= 2 seeds per (size, decay); every AR run >= 0.3 nats below the unigram
    loss, every MDLM bound below it; MIR against wd per size by ttest_rel over (U, seed) from the runs."""
    rep = json.loads((RESULTS / "data_constrained" / "report.json").read_text())
    st = rep["settings"]
    assert st["preset"] == "authors" and st["dropout"] == 0.1 and st["tie"] is False and st["dropout_at"] == "attn-out"
    seeds = {}
    for r in rep["sweep"]:
        seeds.setdefault((r["size"], r["wd"]), set()).add(r["seed"])
    assert seeds and all(len(v) >= 2 for v in seeds.values())
    runs = [r for r in rep["runs"] if r["status"] == "done"]
    assert len(runs) == len(rep["runs"])
    assert all(r["loss"] <= math.log(r["unigram_val_ppl"]) - 0.3 for r in runs if r["method"] in ("wd", "wd+mir"))
    assert all(r["loss"] < math.log(r["unigram_val_ppl"]) for r in runs if r["method"].startswith("mdlm"))
    cells = rep["verdicts"][0]["cells"]
    for c, size in zip(cells, [s[0] for s in st["sizes"]]):
        wd = {(r["U"], r["seed"]): r["loss"] for r in runs if (r["method"], r["size"]) == ("wd", size)}
        mir = {(r["U"], r["seed"]): r["loss"] for r in runs if (r["method"], r["size"]) == ("wd+mir", size)}
        t = stats.ttest_rel([mir[k] for k in sorted(mir)], [wd[k] for k in sorted(mir)])
        assert c["cell"] == size and c["p"] == pytest.approx(t.pvalue, rel=1e-9) and c["n"] == len(mir) >= 8


def test_authors_preset_is_the_default_with_their_baseline():
    """dropout 0.1 at the attention output and an untied head in every run's train.py flags; 2 sweep seeds."""
    a = dc.parse_args([])
    assert a.preset == "authors" and a.dropout == 0.1 and a.tie is False and a.sweep_seeds == 2 and a.scan
    run = dc.make_run(a, "ar", a.sizes[0], a.budgets[0], 1.6, 3e-3, 0)
    assert run.argv[run.argv.index("--dropout") + 1] == "0.1" and "--no-tie" in run.argv
    assert run.argv[run.argv.index("--dropout-at") + 1] == "attn-out"  # their placement (dcp/model.py:149)
    assert run.name == "ar-L2d32-U32000-wd1.6-lr0.003-s0-e16-do0.1-attnout-untied"  # the committed runs' names
    mir = dc.make_run(a, "mir", a.sizes[0], 32000, 1.6, 3e-3, 0)
    assert mir.argv[mir.argv.index("--mir-lambda") + 1] == "0.4" and "--mir-keep-first" in mir.argv
    a.budgets, a.epochs = [32000, 64000, 128000, 256000], 32  # the committed scan's choice
    grid = dc.grid_runs(a, {s[0]: (1.6, 3e-3) for s in a.sizes})
    n = lambda m, U: sorted(r.meta["seed"] for r in grid if (r.meta["method"], r.meta["size"], r.meta["U"]) == (m, "L2d32", U))  # noqa
    assert n("wd", 64000) == n("wd+mir", 32000) == list(range(8)) and n("wd", 128000) == [0, 1]  # seeds_small_u
    assert n("mdlm-weak", 32000) == n("mdlm-tuned", 32000) == [0, 1, 2] and n("mdlm-tuned", 64000) == []
    weak = next(r for r in grid if r.meta["method"] == "mdlm-weak")  # their default decay, lr 2e-4 / 1e-3 of AR's
    assert weak.name == "mdlm-L2d32-U32000-wd0.1-lr0.0006-s0-e256-do0.1-attnout-untied"
    assert {r.meta["wd"] for r in grid if r.meta["method"] == "mdlm-tuned"} == {1.6}
    assert "mdlm-strong" not in a.methods and dc.METHOD_RUN["mdlm-strong"] == ("mdlm", "strong")  # still a method
    e = dc.parse_args(["--preset", "earlier"])
    assert e.tie and e.dropout == 0 and not e.scan and e.sweep_budget == 32000
    r = dc.make_run(e, "ar", e.sizes[0], 8000, 0.4, 3e-3, 0)
    assert "--no-tie" not in r.argv and r.argv[r.argv.index("--dropout") + 1] == "0"


def test_untied_head_is_weight_decayed():
    """model.configure_optimizers: an untied lm_head.weight is in the decayed group; a tied one is the
    embedding, never decayed."""
    from model import GPT, GPTConfig
    for tie in (False, True):
        m = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16, tie_weights=tie))
        decay, no_decay = m.configure_optimizers(0.5, 1e-3, (0.9, 0.95), "cpu").param_groups
        ids = lambda g: {id(p) for p in g["params"]}  # noqa: E731
        assert decay["weight_decay"] == 0.5 and no_decay["weight_decay"] == 0.0
        assert (id(m.lm_head.weight) in ids(decay)) == (not tie) and id(m.transformer.wte.weight) in ids(no_decay)


def test_pick_strong_by_the_mean_over_seeds(tmp_path, monkeypatch):
    """The chosen decay has the lowest mean, not the best single seed."""
    monkeypatch.setitem(dc.PRESETS, "t", (dict(TINY, sizes="L1d16,L2d16", decays="0.1,1.6", sweep_seeds=2),) * 2)
    a = dc.parse_args(["--preset", "t", "--out", str(tmp_path)])
    losses = {(0.1, 0): 2.0, (0.1, 1): 2.6, (1.6, 0): 2.2, (1.6, 1): 2.3}  # best seed 0.1, best mean 1.6
    sweep = dc.sweep_runs(a)
    monkeypatch.setattr(dc, "val_loss", lambda a, r: losses[(r.meta["wd"], r.meta["seed"])])
    assert dc.pick_strong(a, sweep) == {"L1d16": (1.6, 3e-3), "L2d16": (1.6, 3e-3)}
    monkeypatch.setattr(dc, "val_loss", lambda a, r: None if r.meta["seed"] else 2.0)  # unfinished
    assert dc.pick_strong(a, sweep) == {"L1d16": None, "L2d16": None}


def scan_rec(obj, size, U, epochs, loss, train_loss, uni=np.exp(4.0)):
    return dict(obj=obj, size=size, U=U, epochs=epochs, loss=loss, train_loss=train_loss, unigram_val_ppl=uni)


def test_scan_choice_rule_on_made_up_records():
    """ln(unigram) = 4: a size is kept at loss <= 3.7; the two largest kept must overfit by >= 0.3;
    MDLM must be <= 3.9. Most sizes first, then the smallest U0, then the fewest epochs; with a time
    limit the most sizes, then the most budgets, whose grid fits."""
    from experiments.lib import data_constrained_scan as sc
    sizes = ["S", "M", "L", "XL"]
    recs = []
    for e in (16, 32):
        # U0 = 32k: S at the unigram level (3 sizes kept); 64k: all 4 kept, the largest overfit
        recs += [scan_rec("ar", "S", 32000, e, 3.9, 3.8), scan_rec("ar", "M", 32000, e, 3.5, 3.0),
                 scan_rec("ar", "L", 32000, e, 3.3, 2.5), scan_rec("ar", "XL", 32000, e, 3.2, 2.0)]
        recs += [scan_rec("ar", "S", 64000, e, 3.6, 3.5), scan_rec("ar", "M", 64000, e, 3.4, 3.05),
                 scan_rec("ar", "L", 64000, e, 3.2, 2.8), scan_rec("ar", "XL", 64000, e, 3.1, 2.7 if e == 32 else 2.9)]
    recs += [scan_rec("mdlm", "S", 32000, 32, 3.95, 3.9), scan_rec("mdlm", "S", 64000, 32, 3.8, 3.7)]
    out = sc.choose_regime(recs, sizes, dict(margin=0.3, overfit_gap=0.3, mdlm_margin=0.1, min_sizes=3))
    # 64k at 16 epochs: XL overfits by only 0.2; at 32 epochs by 0.4 -> (32, 64k) with all four sizes
    assert out["choice"] == (32, 64000) and out["sizes"] == sizes
    by = {(c["epochs"], c["U0"]): c for c in out["candidates"]}
    assert not by[(16, 64000)]["ok"] and "overfit" in by[(16, 64000)]["why"]
    assert not by[(16, 32000)]["ok"] and "MDLM" in by[(16, 32000)]["why"]  # MDLM 0.05 below the unigram level
    assert sc.grid_budgets(64000, 512000) == [64000, 128000, 256000, 512000]
    none = sc.choose_regime([r for r in recs if r["size"] != "XL"], sizes[:3],
                            dict(margin=0.3, overfit_gap=0.3, mdlm_margin=0.1, min_sizes=4))
    assert none["choice"] is None and sc.closest(none)["kept"]
    # a time limit: a grid of sizes x budgets fits when (#sizes) x (#budgets) <= 12; the largest sizes and
    # budgets go first, the two largest kept must still overfit (L overfits by 0.4 at 64k, M by 0.35)
    rules = dict(margin=0.3, overfit_gap=0.3, mdlm_margin=0.1, min_sizes=3, min_budgets=3)
    asked = []

    def fits(e, u0, kept, budgets):
        asked.append((e, u0, tuple(kept), tuple(budgets)))
        return len(kept) * len(budgets) <= 12
    timed = sc.choose_regime(recs, sizes, rules, max_budget=512000, fits=fits)
    assert timed["choice"] == (32, 64000) and timed["sizes"] == sizes and timed["budgets"] == [64000, 128000, 256000]
    assert (32, 64000, tuple(sizes), (64000, 128000, 256000, 512000)) in asked  # the whole grid was tried first
    small = sc.choose_regime(recs, sizes, rules, max_budget=512000, fits=lambda e, u0, k, b: len(k) * len(b) <= 9)
    # three sizes (M, L overfit) and three budgets fit at 64k with 16 epochs too: the fewest epochs win
    assert small["choice"] == (16, 64000) and small["sizes"] == ["S", "M", "L"] and len(small["budgets"]) == 3
    assert sc.choose_regime(recs, sizes, rules, max_budget=512000, fits=lambda *_: False)["choice"] is None


def test_authors_preset_end_to_end(tmp_path, monkeypatch):
    """The default preset at a tiny size on generated music (its U as whole chunks): the scan (its fallback),
    the sweep with 2 seeds, the MDLM arms; --plan after the scan; --report-only from report.json alone."""
    monkeypatch.setenv("PRELUDE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(dc.PRESETS, "tiny-scan", (dict(
        dc.AUTHORS, stage="music-synthetic", scan_sizes="L1d8,L1d16", scan_budgets="256,512", scan_epochs="1",
        max_budget=1024, decays="0.1,1.0", block_size=16, batch_size=4, mdlm_epochs=1, mdlm_budgets=1, laws="chinchilla",
        scan_fallback=True, grid_hours=None, seeds_small_u=None, mdlm_seeds=1),) * 2)
    out = tmp_path / "out"
    run = ["--preset", "tiny-scan", "--jobs", "1", "--threads", "1", "--out", str(out)]
    dc.main(run)
    rep = json.loads((out / "report.json").read_text())
    st = rep["settings"]
    assert st["preset"] == "tiny-scan" and st["dropout"] == 0.1 and st["tie"] is False
    sw = {}
    for r in rep["sweep"]:
        sw.setdefault((r["size"], r["wd"]), []).append(r["seed"])
    assert sw and all(sorted(v) == [0, 1] for v in sw.values())
    assert rep["scan"]["fallback"] and rep["scan"]["budgets"][0] in (256, 512) and len(rep["scan"]["runs"]) == 6
    assert {r["method"] for r in rep["runs"]} == {"wd", "wd+mir", "mdlm-weak", "mdlm-tuned"}
    # MIR's untied head has a [MASK] row (its N is d larger): its runs still pair with wd's by size, U and seed
    cells = rep["verdicts"][0]["cells"]
    assert cells and all(c["test"] == "paired" and c["n"] == 2 * len(rep["scan"]["budgets"]) for c in cells)
    assert "chose" in (out / "report.md").read_text()
    plan = dc.plan(dc.parse_args(run + ["--plan"]))  # the scan has finished: the grid it chose
    assert "phase 0, scan: 6 runs" in plan and "phase 2, grid: " in plan
    body = {f: (out / f).read_bytes() for f in ("report.md", "report.json")}
    bare = tmp_path / "bare"
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("runs", "provenance.json"))
    dc.main(["--report-only", "--out", str(bare)])
    assert {f: (bare / f).read_bytes() for f in body} == body


def test_budgets_beyond_the_corpus(tmp_path, monkeypatch, capsys):
    """A budget beyond the training set is a one-line error; the scan's max_budget (an upper bound) is lowered to the
    corpus's whole chunks, so its grid stops there."""
    from data.common import UserError
    monkeypatch.setenv("PRELUDE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(dc.PRESETS, "tiny-scan", (dict(
        dc.AUTHORS, stage="music-synthetic", scan_sizes="L1d8,L1d16", scan_budgets="256,512", scan_epochs="1",
        max_budget=10 ** 9, block_size=16, batch_size=4),) * 2)
    a = dc.parse_args(["--preset", "tiny-scan", "--out", str(tmp_path / "o")])
    dc.check_budgets(a)
    corpus = dc.load_corpus("music-synthetic", dc.train_parse_args(["--stages", "music-synthetic", "--block-size", "16"]))
    assert a.max_budget == len(corpus.train) // 17 * 17 and "the grid stops there" in capsys.readouterr().out
    assert dc.sc.grid_budgets(a.max_budget // 3, a.max_budget) == [a.max_budget // 3, a.max_budget // 3 * 2]
    a.max_budget = None  # no bound given: the corpus is the bound, without a note
    dc.check_budgets(a)
    assert a.max_budget == len(corpus.train) // 17 * 17 and "stops there" not in capsys.readouterr().out
    a.budgets = [a.max_budget + 17]
    with pytest.raises(UserError, match="training tokens"):
        dc.check_budgets(a)


def test_committed_report_reads_mir_where_its_gain_lives_and_mdlm_as_the_authors_compare_it():
    """What the default's committed report must hold: >= 4 seeds of wd and wd+mir in every (size, U <= 64k) cell; MIR's
    gain read over the whole grid and by U, each by its test; the multiplier's 95% t-interval (scipy's, from the
    cells' log multipliers) beside the paper's 1.3x; MDLM at the weak decay 0.1 and at each size's AR-tuned decay,
    >= 3 seeds each, every run with its last-epoch change of the validation loss."""
    rep = json.loads((RESULTS / "data_constrained" / "report.json").read_text())
    st, runs = rep["settings"], [r for r in rep["runs"] if r["status"] == "done"]
    seeds = {}
    for r in runs:
        seeds.setdefault((r["method"], r["size"], r["U"], r["wd"]), set()).add(r["seed"])
    mdlm_u = min(st["budgets"])
    for size, wd in ((s[0], rep["strong"][s[0]]["wd"]) for s in st["sizes"]):
        for U in (u for u in st["budgets"] if u <= st["small_u"]):
            assert all(len(seeds.get((m, size, U, wd), ())) >= 4 for m in ("wd", "wd+mir")), (size, U)
        assert len(seeds.get(("mdlm-weak", size, mdlm_u, 0.1), ())) >= 3, size
        assert len(seeds.get(("mdlm-tuned", size, mdlm_u, wd), ())) >= 3, size
    assert all(math.isfinite(r["last_epoch_change"]) and math.isfinite(r["second_half_change"])
               for r in runs if r["method"].startswith("mdlm"))
    v = {x["claim"]: x for x in rep["verdicts"]}
    pooled = v["MIR lowers the validation loss over the whole grid"]
    by_u = v["MIR lowers the validation loss at every data budget"]
    assert pooled["cells"][0]["n"] == sum(len(s) for k, s in seeds.items() if k[0] == "wd+mir")
    assert [c["cell"] for c in by_u["cells"]] == st["budgets"] and all(c["p"] is not None for c in by_u["cells"])
    lg = np.log([c["multiplier"] for c in rep["multipliers"]["softq"]["wd+mir"]["cells"]])
    lo, hi = np.exp(stats.t.interval(0.95, len(lg) - 1, lg.mean(), stats.sem(lg)))
    mult = v["MIR is worth at least the paper's ~1.3x more unique data"]
    assert f"95% CI {lo:.2f}-{hi:.2f}x" in mult["ours"] and "(log 0.262)" in mult["paper"]
