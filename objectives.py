"""
The objectives the loop can optimise, behind one protocol: next-token prediction (here), MIR
(mir.py, arXiv 2606.06888) and masked diffusion (diffusion.py, the same paper's baseline). Each enters
train.py's step through one call, `objective.loss(model, x, y, loss_mask, generators)`.

To add an objective: a class with the Objective protocol's fields and two methods, one entry in
OBJECTIVES (then `--objective NAME` takes it), and a test.
"""

from typing import Protocol

import diffusion
import mir


class Objective(Protocol):
    """What the loop asks of an objective (NextToken below, mir.MIR, diffusion.MDLM):

    name              recorded in each stage's summary ("ar", "mir", "mdlm")
    extra_tokens      vocabulary rows it adds after the corpus's ([MASK]: 1)
    causal            whether the model attends causally (MDLM: False, bidirectional)
    needs_generators  whether loss() draws per-row randomness from `generators` (row_generators:
                      one torch.Generator per row, so masks do not depend on how a batch is split)
    loss(model, x, y, loss_mask, generators) -> scalar training loss (differentiable)
    eval_loss(model, x, y, loss_mask, key)   -> scalar evaluation loss, deterministic given key
    """
    name: str
    extra_tokens: int
    causal: bool
    needs_generators: bool

    def loss(self, model, x, y, loss_mask, generators): ...

    def eval_loss(self, model, x, y, loss_mask, key): ...


class NextToken:
    """Plain next-token prediction: the mean cross-entropy of y given x (causal)."""
    name, extra_tokens, causal, needs_generators = "ar", 0, True, False

    def loss(self, model, x, y, loss_mask, generators):
        return model(x, y, loss_mask)[1]

    def eval_loss(self, model, x, y, loss_mask, key):
        return model(x, y, loss_mask)[1]


def _mir(args, mask_id):
    lo, hi = (float(v) for v in args.mir_ratio.split(","))
    return mir.MIR(mask_id=mask_id, lam=args.mir_lambda, ratio=(lo, hi), keep_first=args.mir_keep_first)


# name -> build(args, mask_id): an objective with [MASK] (if it has one) at id mask_id, the corpus's
# vocabulary size (one row after its tokens). "mir" is --mir, which regularises next-token prediction.
OBJECTIVES = {"ar": lambda args, mask_id: NextToken(),
              "mir": _mir,
              "mdlm": lambda args, mask_id: diffusion.MDLM(mask_id=mask_id)}


def make_objective(args, vocab_size):
    """The run's objective (--objective, or MIR with --mir) for a corpus of vocab_size tokens."""
    return OBJECTIVES["mir" if args.mir else args.objective](args, vocab_size)
