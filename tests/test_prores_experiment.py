"""The ProRes experiment (experiments/prores.py, experiments/lib/prores_*.py): its runs' flags, the
scan's choice of the measurement point, the claims' records, a tiny sweep end to end, --plan, and the
committed reports rebuilt byte for byte from their report.json."""
import json
import math
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from scipy import stats

import prores
from data.common import UserError
from experiments import prores as exp
from experiments.lib import prores_claims
from experiments.lib.claims import read_all
from experiments.lib.prores_report import growth_fit, spike_steps
from experiments.lib.prores_runs import make_run, measure_runs, prores_T, scan_runs
from flags import parse_args as train_parse_args
from model import GPT, GPTConfig

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results"
TINY = ["--jobs", "1", "--threads", "1", "--stage", "music-synthetic", "--train-args", "--synthetic-tokens 20000",
        "--iters", "6", "--seeds", "3", "--set", "n_embd=8", "n_head=2", "block_size=16", "batch_size=2", "evals=2",
        "eval_iters=2", "spike_window=2"]


def test_runs_and_their_train_flags(tmp_path):
    b = exp.parse_args(["--out", str(tmp_path / "b")])  # the default: both baselines where the depth scan broke them
    assert (b.preset, b.scan, b.lr, b.depths, b.norms, b.iters, b.seeds, b.stage, b.n_embd, b.init, b.schedule) == \
        ("breakdown", False, 4e-3, [8, 48, 96], ["pre", "post"], 1000, 3, "music", 32, "plain", "wsd")
    assert len(measure_runs(b, b.lr, b.depths)) == 2 * 2 * 3 * 3 and b.iters // b.evals == 100
    assert [prores_T(b, d, b.iters) for d in b.depths] == [62.5, 10.4167, 5.2083]
    p = exp.parse_args(["--preset", "pilot", "--out", str(tmp_path / "p")])  # the paper's T >= 100 steps a layer
    runs = measure_runs(p, p.lr, p.depths)
    assert {r.meta["T"] for r in runs if r.meta["prores"]} == {100} and len(runs) == 2 * 2 * 2 * 3 and p.iters == 10_000
    assert all(prores.ramp_steps(r.meta["depth"], 100) <= p.iters // 2 for r in runs)   # half the run after the ramp
    w = exp.parse_args(["--preset", "warmup", "--out", str(tmp_path / "w")])  # the Post-LN baselines, 200-step warm-up
    runs = measure_runs(w, w.lr, w.depths)
    assert len(runs) == 3 * 3 and not any(r.meta["prores"] for r in runs) and {r.meta["norm"] for r in runs} == {"post"}
    assert {train_parse_args(r.argv + ["--out", "x"]).warmup_iters for r in runs} == {200}
    base = [x.argv for x in measure_runs(b, b.lr, b.depths) if (x.meta["norm"], x.meta["prores"], x.meta["depth"]) ==
            ("post", False, 48)]  # the breakdown's runs but for the warm-up (20 steps there)
    assert base and [r.argv for r in runs if r.meta["depth"] == 48] == [
        ["200" if v[i - 1] == "--warmup-iters" else x for i, x in enumerate(v)] for v in base]
    a = exp.parse_args(["--preset", "depth", "--quick", "--out", str(tmp_path), "--set", "n_head=2", "stage=x"])
    assert a.norms == ["pre", "post", "sandwich", "deepnorm", "lns-init"] and (a.n_head, a.stage, a.seeds) == (2, "x", 1)
    a.stage = "music"
    scan = scan_runs(a)
    assert len(scan) == len(a.scan_lrs) * len(a.scan_depths) * len(a.scan_norms)
    assert not any(r.meta["prores"] for r in scan) and {r.meta["seed"] for r in scan} == {0}
    meas = measure_runs(a, 2e-3, [4, 16])
    names = [r.name for r in meas]
    assert len(names) == len(set(names)) == len(a.norms) * 2 * 2 * a.seeds
    for r in scan + meas:  # every run's flags parse in train.py and say what its labels say
        args, m = train_parse_args(r.argv + ["--out", str(r.folder)]), r.meta
        assert (args.norm, args.prores, args.n_layer, args.seed, args.lr, args.iters, args.log_interval) == \
            (m["norm"], m["prores"], m["depth"], m["seed"], m["lr"], m["iters"], 1)
        assert args.init == m["init"] == ("deepnet" if (m["norm"], m["prores"]) == ("deepnorm", False) else "plain")
        assert (args.schedule, args.decay_frac, args.min_lr, args.warmup_iters) == ("wsd", 0.1, 0.0, max(1, round(
            0.02 * m["iters"])))
        if m["prores"]:  # the deepest layer fully on half-way (T may be fractional)
            assert args.prores_T == prores_T(a, m["depth"], m["iters"]) == pytest.approx(0.5 * m["iters"] / m["depth"],
                                                                                       rel=1e-4)
            assert prores.ramp_steps(m["depth"], args.prores_T) == round(0.5 * m["iters"])
    shared = {r.name for r in scan} & set(names)  # a scan run and the measurement's seed-0 baseline are one run
    assert shared and all(next(s for s in scan if s.name == n).argv == next(m for m in meas if m.name == n).argv
                          for n in shared)
    for bad, says in ((["--set", "n_embed=8"], "no preset entry 'n_embed'"), (["--norms", "pre,postln"], "postln"),
                      (["--preset", "depth", "--set", "scan=false"], "--lr and --depths"),
                      (["--set", "arms=[\"half\"]"], "distinct arms"), (["--set", "arms=1"], "distinct arms"),
                      (["--set", "arms=[\"base\", \"base\"]"], "distinct arms")):
        with pytest.raises(UserError, match=re.escape(says)):
            exp.parse_args(bad + ["--out", str(tmp_path)])


def test_deepnorm_arms_take_the_authors_inits(tmp_path):
    """DeepNorm's baseline is the authors' `deeppost` (DeepNet's Xavier init), DeepNorm + ProRes their
    `deeppost_prores` (plain N(0, 0.02)): the argv says so, and the models built from it differ there."""
    a = exp.parse_args(["--out", str(tmp_path), "--norms", "deepnorm,pre"])
    init = {pr: (v := make_run(a, "measure", "deepnorm", pr, 24, 2e-3, 0, 200).argv)[v.index("--init") + 1]
            for pr in (False, True)}
    assert init == {False: "deepnet", True: "plain"}
    L, C, std = 24, 32, {}
    torch.manual_seed(0)
    for pr in (False, True):
        m = GPT(GPTConfig(block_size=16, vocab_size=97, n_layer=L, n_head=4, n_embd=C, norm="deepnorm", init=init[pr]))
        std[pr] = m.transformer.h[0].attn.c_attn.weight[2 * C:].std().item()  # the value projection
    assert std[True] == pytest.approx(0.02, rel=0.1)
    assert std[False] == pytest.approx((8 * L) ** -0.25 * math.sqrt(2 / (C + C)), rel=0.1)


def test_choice_rule(tmp_path):
    """lr* = the smallest scan lr >= 2e-3 where a baseline degrades (> margin above its shallowest depth)
    or fails (diverged / stuck) with depth; L* = each baseline's first such depth."""
    a = exp.parse_args(["--preset", "depth", "--out", str(tmp_path)])
    assert a.scan_lrs == [1e-3, 2e-3, 4e-3, 8e-3] and a.scan_depths == [8, 24, 48, 96] and a.margin == 0.1

    def scan(pre, post):  # {lr: [val loss per depth]}, None = diverged; stuck within 0.1 of the unigram 3.8
        return [dict(norm=n, lr=lr, depth=d, val_loss=v, diverged=v is None, failed=v is None or v >= 3.7)
                for n, t in (("pre", pre), ("post", post)) for lr, vs in t.items() for d, v in zip(a.scan_depths, vs)]
    fine = {lr: [2.5] * 4 for lr in a.scan_lrs}
    post_fails = {lr: [3.9] * 4 for lr in a.scan_lrs}
    pre = {1e-3: [2.5, 2.7, 2.8, 2.9], 2e-3: [2.5, 2.58, 2.65, 2.7], 4e-3: [2.5] * 4, 8e-3: [2.5] * 4}
    lr, d, lines = exp.choose(a, scan(pre, post_fails))
    assert (lr, d) == (2e-3, [48]) and any("fails already at L=8" in line for line in lines)
    post = {1e-3: [2.5] * 4, 2e-3: [2.5] * 4, 4e-3: [2.5, 2.5, None, None], 8e-3: [2.5, 3.75, 2.5, 2.5]}
    assert exp.choose(a, scan(fine, post))[:2] == (4e-3, [48])  # a divergence with depth counts
    lr, d, lines = exp.choose(a, scan(fine, fine))
    assert (lr, d) == (8e-3, [96]) and "no baseline in trouble" in lines[-1]
    post = {lr: [3.0, 3.5, 3.6, 3.7] for lr in a.scan_lrs}
    assert exp.measurement_point(a, scan(pre, post))[:2] == (2e-3, [8, 24, 48])
    assert exp.measurement_point(a, scan(pre, post_fails))[:2] == (2e-3, [8, 48])


def test_spikes_and_growth_fit():
    flat = [5.0] * 30
    bumped = flat[:25] + [5.6] + flat[26:]  # +12% over the running median
    assert spike_steps(flat, 20, 1.1) == [] and spike_steps(bumped, 20, 1.1) == [25] and not spike_steps(bumped, 20, 1.15)
    assert spike_steps(bumped[:15] + [9.0] + bumped[16:], 20, 1.1) == [25]  # before the first full window: not counted
    noisy = [1.12 if t % 2 else 0.88 for t in range(60)]  # +-12% each step: noise, not spikes
    noisy[41] = 2.5
    assert len(spike_steps(noisy, 20, 1.1)) == 20 and spike_steps(noisy, 20, mads=6.0) == [41]
    assert spike_steps(noisy, 20, mads=9.0) == []  # bar: median 1.0 + 9 x 1.4826 x MAD 0.12 = 2.60
    sd = {"window": 20, "loss_factor": 1.1, "grad_factor": 3.0}  # the report states the rule it counted by
    notes = [c.note for c in prores_claims.with_spike_rule(dict(sd, loss_mads=6.0)) if "spikes" in c.metric]
    assert notes == ["steps whose loss exceeds the median of the previous 20 by more than 6 x 1.4826 MAD of those "
                     "steps, per run", "steps whose gradient norm exceeds 3 x the median of the previous 20, per run"]
    assert prores_claims.loss_rule(sd) == "1.1 x the median of the previous 20"
    assert prores_claims.loss_rule(sd, "{:.2f}") == "1.10 x the median of the previous 20"
    L = 12
    f = growth_fit([0.1] + [0.3 * math.exp(0.25 * l) for l in range(1, L + 1)])
    assert f["b"] == pytest.approx(0.25) and f["a_exp"] == pytest.approx(math.log(0.3)) and f["better"] == "exponential"
    f = growth_fit([0.1] + [0.5 * l for l in range(1, L + 1)])
    assert f["c"] == pytest.approx(1.0) and f["better"] == "power"
    noisy = [0.2] + [1 + 0.1 * l + 0.05 * (-1) ** l for l in range(1, L + 1)]
    want = stats.linregress(range(1, L + 1), [math.log(v) for v in noisy[1:]])
    assert growth_fit(noisy)["b"] == pytest.approx(want.slope)
    assert growth_fit([0.1, 1.0, 2.0]) is None and growth_fit([0.1, 1.0, 0.0, 2.0]) is None and growth_fit(None) is None


def test_depth_claims_read_only_where_the_baseline_degrades():
    """records(): each seed's baseline at L against its own at the shallowest depth (paired); `degrades` marks
    the depths where that is clearly worse, and only there is ProRes read against the baseline."""
    cells = {("pre", False, 8): [2.40, 2.42, 2.38], ("pre", True, 8): [2.43, 2.46, 2.41],
             ("pre", False, 48): [3.09, 3.00, 3.20], ("pre", True, 48): [2.45, 2.47, 2.44],  # degrades; ProRes lower
             ("pre", False, 96): [2.41, 2.40, 2.40], ("pre", True, 96): [2.30, 2.31, 2.30],  # does not degrade
             ("post", False, 8): [2.5, 2.6, 2.7], ("post", True, 8): [2.5, 2.6, 2.7]}
    runs = [dict(norm=n, prores=pr, depth=d, seed=s, val_loss=v, loss_spikes=0, grad_spikes=0)
            for (n, pr, d), vs in cells.items() for s, v in enumerate(vs)]
    recs = prores_claims.records({"runs": runs})
    assert {(r["norm"], r["depth"]) for r in recs if r.get("degrades")} == {("pre", 48)}
    ref = [r for r in recs if r["arm"] == "baseline at L0"]
    assert sorted((r["depth"], r["seed"], r["val_loss"]) for r in ref) == sorted(
        (d, s, v) for d in (48, 96) for s, v in enumerate(cells["pre", False, 8]))
    got = {e["claim"]: e for e in read_all(prores_claims.CLAIMS, recs)}
    deg = got["Without ProRes, Pre-LN degrades with depth"]
    assert [c["cell"] for c in deg["cells"]] == [48, 96] and deg["verdict"] == "partly"
    assert deg["cells"][0]["p"] == pytest.approx(stats.ttest_rel(cells["pre", False, 48], cells["pre", False, 8]).pvalue)
    prev = got["ProRes prevents the deep breakdown of Pre-LN"]
    assert [c["cell"] for c in prev["cells"]] == [48] and prev["verdict"] == "reproduces"
    assert got["ProRes prevents the deep breakdown of Post-LN"]["verdict"] == "not measured"
    assert got["ProRes raises zero-shot accuracy"]["verdict"] == "not measured"


def test_tiny_sweep_end_to_end(cache, tmp_path, capsys):
    """A tiny scan + measurement on synthetic music: --plan trains nothing; each record from its run's files;
    the claims read from the report's records (a cell's p by scipy); a rerun trains nothing; --report-only
    from the runs and from report.json alone gives the same bytes."""
    out = tmp_path / "exp"
    argv = ["--preset", "depth", "--out", str(out), "--norms", "pre,post", *TINY, "scan_lrs=[1e-3,3e-3]",
            "scan_depths=[1,3]", "auto_min_lr=1e-3"]
    exp.main(argv + ["--plan"])
    assert "scan: 8 runs (0 finished)" in capsys.readouterr().out and not (out / "runs").exists()
    exp.main(argv)
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["figures"]) == {"breakdown.png", "activation_norms.png", "curves.png", "scan.png"}
    assert all((out / f).exists() for f in rep["figures"] + ["report.md", "provenance.json"])
    lr, depths = rep["measurement_point"]["lr"], rep["measurement_point"]["depths"]
    lr_c, d_c, _ = exp.choose(exp.parse_args(argv), rep["scan"])
    assert lr == lr_c and depths == sorted({1, *d_c}) and len(rep["runs"]) == 2 * 2 * 3 * len(depths)
    assert rep["provenance"]["runs_trained"] == len({r["name"] for r in rep["scan"] + rep["runs"]})
    for r in rep["scan"] + rep["runs"]:  # every record from its run's own files
        s = json.loads((out / "runs" / r["name"] / "summary.json").read_text())["stages"][0]
        assert r["val_loss"] == s["val_loss"] and r["unigram_loss"] == pytest.approx(math.log(s["unigram_val_ppl"]))
        assert r["failed"] == (r["val_loss"] >= r["unigram_loss"] - 0.1) and len(r["act_rms"]) == r["depth"]
        events = [json.loads(x) for x in (out / "runs" / r["name"] / "metrics.jsonl").read_text().splitlines()]
        gn = [e["grad_norm"] for e in events if e.get("event") == "train"]
        assert r["max_grad_norm"] == max(gn) and r["grad_spikes"] == len(spike_steps(gn, 2, 3.0))
        assert r["max_grad_norm_after_warmup"] == max(gn[1:]) and ("loss" in r) == (r in rep["runs"] and r["seed"] == 0)
        assert r["act_fit"] == growth_fit([r["embed_rms"]] + r["act_rms"])
        assert r["prores_T"] == (prores_T(exp.parse_args(argv), r["depth"], r["iters"]) if r["prores"] else None)
        assert r["val_curve"][-1] == s["val_loss"] and len(r["val_curve"]) == len(r["val_steps"])  # every run's
    assert [v["claim"] for v in rep["verdicts"]] == [c.claim for c in prores_claims.CLAIMS]
    cell = rep["verdicts"][0]["cells"][0]  # Pre-LN at the shallowest depth: ProRes against the baseline, by seed
    v = {pr: [r["val_loss"] for r in sorted(rep["runs"], key=lambda r: r["seed"])
              if (r["norm"], r["prores"], r["depth"]) == ("pre", pr, cell["cell"])] for pr in (True, False)}
    assert cell["test"] == "paired" and cell["p"] == pytest.approx(stats.ttest_rel(v[True], v[False]).pvalue)
    md = (out / "report.md").read_text()
    assert "| ProRes lowers the loss with Pre-LN |" in md and "## The scan of the baselines" in md
    assert rep["plateau"]["n"] == len(rep["runs"]) and rep["plateau"]["window"] == [4, 5]  # every run's val curve
    assert "## Validation loss along training (nats, mean ± std over seeds)" in md and "by the 0.1-nat margin (n < 3)" not in md  # 3 seeds: the test
    capsys.readouterr()
    exp.main(argv)  # everything is finished: nothing trains, the provenance records no new invocation
    assert "already finished (skipped)" in capsys.readouterr().out and (out / "report.md").read_text() == md
    assert json.loads((out / "report.json").read_text())["provenance"] == rep["provenance"]
    body = {f: (out / f).read_bytes() for f in ("report.md", "report.json")}
    exp.main(argv + ["--report-only"])  # from the runs
    assert {f: (out / f).read_bytes() for f in body} == body
    bare = tmp_path / "bare"  # the run folders gone: from report.json alone
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("runs", "provenance.json"))
    exp.main(["--report-only", "--out", str(bare)])
    assert {f: (bare / f).read_bytes() for f in body} == body


