"""experiments/ladder.py: the plan, a tiny version of the sweep end to end (synthetic music, two small text
folders for poetry and prose, width 8) whose report follows from its runs, resume, the checks, and the
committed reports rebuilt from their report.json byte for byte."""
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from scipy import stats

import train
from conftest import write_paragraphs
from experiments import ladder
from experiments.lib import ladder_claims, ladder_headline_claims, ladder_report, ladder_scarcity_claims
from experiments.lib.claims import VERDICTS, fmt_p, read_all

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
RUN_KEYS = {"condition": str, "width": int, "seed": int, "ppl_first_epoch": float, "ppl_final": float,
            "ppl_best": float, "stopped_early": bool, "steps": int, "tokens": int, "seconds": float}
# every contribution's conditions at d16 with >= 3 seeds, the long pair at d64
MUST_HOLD_D16 = ("random", "music", "ladder", "synthetic", "compute-matched", "volume-small", "volume-large-synthetic",
                 "ablation-attn", "ablation-mlp", "ablation-norm", "ablation-embed")


def tiny_argv(tmp_path, text_dir, out, *extra):
    prose = write_paragraphs(tmp_path / "prose", seed=1)
    return ["--out", str(out), "--jobs", "1", "--threads", "1", "--widths", "8", "--seeds", "2",
            "--n-layer", "1", "--n-head", "2", "--batch-size", "2", "--block-size", "16", "--lr", "0.01",
            "--warmup-iters", "2", "--prose-tokens", "256", "--prose-epochs", "2", "--music-steps", "6",
            "--poetry-steps", "4", "--music-chunks", "40", "--eval-iters", "2", "--pre-eval-iters", "1",
            "--long-width", "8", "--long-epochs", "4", "--patience", "1", "--capacity-widths", "",
            "--music-stage", "music-synthetic", "--synthetic-tokens", "20000", "--headline-seeds", "0",
            "--poetry-stage", f"text:{text_dir}", "--prose-stage", f"text:{prose}", *extra]


def test_plan_shares_runs_and_every_argv_parses(tmp_path, text_dir, cache):
    a = ladder.parse_args(tiny_argv(tmp_path, text_dir, tmp_path / "out", "--conditions", "all"))
    runs = ladder.plan(a)
    for r in runs.values():  # every run's flags are valid train.py flags; deps come in an earlier wave
        args = train.parse_args(r.argv + ["--out", str(r.folder)])
        assert args.n_embd == 8 and args.data_seed == 0
        assert all(runs[d].meta["wave"] < r.meta["wave"] for d in r.meta["deps"])
        if r.meta["deps"]:
            assert args.init_from == str(ladder.checkpoint_of(a, runs[r.meta["deps"][0]]))
    # one music run (3N chunks) serves music, volume-large, the ablations and the ladder's poetry stage
    assert ladder.chain(a, "music", 8, 0)[-1].name == ladder.chain(a, "volume-large", 8, 0)[-1].name
    assert ladder.chain(a, "ablation-attn", 8, 0)[0].name == ladder.chain(a, "ladder", 8, 0)[0].name == "pre-musicL-d8-s0"
    assert [r.name for r in ladder.chain(a, "synthetic", 8, 1)] == ["pre-synthL-d8-s1", "pre-synth-ladder-d8-s1",
                                                                     "prose-synth-ladder-d8-s1"]
    flags = lambda c: train.parse_args(ladder.chain(a, c, 8, 0)[-1].argv)
    assert flags("ablation-embed").transfer == "attn,mlp,norm,pos" and flags("ablation-mlp").transfer == "mlp"
    assert flags("music").transfer is None  # train.py's default across tokenizers: attn,mlp,norm
    spe = 256 // (2 * 16)
    assert flags("random").iters == 2 * spe and flags("random").eval_interval == spe
    assert flags("random").unique_tokens == 256
    assert flags("compute-matched").iters == 6 + 4 + 2 * spe == ladder.ladder_steps(a)
    assert flags("long-ladder").patience == 1 and flags("long-ladder").iters == 4 * spe
    m = [train.parse_args(r.argv).music_chunks for r in runs.values() if r.name.startswith("pre-music")]
    assert sorted(set(m)) == [40, 120]
    # --headline-seeds: more seeds for random, music and ladder only
    h = ladder.parse_args(tiny_argv(tmp_path, text_dir, tmp_path / "out", "--conditions", "all", "--headline-seeds", "3"))
    n = lambda c: len([s for cc, w, s in ladder.cells(h) if cc == c])
    assert [n(c) for c in ("random", "music", "ladder", "synthetic", "long-ladder")] == [3, 3, 3, 2, 2]


