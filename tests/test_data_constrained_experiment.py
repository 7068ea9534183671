"""experiments/data_constrained.py end to end at a tiny size (a folder of tiny paragraphs, CPU, no
network, an empty cache): the report's shape, and that its statistics follow from its runs."""
import csv
import json
import math

import numpy as np
import pytest

import scaling
from experiments import data_constrained as dc
from experiments.lib.common import main_guard

SIZES = ["L1d8", "L1d16", "L2d16"]
BUDGETS = [256, 512, 1024]


def argv(text_dir, out):
    return ["--preset", "earlier", "--stage", f"text:{text_dir}", "--sizes", ",".join(SIZES), "--budgets", ",".join(map(str, BUDGETS)),
            "--epochs", "1", "--block-size", "16", "--batch-size", "4", "--decays", "0.1,1.0", "--seeds", "2",
            "--seeded-sizes", "1", "--laws", "chinchilla,softq", "--fit-methods", "wd,wd+mir", "--jobs", "1", "--threads", "1", "--out", str(out)]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """One tiny experiment, shared by the tests of this file (its own cache and text folder)."""
    import os
    from conftest import write_paragraphs
    base = tmp_path_factory.mktemp("dc")
    old = os.environ.get("PRELUDE_CACHE")
    os.environ["PRELUDE_CACHE"] = str(base / "cache")
    try:
        text_dir = write_paragraphs(base / "texts")
        out = base / "out"
        dc.main(argv(text_dir, out))
        yield text_dir, out, json.loads((out / "report.json").read_text())
    finally:
        if old is None:
            os.environ.pop("PRELUDE_CACHE", None)
        else:
            os.environ["PRELUDE_CACHE"] = old


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_files_and_runs_csv(result):
    _, out, rep = result
    for name in ("report.md", "report.json", "runs.csv", "runs-wd.csv", "runs-wd_mir.csv", "laws.png",
                 "mir_gain.png", "gain_by_frequency.png", "ar_vs_mdlm.png", "wd_sweep.png"):
        assert (out / name).exists(), name
    rows = read_csv(out / "runs.csv")
    assert list(rows[0]) == ["N", "U", "D", "loss", "method", "seed"]
    scaling.read_runs(out / "runs.csv")  # the format scaling.py reads
    done = [r for r in rep["runs"] if r["status"] == "done"]
    assert len(rows) == len(done) == len(rep["runs"])
    assert {r["method"] for r in rows} == set(dc.EARLIER["methods"].split(","))
    # every row is its run: the loss from the run's full-validation evaluation, N and D from its summary
    for row, r in zip(rows, done):
        folder = out / "runs" / r["name"]
        s = json.loads((folder / "summary.json").read_text())
        e = json.loads((folder / "val_eval.json").read_text())
        assert float(row["loss"]) == pytest.approx(e["loss"], abs=1e-6)
        assert int(row["N"]) == s["params"] and int(row["D"]) == s["stages"][0]["tokens"]
        assert int(row["U"]) == s["stages"][0]["unique_tokens"] == r["U"]
        assert e["kind"] == ("nll bound" if r["method"].startswith("mdlm") else "nll")
    # seeds: 2 for wd and wd+mir in the smallest size, 1 elsewhere
    seeds = lambda m, size: sorted(r["seed"] for r in done if r["method"] == m and r["size"] == size and r["U"] == 256)
    assert seeds("wd", "L1d8") == seeds("wd+mir", "L1d8") == [0, 1]
    assert seeds("wd", "L2d16") == seeds("mdlm-weak", "L1d8") == [0]
    text = (out / "report.md").read_text()
    for part in ("## Setup", "## 1. Weight-decay sweep", "## 2. MIR", "## 3. Scaling laws", "## 4. MIR's effective",
                 "## 5. Where MIR's gain", "## 6. AR vs masked diffusion", "Paper:", "Provenance: commit"):
        assert part in text, part


def test_strong_decay_is_the_sweeps_best(result):
    _, _, rep = result
    for size in SIZES:
        sw = [r for r in rep["sweep"] if r["size"] == size]
        assert len(sw) == 2 and all(r["U"] == 512 for r in sw)  # the middle budget
        assert rep["strong"][size]["wd"] == min(sw, key=lambda r: r["loss"])["wd"]
        for r in rep["runs"]:
            if r["size"] == size:
                assert r["wd"] == (0.1 if r["method"] in ("ar-weak", "mdlm-weak") else rep["strong"][size]["wd"])


