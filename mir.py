"""
Masked-Input Regularization (MIR): next-token prediction on a clean batch AND on its masked copy.
Xu et al., "Data-Constrained Language Model Pretraining: Improved Regularization and Scaling
Laws", arXiv 2606.06888, its masked-input regularization: L = NTP(x, y) + lambda * NTP(x^, y),
lambda = 0.4, mask ratio r ~ U[0, 0.5] per sequence, worth ~1.3x more unique data in the paper.

x^ is x with random positions replaced by a [MASK] token (one extra vocabulary row, the last:
mask_id = corpus vocabulary size); under the SAME causal attention it is trained to predict the
ORIGINAL next tokens y at every position. Inference never sees [MASK]: evaluation and sampling
are plain next-token prediction. The authors' choices, from their public code
(github.com/yixinw-lab/dc_pretrain; `impl` = dcp/train4_diffusionauxiliary_impl.py):
  - one ratio per sequence, r ~ U[min, max] (impl:439-443), then each position masked
    independently with probability r (`rand < r`, impl:451-454), row by row (impl:502-505);
  - positions 0..ltr_length-1 never masked: candidates are [ltr_length, T-1] (impl:445-450),
    --ltr-length 8 (impl:127);
  - `--stage1-full-seq`: the masked copy is scored on every position with the plain causal
    loss, model(masked_idx, y) (impl:518-519), not only at the rows before masked tokens;
  - loss = 1.0 * NTP(x) + 0.4 * NTP(x^) on the same micro-batch (impl:958-976 and 535; the
    weights --ntp-loss-downscale 1.0, --adaptive-loss-downscale 0.4, the ratio range 0..0.5 and
    --stage1-full-seq are set in scripts/all5models_diffusionauxiliary.sh:75-82; stage-0
    epochs 0 there, so MIR is on from the first step);
  - [MASK] = the base vocabulary size, the model's vocabulary one larger (impl:659-665).
Ours differs in two mechanical ways, same objective: one forward pass over cat([x, x^]) with
float weights instead of two forward/backward passes (DDP wants one forward per backward; it
holds 2x the activations, so halve the micro-batch if memory is short), and the masks come
from per-row generators (the loop seeds them by global row index) instead of one stream per
rank (impl:410-411), so a row is masked the same whatever the accumulation / DDP split.
"""

import torch


def row_uniform(B, n, generator=None):
    """(B, n) uniforms in [0, 1), on the generators' device. generator: None (global RNG), one
    torch.Generator, or a list of B generators: row b is then drawn from generator[b] only, so
    a row's draws do not depend on the other rows of the batch (the per-row contract)."""
    gens = list(generator) if isinstance(generator, (list, tuple)) else [generator] * B
    assert len(gens) == B, f"{len(gens)} generators for {B} rows"
    return torch.stack([torch.rand(n, generator=g, device=g.device if g is not None else "cpu")
                        for g in gens]) if B else torch.empty(0, n)


def masked_copy(x, mask_id, ratio=(0.0, 0.5), keep_first=8, generator=None):
    """x^: a copy of x (B, T) whose positions >= keep_first are replaced by mask_id
    independently with probability r_b, one r_b ~ U[ratio] per sequence (impl:439-454).
    generator: None, one generator, or a list of B per-row generators (see row_uniform).
    Row b draws its ratio first, then T - keep_first uniforms."""
    B, T = x.shape
    lo, hi = ratio
    assert 0.0 <= lo <= hi <= 1.0, f"mask ratio range {ratio} not within [0, 1]"
    k = min(keep_first, T)
    r = lo + (hi - lo) * row_uniform(B, 1, generator)       # (B, 1): one ratio per sequence
    u = row_uniform(B, T - k, generator)                     # (B, T - k)
    masked = torch.zeros(B, T, dtype=torch.bool)
    masked[:, k:] = u < r                                    # the first k never masked
    return x.masked_fill(masked.to(x.device), mask_id)


class MIR:
    """The MIR objective for the training loop (train.Objective: name, extra_tokens, needs_generators,
    causal, loss, eval_loss). mask_id: the [MASK] row (the last; the model has one extra row).

    loss, for one micro-batch with target weights m (loss_mask, or ones):
        L = L_clean + lam * L_masked,  L_clean = sum(m CE(x)) / sum(m),  L_masked likewise on x^.
    One forward over cat([x, x^]) with float weights w = cat([m, lam * m]) returns
        sum(w CE) / sum(w) = (sum(m CE(x)) + lam sum(m CE(x^))) / ((1 + lam) sum(m))
                           = (L_clean + lam * L_masked) / (1 + lam),
    exactly, as both halves count the same targets m; so L = (1 + lam) * that. lam == 0 skips
    the masked copy (the plain loss and gradients, exactly). eval_loss: the plain NTP loss on
    clean input (`key` unused: nothing is random)."""

    name, extra_tokens, causal, needs_generators = "mir", 1, True, True

    def __init__(self, mask_id, lam=0.4, ratio=(0.0, 0.5), keep_first=8):
        assert lam >= 0, f"MIR lambda must be >= 0, got {lam}"
        self.mask_id, self.lam, self.ratio, self.keep_first = mask_id, lam, tuple(ratio), keep_first

    def loss(self, model, x, y, loss_mask, generators):
        if self.lam == 0:
            return model(x, y, loss_mask)[1]
        x_hat = masked_copy(x, self.mask_id, self.ratio, self.keep_first, generators)  # (B, T)
        m = torch.ones(y.shape, device=y.device) if loss_mask is None else loss_mask.float()
        _, loss = model(torch.cat([x, x_hat]), torch.cat([y, y]), torch.cat([m, self.lam * m]))  # (2B, T)
        return (1 + self.lam) * loss

    def eval_loss(self, model, x, y, loss_mask, key):
        return model(x, y, loss_mask)[1]
