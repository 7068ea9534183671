"""
The claims of Jiang, Shinnick et al., "Procedural Pretraining: Warming Up Language Models with Abstract
Data" (arXiv 2601.21725) as data, read from a report's records by experiments/lib/claims.py: its diagnostic
table (Dyck lifts HAYSTACK from 10% to 98%; the shuffled controls), partial transfer, weight merging and semantic
regimes, on the authors' token-level accuracy (their compute_metrics: the positions whose input is an answer token).
Every condition at one seed sees the same task batches (lib/procedural_authors.DIFFERENCES), so the arms pair by
seed (the claims' default pair_by).
"""

from experiments.lib.claims import Claim

KINDS = ("dyck", "eca110", "set", "union", "stack")
DOMAINS = ("prose", "code", "math")
SIZES = (500, 1500, 4500)   # the semantic warm-ups of the table preset's archive, Dyck steps; 1500 its main size
TOKEN = dict(metric="token", lower_is_better=False, cells="task", fmt="{:.1f}", note="token-level accuracy, %")
LOSS = dict(metric="loss", cells="task", only=DOMAINS, note="final validation loss, nats")

CLAIMS = [
    Claim("Dyck pre-training lifts HAYSTACK", "10% -> 98% accuracy", {"condition": "dyck"}, {"condition": "none"},
          only=("haystack",), paper_value=88, **TOKEN),
    Claim("shuffled procedural data loses the benefit", "falls back to the no-pre-training baseline",
          [{"condition": k} for k in KINDS], [{"condition": k + "-shuffled"} for k in KINDS], **TOKEN),
    Claim("Rule 110 pre-training helps reversed addition", "helps", {"condition": "eca110"}, {"condition": "none"},
          only=("reversed_addition",), **TOKEN),
    Claim("SET / UNION pre-training help sorting", "help", [{"condition": "set"}, {"condition": "union"}],
          {"condition": "none"}, only=("sorting",), **TOKEN),
    Claim("attention layers carry the algorithmic benefit", "attention-only transfer keeps it (against MLP-only)",
          [{"condition": f"{k} (attn)"} for k in KINDS], [{"condition": f"{k} (mlp)"} for k in KINDS], **dict(TOKEN, note=
          "token-level accuracy, %; HAYSTACK: n = 8 not run (80% power needs 16 pairs; 10 more runs of 30-45 CPU-min)")),
    Claim("merging attention from one kind with MLP from another combines their benefits", "combines the benefits",
          {"condition": "attn-dyck+mlp-set"}, {"condition": "none"}, **TOKEN),
    Claim("attention for code and math, MLP for natural language (semantic warm-ups)",
          "attention-only better for code and math, MLP-only for natural language",
          {"condition": "dyck-P1500 (attn)"}, {"condition": "dyck-P1500 (mlp)"}, worse_in=("prose",), **LOSS),
    Claim("a procedural warm-up substitutes for semantic data", "55% (C4), 67% (code), 86% (math) of the semantic "
          "data reach the baseline's loss", {"condition": "dyck-P1500"}, {"condition": "none"}, **LOSS),
    Claim("a small procedural warm-up lowers the semantic loss at a fixed budget (additive regime)",
          "0.1-0.3% procedural tokens lower the loss", [{"condition": f"dyck-P{p}"} for p in SIZES],
          {"condition": "none"}, **LOSS)]


def records(rep):
    """report.json -> one flat record per finished diagnostic run (task, condition, seed; token and exact
    accuracy in %, loss, the accuracy curve) and per semantic run (task = its domain; loss = final val loss).
    A condition names its transfer when not full ("dyck (attn)"), a semantic warm-up its size ("dyck-P500")."""
    out = []
    for r in rep["runs"]:
        if r.get("diverged") or r["part"] == "pretrain":
            continue
        mode = "" if r["transfer"] in ("none", "full") else f" ({r['transfer']})"
        if r["part"] == "semantic":
            cond = "none" if r["kind"] == "none" else f"{r['kind']}-P{r['steps']}{mode}"
            out.append(dict(task=r["domain"], condition=cond, seed=r["seed"], loss=r["val_loss"], curve=r["curve"]))
            continue
        token, exact = r.get("token", r.get("token_accuracy")), r.get("exact", r.get("accuracy"))
        out.append(dict(task=r["task"], condition=r.get("condition", r.get("row")) + mode, seed=r["seed"],
                        token=100 * token, exact=100 * exact, loss=r["val_loss"], curve=r.get("curve")))
    return out