def cells_of(rows, method):
    by = {}
    for r in rows:
        if r["method"] == method:
            by.setdefault((float(r["N"]), float(r["U"])), []).append((float(r["D"]), float(r["loss"])))
    keys = sorted(by)
    N, U = (np.array([k[i] for k in keys]) for i in (0, 1))
    D = np.array([np.mean([d for d, _ in by[k]]) for k in keys])
    L = np.array([np.mean([x for _, x in by[k]]) for k in keys])
    return N, U, D, L


def test_statistics_follow_from_the_runs(result):
    _, out, rep = result
    rows = read_csv(out / "runs.csv")
    loss = {(r["method"], int(r["N"]), int(r["U"]), int(r["seed"])): float(r["loss"]) for r in rows}
    # MIR's gain: wd - wd+mir, paired by seed
    assert len(rep["mir_gain"]) == len(SIZES) * len(BUDGETS)
    for g in rep["mir_gain"]:  # (here U true = U asked: the first U tokens)
        d = [loss[("wd", g["N"], g["U"], s)] - loss[("wd+mir", g["N"], g["U"], s)] for s in range(g["n"])]
        assert g["gains"] == pytest.approx(d) and g["mean"] == pytest.approx(np.mean(d))
    # the laws: the reported RMSE is the reported parameters' error on the seed-averaged cells
    for method in ("wd", "wd+mir"):
        N, U, D, L = cells_of(rows, method)
        for law in ("chinchilla", "softq"):
            f = rep["fits"][method]["laws"][law]
            err = scaling.predict(law, f["params"], N, U, D) - L
            assert f["rmse"] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-6)
            assert f["mae"] == pytest.approx(np.mean(np.abs(err)), rel=1e-6)
            assert f["extrapolation"]["budget"] == U.max()
        assert rep["fits"][method]["fan_out_data"] == pytest.approx(scaling.fan_out(N, U, L))
    # the effective-data multiplier: wd+mir's cells under the wd SoftQ fit
    N, U, D, L = cells_of(rows, "wd+mir")
    m = scaling.effective_data_multiplier("softq", rep["fits"]["wd"]["laws"]["softq"]["params"], N, U, L, D)
    got = [c["multiplier"] for c in rep["multipliers"]["softq"]["wd+mir"]["cells"]]
    assert np.allclose(np.nan_to_num(got, nan=-1), np.nan_to_num(m, nan=-1))
    # AR vs MDLM: the gaps are differences of the seed-0 losses
    for c in rep["ar_vs_mdlm"]:
        u = c["U"]
        assert c["gap_weak"] == pytest.approx(loss[("mdlm-weak", c["N"], u, 0)] - loss[("ar-weak", c["N"], u, 0)])
        assert c["gap_strong"] == pytest.approx(loss[("mdlm-strong", c["N"], u, 0)] - loss[("wd", c["N"], u, 0)])


def test_per_token_analysis_adds_up(result):
    _, out, rep = result
    tok = rep["per_token"]
    pairs = [r for r in rep["runs"] if r["method"] == "wd+mir"]
    assert tok["pairs"] == len(pairs)
    n_targets = next(r["val_tokens"] for r in rep["runs"] if r["method"] == "wd")
    buckets = tok["buckets"]["all"]
    assert sum(b["targets_per_pair"] for b in buckets) == pytest.approx(n_targets)
    assert sum(b["gain_per_pair"] for b in buckets) == pytest.approx(tok["total_gain_per_pair"], abs=1e-6)
    # the summed per-token gain is the difference of the runs' mean losses times the targets
    by = {(r["size"], r["U"], r["seed"], r["method"]): r["loss"] for r in rep["runs"]}
    want = np.mean([(by[(r["size"], r["U"], r["seed"], "wd")] - r["loss"]) * n_targets for r in pairs])
    assert tok["total_gain_per_pair"] == pytest.approx(want, rel=1e-3, abs=1e-3)
    if tok["total_gain_per_pair"] > 0:
        assert sum(b["share"] for b in buckets) == pytest.approx(1.0)
    assert tok["top_tokens"] and all(isinstance(t["token"], str) for t in tok["top_tokens"])
    gains = [t["gain_per_pair"] for t in tok["top_tokens"]]
    assert gains == sorted(gains, reverse=True)
    assert {f"U={u}" for u in BUDGETS} <= set(tok["buckets"]) and {f"size={s}" for s in SIZES} <= set(tok["buckets"])


