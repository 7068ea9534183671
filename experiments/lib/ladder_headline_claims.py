"""experiments/ladder.py --preset headline: its arms (train.py's commands as typed, at train.py's defaults) and the
claims claims.py reads from records {"condition": an arm, "seed", "ppl_final": the last stage's perplexity}."""
from experiments.lib.claims import Claim
from experiments.lib.ladder_claims import CONTROL

HEADLINE_ARMS = {"prose-only": "prose", "prose-only+prores": "prose --prores", "compute-matched": "prose --iters 1200",
                 "curriculum": "music,poetry,prose", "curriculum+prores": "music,poetry,prose --prores",
                 "curriculum+prores-stage": "music,poetry,prose --prores --prores-scope stage"}  # --stages, as typed
HEADLINE_SEEDS = {"curriculum": 3, "curriculum+prores-stage": 3}  # at most; the others --seeds (the preset's 5)
PPL, ARM = dict(fmt="{:.1f}", percent=True, pair_by=("seed",), metric="ppl_final"), lambda c: {"condition": c}
CLAIMS = [Claim("the ladder (music -> poetry -> prose) ends below prose alone", "349.0 vs 423.0 (17.5% below "
                "random init)", ARM("curriculum"), ARM("prose-only"), paper_value=-17.5, **PPL),
          Claim("the headline command (the ladder with --prores) ends below prose alone", "ProRes and the ladder "
                "each lower the loss", ARM("curriculum+prores"), ARM("prose-only"), **PPL),
          Claim("the headline command ends below prose alone for as many steps (compute-matched: --iters 1200)",
                "a compute-matched prose-only control stays 5.0% behind the ladder", ARM("curriculum+prores"),
                ARM("compute-matched"), paper_value=CONTROL, **PPL),
          Claim("ProRes (--prores-scope fresh) lowers the ladder's perplexity", "ProRes lowers the loss with Pre-LN "
                "(71M-7B, from scratch)", ARM("curriculum+prores"), ARM("curriculum"), **PPL),
          Claim("ProRes lowers prose-only perplexity from scratch", "ProRes lowers the loss with Pre-LN (71M-7B, "
                "from scratch)", ARM("prose-only+prores"), ARM("prose-only"), **PPL),
          Claim("warming up only fresh blocks beats re-warming transferred ones (--prores-scope stage)", "not in the "
                "paper: it warms up from scratch", ARM("curriculum+prores"), ARM("curriculum+prores-stage"), **PPL)]


def records(report):
    return report["runs"]
