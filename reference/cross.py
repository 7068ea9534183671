"""
The crossed design for "Procedural Pretraining" (Jiang, Shinnick et al., arXiv 2601.21725): HAYSTACK fine-tuning by
{their pipeline, ours} from Dyck models pre-trained by {their pipeline, ours}, beside each pipeline's baseline from
random init, to tell an error of ours from a claim their published code does not carry either.

    python reference/cross.py --authors-repo A --venv V --plan         # the runs and an estimate; trains nothing
    python reference/cross.py --authors-repo A --venv V --jobs 2       # out/procedural-reference (resumes)
    python reference/cross.py --report-only --out experiments/results/procedural-reference   # from report.json

Each fine-tuning pipeline runs every cell of CELLS: no pre-training; Dyck by them and by us, transferred whole (their
'everything' with every embedding and head row the pre-trained rows' mean, their 'average') and attention alone
(fresh rows); two controls: a near-initialisation model with mean rows (the recipe's start-up cost without Dyck) and
the pipeline's own Dyck model's attention and MLP with fresh rows, positions and norms (their ['attn', 'ffn']: their
config accepts no 'ln', experiment_config.py:85-93). Every
cell at one budget, --steps steps of 1,000 records with their schedule (500 warm-up steps, cosine to 0 at the last),
--seeds seeds paired within a pipeline. Their runs: reference/procedural.py (their scripts unchanged, in their venv);
ours: train.py with experiments/lib/procedural_authors.py's HAYSTACK flags. The starts: their dyck.py for
--pretrain-steps at its settings, the checkpoint their rule keeps (best validation token accuracy); their dyck.py for
10 steps (near-initialisation: lr 5e-5); our committed Dyck model (OUR_DYCK). A model crosses converted by
reference/convert.py. Read by the one engine, experiments/lib/claims.py (CLAIMS below).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.lib import common, procedural_authors as pa  # noqa: E402
from experiments.lib.claims import fmt_mean_std, md_section, md_table, read_all, table, RULE  # noqa: E402
from experiments.lib.significance import finite, welch  # noqa: E402
from reference.cross_claims import CELLS, CLAIMS, PIPELINES, records as readings  # noqa: E402
from experiments.lib.provenance import provenance_line  # noqa: E402
from data.common import UserError  # noqa: E402

SOURCE = {"arxiv": "2601.21725", "title": "Procedural Pretraining: Warming Up Language Models with Abstract Data"}
OUR_DYCK = ROOT / "experiments/results/procedural/pretrained/pre-dyck-2_4_16-s0.pt"
NEAR_INIT_STEPS = 10
DYCK_HEADS = 4                             # their dyck.py's model, 2_4_16 (the weights do not say it)
THEIR_TRANSFER = {("full", "mean"): ["--transfer", "everything", "--embeddings", "average"],
                  ("attn", "random"): ["--transfer", "attn"], ("full", "random"): ["--transfer", "attn,ffn"]}
OUR_TRANSFER = {("full", "mean"): pa.transfer_flags("full"), ("attn", "random"): pa.transfer_flags("attn"),
                ("full", "random"): ["--transfer", "attn,mlp", "--embed-init", "random"]}
# CPU seconds a 1-thread run, measured on the 2-core EPYC: their fine-tuning step (1,000 records), their Dyck step
# (64 rows), our fine-tuning step: what --plan estimates with
PACE = {"theirs": 0.84, "pretrain": 0.24, "ours": 0.17}


def parse_args(argv=None):
    p = common.sweep_parser(__doc__, "out/procedural-reference", [
        ("authors-repo", str, "their checkout (github.com/zlshinnick/procedural-pretraining; only read)"),
        ("venv", str, "the venv `python reference/procedural.py setup --venv V` made"),
        ("authors-git", str, "a git dir of theirs (a bare mirror): its commit, each file run checked against it"),
        ("steps", common.positive_int, "fine-tuning steps of 1,000 records, every cell (default 1,000; theirs 10,000)",
         1000),
        ("pretrain-steps", common.positive_int, "their dyck.py's steps (default 5,000; theirs up to 1,000,000)", 5000),
        ("seeds", common.positive_int, "fine-tuning seeds 0..N-1 (default 3)", 3),
        ("task-test", common.positive_int, "our test records (theirs: 4,000)", 4000)])
    a = p.parse_args(argv)
    if a.quick:
        a.steps, a.pretrain_steps, a.seeds, a.task_test = 20, 20, 1, 500
    a.out = Path(a.out or ("out/procedural-reference-quick" if a.quick else "out/procedural-reference"))
    if not (a.report_only or a.plan or a.authors_repo and a.venv):
        raise UserError("--authors-repo and --venv are needed to run (clone github.com/zlshinnick/procedural-"
                        "pretraining, then python reference/procedural.py setup --venv V); --report-only rebuilds "
                        "from OUT/report.json without them")
    return a


def start_of(cond, finetune):
    start = CELLS[cond][0]
    return finetune if start == "own" else start


def plan(a):
    """{name: job}: a job is dict(name, kind, folder, cmd, needs, meta); their pre-training first, then by seed."""
    here, out = [sys.executable, str(ROOT / "reference/procedural.py")], a.out / "runs"
    harness = lambda sub, folder: [*here, sub, "--authors-repo", a.authors_repo, "--venv", a.venv, "--out", folder,  # noqa: E731
                                   *(["--authors-git", a.authors_git] if a.authors_git else [])]
    jobs = {}
    for name, steps, every in (("pre-dyck-theirs", a.pretrain_steps, min(100, a.pretrain_steps)),
                               ("pre-near-init", NEAR_INIT_STEPS, NEAR_INIT_STEPS)):  # validation every: their checkpoints
        f = out / name
        jobs[name] = dict(name=name, kind="pretrain", folder=f, needs=[], meta=dict(part="pretrain", steps=steps),
                          cmd=[str(c) for c in harness("pretrain", f) + ["--max-steps", steps, "--val-every", every]])
    ckpt = {"theirs": "pre-dyck-theirs", "near-init": "pre-near-init"}
    for seed in range(a.seeds):
        for finetune in PIPELINES:
            for cond, (_, mode, rows) in CELLS.items():
                start, name = start_of(cond, finetune), f"{finetune}-{slug(cond)}-s{seed}"
                f = out / name
                meta = dict(part="finetune", finetune=finetune, condition=cond, start=start, seed=seed)
                needs = [ckpt[start]] if start in ckpt else []
                if finetune == "theirs":
                    cmd = harness("finetune", f) + ["--steps", a.steps, "--seed", seed, "--config",
                                                    "baseline" if start is None else "procedural"]
                    cmd += [] if start is None else ["--pretrained", start_path(a, start, "theirs"),
                                                     *THEIR_TRANSFER[mode, rows]]
                else:
                    ns = argparse.Namespace(records=a.steps * pa.TASKS["haystack"]["batch"], data_seed=0,
                                            eval_records=50 * pa.TASKS["haystack"]["batch"], task_test=a.task_test)
                    cmd = [sys.executable, str(ROOT / "train.py"), *pa.task_argv(ns, "haystack", seed), "--out", f,
                           "--resume", "--threads", 1, "--no-plot", "--no-progress"]
                    cmd += [] if start is None else ["--init-from", start_path(a, start, "ours"),
                                                     *OUR_TRANSFER[mode, rows]]
                jobs[name] = dict(name=name, kind=finetune, folder=f, needs=needs, meta=meta, cmd=[str(c) for c in cmd])
    return jobs


def slug(cond):
    return cond.replace(" (", "-").replace(")", "").replace(" ", "-")


def start_path(a, start, side):
    """The checkpoint a start is for one side: theirs as their rule kept it (or converted to ours), ours committed."""
    if start == "ours":
        return OUR_DYCK
    return a.out / "runs" / f"pre-{'dyck-theirs' if start == 'theirs' else start}" / (
        "start-theirs.pth" if side == "theirs" else "start-ours.pt")


def flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def finished(job):
    """A run that ended at its own budget: ours at its --iters; theirs with exit 0 at its steps, a pre-training also
    with its start kept (kept_start)."""
    s, cmd = common.read_summary(job["folder"]), job["cmd"]
    if s is None:
        return False
    if job["kind"] == "ours":
        return s["stages"][-1]["iters"] == int(flag(cmd, "--iters"))
    steps = int(flag(cmd, "--max-steps" if job["kind"] == "pretrain" else "--steps"))
    return s.get("returncode") == 0 and s.get("steps") == steps and (
        job["kind"] != "pretrain" or (job["folder"] / "start-ours.pt").exists())


def kept_start(job):
    """Their pre-training's kept checkpoint (best validation token accuracy) copied to start-theirs.pth and converted
    to ours in start-ours.pt (reference/convert.py): what the fine-tuning runs start from."""
    import torch
    from checkpoint import save_checkpoint
    from reference.convert import layout, theirs_to_ours
    s = common.read_summary(job["folder"])
    best = (s or {}).get("checkpoints", {}).get("best")
    if not best:
        raise UserError(f"{job['folder']}/summary.json names no kept checkpoint; see its stderr.txt")
    sd = torch.load(best, map_location="cpu", weights_only=True)["model"]
    save_checkpoint(job["folder"] / "start-theirs.pth", {"model": sd})
    vocab, positions, width, layers = layout(sd, "their")
    cfg = dict(vocab_size=vocab, block_size=positions, n_layer=layers, n_head=DYCK_HEADS, n_embd=width, bias=True,
               dropout=0.0,
               tie_weights=torch.equal(sd["transformer.wte.weight"], sd.get("lm_head.weight", sd["transformer.wte.weight"])))
    save_checkpoint(job["folder"] / "start-ours.pt", {"model": theirs_to_ours(sd, cfg), "model_config": cfg})


def keep(job):
    """kept_start, its error written to the run's log.txt: 0 if kept, else 1 (the run counts as failed)."""
    try:
        kept_start(job)
        return 0
    except Exception as e:  # their run ended without the checkpoint we need, or one that does not convert
        with open(job["folder"] / "log.txt", "a") as log:
            print(f"cannot keep its start: {type(e).__name__}: {e}", file=log)
        return 1


