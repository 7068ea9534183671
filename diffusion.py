"""
Masked diffusion (MDLM / LLaDA form): the absorbing-state diffusion baseline MIR is compared with.
Xu et al., arXiv 2606.06888 (its dLLM baseline, which strong weight decay also improves), the
bound of MDLM (Sahoo et al., arXiv
2406.07524) and LLaDA (Nie et al., arXiv 2502.09992, eq. 3), per token:
    L(x) = E_{t ~ U(0,1]} E_{x_t ~ q(.|x, t)} [ (1/t) sum_{i: x_t^i = [MASK]} -log p(x^i | x_t) ] / T

Forward process: each of the T tokens of x is replaced by [MASK] independently with probability t
(linear schedule alpha_t = 1 - t). Why L >= -log p(x) / T: L is the continuous-time negative ELBO
of this process. Jensen on log p(x) = log E_q[p(x, path)/q(path | x)] bounds the NLL by a sum of
one KL term per reverse step; a token still masked at level t is revealed in (t - dt, t] with
probability dt / t, and the KL of that step is then the cross-entropy of the model's prediction
of that token given x_t; integrating over t gives the 1/t weight. A model that also gives some
probability to the [MASK] class itself (we do not zero that logit, as MDLM's SUBS does; LLaDA
does not either) only makes each cross-entropy larger: still a bound.
The model is the same GPT with causal=False (bidirectional attention); the sequence is x (B, T)
itself, targets = x at the masked positions, NOT the shifted y: the last token of y (the window's
T+1-th token) is ignored, so a stage reads the same windows as AR training and scores T tokens.
The authors' baseline (github.com/yixinw-lab/dc_pretrain, dcp/train4_diffusionauxiliary_ddc_impl.py
= `ddc`): t = (1 - eps) u + eps, u ~ U[0, 1), eps 1e-3 (ddc:101, 310-311); Bernoulli masks
(ddc:314); bidirectional (ddc:358); targets the clean tokens (ddc:356); loss = sum of
CE / t over masked positions / (B T) (ddc:361-362); [MASK] = base vocab size (ddc:467-468); their
validation draws fresh random masks (dcp/eval.py:168-186, 1 draw by default, ddc:103) — ours uses
fixed stratified levels and seeded masks instead, so evaluations are noise-free and comparable.
loss_mask (0/1 on the targets y, e.g. answers of a task corpus): token j of x is the target
y[j-1], so it counts iff loss_mask[:, j-1] (token 0 never counts). Only counted tokens are ever
masked and scored; the others stay visible as context, and the sum is divided by the number of
counted tokens instead of T: the conditional bound on -log p(counted | rest) per counted token,
as in LLaDA's SFT loss (the prompt is never masked).
"""

import torch

from mir import row_uniform


def draw_levels(B, eps=1e-3, generator=None):
    """(B,) masking levels t ~ U(eps, 1], one per sequence (row b from generator[b])."""
    return 1.0 - (1.0 - eps) * row_uniform(B, 1, generator)[:, 0]


def forward_mask(x, t, mask_id, generator=None, maskable=None):
    """q(x_t | x): each token of x (B, T) -> mask_id with probability t_b (t: float or (B,)), only
    where maskable (B, T) bool if given. Returns (x_t, masked), both (B, T). t = 1: all; t = 0: none."""
    B, T = x.shape
    u = row_uniform(B, T, generator)                                       # (B, T), generators' device
    t = torch.as_tensor(t, dtype=torch.float32, device=u.device).reshape(-1).expand(B)  # (B,)
    masked = (u < t[:, None]).to(x.device)                                 # (B, T)
    if maskable is not None:
        masked &= maskable
    return x.masked_fill(masked, mask_id), masked


def counted_tokens(x, loss_mask):
    """Which tokens of x (B, T) count, from loss_mask on the targets y (see the module
    docstring); None: all of them."""
    if loss_mask is None:
        return None
    counted = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
    counted[:, 1:] = loss_mask[:, :-1] != 0
    return counted


