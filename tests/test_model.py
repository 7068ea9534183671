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


def test_lns_init_initialises_norm_weights_to_inverse_sqrt_depth():
    m = tiny(norm="lns-init")  # the ProRes authors' variant: a learnable weight that starts there
    for i, block in enumerate(m.transformer.h):
        assert torch.allclose(block.ln_1.weight, torch.full((16,), 1 / math.sqrt(i + 1)))
        assert block.ln_1.scale == 1.0


def test_lns_scales_the_norm_output_by_a_fixed_inverse_sqrt_depth():
    """LayerNorm-Scaling (arXiv 2502.05795): LN(x) * 1/sqrt(l), the scale a constant."""
    torch.manual_seed(0)
    m = tiny(norm="lns")
    x = torch.randn(2, 5, 16, requires_grad=True)
    for l, block in enumerate(m.transformer.h, start=1):
        ln = block.ln_2
        ref = torch.nn.functional.layer_norm(x, (16,), ln.weight, ln.bias, 1e-5) / math.sqrt(l)
        assert torch.allclose(ln(x), ref, atol=1e-6)
        assert torch.equal(ln.weight, torch.ones(16))       # the learnable weight starts at 1
    names = [n for n, _ in m.named_parameters()] + list(m.state_dict())
    assert not any("scale" in n and "residual_scale" not in n for n in names)  # nothing learned


def test_deepnorm_init_is_xavier_with_the_deepnet_gain():
    """DeepNet: Xavier-normal, gain (8L)^(-1/4) on v, attn out, both MLP matrices; gain 1 on q, k."""
    L, C = 6, 64
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=8, vocab_size=50, n_layer=L, n_head=4, n_embd=C, norm="deepnorm", init="deepnet"))
    beta = (8 * L) ** -0.25
    xavier = lambda fan_in, fan_out, gain: gain * math.sqrt(2.0 / (fan_in + fan_out))
    stds = {"q": [], "k": [], "v": [], "o": [], "fc": [], "proj": []}
    for b in m.transformer.h:
        w = b.attn.c_attn.weight
        for i, k in enumerate("qkv"):
            stds[k].append(w[i * C:(i + 1) * C])
        stds["o"].append(b.attn.c_proj.weight)
        stds["fc"].append(b.mlp.c_fc.weight)
        stds["proj"].append(b.mlp.c_proj.weight)
    want = {"q": xavier(C, C, 1), "k": xavier(C, C, 1), "v": xavier(C, C, beta), "o": xavier(C, C, beta),
            "fc": xavier(C, 4 * C, beta), "proj": xavier(4 * C, C, beta)}
    for k, ws in stds.items():
        got = torch.cat([w.flatten() for w in ws]).std().item()
        assert got == pytest.approx(want[k], rel=0.03), k
    assert m.transformer.h[0].deepnorm_k == pytest.approx((2 * L) ** 0.25)


def test_plain_init_leaves_residual_projections_at_0_02():
    torch.manual_seed(0)
    cfg = dict(block_size=8, vocab_size=50, n_layer=12, n_head=4, n_embd=64)
    plain, gpt2 = GPT(GPTConfig(init="plain", **cfg)), GPT(GPTConfig(init="gpt2", **cfg))
    proj = lambda m: torch.cat([p.flatten() for n, p in m.named_parameters() if n.endswith("c_proj.weight")])
    assert proj(plain).std().item() == pytest.approx(0.02, rel=0.03)
    assert proj(gpt2).std().item() == pytest.approx(0.02 / math.sqrt(24), rel=0.03)
    with pytest.raises(ValueError, match="init"):
        GPT(GPTConfig(init="xavier", **cfg))


def test_deepnorm_runs_with_whatever_init_says_and_deepnet_needs_deepnorm():
    """The ProRes authors' arms: `deeppost` on DeepNet's init, `deeppost_prores` on the plain one."""
    torch.manual_seed(0)
    cfg = dict(block_size=8, vocab_size=50, n_layer=6, n_head=4, n_embd=64, norm="deepnorm")
    v = lambda m: torch.cat([b.attn.c_attn.weight[128:].flatten() for b in m.transformer.h])  # the v rows
    plain, deepnet = GPT(GPTConfig(init="plain", **cfg)), GPT(GPTConfig(init="deepnet", **cfg))
    assert v(plain).std().item() == pytest.approx(0.02, rel=0.03)
    assert v(deepnet).std().item() == pytest.approx((8 * 6) ** -0.25 * math.sqrt(2 / 128), rel=0.03)
    for norm in ("pre", "post", "lns"):
        with pytest.raises(ValueError, match=f"init 'deepnet'.*norm 'deepnorm'.*norm '{norm}'"):
            GPT(GPTConfig(**{**cfg, "norm": norm}, init="deepnet"))


