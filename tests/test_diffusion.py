"""Masked diffusion (diffusion.py): the forward process, the bound against a hand computation,
the deterministic evaluation, bidirectional attention, and the sampler."""
import math

import pytest
import torch
from torch.nn import functional as F

from diffusion import MDLM, counted_tokens, draw_levels, forward_mask, sample
from model import GPT, GPTConfig
from conftest import gens, token_batch

V = 11            # corpus vocabulary; [MASK] = V, the model's extra last row
MASK = V


def tiny(causal=False, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(block_size=16, vocab_size=V + 1, n_layer=2, n_head=2, n_embd=16, causal=causal))


def batch(B=4, T=16, seed=1):
    return token_batch(V, B, T, seed)


def test_forward_mask_levels():
    x, _ = batch(B=64)
    xt, m = forward_mask(x, 1.0, MASK, gens(range(64)))
    assert m.all() and (xt == MASK).all()
    for t in (0.0, 1e-7):
        xt, m = forward_mask(x, t, MASK, gens(range(64)))
        assert not m.any() and torch.equal(xt, x)
    xt, m = forward_mask(x, torch.full((64,), 0.3), MASK, torch.Generator().manual_seed(0))
    assert abs(m.float().mean() - 0.3) < 0.03 and torch.equal(xt == MASK, m)
    keep = torch.rand(64, 16) < 0.5
    assert not (forward_mask(x, 1.0, MASK, maskable=keep)[1] & ~keep).any()
    t = draw_levels(5000, 1e-3, torch.Generator().manual_seed(0))
    assert t.min() > 1e-3 and t.max() <= 1 and t.min() < 0.01 and t.max() > 0.99


@pytest.mark.parametrize("with_mask", [False, True])
def test_loss_equals_hand_computation(with_mask):
    model, (x, y) = tiny(), batch()
    lm = None
    if with_mask:
        lm = torch.ones_like(y)
        lm[1, :9] = 0
    counted = counted_tokens(x, lm)
    g = gens(range(4))
    t = draw_levels(4, 1e-3, g)                               # row b: t first, then the masks
    xt, m = forward_mask(x, t, MASK, g, counted)
    assert m.any()
    ce = F.cross_entropy(model(xt)[0].transpose(1, 2), x, reduction="none")   # (B, T)
    per_row = (ce * m).sum(1) / t                             # (B,)
    hand = per_row.mean() / 16 if lm is None else per_row.sum() / counted.sum()
    got = MDLM(MASK).loss(model, x, y, lm, gens(range(4)))
    assert torch.allclose(got, hand, rtol=1e-5, atol=1e-6)


def test_split_batch_equals_full_batch():
    x, y = batch(B=6)
    full, half, mdlm = tiny(), tiny(), MDLM(MASK)
    lf = mdlm.loss(full, x, y, None, gens(range(6)))
    lf.backward()
    parts = [mdlm.loss(half, x[i:i + 3], y[i:i + 3], None, gens(range(i, i + 3))) for i in (0, 3)]
    ((parts[0] + parts[1]) / 2).backward()
    assert torch.allclose(lf, (parts[0] + parts[1]) / 2, rtol=1e-5)
    for p, q in zip(full.parameters(), half.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-7)


def test_eval_is_deterministic_and_depends_on_the_weights():
    x, y = batch()
    mdlm = MDLM(MASK)
    assert (mdlm.name, mdlm.extra_tokens, mdlm.causal) == ("mdlm", 1, False)
    a = mdlm.eval_loss(tiny(), x, y, None, key=3)
    assert torch.equal(a, mdlm.eval_loss(tiny(), x, y, None, key=3))
    assert not a.requires_grad and 1.0 < a < 5.0
    assert not torch.equal(a, mdlm.eval_loss(tiny(seed=1), x, y, None, key=3))


def test_bidirectional_attention_sees_the_future():
    x, _ = batch(B=1)
    later = x.clone()
    later[0, 9] = (later[0, 9] + 1) % V
    for causal in (True, False):
        model = tiny(causal=causal)
        a, b = model(x)[0][0, :9], model(later)[0][0, :9]     # outputs before the change
        assert torch.allclose(a, b, atol=1e-6) == causal


class Recorder(torch.nn.Module):
    """A stand-in model that prefers [MASK] above all and records how many are left per call."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.masked = []

    def forward(self, idx):
        self.masked.append(int((idx == MASK).sum()))
        logits = torch.randn(*idx.shape, V + 1)
        logits[..., MASK] = 100.0
        return logits, None


@pytest.mark.parametrize("steps", [4, 16, 40])
def test_sampler_schedule_never_emits_mask(steps):
    rec = Recorder()
    out = sample(rec, 3, 16, MASK, steps=steps, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 16) and not (out == MASK).any() and (out < V).all()
    if steps == 4:
        assert rec.masked == [48, 36, 24, 12]                 # 3 rows x 16 x (1, 3/4, 1/2, 1/4)
    assert len(rec.masked) == min(steps, 16)                  # steps revealing nothing are skipped


def test_sampler_with_a_real_model():
    out = sample(tiny().eval(), 2, 16, MASK, steps=5, generator=torch.Generator().manual_seed(0),
                 temperature=0.0)
    assert not (out == MASK).any() and (out < V).all()


def test_training_a_few_steps_drops_the_bound_below_uniform():
    x = torch.arange(16).remainder(V)[None].repeat(8, 1)     # one repetitive sequence
    model, mdlm = tiny(), MDLM(MASK, eval_levels=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = mdlm.eval_loss(model, x, x, None, 0)
    for step in range(60):
        opt.zero_grad()
        mdlm.loss(model, x, x, None, gens(range(8 * step, 8 * step + 8))).backward()
        opt.step()
    after = mdlm.eval_loss(model, x, x, None, 0)
    assert before > math.log(V) > after and after < 0.5 * math.log(V)
    out = sample(model.eval(), 2, 16, MASK, generator=torch.Generator().manual_seed(0), temperature=0.0)
    assert torch.equal(out, x[:2])                            # it unmasks its way to the sequence


def test_training_learns_to_read_a_masked_token_from_its_visible_neighbours():
    """Rows of one random token repeated: no position tells a masked token, only the row's visible tokens do
    (the test above can be passed by position alone). After training, the bound falls far below log V, and the
    first token is read from the last one alone, the only token left visible: attention to the future."""
    model, mdlm, g, T = tiny(), MDLM(MASK, eval_levels=4), torch.Generator().manual_seed(0), 16
    rows = lambda n: torch.randint(0, V, (n, 1), generator=g).repeat(1, T)  # noqa: E731
    opt, held_out = torch.optim.AdamW(model.parameters(), lr=1e-2), rows(64)
    for step in range(150):
        opt.zero_grad()
        mdlm.loss(model, (x := rows(16)), x, None, gens(range(16 * step, 16 * step + 16))).backward()
        opt.step()
    assert mdlm.eval_loss(model, held_out, held_out, None, 0) < 0.1 * math.log(V)
    only_last = held_out.clone()
    only_last[:, :-1] = MASK
    with torch.no_grad():
        first = F.cross_entropy(model(only_last)[0][:, 0], held_out[:, 0])
    assert first < 0.1 * math.log(V)
