"""ProRes (arXiv 2603.05369): the schedules against their formulas, the hook's in-place writes,
and the norm placements of model.Block against references written from the paper's equations."""
import math

import pytest
import torch

import prores
from model import GPT, GPTConfig, NORMS


def tiny(**kw):
    cfg = dict(block_size=16, vocab_size=97, n_layer=4, n_head=2, n_embd=16)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg))


# --- schedules -------------------------------------------------------------------------------

def formula(schedule, l, t, T, L):
    """alpha(l, t) for one layer, written out from the paper's equation (arXiv 2603.05369) in plain floats."""
    clip = lambda v: min(max(v, 0.0), 1.0)
    return {
        "linear": lambda: clip(t / (T * l)),
        "equal": lambda: clip(t / (T * L)),
        "reverse": lambda: clip(t / (T * (L - l + 1))),
        "sqrt": lambda: clip(math.sqrt(t / (T * l))),
        "square": lambda: clip((t / (T * l)) ** 2),
        "stagewise": lambda: clip((t - (l - 1) * T) / T),
        # the authors' floors: a_l + (1 - a_l) * (t - (l-1)T) / T, clipped to [a_l, 1]
        "stagewise-1/L": lambda: min(max(1 / L + (1 - 1 / L) * (t - (l - 1) * T) / T, 1 / L), 1.0),
        "stagewise-1/sqrt(L)": lambda: min(max(L ** -0.5 + (1 - L ** -0.5) * (t - (l - 1) * T) / T, L ** -0.5), 1.0),
        "stagewise-1/sqrt(l)": lambda: min(max(l ** -0.5 + (1 - l ** -0.5) * (t - (l - 1) * T) / T, l ** -0.5), 1.0),
        # fixed: held through the warmup (t <= T*L), then the plain model (the authors' loop)
        "fixed-1/L": lambda: 1 / L if t <= T * L else 1.0,
        "fixed-1/sqrt(L)": lambda: 1 / math.sqrt(L) if t <= T * L else 1.0,
        "fixed-1/sqrt(l)": lambda: 1 / math.sqrt(l) if t <= T * L else 1.0,
    }[schedule]()


@pytest.mark.parametrize("schedule", prores.SCHEDULES)
def test_alpha_matches_the_formula(schedule):
    L, T = 6, 10
    for t in (0, 1, 7, 10, 15, 25, 33, 59, 60, 61, 200):
        a = prores.alpha(t, L, T, schedule)
        assert a.shape == (L,) and a.dtype == torch.float32
        for l in range(1, L + 1):
            assert a[l - 1].item() == pytest.approx(formula(schedule, l, t, T, L), abs=1e-6), (l, t)


def test_stagewise_floor_worked_values():
    # L = 4, T = 10, floor 1/L = 0.25: at t = 15 layer 1 is on, layer 2 is half-way up from 0.25
    a = prores.alpha(15, 4, 10, "stagewise-1/L")
    assert a.tolist() == pytest.approx([1.0, 0.625, 0.25, 0.25])
    assert prores.alpha(0, 4, 10, "stagewise-1/sqrt(l)").tolist() == pytest.approx([1.0, 2 ** -0.5, 3 ** -0.5, 0.5])


def test_alpha_linear_worked_values():
    # the paper's example: layer 1 is on after T steps, layer L after T*L
    a = prores.alpha(1000, 4, 1000)
    assert a.tolist() == pytest.approx([1.0, 0.5, 1 / 3, 0.25])
    assert prores.alpha(4000, 4, 1000).tolist() == [1.0] * 4


@pytest.mark.parametrize("schedule", prores.WARMUPS)
def test_warmups_start_low_rise_monotonically_and_end_at_one(schedule):
    L, T = 5, 7
    end = prores.ramp_steps(L, T, schedule)
    assert end == T * L
    prev = prores.alpha(0, L, T, schedule)
    if schedule in prores.STAGEWISE_FLOORS:  # they start at their floor, not at 0
        assert prev.gt(0).all() and prev.lt(1).any()
    else:
        assert prev.eq(0).all()
    for t in range(1, end + 5):
        a = prores.alpha(t, L, T, schedule)
        assert (a >= prev).all(), t
        prev = a
        if t < end:
            assert not a.eq(1).all(), t  # some layer is still ramping before T*L
    for t in (end, end + 1, 10 * end):
        assert prores.alpha(t, L, T, schedule).eq(1).all()


@pytest.mark.parametrize("schedule", prores.FIXED)
def test_fixed_schedules_are_constant_through_the_warmup(schedule):
    # (the hold's end and the hook: tests/test_prores_schedule.py)
    assert prores.ramp_steps(8, 100, schedule) == 801
    assert torch.equal(prores.alpha(0, 8, 100, schedule), prores.alpha(800, 8, 100, schedule))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="linear"):
        prores.alpha(0, 4, 10, "cubic")
    with pytest.raises(ValueError, match="T > 0"):
        prores.alpha(0, 4, 0, "linear")


# --- the hook --------------------------------------------------------------------------------

def test_hook_writes_in_place_and_stops_when_done():
    m = tiny(n_layer=3)
    buf = m.residual_scale
    ptr = buf.data_ptr()
    hook = prores.ProRes(m, T=4)
    assert hook.end == 12 and not hook.done
    for step in range(12):
        assert hook.update(step)
        assert m.residual_scale is buf and buf.data_ptr() == ptr
        assert torch.equal(buf, prores.alpha(step, 3, 4))
        assert not hook.done
    assert hook.update(12) and hook.done and buf.eq(1).all()
    buf.fill_(7.0)  # anything written later is left alone: the hook no longer touches the model
    assert not hook.update(13) and buf.eq(7).all()