@pytest.mark.parametrize("name", ["prores", "prores-depth", "prores-warmup", "prores-pilot"])
def test_committed_report_rebuilds_byte_identical(tmp_path, name):
    src, out = RESULTS / name, tmp_path / name
    shutil.copytree(src, out)
    exp.main(["--report-only", "--out", str(out)])
    for f in ("report.md", "report.json"):
        assert (out / f).read_bytes() == (src / f).read_bytes(), f
    rep = json.loads((out / "report.json").read_text())
    assert rep["settings"]["preset"] == {"prores": "breakdown", "prores-depth": "depth", "prores-warmup": "warmup",
                                         "prores-pilot": "pilot"}[name]
    assert sum("loss" in r for r in rep["runs"]) == len(rep["runs"]) // rep["settings"]["seeds"]  # seed 0's curves
    if name == "prores-pilot":  # the paper's steps a layer, and every run's validation curve
        assert all(r["prores_T"] >= 100 for r in rep["runs"] if r["prores"])
        assert all(len(r["val_curve"]) == len(r["val_steps"]) == 40 for r in rep["runs"])
        cells = Counter((r["norm"], r["prores"], r["depth"]) for r in rep["runs"])  # the main grid: n >= 3 a cell
        assert len(cells) == 8 and min(cells.values()) >= 3