@pytest.mark.parametrize("init, tie", [("gpt2", True), ("plain", True), ("plain", False), ("deepnet", False)])
def test_token_embedding_std_follows_the_init(init, tie):
    """gpt2: N(0, 0.02); plain and deepnet: N(0, 0.02 sqrt(d)), the ProRes authors' embedding; an
    untied head stays at 0.02 (theirs), a tied one is the embedding; positions stay at 0.02."""
    torch.manual_seed(0)
    d = 64
    m = GPT(GPTConfig(block_size=256, vocab_size=3000, n_layer=2, n_head=4, n_embd=d, init=init, tie_weights=tie,
                      norm="deepnorm" if init == "deepnet" else "pre"))
    want = 0.02 if init == "gpt2" else 0.02 * math.sqrt(d)
    assert m.transformer.wte.weight.std().item() == pytest.approx(want, rel=0.02)
    assert m.lm_head.weight.std().item() == pytest.approx(want if tie else 0.02, rel=0.02)
    assert m.transformer.wpe.weight.std().item() == pytest.approx(0.02, rel=0.03)


def test_non_causal_switch_lets_a_position_see_later_tokens():
    torch.manual_seed(0)
    idx = torch.randint(0, 97, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (changed[0, 10] + 1) % 97
    for causal in (True, False):
        torch.manual_seed(0)
        m = tiny(causal=causal).eval()
        a, b = m(idx)[0], m(changed)[0]
        assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6) == causal


@pytest.mark.parametrize("impl", ["fused", "standard"])
def test_float_loss_mask_is_a_weighted_mean(impl):
    torch.manual_seed(0)
    m = tiny(loss_impl=impl)
    idx, tgt = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16))
    w = torch.rand(2, 16)
    w[0, :4] = 0.0
    _, loss = m(idx, tgt, w)
    logits = m(idx)[0]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 97), tgt.reshape(-1), reduction="none")
    assert loss.item() == pytest.approx(((ce * w.reshape(-1)).sum() / w.sum()).item(), rel=1e-5)
    m.zero_grad()
    loss.backward()
    g = m.transformer.h[0].attn.c_attn.weight.grad.clone()
    m.zero_grad()
    ((ce * w.reshape(-1)).sum() / w.sum()).backward()
    assert torch.allclose(g, m.transformer.h[0].attn.c_attn.weight.grad, rtol=1e-4, atol=1e-7)


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


def reference_loss(m, idx, tgt, mask):
    """The loss as GPT.forward took it before counted_rows: the last norm and the head over every
    row, the rows that do not count given target -1 (and weight 0) and dropped by the loss."""
    from lm_loss import linear_cross_entropy
    from model import standard_cross_entropy
    h = m.transformer.ln_f(m.residual_stream(idx)).view(-1, m.config.n_embd)
    t = tgt.masked_fill(mask == 0, -1).reshape(-1)
    w = mask.reshape(-1) if mask.is_floating_point() else None
    if m.config.loss_impl == "standard":
        return standard_cross_entropy(h, m.lm_head.weight, t, row_weight=w)
    return linear_cross_entropy(h, m.lm_head.weight, t, row_weight=w)


def haystack_mask(B, T, g):
    """One counted target per row at a position drawn anywhere in the row (a padded record)."""
    mask = torch.zeros(B, T, dtype=torch.long)
    mask[torch.arange(B), torch.randint(0, T, (B,), generator=g)] = 1
    return mask