def test_hook_unwraps_compiled_model():
    m = tiny()
    compiled = torch.compile(m, backend="eager")
    hook = prores.ProRes(compiled, T=5)
    assert hook.model is m
    hook.update(5)
    assert m.residual_scale.tolist() == pytest.approx([1, 0.5, 1 / 3, 0.25])
    with pytest.raises(TypeError, match="residual_scale"):
        prores.ProRes(torch.nn.Linear(2, 2), T=5)


def test_no_recompilation_when_the_hook_changes_the_scales(graphs):
    """torch.compile with a backend that counts the graphs it is handed: ProRes's in-place
    writes change the output (the buffer is a graph input, not a baked constant) but never
    the number of compilations."""
    counting_backend, compiled_graphs = graphs
    torch.manual_seed(0)
    m = tiny(n_layer=3).eval()
    fwd = torch.compile(m, backend=counting_backend)
    hook = prores.ProRes(fwd, T=2)
    idx = torch.randint(0, 97, (2, 16))
    seen = []
    for step in range(8):
        hook.update(step)
        with torch.no_grad():
            out = fwd(idx)[0]
            ref = m(idx)[0]  # eager, same buffer values
        assert torch.allclose(out, ref, atol=1e-5), step
        seen.append(out)
    assert len(compiled_graphs) == 1
    assert not torch.allclose(seen[0], seen[3])  # the scales did reach the compiled graph


def test_at_step_zero_every_block_passes_the_residual_stream_through():
    torch.manual_seed(0)
    m = tiny(n_layer=4, norm="pre").eval()
    prores.ProRes(m, T=10).update(0)
    idx = torch.randint(0, 97, (2, 16))
    seen = {}
    m.transformer.ln_f.register_forward_hook(lambda mod, inp, out: seen.__setitem__("ln_f", inp[0]))
    for i, block in enumerate(m.transformer.h):
        block.register_forward_hook(lambda mod, inp, out, i=i: seen.__setitem__(i, (inp[0], out)))
    m(idx)
    emb = m.transformer.wte(idx) + m.transformer.wpe(torch.arange(16))
    assert torch.equal(seen["ln_f"], emb)
    for i in range(4):
        assert torch.equal(seen[i][0], seen[i][1])


# --- norm placements against hand-written references ----------------------------------------

def layer_norm(x, ln):
    """LayerNorm from its definition: (x - mean) / sqrt(var + eps) * weight + bias."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + 1e-5) * ln.weight
    return y + ln.bias if ln.bias is not None else y


def reference(block, x, a, norm, L, l):
    """The paper's placements (arXiv 2603.05369), the sub-layers F = attention then MLP, each with its own norm(s);
    l = 1..L is the block's layer number."""
    branches = [(block.attn, block.ln_1, getattr(block, "ln_1_out", None)),
                (block.mlp, block.ln_2, getattr(block, "ln_2_out", None))]
    for f, ln, ln_out in branches:
        if norm in ("pre", "lns-init"):   # x + a F(LN(x))
            x = x + a * f(layer_norm(x, ln))
        elif norm == "lns":          # x + a F(LN(x) / sqrt(l)), the scale fixed (LNS paper)
            x = x + a * f(layer_norm(x, ln) / math.sqrt(l))
        elif norm == "post":         # LN(x + a F(x))
            x = layer_norm(x + a * f(x), ln)
        elif norm == "sandwich":     # x + a LN'(F(LN(x)))
            x = x + a * layer_norm(f(layer_norm(x, ln)), ln_out)
        elif norm == "deepnorm":     # LN((2L)^(1/4) x + a F(x))
            x = layer_norm((2 * L) ** 0.25 * x + a * f(x), ln)
    return x


@pytest.mark.parametrize("norm", NORMS)
def test_block_forward_matches_the_reference(norm):
    torch.manual_seed(0)
    L = 4
    m = tiny(n_layer=L, norm=norm).eval()
    if norm == "lns-init":  # the ProRes authors' LNS: block i's norm weights start at 1/sqrt(i + 1)
        for i, block in enumerate(m.transformer.h):
            for ln in (block.ln_1, block.ln_2):
                assert torch.allclose(ln.weight, torch.full_like(ln.weight, 1 / math.sqrt(i + 1)))
    else:  # every other placement starts with unit norm weights; perturb them so they matter
        with torch.no_grad():
            for name, p in m.named_parameters():
                if ".ln_" in name:
                    p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2, 16, 16)
    for i, block in enumerate(m.transformer.h):
        a = torch.tensor(0.37 + 0.1 * i)
        with torch.no_grad():
            assert torch.allclose(block(x, a), reference(block, x, a, norm, L, i + 1), atol=1e-5), (norm, i)


@pytest.mark.parametrize("norm", NORMS)
def test_gpt_forward_uses_each_layers_scale(norm):
    """GPT.forward hands block i the buffer's entry i: the whole model equals a chain of
    references fed the same per-layer scales."""
    torch.manual_seed(1)
    L = 3
    m = tiny(n_layer=L, norm=norm).eval()
    prores.ProRes(m, T=2).update(3)  # alpha = (1, 0.75, 0.5)
    idx = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        x = m.transformer.wte(idx) + m.transformer.wpe(torch.arange(16))
        for i, block in enumerate(m.transformer.h):
            x = reference(block, x, [1.0, 0.75, 0.5][i], norm, L, i + 1)
        ref = m.lm_head(layer_norm(x, m.transformer.ln_f))
        assert torch.allclose(m(idx)[0], ref, atol=1e-4)