def test_report_only_without_runs_or_report_is_one_line(tmp_path, capsys):
    from experiments.lib.common import main_guard
    with pytest.raises(SystemExit) as e:
        main_guard(lambda: exp.main(["--report-only", "--out", str(tmp_path / "none")]))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error:") and "\n" not in err and "report.json" in err


def test_stuck_baselines_are_noted_on_their_depth_claims():
    """A depth claim whose baseline failed to train says where and after what warm-up; none otherwise."""
    from experiments.lib.prores_report import stuck_notes
    recs = [dict(norm=n, prores=pr, depth=d, seed=s, failed=(n == "post" and d == 48 and s < 2))
            for n in ("pre", "post") for pr in (False, True) for d in (8, 48) for s in range(3)]
    notes = stuck_notes(recs, 20)
    assert set(notes) == {"Without ProRes, Post-LN degrades with depth", "ProRes prevents the deep breakdown of Post-LN"}
    assert set(notes) <= {c.claim for c in prores_claims.CLAIMS}
    assert "L = 48 (2/3)" in notes["ProRes prevents the deep breakdown of Post-LN"] and "20-step" in notes[
        "ProRes prevents the deep breakdown of Post-LN"]
    assert stuck_notes([dict(r, failed=False) for r in recs], 20) == {}