def scipy_cells(claim, records):
    """[(p, n)] of a claim's cells by scipy: paired by seed over the seeds both arms have, width by width, on the
    perplexities' logs (the loss difference)."""
    out = []
    for t in (claim.treat if isinstance(claim.treat, list) else [claim.treat]):
        for w in sorted({r["width"] for r in records if r["condition"] == t["condition"]}):
            x, y = ({r["seed"]: r[claim.metric] for r in records if r["condition"] == c and r["width"] == w}
                    for c in (t["condition"], claim.base["condition"]))
            seeds = sorted(x.keys() & y.keys())
            if (claim.only is None or w in claim.only) and len(seeds) >= 2:
                out.append((stats.ttest_rel([math.log(x[s]) for s in seeds], [math.log(y[s]) for s in seeds]).pvalue,
                            len(seeds)))
    return out


def test_tiny_sweep_report_follows_from_runs(tmp_path, text_dir, cache, capsys, monkeypatch):
    out = tmp_path / "out"
    argv = tiny_argv(tmp_path, text_dir, out, "--conditions", "music,ladder,compute-matched,ablation-embed,long-ladder")
    ladder.main(argv)
    rep = json.loads((out / "report.json").read_text())
    assert set(rep) == {"source", "regime", "figures", "verdicts", "provenance", "prose_unigram_ppl", "checks",
                        "front_table", "settings", "facts", "pretrain_share", "runs", "missing"}
    steps = rep["facts"]["spe"] * 2   # pre-training steps / prose steps (the same tokens a step in every stage)
    assert rep["pretrain_share"]["ours"] == pytest.approx((6 + 4) / steps) and "few percent" in rep["pretrain_share"]["paper"]
    assert len(rep["front_table"]["lines"]) == 2 + 6 and all(ln.endswith("** |") for ln in rep["front_table"]["lines"][2:])
    assert rep["figures"][-1] == "music.png" and (out / "music.png").stat().st_size > 0
    import mido  # the two pieces of music.png, to listen to: playable MIDI with notes, named in the report
    for name in ("music-real.mid", "music-sampled.mid"):
        notes = [m for t in mido.MidiFile(out / name).tracks for m in t if m.type == "note_on" and m.velocity > 0]
        assert notes and f"`{name}`" in (out / "report.md").read_text()
    assert rep["facts"]["music_train_chunks"] >= 120
    assert rep["provenance"]["runs_trained"] == len(ladder.plan(ladder.parse_args(argv)))
    assert rep["prose_unigram_ppl"] > 1 and rep["missing"] == [] and len(rep["checks"]) == 4
    pre = rep["facts"]["pretrain"]  # what each pre-training run learnt, from its own summary
    assert sorted(pre) == ["ladder-d8", "musicL-d8"] and pre["ladder-d8"]["stage"] == "poetry"
    for key, p in pre.items():
        stages = [json.loads((out / "runs" / f"pre-{key}-s{s}" / "summary.json").read_text())["stages"][0]
                  for s in (0, 1)]
        assert sorted(p["val_ppl"]) == sorted(t["val_ppl"] for t in stages)
        assert p["unigram_ppl"] == stages[0]["unigram_val_ppl"]
    assert rep["checks"][3]["holds"] == all(statistics.mean(p["val_ppl"]) < p["unigram_ppl"] for p in pre.values())
    curves = json.loads((out / "details.json").read_text())["runs"]
    for r in rep["runs"]:
        long = r["condition"].startswith("long-")
        assert set(r) == set(RUN_KEYS) | ({"last_epoch_change", "stop_reason"} if long else set())
        assert all(isinstance(r[k], t) for k, t in RUN_KEYS.items()), r
        if long:  # the last epoch's change of perplexity, from the run's own curve
            (_, before), (_, last) = curves[f"{r['condition']}/d{r['width']}/s{r['seed']}"]["curve"][-2:]
            assert r["last_epoch_change"] == pytest.approx(last / before - 1)
            det = curves[f"{r['condition']}/d{r['width']}/s{r['seed']}"]
            assert r["stop_reason"] == (f"stopping rule, after epoch {det['prose_steps'] / det['steps_per_epoch']:g}"
                                        if r["stopped_early"] else "cap: 4 epochs")
        assert math.isfinite(r["ppl_first_epoch"]) and math.isfinite(r["ppl_final"])
    conds = {r["condition"] for r in rep["runs"]}
    assert conds == {"random", "music", "ladder", "compute-matched", "ablation-embed", "long-random", "long-ladder"}
    assert len(rep["runs"]) == 2 * len(conds)
    by = lambda c, m: [r[m] for r in rep["runs"] if r["condition"] == c]
    # every claim's p by scipy from the records (paired by seed); n = 2 is never an effect
    for claim, v in zip(ladder_claims.CLAIMS, rep["verdicts"]):
        assert v["claim"] == claim.claim and v["verdict"] in VERDICTS
        expect = scipy_cells(claim, rep["runs"])
        assert [(c["p"], c["n"]) for c in v["cells"]] == [(pytest.approx(p, rel=1e-9), n) for p, n in expect]
        capped = claim.extra.get("fails") == "plateau"  # the tiny long pair runs to its epoch cap: its check fails
        assert v["verdict"] == ("check failed" if expect and capped else "no clear difference" if expect else
                                "not measured")
    music = rep["verdicts"][1]["cells"][0]  # the change: the mean log ratio, as a percentage
    assert music["change"] == pytest.approx(100 * (math.exp(statistics.mean(
        math.log(m / r) for m, r in zip(by("music", "ppl_final"), by("random", "ppl_final")))) - 1))
    # compute-matched trains prose for as many optimizer steps as the whole ladder took, seed by seed
    assert by("compute-matched", "steps") == by("ladder", "steps") == [6 + 4 + 16] * 2
    assert by("random", "steps") == [16, 16] and by("music", "steps") == [22, 22]
    # the first-epoch perplexity is the evaluation after exactly one prose epoch
    events = [json.loads(line) for line in open(out / "runs" / "prose-random-d8-s0" / "metrics.jsonl")]
    first = [e["val_loss"] for e in events if e.get("event") == "eval" and e["iter"] == 8]
    assert by("random", "ppl_first_epoch")[0] == pytest.approx(math.exp(first[0]))
    for f in ("report.md", "curves.png", "width.png", "ablation.png"):
        assert (out / f).stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "| ladder | 8 | 2 |" in md and "cores, torch" in md and "Provenance: commit" in md and "n = 2" in md
    # rerunning skips every finished run; --report-only trains nothing and rebuilds the same report
    stamp = (out / "runs" / "prose-ladder-d8-s1" / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    ladder.main(argv)
    assert "already finished (skipped)" in capsys.readouterr().out
    ladder.main(argv + ["--report-only"])
    assert (out / "runs" / "prose-ladder-d8-s1" / "summary.json").stat().st_mtime_ns == stamp
    again = json.loads((out / "report.json").read_text())
    assert again["verdicts"] == rep["verdicts"] and again["provenance"] == rep["provenance"]
    # a copy without the run folders rebuilds the same report from report.json (and details.json's curves)
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("report.md", "report.json", "details.json", "music.png", "music-real.mid", "music-sampled.mid"):
        (copy / f).write_bytes((out / f).read_bytes())
    ladder.main(["--report-only", "--out", str(copy)])
    for f in ("report.md", "report.json", "details.json"):
        assert (copy / f).read_bytes() == (out / f).read_bytes(), f
    assert (copy / "curves.png").stat().st_size > 0
    # --reuse: a report lacking one result trains that result's prose run alone (its pre-training is cheap and
    # is trained again, for the report's facts), and the new report holds the same records
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "details.json").write_bytes((out / "details.json").read_bytes())
    drop = ("long-ladder", 8, 1)
    (kept / "report.json").write_text(json.dumps(dict(rep, runs=[r for r in rep["runs"] if (
        r["condition"], r["width"], r["seed"]) != drop])))
    real, trained = train.run, []
    monkeypatch.setattr(train, "run", lambda args: trained.append(Path(args.out).name) or real(args))
    new = argv + ["--out", str(tmp_path / "new"), "--reuse", str(kept)]
    ladder.main(new)
    assert [n for n in trained if n.startswith("prose-")] == ["prose-long-ladder-d8-s1"]
    assert sorted(n for n in trained if n.startswith("pre-")) == sorted(p for p in ladder.plan(ladder.parse_args(argv))
                                                                        if p.startswith("pre-"))
    again = json.loads((tmp_path / "new" / "report.json").read_text())
    strip = lambda rs: sorted((dict(r, seconds=0) for r in rs), key=json.dumps)  # noqa: E731
    assert strip(again["runs"]) == strip(rep["runs"]) and again["facts"]["reused"] == [len(rep["runs"]) - 1, str(kept)]
    from data.common import UserError
    with pytest.raises(UserError, match=r"other settings \(1: prose_epochs 2 there, 3 here\); give the same flags"):
        ladder.main(argv + ["--out", str(tmp_path / "other"), "--reuse", str(kept), "--prose-epochs", "3"])
    with pytest.raises(SystemExit):  # the headline preset has no results DIR to take from: said, not ignored
        ladder.parse_args(["--preset", "headline", "--reuse", str(kept), "--out", str(tmp_path / "h")])