def assert_same_loss_and_grads(m, idx, tgt, mask, rel=1e-5, rtol=1e-4, atol=1e-6):
    """GPT.forward's loss and every gradient = reference_loss's (all positions scored)."""
    res = []
    for fn in (lambda: m(idx, tgt, mask)[1], lambda: reference_loss(m, idx, tgt, mask)):
        m.zero_grad(set_to_none=True)
        loss = fn()
        loss.backward()
        res.append((loss.item(), {n: p.grad.clone() for n, p in m.named_parameters()}))
    assert res[0][0] == pytest.approx(res[1][0], rel=rel)
    for n, g in res[1][1].items():
        torch.testing.assert_close(res[0][1][n], g, rtol=rtol, atol=atol, msg=n)


def masks(B=3, T=16):
    g = torch.Generator().manual_seed(3)
    one = torch.zeros(B, T, dtype=torch.long)
    one[torch.arange(B), torch.randint(0, T, (B,), generator=g)] = 1        # a haystack record: one answer
    weights = torch.rand(B, T, generator=g) * (torch.rand(B, T, generator=g) > 0.5)  # MIR-like weights, some 0
    return {"one per row": one, "random": (torch.rand(B, T, generator=g) > 0.6).long(),
            "every row": torch.ones(B, T, dtype=torch.long), "float weights": weights,
            "bool": torch.rand(B, T, generator=g) > 0.5}


@pytest.mark.parametrize("impl", ["fused", "standard"])
@pytest.mark.parametrize("kind", list(masks()))
def test_counted_rows_give_the_loss_and_gradients_of_scoring_every_row(impl, kind):
    """GPT.forward puts only the counted rows through ln_f, the head and the loss: the same loss
    and gradients (every parameter, fp32 tolerance) as scoring all rows with the others ignored."""
    torch.manual_seed(0)
    m = tiny(loss_impl=impl, tie_weights=kind != "random")
    idx, tgt = torch.randint(0, 97, (3, 16)), torch.randint(0, 97, (3, 16))
    assert_same_loss_and_grads(m, idx, tgt, masks()[kind], rel=1e-6, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("causal", [True, False])
def test_the_last_block_at_the_counted_positions_only_matches_every_position(norm, causal):
    """GPT.forward puts only the counted positions through the last block (their queries, every
    key of their row): for every norm placement, causal or not, with a ProRes-like residual
    scale, the loss and gradients of running the last block everywhere."""
    torch.manual_seed(0)
    m = tiny(norm=norm, causal=causal, tie_weights=False)
    m.residual_scale.copy_(torch.tensor([1.0, 0.5, 0.25]))
    g = torch.Generator().manual_seed(1)
    idx, tgt = torch.randint(0, 97, (5, 16), generator=g), torch.randint(0, 97, (5, 16), generator=g)
    for mask in (haystack_mask(5, 16, g), (torch.rand(5, 16, generator=g) > 0.7).long()):
        assert_same_loss_and_grads(m, idx, tgt, mask)


def test_rows_grouped_by_length_give_the_loss_of_the_whole_batch():
    """A batch large enough to be cut into length groups (model.length_groups): each group cut
    after its last counted position, the same loss and gradients as the whole batch."""
    from model import LENGTH_GROUPS, length_groups
    torch.manual_seed(0)
    m = tiny(tie_weights=False)
    g = torch.Generator().manual_seed(2)
    B = 64 * LENGTH_GROUPS
    idx, tgt = torch.randint(0, 97, (B, 16), generator=g), torch.randint(0, 97, (B, 16), generator=g)
    mask = haystack_mask(B, 16, g)
    groups = length_groups(mask, LENGTH_GROUPS)
    assert groups is not None and len(groups) == LENGTH_GROUPS
    assert sorted(torch.cat([r for r, _ in groups]).tolist()) == list(range(B))   # every row once
    for rows, n in groups:                                                      # nothing counted is cut
        assert not mask[rows, n:].any() and mask[rows, :n].any(1).all()
    assert [n for _, n in groups] == sorted(n for _, n in groups) and groups[0][1] < 16
    assert_same_loss_and_grads(m, idx, tgt, mask)
    weights = torch.rand(B, 16, generator=g) * mask                              # float weights too
    assert_same_loss_and_grads(m, idx, tgt, weights)


def test_the_last_block_asks_only_the_counted_queries_when_few_count(monkeypatch):
    """One counted target per row: the last block's attention gets the N queries (block_at); half the
    positions counted (a masked-diffusion batch): it runs over every position (no key copies)."""
    from model import CausalSelfAttention, _Asking
    asked, full, at = [], CausalSelfAttention.forward, _Asking.attn
    monkeypatch.setattr(CausalSelfAttention, "forward", lambda self, x: asked.append("all") or full(self, x))
    monkeypatch.setattr(_Asking, "attn", lambda self, h: asked.append(h.shape[0]) or at(self, h))
    torch.manual_seed(0)
    m = tiny(causal=False)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 97, (4, 16), generator=g)
    m(idx, idx, haystack_mask(4, 16, g))
    assert asked == ["all", "all", 4]
    asked.clear()
    m(idx, idx, (torch.rand(4, 16, generator=g) < 0.5).long())
    assert asked == ["all", "all", "all"]


