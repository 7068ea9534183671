import math

import pytest
import torch

from model import GPT, GPTConfig, NORMS, group_of


def tiny(**kw):
    cfg = dict(block_size=16, vocab_size=97, n_layer=3, n_head=2, n_embd=16)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg))


def test_shapes():
    m = tiny()
    idx = torch.randint(0, 97, (2, 16))
    logits, loss = m(idx)
    assert logits.shape == (2, 16, 97) and loss is None
    logits, loss = m(idx, idx)
    assert logits is None and loss.dim() == 0


@pytest.mark.parametrize("norm", NORMS)
def test_causality(norm):
    torch.manual_seed(0)
    m = tiny(norm=norm).eval()
    idx = torch.randint(0, 97, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (changed[0, 10] + 1) % 97
    a, b = m(idx)[0], m(changed)[0]
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)
    assert not torch.allclose(a[:, 10:], b[:, 10:])


@pytest.mark.parametrize("norm", ["pre", "sandwich", "lns"])
def test_zero_residual_scale_makes_every_block_the_identity(norm):
    torch.manual_seed(0)
    m = tiny(norm=norm)
    m.residual_scale.zero_()
    x = torch.randn(2, 16, 16)
    for block in m.transformer.h:
        assert torch.equal(block(x, m.residual_scale[0]), x)


def test_loss_at_init_is_close_to_ln_vocab():
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=32, vocab_size=50257, n_layer=2, n_head=2, n_embd=32))
    idx = torch.randint(0, 50257, (4, 32))
    _, loss = m(idx, torch.randint(0, 50257, (4, 32)))
    assert abs(loss.item() - math.log(50257)) < 0.05


def test_loss_mask_counts_only_masked_positions():
    torch.manual_seed(0)
    m = tiny()
    idx, tgt = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16))
    mask = torch.zeros(2, 16, dtype=torch.long)
    mask[:, 5:9] = 1
    _, loss = m(idx, tgt, mask)
    logits = m(idx)[0]
    ref = torch.nn.functional.cross_entropy(logits[:, 5:9].reshape(-1, 97), tgt[:, 5:9].reshape(-1))
    assert torch.allclose(loss, ref, atol=1e-5)


def test_weight_decay_only_on_matrices_of_attention_mlp_head():
    for tie in (True, False):
        m = tiny(tie_weights=tie)
        opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
        decay = {id(p) for p in opt.param_groups[0]["params"]}
        names = {id(p): n for n, p in m.named_parameters()}
        for n, p in m.named_parameters():
            want = p.dim() >= 2 and group_of(n) in ("attn", "mlp", "head")
            assert (id(p) in decay) == want, n
        n_opt = sum(len(g["params"]) for g in opt.param_groups)
        assert n_opt == len(names)  # a tied head is one tensor, optimized once
        assert (m.lm_head.weight is m.transformer.wte.weight) == tie


def test_every_parameter_has_a_group():
    m = tiny(norm="sandwich")
    groups = {group_of(n) for n, _ in m.named_parameters()}
    assert groups == {"embed", "pos", "attn", "mlp", "norm"}  # tied head: no separate tensor
    assert group_of("lm_head.weight") == "head"
    with pytest.raises(KeyError):
        group_of("something.else")


def test_lns_initialises_norm_weights_to_inverse_sqrt_depth():
    m = tiny(norm="lns")
    for i, block in enumerate(m.transformer.h):
        assert torch.allclose(block.ln_1.weight, torch.full((16,), 1 / math.sqrt(i + 1)))


def test_flops_per_token_counts_head_and_attention():
    m = tiny()
    n = m.get_num_params() + 97 * 16
    assert m.flops_per_token() == 6 * n + 12 * 3 * 16 * 16
    assert m.estimate_mfu(1000.0, 1e12) == pytest.approx(m.flops_per_token() * 1000 / 1e12)


def test_generate_extends_the_context():
    m = tiny()
    out = m.generate(torch.zeros(1, 3, dtype=torch.long), 20, top_k=5)
    assert out.shape == (1, 23) and int(out.max()) < 97


@pytest.mark.parametrize("tie", [True, False])
def test_fused_loss_equals_the_standard_formulation_in_the_model(tie):
    torch.manual_seed(0)
    m = tiny(tie_weights=tie)
    idx, tgt = torch.randint(0, 97, (3, 16)), torch.randint(0, 97, (3, 16))
    mask = (torch.rand(3, 16) > 0.3).long()
    res = {}
    for impl in ("standard", "fused"):
        m.config.loss_impl = impl
        m.zero_grad()
        _, loss = m(idx, tgt, mask)
        loss.backward()
        res[impl] = (loss.item(), {n: p.grad.clone() for n, p in m.named_parameters()})
    assert res["fused"][0] == pytest.approx(res["standard"][0], rel=1e-6)
    for n, g in res["standard"][1].items():
        assert torch.allclose(res["fused"][1][n], g, rtol=1e-5, atol=1e-7), n