def test_one_seed_reads_depth_by_the_margin():
    """A pilot of one seed cannot test a depth difference: its table reads it against the margin, and says so."""
    from experiments.lib.prores_report import front_table
    loss = {(False, 8): 2.0, (False, 48): 2.3, (True, 8): 2.0, (True, 48): 2.05}
    recs = [dict(norm="pre", prores=pr, depth=d, seed=0, val_loss=v, failed=False, loss_spikes=0, grad_spikes=0,
                 act_fit=None, max_grad_norm_after_warmup=1.0) for (pr, d), v in loss.items()]
    rows = front_table(recs, 0.1)["lines"]
    assert rows[-1].endswith("| +0.300 (p = n/a) | yes by the 0.1-nat margin (n < 3) |")
    assert front_table(recs, 0.5)["lines"][-1].endswith("no by the 0.5-nat margin (n < 3) |")


def test_plateau_check_tests_the_change_before_the_decay():
    """along(): each run's val loss over the tenth of the run before the lr decay, mean over seeds per condition,
    and the change over all runs tested against 0 (scipy's one-sample t-test: the paired test of end vs start)."""
    import argparse
    from experiments.lib.prores_report import along
    a = argparse.Namespace(iters=1000, decay_frac=0.1, warmup_frac=0.02, prores_schedule="linear")
    steps, drops = list(range(100, 1001, 100)), {(False, 0): 0.05, (False, 1): 0.03, (True, 0): 0.04, (True, 1): 0.01}
    recs = [dict(norm="pre", prores=pr, depth=4, seed=s, prores_T=50, name=f"{pr}{s}", val_steps=steps,
                 val_curve=[3.0 - (d if t >= 900 else 0) - 0.001 * t for t in steps]) for (pr, s), d in drops.items()]
    lines, plateau = along(a, recs)
    changes = [-0.1 - d for d in drops.values()]  # steps 800 -> 900: 0.1 of the slope, then the drop at 900
    assert plateau["window"] == [800, 900] and plateau["n"] == 4 and plateau["change"] == pytest.approx(-0.1325)
    assert plateau["p"] == pytest.approx(stats.ttest_1samp(changes, 0).pvalue) and plateau["flat"] is False
    assert "| Pre-LN | 4 | 20 |" in lines[4] and "| Pre-LN + ProRes | 4 | 200 |" in lines[5]
    assert lines[4].endswith("| -0.140 ± 0.014 |") and lines[-2].endswith("still falling.")
    flat = [dict(r, val_curve=[3.0] * len(steps)) for r in recs]
    assert along(a, flat)[1]["flat"] and along(a, flat)[1]["p"] is None  # no change: no spread, nothing to test