def test_rerun_skips_finished_runs_and_report_only(result, capsys):
    text_dir, out, rep = result
    stamp = {p: p.stat().st_mtime for p in (out / "runs").glob("*/summary.json")}
    dc.main(argv(text_dir, out) + ["--laws", "chinchilla", "--fit-methods", "wd"])
    assert "already finished (skipped)" in capsys.readouterr().out
    assert {p: p.stat().st_mtime for p in (out / "runs").glob("*/summary.json")} == stamp
    dc.main(argv(text_dir, out) + ["--report-only", "--laws", "softq", "--fit-methods", "wd"])
    again = json.loads((out / "report.json").read_text())
    assert [r["loss"] for r in again["runs"]] == [r["loss"] for r in rep["runs"]]
    assert set(again["fits"]["wd"]["laws"]) == {"softq"}


def test_errors_are_one_line(result, capsys):
    text_dir, out, _ = result
    with pytest.raises(SystemExit) as e:
        main_guard(lambda: dc.main(argv(text_dir, out.parent / "big") + ["--budgets", "256,512,99999"]))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "99,999" in err
    with pytest.raises(SystemExit) as e:
        dc.parse_args(["--sizes", "4x64"])
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
    assert token_name(music, midi.VOCAB_SIZE) == "[MASK]"


def test_readings_follow_from_the_records(result):
    """The gain-against-size slope is linregress over every pair; the fan-out's slope test is
    scaling.fan_out when every seed ran at both budgets; each verdict is one of VERDICTS and a
    reading calls nothing an effect without p < 0.05 and n >= 3."""
    from scipy import stats
    from experiments.lib.common import VERDICTS
    _, out, rep = result
    pairs = [(np.log10(g["N"]), x) for g in rep["mir_gain"] for x in g["gains"]]
    want = stats.linregress(*zip(*pairs))
    got = rep["mir_gain_summary"]["slope"]
    assert got["slope"] == pytest.approx(want.slope) and got["p"] == pytest.approx(want.pvalue)
    assert got["n"] == len(pairs) and got["clear"] == (want.pvalue < 0.05 and len(pairs) >= 4)
    for m, f in rep["fan_out"].items():
        if f and f["n"] == len(SIZES):  # one seed per size: the same points as the seed-averaged cells
            assert f["slope"] == pytest.approx(rep["fits"][m]["fan_out_data"])
    for s in rep["mir_gain_summary"]["per_size"]:
        c = s["paired"]
        assert c["n"] == s["pairs"] and (not c["clear"] or (c["p"] < 0.05 and c["n"] >= 3))
    assert rep["verdicts"] and all(v["verdict"] in VERDICTS for v in rep["verdicts"])
    assert {"claim", "paper", "ours", "test", "verdict"} <= set(rep["verdicts"][0])
    assert rep["source"]["arxiv"] == "2606.06888" and rep["regime"] and rep["figures"][0] == "mir_gain.png"
    prov = rep["provenance"]
    assert prov["runs_trained"] == len({r["name"] for r in rep["runs"] + rep["sweep"]})
    assert prov["wall_seconds"] > 0 and len(prov["invocations"]) == 1


def test_report_only_from_report_json_alone(result, tmp_path):
    """The run folders gone: --report-only renders the records report.json keeps, byte for byte."""
    import shutil
    text_dir, out, _ = result
    dc.main(argv(text_dir, out) + ["--report-only"])  # from the runs, with the fixture's flags
    body = {f: (out / f).read_bytes() for f in ("report.md", "report.json", "runs.csv")}
    bare = tmp_path / "bare"
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("runs", "provenance.json"))
    dc.main(["--report-only", "--out", str(bare)])
    assert {f: (bare / f).read_bytes() for f in body} == body


