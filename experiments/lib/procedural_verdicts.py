"""
The procedural report's part of the results page: one verdict per claim of the paper and the
regime sentence (report.json's `verdicts` and `regime`), from the analysis procedural_report makes.
Jiang, Shinnick et al., "Procedural Pretraining: Warming Up Language Models with Abstract Data",
arXiv 2601.21725: the claims of its diagnostic table, its semantic regimes and its merges.

A claim tested on several cells (tasks, domains, sizes) gets the cells' common verdict, or
"partly" when they disagree (each cell's verdict is then named in `ours`). A verdict is
common.verdict_of a comparison: "reproduces" only on a clear difference in the paper's direction.
"""

from experiments.lib import common

PAPER = {
    "haystack": "Dyck pre-training lifts HAYSTACK accuracy from 10% (no pre-training) to 98%",
    "reversed_addition": "Rule 110 (ECA) pre-training helps reversed addition",
    "sorting": "SET / UNION pre-training help sorting",
    "shuffled": "shuffled procedural data (same tokens, structure destroyed) loses the benefit",
    "layers": "attention layers carry the benefit for structured domains (code, algorithmic tasks), "
              "MLP layers for natural language",
    "merge": "attention from one procedural model + MLP from another can combine their benefits",
    "substitutive": "with a procedural warm-up, 55% (C4), 67% (code), 86% (math) of the semantic data "
                    "reach the baseline's loss",
    "additive": "at a fixed semantic budget, a small procedural warm-up (0.1-0.3% of the tokens) lowers the loss",
}
PAPER_SUBST = {"prose": 0.55, "code": 0.67, "math": 0.86}  # prose stands in for C4
SOURCE = {"arxiv": "2601.21725", "title": "Procedural Pretraining: Warming Up Language Models with Abstract Data"}
# the semantic domain each layer group should help (the paper: attention for code / math, MLP for language)
LAYER_DOMAIN = {"prose": "mlp", "code": "attn", "math": "attn"}




def welch_test(cells):
    """The 'test' text of Welch comparisons: 'Welch p = 0.052, n = 2/2' (one cell) or per cell."""
    if len(cells) == 1:
        c = cells[0][1]
        return f"Welch {common.fmt_p(c['p'])}, {common.fmt_n(c)}"
    return "Welch " + "; ".join(f"{label} {common.fmt_p(c['p'])}, {common.fmt_n(c)}" for label, c, _ in cells)


def entry(claim, paper, cells, ours, test):
    """One `verdicts` entry; with disagreeing cells `ours` names each cell's verdict."""
    if not cells:
        return {"claim": claim, "paper": paper, "ours": "not in this run", "test": "not tested",
                "verdict": "not measured"}
    v = common.combined_verdict([v for _, _, v in cells])
    if len({vd for _, _, vd in cells}) > 1:  # the cells disagree: name each one's verdict
        ours += " (" + ", ".join(f"{label}: {vd}" for label, _, vd in cells) + ")"
    return {"claim": claim, "paper": paper, "ours": ours, "test": test, "verdict": v}


def pct(xs):
    return common.fmt_mean_std([100 * x for x in xs], "{:.1f}")


def metric_words(metric):
    return "exact-answer accuracy" if metric == "exact" else "per-token answer accuracy"


def task_claims(res):
    """The diagnostic-table claims: Dyck -> HAYSTACK, Rule 110 -> reversed addition, SET/UNION -> sorting."""
    full = res["table"].get("full", {})
    out = []
    for task, claim, paper in (("haystack", "Dyck pre-training lifts HAYSTACK", "10% -> 98% exact-answer accuracy"),
                               ("reversed_addition", "Rule 110 pre-training helps reversed addition", "helps"),
                               ("sorting", "SET / UNION pre-training help sorting", "help")):
        cs = [c for c in res["claims"] if c["task"] == task and c["vs_none"]]
        cells = [(c["kind"], c["vs_none"], common.verdict_of(c["vs_none"])) for c in cs]
        ours = "; ".join(f"{c['kind']} {pct(full[c['kind']][task][c['metric']])}% vs none "
                         f"{pct(full['none'][task][c['metric']])}% ({metric_words(c['metric'])})" for c in cs)
        out.append(entry(claim, paper, cells, ours, welch_test(cells)))
    return out


def pooled_claim(claim, paper, c, what, unit="points", scale=100):
    """A claim tested by one paired t-test pooled over many cells."""
    if c is None or c["n"] == 0:
        return entry(claim, paper, [], "", "")
    ours = f"{what}: {scale * c['diff']:+.{1 if scale == 100 else 3}f} {unit} on average over {c['n']} pairs"
    cell = [("pooled", c, common.verdict_of(c))]
    return entry(claim, paper, cell, ours, f"paired t-test {common.fmt_p(c['p'])}, n = {c['n']} pairs")