def test_a_sweep_grown_by_seeds_reuses_the_runs_of_an_earlier_report(cache, tmp_path, capsys):
    """--reuse DIR: the runs DIR/report.json holds with the same train.py flags and stuck margin are not trained
    again; their records come over with their spikes recounted by this sweep's rule (a record without per-step
    curves only under the same rule); DIR's invocations head the provenance; a rebuild with or without --reuse
    gives the same report. Runs made with other flags are trained afresh; a DIR without a ProRes report is one line."""
    from experiments.lib.common import main_guard
    grid = ["--preset", "breakdown", "--norms", "pre", "--depths", "1,2", *TINY[:10]]
    small = [*grid, "--seeds", "1", "--set", *TINY[13:]]
    one, two = tmp_path / "one", tmp_path / "two"
    exp.main(small + ["--out", str(one)])
    first = json.loads((one / "report.json").read_text())
    grown = [*grid, "--seeds", "2", "--out", str(two), "--reuse", str(one), "--set", *TINY[13:], "loss_spike_mads=0.5"]
    exp.main(grown + ["--plan"])
    assert "measurement: 8 runs (4 finished)" in capsys.readouterr().out
    exp.main(grown)
    rep = json.loads((two / "report.json").read_text())
    assert sorted(p.name for p in (two / "runs").iterdir()) == sorted(r["name"] for r in rep["runs"] if r["seed"] == 1)
    assert rep["provenance"]["runs_trained"] == 8 and len(rep["provenance"]["invocations"]) == 2
    assert rep["provenance"]["invocations"][0] == first["provenance"]["invocations"][0]
    old = {r["name"]: r for r in first["runs"]}
    for r in (r for r in rep["runs"] if r["seed"] == 0):
        assert r["reused"] == str(one) and r["val_loss"] == old[r["name"]]["val_loss"] and r["loss"] == old[r["name"]]["loss"]
        assert r["loss_spikes"] == len(spike_steps(r["loss"], 2, 1.1, 0.5))
    assert "(4 of them from " in (two / "report.md").read_text()
    body = {f: (two / f).read_bytes() for f in ("report.md", "report.json")}
    for rebuild in (grown, [x for x in grown if x not in ("--reuse", str(one))]):  # with --reuse, or from TWO's own
        exp.main(rebuild + ["--report-only"])  # the runs here, the others as TWO's report took them: the same report
        assert {f: (two / f).read_bytes() for f in body} == body
    capsys.readouterr()
    for change, reusable in (("loss_spike_mads=0.5", 8), ("loss_spike_mads=0.8", 4), ("stuck_margin=0.2", 0)):
        exp.main([*grid, "--seeds", "2", "--out", str(tmp_path / "three"), "--reuse", str(two), "--set", *TINY[13:],
                  change, "--plan"])  # seed 1 kept no per-step curves: reused only under the same spike rule
        assert f"measurement: 8 runs ({reusable} finished)" in capsys.readouterr().out
    other = tmp_path / "other"  # another width: nothing of ONE's is the same run
    exp.main([*grid, "--seeds", "1", "--out", str(other), "--reuse", str(one), "--set", *TINY[13:], "n_embd=12",
              "--plan"])
    assert "measurement: 4 runs (0 finished)" in capsys.readouterr().out
    for bad, says in ((tmp_path / "none", "no report.json there"), (RESULTS / "procedural", "not a report of")):
        with pytest.raises(SystemExit):
            main_guard(lambda: exp.main([*grid, "--out", str(other), "--reuse", str(bad)]))
        err = capsys.readouterr().err
        assert "--reuse" in err and says in err and err.count("\n") == 1
    assert all(r["argv"] for r in first["runs"])  # a record keeps its train.py flags: --reuse compares them
    older = dict(first, runs=[{k: v for k, v in r.items() if k != "argv"} for r in first["runs"]])  # rebuilt instead
    unsaid = dict(first, runs=[dict(r, argv=r["argv"] + ["--clip", "0.5"]) for r in first["runs"]])  # not in settings
    for report, reusable in ((older, 4), (unsaid, 0)):
        (one / "report.json").write_text(json.dumps(report))
        exp.main([*small, "--out", str(tmp_path / "four"), "--reuse", str(one), "--plan"])
        assert f"measurement: 4 runs ({reusable} finished)" in capsys.readouterr().out