def test_plan_and_presets_train_nothing(tmp_path, capsys):
    ladder.main(["--preset", "paper", "--plan", "--out", str(tmp_path / "p")])
    text = capsys.readouterr().out
    assert "wikitext103" in text and "310 runs" in text and "estimated wall time" in text
    assert not (tmp_path / "p").exists()
    a = ladder.parse_args(["--preset", "paper", "--plan"])
    assert (a.prose, a.music_dir, a.music_chunks, a.seeds, a.widths) == ("wikitext103", "maestro", 12000, 5, [16, 32, 64])
    d = ladder.parse_args(["--preset", "subset"])  # as the committed ladder-subset report was made
    assert d.conditions == ["random", "music", "ladder", "compute-matched"] and d.widths == [16, 32, 64]
    assert (d.prose_tokens, d.prose_epochs, d.batch_size, d.music_steps, d.poetry_steps, d.music_chunks) == \
        (65536, 5, 8, 400, 200, 1340) and d.capacity_widths == [] and len(ladder.plan(d)) == 54
    assert len(ladder.parse_args(["--preset", "full"]).conditions) == len(ladder.CONDITIONS)
    assert ladder.parse_args(["--conditions", "long-ladder"]).conditions == ["long-random", "long-ladder"]


def test_more_seeds_adds_seeds_to_some_cells_and_reuse_takes_the_committed_rest(capsys):
    """--more-seeds COND[@WIDTH]=N: those cells get seeds 0..N-1, every other cell keeps --seeds (--headline-seeds);
    --reuse of the committed default report (made before --long-schedule and --min-delta existed, at their defaults)
    trains only the new cells' prose runs; a spec naming no condition of the run is a usage error."""
    more = "random@16=10,volume-small@64=5,ablation-norm=4"  # the committed report has 8, 3 and 3 seeds there
    a = ladder.parse_args(["--reuse", str(RESULTS / "ladder"), "--more-seeds", more])
    n = lambda c, w: len({s for c2, w2, s in ladder.cells(a) if (c2, w2) == (c, w)})  # noqa: E731
    assert (n("random", 16), n("volume-small", 64), n("ablation-norm", 16)) == (10, 5, 4)
    assert (n("volume-small", 16), n("volume-large", 64), n("ladder", 16), n("ablation-mlp", 16)) == (3, 3, 5, 3)
    new = {c for c in ladder.cells(a) if c not in a._reused}
    assert len(new) == 2 + 2 + 1 and {n.split("-s")[-1] for n in ladder.plan(a) if n.startswith("prose-")} == {
        "8", "9", "3", "4"}
    for bad in ("nonsense=8", "ablation-attn", "ablation-attn@x=8"):
        with pytest.raises(SystemExit):
            ladder.parse_args(["--more-seeds", bad])
        assert "--more-seeds" in capsys.readouterr().err


