"""The claims of experiments/ladder.py --preset headline (train.py --stages music,poetry,prose --prores at train.py's
defaults), read by claims.py from records {"condition": an arm, "seed", "ppl_final": the last stage's perplexity}."""
from experiments.lib.claims import Claim

PPL, ARM = dict(fmt="{:.1f}", percent=True, pair_by=("seed",), metric="ppl_final"), lambda c: {"condition": c}
CLAIMS = [Claim("the ladder (music -> poetry -> prose) ends below prose alone", "349.0 vs 423.0 (17.5% below "
                "random init)", ARM("curriculum"), ARM("prose-only"), **PPL),
          Claim("the headline command (the ladder with --prores) ends below prose alone", "ProRes and the ladder "
                "each lower the loss", ARM("curriculum+prores"), ARM("prose-only"), **PPL),
          Claim("ProRes (--prores-scope fresh) lowers the ladder's perplexity", "ProRes lowers the loss with Pre-LN "
                "(71M-7B, from scratch)", ARM("curriculum+prores"), ARM("curriculum"), **PPL),
          Claim("warming up only fresh blocks beats re-warming transferred ones (--prores-scope stage)", "not in the "
                "paper: it warms up from scratch", ARM("curriculum+prores"), ARM("curriculum+prores-stage"), **PPL)]


def records(report):
    return report["runs"]
