"""MIR (mir.py): the masked copy, the loss against a hand computation, lambda 0, gradients,
and the per-row generator contract."""
import pytest
import torch
from torch.nn import functional as F

from mir import MIR, masked_copy
from model import GPT, GPTConfig
from conftest import gens, token_batch

V = 11            # corpus vocabulary; [MASK] = V, the model's extra last row
MASK = V


def tiny(**kw):
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=16, vocab_size=V + 1, n_layer=2, n_head=2, n_embd=16, **kw))


def batch(B=4, T=16, seed=1):
    return token_batch(V, B, T, seed)


def test_keep_first_never_masked_and_mask_only_replaces():
    x = torch.randint(0, V, (500, 32), generator=torch.Generator().manual_seed(0))
    x0 = x.clone()
    xh = masked_copy(x, MASK, (0.0, 1.0), keep_first=8, generator=gens(range(500)))
    assert torch.equal(x, x0)                                  # the input is untouched
    assert torch.equal(xh[:, :8], x[:, :8])
    changed = xh != x
    assert torch.equal(changed, xh == MASK)                    # every change is a [MASK] ...
    assert not (x == MASK).any()                               # ... which the clean batch lacks
    assert changed[:, 8:].float().mean() > 0.3


def test_ratio_per_sequence_spans_the_range():
    x = torch.zeros(2000, 264, dtype=torch.long)
    rates = (masked_copy(x, MASK, (0.0, 0.5), 8, torch.Generator().manual_seed(0)) == MASK)[:, 8:].float().mean(1)
    assert rates.min() < 0.03 and rates.max() > 0.47 and abs(rates.mean() - 0.25) < 0.01
    assert rates.max() < 0.6                                   # each row's rate near its r <= 0.5
    fixed = (masked_copy(x, MASK, (0.3, 0.3), 8, torch.Generator().manual_seed(1)) == MASK)[:, 8:].float()
    assert abs(fixed.mean() - 0.3) < 0.005 and fixed.mean(1).std() < 0.05


def test_per_row_generator_contract():
    x, _ = batch(B=6)
    full = masked_copy(x, MASK, generator=gens(range(6)))
    assert torch.equal(masked_copy(x[2:5], MASK, generator=gens([2, 3, 4])), full[2:5])
    assert torch.equal(masked_copy(x[[5, 0]], MASK, generator=gens([5, 0])), full[[5, 0]])


@pytest.mark.parametrize("with_mask", [False, True])
def test_loss_equals_the_two_cross_entropies(with_mask):
    model, (x, y) = tiny(), batch()
    lm = None
    if with_mask:
        lm = torch.ones_like(y)
        lm[0, :10] = 0
        lm[2, 5:] = 0
    xh = masked_copy(x, MASK, generator=gens(range(4)))
    assert (xh == MASK).any()

    def ce(inp):
        per = F.cross_entropy(model(inp)[0].transpose(1, 2), y, reduction="none")   # (B, T)
        return per.mean() if lm is None else (per * lm).sum() / lm.sum()
    hand = ce(x) + 0.4 * ce(xh)
    got = MIR(MASK).loss(model, x, y, lm, gens(range(4)))
    assert torch.allclose(got, hand, rtol=1e-5, atol=1e-6)


def test_lambda_zero_is_exactly_the_plain_loss_and_gradients():
    x, y = batch()
    a, b = tiny(), tiny()
    la = MIR(MASK, lam=0.0).loss(a, x, y, None, gens(range(4)))
    lb = b(x, y)[1]
    la.backward(), lb.backward()
    assert torch.equal(la, lb)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad), n


def test_gradients_reach_the_mask_embedding():
    x, y = batch()
    model = tiny(tie_weights=False)          # untied: the head's [MASK] row cannot leak in
    model(x, y)[1].backward()
    assert model.transformer.wte.weight.grad[MASK].abs().sum() == 0
    model.zero_grad()
    MIR(MASK).loss(model, x, y, None, gens(range(4))).backward()
    assert model.transformer.wte.weight.grad[MASK].abs().sum() > 0


def test_split_batch_equals_full_batch():
    x, y = batch(B=6)
    full, half = tiny(), tiny()
    mir = MIR(MASK)
    lf = mir.loss(full, x, y, None, gens(range(6)))
    lf.backward()
    parts = [mir.loss(half, x[i:i + 3], y[i:i + 3], None, gens(range(i, i + 3))) for i in (0, 3)]
    for part in parts:
        (part / 2).backward()
    assert torch.allclose(lf, (parts[0] + parts[1]) / 2, rtol=1e-5)
    for p, q in zip(full.parameters(), half.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-7)


def test_eval_is_plain_next_token_loss_and_protocol():
    model, (x, y) = tiny(), batch()
    mir = MIR(MASK)
    assert (mir.name, mir.extra_tokens, mir.causal) == ("mir", 1, True)
    with torch.no_grad():
        assert torch.equal(mir.eval_loss(model, x, y, None, 0), model(x, y)[1])