def semantic_layer_claim(res, pretrain_steps):
    """Attention-only against MLP-only warm-ups per domain, each in the paper's direction for that domain."""
    cells, parts = [], []
    for d, dd in res["semantic"].items():
        fin = {c["transfer"]: c for c in dd["conditions"] if c["steps"] == pretrain_steps}
        if "attn" in fin and "mlp" in fin and d in LAYER_DOMAIN:
            c = common.compare(fin["attn"]["final"], fin["mlp"]["final"])
            c["treat"], c["base"] = common.mean_std(fin["attn"]["final"])[0], common.mean_std(fin["mlp"]["final"])[0]
            cells.append((d, c, common.verdict_of(c, paper_direction_better=LAYER_DOMAIN[d] == "attn")))
            parts.append(f"{d} attn {c['treat']:.3f} vs mlp {c['base']:.3f} nats")
    return entry("attention for code and math, MLP for natural language (semantic warm-ups)",
                 "attention-only better for code and math, MLP-only for natural language",
                 cells, "; ".join(parts), welch_test(cells))


def merge_claim(res):
    cells, parts = [], []
    for x in res["merges"]:
        c = x["vs"].get("none")
        if c:
            cells.append((x["task"], c, common.verdict_of(c)))
            parts.append(f"{x['task']} {pct(x['merged'])}% vs none {pct(x['alone']['none'])}% ({x['metric']})")
    label = res["merges"][0]["merge"] if res["merges"] else ""
    return entry("merging attention from one kind with MLP from another combines their benefits",
                 "combines the benefits", cells, (f"{label} against no pre-training: " if label else "")
                 + "; ".join(parts), welch_test(cells))


def substitutive_claim(res, pretrain_steps):
    cells, parts = [], []
    for d, dd in res["semantic"].items():
        c = next((c for c in dd["conditions"] if c.get("substitutive") is not None), None)
        if c and c["vs_base"]:
            shares = ", ".join("not within 100%" if s["qualifier"] == ">" else
                               f"{s['qualifier'].replace('=', '')}{100 * s['share']:.0f}%" for s in c["substitutive"])
            cells.append((d, c["vs_base"], common.verdict_of(c["vs_base"])))
            parts.append(f"{d}: share of the data at which the baseline's final loss is reached, per seed: {shares}; "
                         f"final loss {common.fmt_mean_std(c['diff'], '{:+.3f}')} nats against the baseline")
    return entry(f"a procedural warm-up substitutes for semantic data (P = {pretrain_steps} steps, full transfer)",
                 "55% (C4), 67% (code), 86% (math) of the semantic data reach the baseline's loss",
                 cells, "; ".join(parts), welch_test(cells))


def additive_claim(res):
    cells, parts = [], []
    for steps, c in sorted(res["pooled"].get("additive", {}).items(), key=lambda kv: int(kv[0])):
        if c["n"]:
            cells.append((f"P = {steps}", c, common.verdict_of(c)))
            parts.append(f"P = {steps}: {c['diff']:+.3f} nats")
    test = "paired t-test over domains x seeds: " + "; ".join(
        f"{label} {common.fmt_p(c['p'])}, n = {c['n']} pairs" for label, c, _ in cells)
    return entry("a small procedural warm-up lowers the semantic loss at a fixed budget (additive regime)",
                 "0.1-0.3% procedural tokens lower the loss", cells,
                 "final loss minus the same seed's baseline, mean over domains and seeds: " + "; ".join(parts), test)


def verdicts(a, res):
    """report.json's `verdicts`: one entry per claim of the paper."""
    p = res["pooled"]
    return task_claims(res) + [
        pooled_claim("shuffled procedural data loses the benefit", "falls back to the no-pre-training baseline",
                     p.get("real_vs_shuffled"), "real minus shuffled (full transfer, every kind and task)"),
        pooled_claim("attention layers carry the algorithmic benefit", "attention-only transfer keeps it",
                     p.get("attn_vs_mlp_tasks"), "attention-only minus MLP-only (every split kind and task)"),
        semantic_layer_claim(res, a.pretrain_steps), merge_claim(res), substitutive_claim(res, a.pretrain_steps),
        additive_claim(res)]


def regime(a, provenance):
    """report.json's `regime`: our scale and budget, and what differs from the paper's."""
    where = ""
    if provenance:
        h = provenance["hardware"]
        where = f" {provenance['wall_seconds'] / 60:.0f} min wall on {common.hardware(h) if isinstance(h, dict) else h}."
    sizes = "/".join(str(s) for s in a.additive_steps)
    return (f"The authors' diagnostic model ({a.n_layer} layers, {a.n_head} heads, d = {a.n_embd}), {a.seeds} seed(s) "
            f"per cell: pre-training {a.pretrain_steps} steps x {a.batch_size} sequences, each diagnostic "
            f"{a.task_steps} steps x {a.batch_size} records (the authors: 10,000 steps x 1,000), scored on "
            f"{a.task_test} test records; semantic runs: {sizes} {a.sem_kind} steps before {a.sem_steps} steps x "
            f"{a.sem_batch} x {a.sem_block} tokens of {', '.join(a.domains)}, so the procedural tokens outnumber the "
            f"semantic ones (the paper: 0.1-0.3%).{where} Our diagnostic metrics differ from the authors' task "
            "files (downstream/algorithmic_tasks/task_forwardaddition.py, compute_metrics and compute_loss), which "
            "score token-level accuracy and loss at the positions whose input is an answer token (the mask shifted "
            "by one: the first answer token is not scored, the stop token is); ours is the exact answer over the "
            "whole answer span, with the per-token accuracy and loss over the answer tokens themselves beside it."
            + (f" With {a.seeds} seed(s) no single cell can pass the reading rule (n >= 3 per side); only the tests "
               "pooled over cells can." if a.seeds < common.MIN_N else ""))