def assert_json_close(a, b, where="report.json"):
    """Equal JSON, floats to 1e-9 relative: the law fits' last bits differ between CPUs (the
    same scipy fit on an Intel and an AMD core), nothing else may."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
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


@pytest.mark.parametrize("folder,runs_trained,commit", [("data_constrained", 137, "70134ab"),
                                                         ("data_constrained-earlier", 135, "51f75e6")])
def test_committed_report_rebuilds_byte_identical(tmp_path, folder, runs_trained, commit):
    """experiments/results/data_constrained (the default, --preset authors) and -earlier (--preset
    earlier) have no run folders: --report-only rebuilds report.md and runs.csv from report.json
    alone, byte for byte, and report.json with the same keys, values and text (floats to 1e-9
    relative: assert_json_close)."""
    import shutil
    from pathlib import Path
    src = Path(__file__).resolve().parents[1] / "experiments" / "results" / folder
    out = tmp_path / folder
    shutil.copytree(src, out)
    dc.main(["--report-only", "--out", str(out)])
    for f in ("report.md", "runs.csv"):
        assert (out / f).read_bytes() == (src / f).read_bytes(), f
    assert_json_close(json.loads((out / "report.json").read_text()), json.loads((src / "report.json").read_text()))
    prov = json.loads((out / "report.json").read_text())["provenance"]
    assert prov["runs_trained"] == runs_trained and prov["commit"].startswith(commit)


def test_committed_report_is_the_authors_baseline_in_the_fan_out_regime():
    """The default's committed report (--preset authors): their baseline (dropout 0.1, an untied
    head); the decay sweep with >= 2 seeds per (size, decay); every AR run >= 0.3 nats below the
    unigram loss, every MDLM bound below it; the fan-out with its uncertainty; MIR's gain against
    log10 N with its slope test, recomputed from the runs with scipy."""
    import math
    from pathlib import Path
    from scipy import stats
    rep = json.loads((Path(__file__).resolve().parents[1] / "experiments" / "results" / "data_constrained"
                      / "report.json").read_text())
    st = rep["settings"]
    assert st["preset"] == "authors" and st["dropout"] == 0.1 and st["tie"] is False
    assert st["dropout_at"] == "attn-out"  # their placement (dcp/model.py:149)
    seeds = {}
    for r in rep["sweep"]:
        seeds.setdefault((r["size"], r["wd"]), set()).add(r["seed"])
    assert seeds and all(len(v) >= 2 for v in seeds.values())
    runs = [r for r in rep["runs"] if r["status"] == "done"]
    ar = [r for r in runs if r["method"] in ("wd", "wd+mir")]
    mdlm = [r for r in runs if r["method"].startswith("mdlm")]
    assert ar and mdlm and len(runs) == len(rep["runs"])
    assert all(r["loss"] <= math.log(r["unigram_val_ppl"]) - 0.3 for r in ar), \
        max(r["loss"] - math.log(r["unigram_val_ppl"]) for r in ar)
    assert all(r["loss"] < math.log(r["unigram_val_ppl"]) for r in mdlm)
    f = rep["fan_out"]
    assert {"slope", "stderr", "p", "ci95"} <= set(f) and f["ci95"][0] <= f["slope"] <= f["ci95"][1]
    x = [math.log10(g["N"]) for g in rep["mir_gain"] for _ in g["gains"]]
    y = [v for g in rep["mir_gain"] for v in g["gains"]]
    fit = stats.linregress(x, y)
    slope = rep["mir_gain_summary"]["slope"]
    assert slope["slope"] == pytest.approx(fit.slope, rel=1e-9) and slope["p"] == pytest.approx(fit.pvalue, rel=1e-9)
    for g in rep["mir_gain"]:  # every gain pairs a wd run with a wd+mir run of its (size, U, seed)
        wd = {r["seed"]: r["loss"] for r in runs if r["method"] == "wd" and r["size"] == g["size"] and r["U"] == g["U"]}
        mir = {r["seed"]: r["loss"] for r in runs if r["method"] == "wd+mir" and r["size"] == g["size"] and r["U"] == g["U"]}
        assert sorted(g["gains"]) == pytest.approx(sorted(wd[s] - mir[s] for s in mir if s in wd), abs=1e-9)
        assert {r["N"] for r in runs if r["method"] == "wd" and r["size"] == g["size"]} == {g["N"]}  # the baseline's N
    rows = rep["front_table"]["lines"][2:]  # the README's table: one row per claim, its verdict
    assert [(r.split(" | ")[0][2:], r.split(" | ")[-1]) for r in rows] == \
        [(v["claim"], f"**{v['verdict']}** |") for v in rep["verdicts"]]


# ---------------------------------------------------------------------------------------------
# the authors' preset (the default): their baseline, the scan, the sweep by the mean, the fan-out

def test_authors_preset_is_the_default_with_their_baseline():
    """dropout 0.1 and an untied head in every run's train.py flags; the sweep has 2 seeds."""
    a = dc.parse_args(["--no-scan"])
    assert a.preset == "authors" and a.dropout == 0.1 and a.tie is False and a.sweep_seeds == 2
    run = dc.make_run(a, "ar", a.sizes[0], a.budgets[0], 1.6, 3e-3, 0)
    assert run.argv[run.argv.index("--dropout") + 1] == "0.1" and "--no-tie" in run.argv
    assert run.argv[run.argv.index("--dropout-at") + 1] == "attn-out"  # their placement (dcp/model.py:149)
    assert run.name.endswith("-do0.1-attnout-untied")
    seeds = {}
    for r in dc.sweep_runs(a):
        seeds.setdefault((r.meta["size"], r.meta["wd"]), set()).add(r.meta["seed"])
    assert all(v == {0, 1} for v in seeds.values()) and {w for _, w in seeds} == {0.1, 0.4, 0.8, 1.6, 3.2}
    e = dc.parse_args(["--preset", "earlier"])  # the earlier default: its run names and flags as they were
    r = dc.make_run(e, "ar", e.sizes[0], 8000, 0.4, 3e-3, 0)
    assert r.name == "ar-L2d32-U8000-wd0.4-lr0.003-s0" and "--dropout" not in r.argv and "--no-tie" not in r.argv


