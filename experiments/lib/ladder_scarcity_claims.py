"""The claims of experiments/ladder.py --preset scarcity (lib/ladder_scarcity.py), read by claims.py in each cell
(width, unique prose tokens U) from records {"condition", "width", "seed", "unique", "ppl_final", "ppl_best"}."""
from experiments.lib.claims import Claim
from experiments.lib.ladder_claims import CONTROL

PPL, ARM = dict(cells=("width", "unique"), label="d{} U {:,}", fmt="{:.1f}", percent=True), lambda c: {"condition": c}
CLAIMS = [Claim("the ladder ends below prose alone at the same prose budget", "349.0 vs 423.0 (17.5% below random "
                "init)", ARM("ladder"), ARM("random"), metric="ppl_final", paper_value=-17.5, **PPL),
          Claim("the ladder ends below prose alone for as many steps (compute-matched), both at their end",
                "the control 5.0% behind the ladder", ARM("ladder"), ARM("compute-matched"), metric="ppl_final",
                paper_value=CONTROL, **PPL),
          Claim("the ladder ends below the compute-matched control, both at their best evaluation", "the control 5.0% "
                "behind the ladder (WikiText-103: prose is not scarce)", ARM("ladder"), ARM("compute-matched"),
                metric="ppl_best", paper_value=CONTROL, **PPL)]
CROSSOVER = CLAIMS[2]  # its cells give the crossover U


def records(report):
    return report["runs"]