def nelbo(model, x, t, mask_id, generator=None, counted=None):
    """The bound's integrand at levels t (B,), one draw of the masks, per counted token:
        sum_b (1/t_b) sum_{i masked in row b} CE_bi / N,   N = B*T (or the counted tokens).
    Per-token weights w_bi = 1/t_b on masked positions; the model returns sum(w CE) / sum(w),
    so times sum(w) / N it is the sum above = with all tokens counted, the batch mean of the
    per-sequence bounds (1/(t_b T)) sum_i CE_bi. A row with nothing masked adds 0."""
    x_t, masked = forward_mask(x, t, mask_id, generator, counted)          # (B, T)
    w = masked.float() / t.to(x.device)[:, None]                           # (B, T)
    n = x.numel() if counted is None else counted.sum().clamp_min(1)
    _, loss = model(x_t, x, w)
    return loss * w.sum() / n


class MDLM:
    """The masked-diffusion objective for the training loop (train.Objective).
    loss: t ~ U(eps, 1] per row (eps = 1e-3, the authors' ddc:101), masks from row b's own
    generator (first t, then T uniforms). eval_loss: the bound with eval_levels stratified
    levels t_k = (k + 0.5) / K (a midpoint rule for the integral over t in (0, 1]) and masks from
    generators seeded by (key, k, row), averaged over k: deterministic for given weights."""

    name, extra_tokens, causal, needs_generators = "mdlm", 1, False, True

    def __init__(self, mask_id, eps=1e-3, eval_levels=8):
        assert 0 < eps <= 1 and eval_levels >= 1
        self.mask_id, self.eps, self.eval_levels = mask_id, eps, eval_levels

    def loss(self, model, x, y, loss_mask, generators):
        t = draw_levels(x.size(0), self.eps, generators)                   # (B,)
        return nelbo(model, x, t, self.mask_id, generators, counted_tokens(x, loss_mask))

    @torch.no_grad()
    def eval_loss(self, model, x, y, loss_mask, key):
        B, K = x.size(0), self.eval_levels
        counted, total = counted_tokens(x, loss_mask), 0.0
        for k in range(K):
            t = torch.full((B,), (k + 0.5) / K)
            gens = [torch.Generator().manual_seed(((key * 1_000_003 + k) * 1_000_003 + b) % 2**63)
                    for b in range(B)]
            total = total + nelbo(model, x, t, self.mask_id, gens, counted)
        return total / K


@torch.no_grad()
def sample(model, n, length, mask_id, steps=None, generator=None, temperature=1.0, vocab_limit=None):
    """n sequences of `length` tokens by iterative unmasking (MDLM's ancestral sampler with a fixed
    count per step; LLaDA's random remasking). Start all [MASK]; at step s = 0..steps-1 the model
    predicts every position at once and the tokens of ranks [round(L s/S), round(L (s+1)/S)) of a
    random order drawn at the start are revealed, each sampled from its predicted distribution
    restricted to ids < vocab_limit (default mask_id: [MASK] is never emitted); so the masked
    fraction follows t = 1 - (s+1)/S and after the last step none remains. The positions revealed
    at a step are a uniformly random subset of those still masked (MDLM's reverse process);
    predictions at the others are discarded. steps: default length (one token a step: any-order
    autoregressive sampling). temperature 0: argmax. generator on the model's device."""
    steps = length if steps is None else steps
    vocab_limit = mask_id if vocab_limit is None else vocab_limit
    assert vocab_limit <= mask_id, "vocab_limit must exclude the [MASK] id"
    device = next(model.parameters()).device
    x = torch.full((n, length), mask_id, dtype=torch.long, device=device)          # (n, L)
    rank = torch.rand(n, length, generator=generator, device=device).argsort(1).argsort(1)  # (n, L)
    for s in range(steps):
        reveal = (rank >= round(length * s / steps)) & (rank < round(length * (s + 1) / steps))
        if not reveal.any():
            continue
        logits = model(x)[0][..., :vocab_limit][reveal].float()                     # (k, V)
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            x[reveal] = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            x[reveal] = logits.argmax(-1)
    return x