def test_untied_head_is_weight_decayed():
    """model.configure_optimizers: an untied lm_head.weight is in the decayed group; a tied one is
    the embedding, never decayed."""
    import torch
    from model import GPT, GPTConfig
    for tie in (False, True):
        m = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16, tie_weights=tie))
        decay, no_decay = m.configure_optimizers(0.5, 1e-3, (0.9, 0.95), "cpu").param_groups
        ids = lambda g: {id(p) for p in g["params"]}  # noqa: E731
        assert decay["weight_decay"] == 0.5 and no_decay["weight_decay"] == 0.0
        assert (id(m.lm_head.weight) in ids(decay)) == (not tie)
        assert id(m.transformer.wte.weight) in ids(no_decay)
    assert isinstance(m.lm_head.weight, torch.nn.Parameter)


def test_pick_strong_by_the_mean_over_seeds(tmp_path):
    """The chosen decay has the lowest mean, not the best single seed."""
    import json as _json
    a = dc.parse_args(["--no-scan", "--sizes", "L1d16,L2d16", "--decays", "0.1,1.6", "--out", str(tmp_path)])
    losses = {(0.1, 0): 2.0, (0.1, 1): 2.6, (1.6, 0): 2.2, (1.6, 1): 2.3}  # best seed 0.1, best mean 1.6
    sweep = dc.sweep_runs(a)
    for r in sweep:
        r.folder.mkdir(parents=True)
        (r.folder / "val_eval.json").write_text(_json.dumps({"loss": losses[(r.meta["wd"], r.meta["seed"])]}))
    import experiments.data_constrained as mod
    old = mod.evaluate_run
    mod.evaluate_run = lambda f: _json.loads((f / "val_eval.json").read_text())
    try:
        assert dc.pick_strong(a, sweep) == {"L1d16": (1.6, 3e-3), "L2d16": (1.6, 3e-3)}
    finally:
        mod.evaluate_run = old


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


