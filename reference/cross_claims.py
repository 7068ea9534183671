"""
The claims the crossed design reads (reference/cross.py), as data for the one engine (experiments/lib/claims.py):
Jiang, Shinnick et al., "Procedural Pretraining" (arXiv 2601.21725), Dyck lifts HAYSTACK from 10% to 98%, and the
attention-only transfer their companion work credits, each read in both fine-tuning pipelines (theirs, ours: a
claim's cells); the controls say whether Dyck or the recipe moves it. Records pair by seed within a pipeline.
"""

from experiments.lib.claims import Claim

PIPELINES = ("theirs", "ours")             # who fine-tunes (a claim's cells)
# condition -> (start, transfer, rows); start "own": the fine-tuning pipeline's own Dyck model
CELLS = {"none": (None, None, None),
         "dyck-theirs": ("theirs", "full", "mean"), "dyck-theirs (attn)": ("theirs", "attn", "random"),
         "dyck-ours": ("ours", "full", "mean"), "dyck-ours (attn)": ("ours", "attn", "random"),
         "near-init": ("near-init", "full", "mean"), "dyck-own (random rows)": ("own", "full", "random")}
TOKEN = dict(metric="token", lower_is_better=False, cells="finetune", label="{} fine-tuning", fmt="{:.1f}",
             note="token-level accuracy at the answer, %")

CLAIMS = [
    Claim("Dyck pre-training lifts HAYSTACK", "10% -> 98% accuracy", {"condition": "dyck-theirs"},  # the paper's words
          {"condition": "none"}, paper_value=88, **dict(TOKEN, note="Dyck by their dyck.py, full transfer, mean rows ("
                                                        "their 'everything', 'average'); " + TOKEN["note"])),
    Claim("Dyck pre-training lifts HAYSTACK: our Dyck model, full transfer, mean rows", "10% -> 98% accuracy",
          {"condition": "dyck-ours"}, {"condition": "none"}, paper_value=88, **TOKEN),
    Claim("attention-only transfer keeps the benefit: Dyck by their dyck.py", "attention carries it",
          {"condition": "dyck-theirs (attn)"}, {"condition": "none"}, **TOKEN),
    Claim("attention-only transfer keeps the benefit: our Dyck model", "attention carries it",
          {"condition": "dyck-ours (attn)"}, {"condition": "none"}, **TOKEN),
    Claim("Dyck, not the recipe, lifts HAYSTACK: the pipeline's own Dyck model against a near-initialisation model, "
          "both full transfer with mean rows", "Dyck's structure transfers", {"own": "dyck (mean rows)"},
          {"condition": "near-init"}, **TOKEN),
    Claim("their whole transfer with mean rows ('everything', 'average') beats attention and MLP alone: the pipeline's "
          "own Dyck model, against the same with fresh rows, positions and norms (their config has no norms alone)",
          "their default recipe", {"own": "dyck (mean rows)"}, {"condition": "dyck-own (random rows)"}, **TOKEN),
]


def records(rep):
    """The engine's records: the fine-tuning runs, each with `own` = 'dyck (mean rows)' where its start is the
    pipeline's own Dyck model transferred whole with mean rows (their Dyck in theirs, ours in ours)."""
    return [dict(r, own="dyck (mean rows)" if r["condition"] == f"dyck-{r['finetune']}" else None)
            for r in rep["runs"] if r["part"] == "finetune" and not r.get("diverged")]