def test_user_errors_are_one_line(tmp_path, text_dir, cache, capsys):
    with pytest.raises(SystemExit) as e:
        ladder.parse_args(["--conditions", "ladder,nonsense"])
    assert e.value.code == 2
    capsys.readouterr()
    argv = tiny_argv(tmp_path, text_dir, tmp_path / "o", "--conditions", "music", "--music-chunks", "100000")
    with pytest.raises(SystemExit) as e:
        from experiments.lib.common import main_guard
        main_guard(lambda: ladder.main(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: stage 'music-synthetic' has") and err.count("\n") == 1
    assert not (tmp_path / "o" / "runs").exists()


def test_default_plan_has_every_contribution_with_three_seeds_five_for_the_headline(capsys, tmp_path):
    a = ladder.parse_args(["--plan", "--out", str(tmp_path / "none")])  # no finished runs: the whole estimate
    assert a.preset == "contributions" and a.prose_tokens >= 990_088 // 2  # a large share of wiki-leads
    seeds = {}
    for c, w, s in ladder.cells(a):
        seeds.setdefault((c, w), set()).add(s)
    for c in MUST_HOLD_D16:
        assert len(seeds[(c, 16)]) >= 3, c
    for c in ("random", "music", "ladder"):  # the headline rows: 5 seeds
        assert len(seeds[(c, 16)]) == 5, c
    for c in ("long-random", "long-ladder"):
        assert len(seeds[(c, 64)]) >= 3 and (c, 16) not in seeds
    for w in (16, 32, 64):  # the capacity contribution: N vs 3N at every width
        assert len(seeds[("volume-small", w)]) >= 3 and len(seeds[("volume-large", w)]) >= 3
    assert ("random", 32) not in seeds  # nothing else is run wider
    assert 3 * a.music_chunks <= 4038 and a.music_chunks > 4038 // 3 - 3  # 3N = the whole music21 corpus
    runs = ladder.plan(a)
    spe, _ = ladder.steps_per_epoch(a)
    assert ladder.ladder_steps(a) < 6 * spe  # the compute-matched control repeats the prose fewer than 6 times
    assert 60 < ladder.print_plan(a, runs) / 60 < 270  # a few hours on 2 cores
    assert "estimated wall time" in capsys.readouterr().out


def test_checks_notes_and_front_table():
    rec = lambda c, s, first, final, best, w=16: {"condition": c, "width": w, "seed": s, "ppl_first_epoch": first,
                                                  "ppl_final": final, "ppl_best": best, "stopped_early": s > 0}
    records = [rec("random", s, 900 + s, 700 + 3 * s, 700) for s in range(3)]
    records += [rec("music", s, 800 - s, 600 + s, 600) for s in range(3)]
    records += [rec("compute-matched", s, 900, 650 * (1.06 if s == 2 else 1.0), 650) for s in range(3)]
    records += [dict(rec(c, s, 1, 2 + (s if c == "long-random" else 0), 2, 64), last_epoch_change=-0.01 * (s + 1))
                for c in ("long-random", "long-ladder") for s in range(3)]
    (un, of, pl), notes = ladder_report.checks(records, unigram=2000.0)
    assert un["holds"] is True and of["holds"] is False and "6.0%" in of["detail"] and pl["holds"] is False
    assert pl["detail"].startswith("4 of 6 runs stopped early") and pl["detail"].endswith(
        "-1.0% on average, -1.0% to -1.0%)")  # the capped runs: seed 0 of each, last epoch -1%
    assert not notes["unigram"] and notes["plateau"].startswith("2 of 6 runs ran to the epoch cap")
    facts = {"pretrain": {"musicL-d16": dict(stage="music", steps=60, unigram_ppl=45.5, val_ppl=[30.0, 32.0]),
                          "ladder-d16": dict(stage="poetry", steps=60, unigram_ppl=900.0, val_ppl=[950.0, 1000.0])}}
    pre = ladder_report.checks(records, 2000.0, facts)[0][3]  # poetry's run ends above its unigram: it fails
    assert pre["holds"] is False and pre["detail"] == ("musicL-d16 (music, 60 steps): 31.0 ± 1.4 vs unigram 45.5; "
                                                       "ladder-d16 (poetry, 60 steps): 975.0 ± 35.4 vs unigram 900.0")
    facts["pretrain"]["ladder-d16"]["val_ppl"] = [850.0]
    assert ladder_report.checks(records, 2000.0, facts)[0][3]["holds"] is True
    (un, _, _), notes = ladder_report.checks(records, unigram=850.0)
    assert un["holds"] is False and notes["unigram"].endswith("at d16 901.0: part of a gain there is a head start")
    entries = read_all(ladder_claims.CLAIMS, records, notes={c.claim: notes.get(c.extra.get("check"))
                                                             for c in ladder_claims.CLAIMS},
                       failed=lambda claim, treat, cell: notes.get(claim.extra.get("fails")) or "")
    assert entries[0]["ours"].endswith(notes["unigram"]) and entries[5]["verdict"] == "check failed"
    assert entries[5]["cells"][0]["check_failed"] == notes["plateau"] and entries[5]["cells"][0]["word"] is None
    assert entries[5]["against"] == "check failed: " + notes["plateau"]
    logs = lambda xs: [math.log(x) for x in xs]  # noqa: E731
    p = stats.ttest_rel(logs([600, 601, 602]), logs([700, 703, 706])).pvalue  # a perplexity: on its log
    change = 100 * (math.exp(statistics.mean(math.log(a / b) for a, b in zip([600, 601, 602], [700, 703, 706]))) - 1)
    front = ladder_report.front_table(entries)["lines"]
    assert f"(b) music vs random d16 {change:+.1f}% (paired {fmt_p(p)}, n = 3)" in front[2]
    assert front[2].startswith("| 1 | music before prose") and front[2].endswith("| **reproduces** |")
    assert "| (a) not in this run (b) not in this run (c) not in this run |" in front[4]
    assert front[7].endswith("| **check failed** |")  # the long pair (2, 2, 2 vs 2, 3, 4) ran to its cap
    rows = ladder_report.front_table(entries, "proportions")  # the contributions its conditions read
    assert rows["title"].startswith("The ladder paper's contributions 1, 3, 6 beside its numbers, with pre-training")
    rows = rows["lines"]
    assert [ln.split(" | ")[0] for ln in rows[2:]] == ["| 1", "| 3", "| 6"] and rows[2:] == [front[i] for i in (2, 4, 7)]


def test_curves_draw_volume_large_where_music_has_no_runs():
    conds = ["random", "music", "volume-small", "volume-large", "long-random"]
    details = {f"{c}/d{w}/s0": {} for c, w in [("random", 16), ("music", 16), ("volume-large", 16),
                                                 ("volume-small", 16), ("volume-small", 32), ("volume-large", 32),
                                                 ("long-random", 64)]}
    assert ladder_report.curve_conditions(conds, details, 16) == ["random", "music", "volume-small"]
    assert ladder_report.curve_conditions(conds, details, 32) == ["volume-small", "volume-large"]
    assert ladder_report.curve_conditions(conds, details, 64) == ["long-random"]


@pytest.mark.parametrize("name", ["ladder", "ladder-subset", "ladder-headline", "ladder-proportions", "ladder-scarcity"])
def test_committed_report_rebuilds_byte_identical(name, tmp_path):
    """The committed report (the default's, the subset preset's archive, the headline, proportions and scarcity
    presets'), rebuilt from its report.json alone (no run folders), comes out byte for byte as committed; the
    default's has every contribution; the scarcity scan has its must-holds (#56)."""
    out = tmp_path / name
    shutil.copytree(RESULTS / name, out)
    ladder.main(["--report-only", "--out", str(out)])
    for f in ("report.md", "report.json", "details.json")[:2 if name in ("ladder-headline", "ladder-scarcity") else 3]:
        assert (out / f).read_bytes() == (RESULTS / name / f).read_bytes(), f
    rep = json.loads((out / "report.json").read_text())
    if name == "ladder-headline":  # the must-holds: n >= 3 an arm, the ladder clearly below prose alone,
        v = {e["claim"]: e for e in rep["verdicts"]}  # ProRes (fresh) not clearly worse than the plain ladder
        assert all(len([r for r in rep["runs"] if r["condition"] == c]) >= 3 for c in rep["settings"]["conditions"])
        assert v[ladder_headline_claims.CLAIMS[0].claim]["verdict"] == "reproduces"
        assert v[ladder_headline_claims.CLAIMS[3].claim]["verdict"] != "opposite"
        # the compute-matched and the plain prose-only arms at >= 5 seeds, read against the user's command (#56)
        n = lambda c: len({r["seed"] for r in rep["runs"] if r["condition"] == c})  # noqa: E731
        assert min(n("compute-matched"), n("prose-only"), n("prose-only+prores"), n("curriculum+prores")) >= 5
        assert v[ladder_headline_claims.CLAIMS[2].claim]["cells"][0]["n"] >= 5
        seed = {r["condition"]: r["ppl_final"] for r in rep["runs"] if r["seed"] == 1337}  # train.py's default seed
        assert seed["curriculum+prores"] < seed["prose-only"] and rep["settings"]["budget"]["iters"] == \
            train.parse_args([]).iters and rep["settings"]["budget"]["n_embd"] == train.parse_args([]).n_embd
    if name == "ladder-scarcity":  # >= 3 values of U, d16 and d64, 3 seeds a cell, every arm read at its end
        cells = {(r["condition"], r["width"], r["unique"]): set() for r in rep["runs"]}  # and at its best
        for r in rep["runs"]:
            cells[r["condition"], r["width"], r["unique"]].add(r["seed"])
        assert len({u for _, _, u in cells}) >= 3 and {w for _, w, _ in cells} == {16, 64}
        assert all(len(s) == 3 for s in cells.values()) and {c for c, _, _ in cells} == {
            "ladder", "random", "compute-matched"} and not rep["missing"]
        best = {e["claim"]: e for e in rep["verdicts"]}[ladder_scarcity_claims.CROSSOVER.claim]
        assert {tuple(c["cell"]) for c in best["cells"]} == {(w, u) for _, w, u in cells}
        for w in (16, 64):  # the crossover: the largest U at which the ladder is clearly below the control at its best
            won = [c["cell"][1] for c in best["cells"] if c["cell"][0] == w and c["verdict"] == "reproduces"]
            assert rep["crossover"][str(w)] == (max(won) if won else None)
        assert (RESULTS / name / "curves.png").exists()
    seeds = lambda c, w: {r["seed"] for r in rep["runs"] if r["condition"] == c and r["width"] == w}
    if name == "ladder":
        assert all(len(seeds(c, 16)) >= 3 for c in MUST_HOLD_D16) and len(seeds("long-ladder", 64)) == 3
        # #58: 8 seeds where 80% power needed <= 15 pairs (volume d32, the ablations, real vs synthetic; their bases)
        assert all(len(seeds(c, w)) >= 8 for c, w in (("random", 16), ("volume-small", 16), ("volume-large-synthetic", 16),
                                                      ("volume-small", 32), ("volume-large", 32), ("ablation-attn", 16),
                                                      ("ablation-mlp", 16)))
        assert [ln.split(" | ")[0] for ln in rep["front_table"]["lines"][2:]] == [f"| {n}" for n in range(1, 7)]


def test_the_proportions_report_reads_the_end_after_five_epochs_and_the_plateau_by_its_rule():
    """experiments/results/ladder-proportions (--preset proportions): pre-training a small share of the prose
    tokens (pretrain_share beside the paper's), n >= 5 per headline condition at d16, every long-pair run stopped
    by its rule (stop_reason) and the report's check says so; RESULTS.md gives contributions 1, 3
    and 6 at these proportions beside the fixed-budget reading (every p: test_committed_reports)."""
    rep = json.loads((RESULTS / "ladder-proportions" / "report.json").read_text())
    assert 0.01 < rep["pretrain_share"]["ours"] < 0.2 and rep["pretrain_share"]["paper"]
    seeds = lambda c: {r["seed"] for r in rep["runs"] if r["condition"] == c and r["width"] == 16}  # noqa: E731
    assert all(len(seeds(c)) >= 5 for c in ("random", "music", "ladder", "compute-matched"))
    long = [r for r in rep["runs"] if r["condition"].startswith("long-")]
    assert len(long) >= 10 and all(r["stop_reason"].startswith("stopping rule") for r in long)
    assert next(c for c in rep["checks"] if "plateau" in c["check"])["holds"] is True
    rows = rep["front_table"]["lines"][2:]
    assert [ln.split(" | ")[0] for ln in rows] == ["| 1", "| 3", "| 6"]
    text = (ROOT / "RESULTS.md").read_text()  # (the README links it from its headline table)
    assert all(ln in text for ln in rows) and "experiments/results/ladder-proportions/report.md" in text
    assert "experiments/results/ladder-proportions/report.md" in (ROOT / "README.md").read_text()


def test_headline_preset_runs_train_py_as_typed_and_reports_from_the_runs(tmp_path):
    """--preset headline: each arm is train.py's command as a user types it (its defaults, seed 1337 + k: 5 seeds, 3
    for the two arms that only read ProRes' scope); the compute-matched arm is prose alone for the curriculum's
    steps; the report reads each run's last-stage perplexity, and rebuilds byte for byte from report.json alone."""
    out = tmp_path / "h"
    a = ladder.parse_args(["--preset", "headline", "--out", str(out)])
    runs = ladder.plan(a)
    assert len(runs) == 4 * 5 + 2 * 3 and list(a.conditions) == list(ladder.HEADLINE_ARMS)
    assert a.budget["iters"] == train.parse_args([]).iters
    matched = train.parse_args(runs["compute-matched-s0"].argv)
    assert matched.iters == 3 * a.budget["iters"] == runs["curriculum+prores-s0"].meta["steps"] and not matched.prores
    for r in runs.values():
        args = train.parse_args(r.argv)
        assert r.argv == ["--stages", *ladder.HEADLINE_ARMS[r.meta["condition"]].split(), "--seed", str(args.seed)]
        assert 1337 <= args.seed < 1337 + 5 and args.prores == ("prores" in r.meta["condition"])
        assert args.prores_scope == ("stage" if r.meta["condition"].endswith("stage") else "fresh")
    ppl = {"prose-only": (900, 911, 942, 905, 930), "prose-only+prores": (1100, 1130, 1190, 1120, 1150),
           "compute-matched": (600, 590, 640, 610, 620), "curriculum": (700, 705, 730),
           "curriculum+prores": (690, 700, 728, 712, 700), "curriculum+prores-stage": (800, 790, 850)}
    for r in runs.values():  # finished runs, made up: the report follows from their summaries
        r.folder.mkdir(parents=True)
        stages = [{"val_ppl": v} for v in (30.0, 500.0)[:r.argv[1].count(",")]]
        stages.append({"val_ppl": ppl[r.meta["condition"]][r.meta["seed"] - 1337]})
        (r.folder / "summary.json").write_text(json.dumps({"stages": stages, "seconds": 60.0 * len(stages)}))
    ladder.main(["--preset", "headline", "--out", str(out), "--report-only"])
    rep = json.loads((out / "report.json").read_text())
    assert [v["claim"] for v in rep["verdicts"]] == [c.claim for c in ladder_headline_claims.CLAIMS]
    x, y = [r["ppl_final"] for r in rep["runs"] if r["condition"] == "curriculum"], [
        r["ppl_final"] for r in rep["runs"] if r["condition"] == "prose-only" and r["seed"] < 1340]  # shared seeds
    logs = lambda xs: [math.log(v) for v in xs]  # noqa: E731  (a perplexity is tested on its log)
    assert rep["verdicts"][0]["cells"][0]["p"] == pytest.approx(stats.ttest_rel(logs(x), logs(y)).pvalue, rel=1e-9)
    assert [v["verdict"] for v in rep["verdicts"]] == ["reproduces", "reproduces", "opposite", "no clear difference",
                                                       "opposite", "reproduces"]
    lines = rep["front_table"]["lines"]
    assert lines[2] == "| prose-only | `prose` | 917.6 ± 17.8 | 900.0 / 911.0 / 942.0 / 905.0 / 930.0 | +0.0% | 1.0 |"
    assert lines[4] == ("| compute-matched | `prose --iters 1200` | 612.0 ± 19.2 | 600.0 / 590.0 / 640.0 / 610.0 / "
                        "620.0 | -33.3% | 1.0 |")
    assert lines[5] == "| curriculum | `music,poetry,prose` | 711.7 ± 16.1 | 700.0 / 705.0 / 730.0 | -22.4% | 3.0 |"
    assert "(curriculum 3, curriculum+prores-stage 3)" in rep["regime"]
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("report.md", "report.json"):
        (copy / f).write_bytes((out / f).read_bytes())
    ladder.main(["--report-only", "--out", str(copy)])
    for f in ("report.md", "report.json"):
        assert (copy / f).read_bytes() == (out / f).read_bytes(), f


def test_the_proportions_preset_pretrains_a_small_share_and_stops_the_long_pair_by_its_rule(tmp_path):
    """--preset proportions: all the prose for 5 epochs, music + poetry ~15% of the prose tokens (the paper: a few
    percent; the least at which both beat their unigram at d16), the compute-matched control as many more prose
    steps; the long pair with --min-delta."""
    a = ladder.parse_args(["--preset", "proportions", "--plan", "--out", str(tmp_path)])
    runs, spe = ladder.plan(a), ladder.steps_per_epoch(a)[0]
    assert a.prose_tokens == 0 and a.prose_epochs == 5 and a.seeds == 5 and a.widths == [16]
    assert 0.1 < (a.music_steps + a.poetry_steps) / (5 * spe) < 0.2 and a.music_steps * a.batch_size == 2 * 3 * a.music_chunks
    assert runs["prose-matched-d16-s0"].meta["steps"] == 5 * spe + a.music_steps + a.poetry_steps
    long = [r for r in runs.values() if r.name.startswith("prose-long")]
    assert len(long) == 10 and all(r.argv[r.argv.index("--min-delta") + 1] == "0.005" and
                                   r.argv[r.argv.index("--patience") + 1] == "2" for r in long)
    assert "--min-delta" not in runs["prose-random-d16-s0"].argv
    # a plateau the rule can see: the long pair at a constant lr (a cosine over the cap falls until the cap)
    assert all(r.argv[r.argv.index("--schedule") + 1] == "constant" for r in long)
    assert "--schedule" not in runs["prose-random-d16-s0"].argv and "--schedule" not in ladder.plan(
        ladder.parse_args(["--plan", "--out", str(tmp_path / "c")]))["prose-long-random-d64-s0"].argv
    cost = ladder.long_pair_cost(a)   # the d64 pair it does not run, by the same cost model as the plan
    d64 = ladder.parse_args(["--preset", "proportions", "--plan", "--long-width", "64", "--seeds", "3", "--out",
                             str(tmp_path / "d")])
    want = sum(r.meta["cpu_s"] for r in ladder.plan(d64).values() if "long" in r.name or r.name.startswith(
        ("pre-musicL", "pre-ladder")) and "d64" in r.name) / 3600
    assert ladder.long_pair_cost(d64) is None and cost["width"] == 64 and cost["cpu_hours"] == pytest.approx(want, abs=0.1)
    with pytest.raises(SystemExit):
        ladder.parse_args(["--long-schedule", "linear", "--out", str(tmp_path / "e")])


def test_the_scarcity_scan_reads_each_arm_at_its_end_and_best_and_states_the_crossover(tmp_path, text_dir, cache):
    """--preset scarcity: at each U the ladder's, prose alone's and the compute-matched control's prose runs (the
    control: as many steps as the whole ladder, --unique-tokens U repeated), one pre-training pair a width and seed
    for every U; records at the end and at the best evaluation; the report follows from them, rebuilds byte for
    byte from report.json, and --reuse takes its cells instead of training them."""
    from experiments.lib import ladder_scarcity
    argv = tiny_argv(tmp_path, text_dir, tmp_path / "s", "--preset", "scarcity", "--widths", "8", "--seeds", "3",
                     "--scan-tokens", "64,0", "--prose-steps", "6", "--eval-every", "2", "--eval-iters", "1")
    a = ladder.parse_args(argv)
    runs = ladder.plan(a)
    assert ladder_scarcity.scan(a) == [64, 0] and len(runs) == 3 * (2 + 2 * 3)  # 2 pre-training runs a seed
    for r in runs.values():
        args = train.parse_args(r.argv + ["--out", str(r.folder)])
        assert all(runs[d].meta["wave"] < r.meta["wave"] for d in r.meta["deps"])
        if r.name.startswith("prose-"):
            assert args.iters == 6 + (6 + 4) * (r.meta["condition"] == "compute-matched") and args.eval_interval == 2
            assert args.unique_tokens == (r.meta["unique"] or None) and bool(args.init_from) == (
                r.meta["condition"] == "ladder")
    ladder.main(argv)
    rep = json.loads((tmp_path / "s" / "report.json").read_text())
    recs = rep["runs"]
    assert len(recs) == 18 and not rep["missing"] and {r["unique"] for r in recs} >= {64}
    for r in recs:
        assert r["ppl_best"] == min(p for _, p in r["curve"]) <= r["ppl_final"] * (1 + 1e-9)
        assert r["ppl_final"] == pytest.approx(r["curve"][-1][1]) and r["steps"] == r["curve"][-1][0]
    cell = rep["verdicts"][2]["cells"][0]  # the ladder against the control at its best, d8 at U = 64
    x = [r["ppl_best"] for r in sorted(recs, key=lambda r: r["seed"]) if (r["condition"], r["unique"]) == ("ladder", 64)]
    y = [r["ppl_best"] for r in sorted(recs, key=lambda r: r["seed"])
         if (r["condition"], r["unique"]) == ("compute-matched", 64)]
    x, y = ([math.log(v) for v in xs] for xs in (x, y))  # a perplexity is tested on its log
    assert cell["cell"] == [8, 64] and cell["p"] == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-9)
    want = max((c["cell"][1] for c in rep["verdicts"][2]["cells"] if c["verdict"] == "reproduces"), default=None)
    assert rep["crossover"] == {"8": want} and (tmp_path / "s" / "curves.png").exists()
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("report.md", "report.json"):
        (copy / f).write_bytes((tmp_path / "s" / f).read_bytes())
    ladder.main(["--report-only", "--out", str(copy)])
    for f in ("report.md", "report.json"):
        assert (copy / f).read_bytes() == (tmp_path / "s" / f).read_bytes(), f
    again = ladder.parse_args(argv[:1] + [str(tmp_path / "again")] + argv[2:] + ["--reuse", str(copy)])
    assert ladder.plan(again) == {}  # every cell is in the report: nothing to train, not even pre-training