def run_jobs(jobs, n):
    """Every unfinished job, n at a time, each once what it needs has finished; their pre-training's start kept.
    Returns the names of the runs it finished."""
    for j in jobs.values():  # a pre-training that ended before its start was kept (an interrupted sweep)
        s = common.read_summary(j["folder"]) if j["kind"] == "pretrain" else None
        if s and s.get("returncode") == 0 and not (j["folder"] / "start-ours.pt").exists():
            keep(j)
    todo = [j for j in jobs.values() if not finished(j)]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} runs already finished; {len(todo)} to run, {n} at a time")
    done, failed, trained = {j["name"] for j in jobs.values() if j not in todo}, [], []

    def one(j):
        j["folder"].mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        with open(j["folder"] / "log.txt", "a") as log:
            rc = subprocess.run(j["cmd"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
        return j, keep(j) if rc == 0 and j["kind"] == "pretrain" else rc, time.time() - t0

    with ThreadPoolExecutor(max_workers=n) as pool:
        pending, running = list(todo), set()
        while pending or running:
            ready = [j for j in pending if all(d in done for d in j["needs"])]
            for j in ready[:n - len(running)]:
                pending.remove(j)
                running.add(pool.submit(one, j))
            if not running:
                failed += [j["name"] for j in pending]  # what they need failed
                break
            for f in wait(running, return_when=FIRST_COMPLETED).done:
                running.discard(f)
                j, rc, s = f.result()
                ok = rc == 0 and finished(j)
                done |= {j["name"]} if ok else set()
                (trained if ok else failed).append(j["name"])
                print(f"[{len(done)}/{len(jobs)}] {j['name']}: {'done' if ok else f'FAILED (exit {rc})'} ({s:.0f} s)",
                      flush=True)
    if failed:
        raise UserError(f"{len(failed)} run(s) failed or could not start: {failed}; see their log.txt")
    return trained


def record(a, job):
    """One finished run's record: a fine-tuning run's token accuracy (%) and curve, their pre-training's summary."""
    s, f = common.read_summary(job["folder"]), job["folder"]
    if not finished(job):  # not run, stopped, or failed part-way (its last evaluation is not the end's)
        return None
    r = dict(name=job["name"], **job["meta"])
    if job["kind"] == "pretrain":
        val = s["val_curve"]["rows"]
        return dict(r, steps=s["steps"], val=val, entropy=s["entropy"]["nats_per_token"],
                    best_step=s["checkpoints"]["best_step"], best_val_accuracy=s["checkpoints"]["best_val_accuracy"],
                    authors=s["authors"], cpu_seconds=s["cpu_seconds"])
    if job["kind"] == "theirs":
        c = s["curve"]
        curve = [[st, 100 * acc] for st, acc in zip(c["steps"], c["accuracy"])]
        return dict(r, token=curve[-1][1] if curve and curve[-1][0] == s["steps"] else None, curve=curve,
                    steps=s["steps"], cpu_seconds=s["cpu_seconds"])
    from evaluate import task_scores
    ev = sorted((e["iter"], 100 * e["accuracy"]) for e in common.read_events(f, "eval"))
    return dict(r, token=100 * task_scores(f, "haystack", 0, a.task_test)["token"], curve=[list(x) for x in ev],
                steps=s["stages"][-1]["iters"], cpu_seconds=s["seconds"])


def cell_table(recs):
    """(header, rows): every cell's mean ± sd (n) in both pipelines, and theirs against ours by Welch's test (no
    shared batches)."""
    rows = []
    for cond in CELLS:
        arm = {ft: finite(r["token"] for r in recs if r["finetune"] == ft and r["condition"] == cond) for ft in PIPELINES}
        w = welch(arm["theirs"], arm["ours"], lower_is_better=False)
        rows.append([cond, *(f"{fmt_mean_std(arm[ft], '{:.1f}')} (n = {len(arm[ft])})" for ft in PIPELINES),
                     f"{w['diff']:+.1f}, p = {w['p']:.3f}" if w["p"] is not None else "-"])
    return ["start (transfer)", "their fine-tuning", "our fine-tuning", "theirs - ours (Welch)"], rows


def regime(a, runs, provenance):
    pre, ours = (next((r for r in runs if r["name"] == n), None) for n in ("pre-dyck-theirs", "pre-dyck-ours"))
    where = f" {provenance['wall_seconds'] / 60:.0f} min wall in all." if provenance else ""
    dyck = (f"their dyck.py (2_4_16, k = 16, 128 tokens, batch 64, lr 5e-5 constant, dropout 0.1, decay 0.01 on every "
            f"weight, fresh rows) for {pre['steps']:,} steps (theirs: up to 1,000,000): validation {pre['val'][-1][1]:.3f} "
            f"nats against the data's entropy {pre['entropy']:.3f}, token accuracy {pre['val'][-1][2]:.3f}; the kept "
            f"checkpoint (best validation accuracy, {pre['best_val_accuracy']:.3f}) is step {pre['best_step']:,}, "
            f"validation {next(v[1] for v in pre['val'] if v[0] == pre['best_step']):.3f} nats there"
            if pre else "their dyck.py (not run yet)")
    mine = (f"{ours['val_loss']:.3f} nats against {ours['entropy']:.3f}, {ours['steps']:,} steps at lr "
            f"{ours['lr']:g}, no dropout" if ours else "not recorded")
    return (f"HAYSTACK (condattendstream_30, 2_4_16 GPT-2, batch 1,000) fine-tuned {a.steps:,} steps in every cell "
            f"(theirs: 10,000; their schedule compressed: 500 warm-up steps, cosine to 0 at step {a.steps:,}), {a.seeds} "
            f"seed(s), by their experiment_stream.py (HF Trainer, their venv) and by our train.py. Dyck by {dyck}; ours: "
            f"the committed model of experiments/results/procedural ({mine}). "
            f"Near-initialisation: their dyck.py after {NEAR_INIT_STEPS} steps." + where)


def outcome(verdicts, recs, left=""):
    """Which outcome holds, from the claims against random init: the starts that lift HAYSTACK clearly (p < 0.05,
    better) in each fine-tuning pipeline, and the best cell's mean against the paper's 98%; where their pipeline lifts
    nothing, `left`: what is left to try."""
    against = [(v, claim.treat["condition"]) for v, claim in zip(verdicts, CLAIMS) if claim.base == {"condition": "none"}]
    lifts = {ft: [cond for v, cond in against for c in v["cells"] if c["cell"] == ft and c["clear"] and c["better"]]
             for ft in PIPELINES}
    means = {(ft, cond): statistics.mean(xs) for ft in PIPELINES for cond in CELLS
             if (xs := finite(r["token"] for r in recs if r["finetune"] == ft and r["condition"] == cond))}
    if not means:
        return "Outcome: not measured yet."
    cells = [c for v, _ in against for c in v["cells"]]
    few = len(cells) < len(against) * len(PIPELINES) or any(
        c["p"] is None or min(c["n"] if isinstance(c["n"], list) else [c["n"]]) < 3 for c in cells)
    says = {(True, False): "their pipeline lifts HAYSTACK and ours does not",
            (False, True): "our pipeline lifts HAYSTACK and theirs does not",
            (True, True): "both pipelines lift HAYSTACK",
            (False, False): "neither pipeline lifts HAYSTACK from a Dyck start: their code, unchanged, does not "
                            "reproduce the paper's lift at this budget"}[bool(lifts["theirs"]), bool(lifts["ours"])]
    says = "too few runs to tell yet (a cell against random init has under 3 runs a side)" if few else says
    who = {"theirs": "their", "ours": "our"}
    (ft, cond), best = max(means.items(), key=lambda kv: kv[1])
    which = "; ".join(f"{who[ft]} fine-tuning from {', '.join(lifts[ft])}" for ft in PIPELINES if lifts[ft])
    tail = f"; left to try: {left}" if left and not lifts["theirs"] and not few else ""
    return (f"Outcome: {says}{f' (clearly above random init: {which})' if which else ''}; the best cell, {cond} by "
            f"{who[ft]} fine-tuning, reaches {best:.1f}% against the paper's 98%{tail}")


def left_to_try(a, runs):
    """What this budget left out of their recipe: their Dyck pre-training's length, the checkpoint their README
    fine-tunes from (the latest), their fine-tuning's length."""
    pre = next((r for r in runs if r["name"] == "pre-dyck-theirs"), None)
    where = f", where it ended {pre['val'][-1][1]:.3f} nats against {pre['entropy']:.3f}" if pre else ""
    return (f"their Dyck pre-training past {a.pretrain_steps:,} steps (theirs up to 1,000,000{where}), the latest "
            f"checkpoint their README fine-tunes from (not the best-accuracy one), their 10,000 fine-tuning steps "
            f"(here {a.steps:,})")


def render(a, runs, n_planned, provenance):
    recs = readings({"runs": runs})
    verdicts = read_all(CLAIMS, recs)
    authors = next((r["authors"] for r in runs if r["part"] == "pretrain"), None)
    header, rows = cell_table(recs)
    front = dict(title="HAYSTACK token accuracy (%) after the same fine-tuning budget, by start and fine-tuning "
                 f"pipeline (their code unchanged, and ours). {outcome(verdicts, recs, left_to_try(a, runs))}",
                 lines=md_table(header, rows))
    reg = regime(a, runs, provenance)
    text = "\n".join([
        "# Procedural pre-training: the authors' pipeline beside ours, crossed", "",
        f"{SOURCE['title']} (arXiv {SOURCE['arxiv']}). `python reference/cross.py`; their code at commit "
        f"{(authors or {}).get('commit') or 'unknown'}. {sum(r['part'] != 'ours-pretrain' for r in runs)} of "
        f"{n_planned} runs finished (beside them, our own Dyck model's record).", "",
        provenance_line(provenance), "", f"**Regime.** {reg}", "", RULE, "", *table(verdicts), "",
        *md_section("Every cell", front["title"] + ".", header, rows), "Figure: curves.png."])
    common.write_report(a.out, text + "\n", source=SOURCE, regime=reg, figures=["curves.png"], verdicts=verdicts,
                        claims="reference.cross_claims", provenance=provenance, front_table=front,
                        settings=common.settings_json(a, leave_out=common.INVOCATION_FLAGS + ("authors_repo", "venv",
                                                                                                 "authors_git")),
                        n_planned=n_planned, authors=authors, runs=runs)
    figure(recs, a.out / "curves.png")
    return text


def figure(recs, path):
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, ft in zip(axes, PIPELINES):
        for i, cond in enumerate(CELLS):
            for r in (r for r in recs if r["finetune"] == ft and r["condition"] == cond):
                xs, ys = zip(*r["curve"]) if r["curve"] else ((), ())
                ax.plot(xs, ys, color=f"C{i}", alpha=0.7, label=cond if r["seed"] == 0 else None)
        ax.set(title=f"{ft} fine-tuning", xlabel="step", ylabel="token accuracy, %" if ft == "theirs" else None)
    common.finish(fig, axes, path)


def rebuild(out):
    rep = json.loads((out / "report.json").read_text())
    a = argparse.Namespace(**rep["settings"], out=out)
    return render(a, rep["runs"], rep["n_planned"], rep["provenance"])


def show_plan(a, jobs):
    todo = [j for j in jobs.values() if not finished(j)]
    cost = lambda j: (int(flag(j["cmd"], "--max-steps")) * PACE["pretrain"] if j["kind"] == "pretrain"  # noqa: E731
                      else a.steps * PACE[j["kind"]])
    for j in jobs.values():
        print(f"  {j['name']:<40} {j['kind']:<9} ~{cost(j) / 60:6.1f} min{'' if j in todo else '  (done)'}")
    s = sum(map(cost, todo))
    print(f"{len(jobs)} runs, {len(todo)} to run: ~{s / 60:.0f} CPU-min, ~{s / a.jobs / 60:.0f} min wall with --jobs "
          f"{a.jobs} (1 thread a run; the 2-core EPYC's pace)")


def train(a, jobs, sweep):
    """The runs not finished (none with --report-only), then every finished run's record."""
    sweep(jobs, run=lambda js, n, threads: run_jobs(js, n))
    return [r for j in jobs.values() if (r := record(a, j))] + [our_dyck()]


def our_dyck():
    """Our Dyck start as the committed procedural report records it (its model as last trained: `retrained`)."""
    rep = json.loads((OUR_DYCK.parents[1] / "report.json").read_text())
    r = next(r for r in rep["runs"] if r["name"] == OUR_DYCK.stem)
    last = r.get("retrained") or r
    lr = float(r["argv"][r["argv"].index("--lr") + 1])
    return dict(name="pre-dyck-ours", part="ours-pretrain", val_loss=last["val_loss"], entropy=r["entropy"],
                steps=last["steps"], lr=lr, checkpoint=str(OUR_DYCK.relative_to(ROOT)))


def main(argv=None):
    a = parse_args(argv)
    common.experiment_main(
        a, argv, plan=plan, show_plan=show_plan, rebuild=rebuild, inherit=False, train=train,
        render=lambda a, runs, prov: render(a, runs, len(plan(a)), prov),
        wrote="\n{text}\n\nwrote {out}/report.md, report.json and curves.png ({s:.0f} s in all)")


if __name__ == "__main__":
    common.main_guard(main)