def test_the_blocks_and_the_attention_take_no_task_specific_argument():
    """The forward passes a reader reads are the model's equations: the counted-positions speed path
    (counted_loss) is not threaded through them."""
    import inspect
    from model import Block, CausalSelfAttention
    assert list(inspect.signature(CausalSelfAttention.forward).parameters) == ["self", "x"]
    assert list(inspect.signature(Block.forward).parameters) == ["self", "x", "alpha"]
    assert list(inspect.signature(GPT.forward).parameters) == ["self", "idx", "targets", "loss_mask"]


def test_length_groups_only_where_they_save_work():
    from model import length_groups
    g = torch.Generator().manual_seed(0)
    assert length_groups(haystack_mask(255, 16, g), 4) is None          # fewer than 64 rows a group
    late = torch.zeros(256, 16, dtype=torch.long)
    late[:, 14] = 1
    assert length_groups(late, 4) is None                               # every row needs 15 of 16
    assert length_groups(haystack_mask(256, 16, g), 1) is None


def test_counted_rows_gathers_only_what_counts_and_copies_nothing_when_all_count():
    from model import counted_rows
    h, t = torch.randn(6, 4), torch.arange(6)
    rows, targets, w = counted_rows(h, t, torch.tensor([0, 1, 0, 0, 2, 0]))
    assert torch.equal(rows, h[[1, 4]]) and torch.equal(targets, torch.tensor([1, 4])) and w is None
    rows, targets, w = counted_rows(h, t, torch.tensor([0.0, 0.5, 0.0, 0.0, 2.0, 0.0]))
    assert torch.equal(w, torch.tensor([0.5, 2.0])) and torch.equal(targets, torch.tensor([1, 4]))
    rows, targets, w = counted_rows(h, t, torch.ones(6))
    assert rows is h and targets is t                                   # every row counts: no copy
    rows, _, _ = counted_rows(h, t, torch.zeros(6, dtype=torch.long))
    assert rows.shape == (0, 4)


@pytest.mark.parametrize("impl", ["fused", "standard"])
def test_a_mask_that_counts_nothing_scores_as_before(impl):
    torch.manual_seed(0)
    m = tiny(loss_impl=impl)
    idx, tgt = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16))
    for mask in (torch.zeros(2, 16, dtype=torch.long), torch.zeros(2, 16)):
        ours, ref = m(idx, tgt, mask)[1], reference_loss(m, idx, tgt, mask)
        assert torch.equal(ours.isnan(), ref.isnan()) and (ref.isnan() or ours.item() == ref.item())


def test_dropout_at_attn_out_drops_only_the_attention_output():
    """dropout_at='attn-out' (the data-constrained authors' placement): with every attention
    output projection zeroed, a training-mode forward is the eval-mode one (no other site drops);
    with it intact, or with dropout_at='all' (embeddings, probabilities, MLP too), it is not."""
    x = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))

    def logits(at, zero_attn_out, train):
        torch.manual_seed(0)
        m = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.5, dropout_at=at))
        if zero_attn_out:
            with torch.no_grad():
                for b in m.transformer.h:
                    b.attn.c_proj.weight.zero_()
                    b.attn.c_proj.bias.zero_()
        m.train(train)
        torch.manual_seed(1)
        return m(x)[0]
    assert torch.equal(logits("attn-out", True, True), logits("attn-out", True, False))
    assert not torch.allclose(logits("attn-out", False, True), logits("attn-out", False, False))
    assert not torch.allclose(logits("all", True, True), logits("all", True, False))
    with pytest.raises(ValueError, match="dropout placement"):
        GPT(GPTConfig(dropout_at="mlp"))