def test_fan_out_uncertainty_against_a_known_answer():
    """gap = 0.2 log10 N + noise: the slope, its standard error (the textbook
    sqrt(SSE / (n - 2) / Sxx)) and a bootstrap interval around it; noise-free, the interval is the slope."""
    from experiments.lib.data_constrained_authors import fan_out_summary
    rng = np.random.default_rng(1)
    runs, truth = [], {}
    for n in (1e4, 3e4, 1e5, 3e5, 1e6):
        for seed in (0, 1):
            gap = 0.2 * np.log10(n) + rng.normal(0, 0.02)
            truth[(n, seed)] = gap
            runs += [dict(method="wd", N=n, U=1000, seed=seed, loss=3.0 + gap), dict(method="wd", N=n, U=8000, seed=seed, loss=3.0)]
    f = fan_out_summary(runs)
    x = np.array([np.log10(n) for n, _ in sorted(truth)])
    y = np.array([truth[k] for k in sorted(truth)])
    b = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    sse = ((y - y.mean() - b * (x - x.mean())) ** 2).sum()
    assert f["slope"] == pytest.approx(b) and f["stderr"] == pytest.approx(np.sqrt(sse / 8 / ((x - x.mean()) ** 2).sum()))
    lo, hi = f["ci95"]
    assert lo < b < hi and hi - lo < 6 * f["stderr"] and f["clear"] and f["n"] == 10
    exact = fan_out_summary([dict(r, loss=3.0 + 0.2 * np.log10(r["N"]) if r["U"] == 1000 else 3.0) for r in runs])
    assert exact["ci95"] == pytest.approx([0.2, 0.2])


def test_authors_preset_end_to_end(tmp_path):
    """The default preset at a tiny size: the scan (fallback), the sweep with 2 seeds, the report's
    settings, fan_out with its interval, the MDLM arms; --report-only from report.json alone rebuilds it."""
    import os
    import shutil
    old = os.environ.get("PRELUDE_CACHE")
    os.environ["PRELUDE_CACHE"] = str(tmp_path / "cache")
    try:
        out = tmp_path / "out"  # music as the default, generated (no files): its U as whole chunks
        dc.main(["--stage", "music-synthetic", "--scan-sizes", "L1d8,L1d16", "--scan-budgets", "256,512",
                 "--scan-epochs", "1", "--max-budget", "1024", "--decays", "0.1,1.0", "--block-size", "16",
                 "--batch-size", "4", "--mdlm-epochs", "1", "--mdlm-budgets", "1", "--laws", "chinchilla",
                 "--scan-fallback", "--jobs", "1", "--threads", "1", "--out", str(out)])
        rep = json.loads((out / "report.json").read_text())
        st = rep["settings"]
        assert st["preset"] == "authors" and st["dropout"] == 0.1 and st["tie"] is False
        assert st["dropout_at"] == "attn-out"
        sw = {}
        for r in rep["sweep"]:
            sw.setdefault((r["size"], r["wd"]), []).append(r["seed"])
        assert sw and all(sorted(v) == [0, 1] for v in sw.values())
        for size, s in rep["sweep_summary"].items():  # chosen by the mean
            best = min((r for r in s["rows"] if r["n"]), key=lambda r: r["mean"])
            assert rep["strong"][size]["wd"] == best["wd"] == s["chosen"]["wd"]
        assert rep["scan"]["fallback"] and rep["scan"]["budgets"][0] in (256, 512)
        assert {"slope", "stderr", "p", "ci95", "by_method"} <= set(rep["fan_out"])
        assert {r["method"] for r in rep["runs"]} == {"wd", "wd+mir", "mdlm-tuned", "mdlm-strong"}
        assert all(r["wd"] == 3.2 for r in rep["runs"] if r["method"] == "mdlm-strong")
        assert "regime_check" in rep and "## 0. The scan" in (out / "report.md").read_text()
        # MIR's and MDLM's untied heads have a [MASK] row (N is d larger): cells still pair by size
        assert rep["multipliers"]["chinchilla"]["test"]["n"] == len(rep["multipliers"]["chinchilla"]["wd+mir"]["cells"])
        assert rep["ar_vs_mdlm"] and all(r["gap_tuned"] is not None and r["gap_strong"] is not None
                                         for r in rep["ar_vs_mdlm"])
        body = {f: (out / f).read_bytes() for f in ("report.md", "report.json")}
        bare = tmp_path / "bare"
        shutil.copytree(out, bare, ignore=shutil.ignore_patterns("runs", "provenance.json"))
        dc.main(["--report-only", "--out", str(bare)])
        assert {f: (bare / f).read_bytes() for f in body} == body
    finally:
        if old is None:
            os.environ.pop("PRELUDE_CACHE", None)
        else:
            os.environ["PRELUDE_CACHE"] = old
