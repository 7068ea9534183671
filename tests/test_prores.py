"""ProRes (arXiv 2603.05369): the schedules against their formulas, the hook's in-place writes,
and the norm placements of model.Block against references written from PAPERS.md section 4."""
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
    """alpha(l, t) for one layer, written out from PAPERS.md section 4 in plain floats."""
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


def test_no_recompilation_when_the_hook_changes_the_scales():
    """torch.compile with a backend that counts the graphs it is handed: ProRes's in-place
    writes change the output (the buffer is a graph input, not a baked constant) but never
    the number of compilations."""
    torch._dynamo.reset()
    compiled_graphs = []

    def counting_backend(gm, example_inputs):
        compiled_graphs.append(gm)
        return gm.forward

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
    torch._dynamo.reset()


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
    """PAPERS.md section 4, the sub-layers F = attention then MLP, each with its own norm(s);
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


# --- the experiment (experiments/prores.py, experiments/lib/prores_report.py) ---------------------

def test_experiment_spike_count_and_train_flags(tmp_path):
    from experiments import prores as exp
    from experiments.lib.prores_report import count_spikes
    from experiments.lib.prores_runs import make_run, measure_runs, prores_T, scan_runs
    from flags import parse_args as train_parse_args
    flat = [5.0] * 30
    assert count_spikes(flat, 20, 1.1) == 0
    bumped = flat[:25] + [5.6] + flat[26:]  # +12% over the running median
    assert count_spikes(bumped, 20, 1.1) == 1 and count_spikes(bumped, 20, 1.15) == 0
    assert count_spikes(bumped[:15] + [9.0] + bumped[16:], 20, 1.1) == 1  # before the first full window
    # the default preset, breakdown: the two baselines with and without ProRes where the depth scan found them break
    b = exp.parse_args(["--out", str(tmp_path / "b")])
    assert (b.preset, b.scan, b.lr, b.depths, b.norms, b.iters, b.seeds, b.stage, b.n_embd, b.init, b.schedule) == \
        ("breakdown", False, 4e-3, [8, 48, 96], ["pre", "post"], 1000, 3, "music", 32, "plain", "wsd")
    assert len(measure_runs(b, b.lr, b.depths)) == 2 * 2 * 3 * 3 and b.iters // b.evals == 100
    assert [prores_T(b, d, b.iters) for d in b.depths] == [62.5, 10.4167, 5.2083]
    a = exp.parse_args(["--preset", "depth", "--quick", "--out", str(tmp_path)])
    assert a.norms == ["pre", "post", "sandwich", "deepnorm", "lns-init"] and a.stage == "music"
    scan = scan_runs(a)
    assert len(scan) == len(a.scan_lrs) * len(a.scan_depths) * len(a.scan_norms)
    assert not any(r.meta["prores"] for r in scan) and {r.meta["seed"] for r in scan} == {0}
    meas = measure_runs(a, 2e-3, [4, 16])
    names = [r.name for r in meas]
    assert len(names) == len(set(names)) == len(a.norms) * 2 * 2 * a.seeds
    for r in scan + meas:  # every run's flags parse in train.py and say what its labels say
        args, m = train_parse_args(r.argv + ["--out", str(r.folder)]), r.meta
        assert (args.norm, args.prores, args.n_layer, args.seed, args.lr, args.iters, args.log_interval) == \
            (m["norm"], m["prores"], m["depth"], m["seed"], m["lr"], m["iters"], 1)
        # the authors' baselines and schedule: plain init (DeepNet's for the DeepNorm baseline), WSD, 2% warmup,
        # decay over the last 10% to 0
        assert args.init == m["init"] == ("deepnet" if (m["norm"], m["prores"]) == ("deepnorm", False) else "plain")
        assert (args.schedule, args.decay_frac, args.min_lr) == ("wsd", 0.1, 0.0)
        assert args.warmup_iters == max(1, round(0.02 * m["iters"]))
        if m["prores"]:
            T = 0.5 * m["iters"] / m["depth"]  # the deepest layer fully on half-way (T may be fractional)
            assert args.prores_T == prores_T(a, m["depth"], m["iters"]) == pytest.approx(T, rel=1e-4)
            assert prores.ramp_steps(m["depth"], args.prores_T) == round(0.5 * m["iters"])
    # a scan run and the measurement's seed-0 baseline with the same flags are one run (one folder)
    shared = {r.name for r in scan} & set(names)
    assert shared and all(next(s for s in scan if s.name == n).argv == next(m for m in meas if m.name == n).argv
                          for n in shared)
    # the previous sweep stays reachable by a preset
    old = exp.parse_args(["--preset", "prose-d32", "--out", str(tmp_path / "old")])
    assert (old.stage, old.init, old.schedule, old.lr, old.depths, old.n_embd, old.iters, old.scan, old.norms) == \
        ("prose", "gpt2", "cosine", 3e-3, [6, 12, 24, 48], 32, 400, False, ["pre", "post"])
    args = train_parse_args(make_run(old, "measure", "pre", True, 12, 3e-3, 0, 400).argv + ["--out", "x"])
    assert (args.warmup_iters, args.batch_size, args.block_size, args.min_lr) == (40, 8, 64, 3e-4)
    assert args.prores_T == pytest.approx(0.5 * 400 / 12, rel=1e-4)


def test_deepnorm_arms_take_the_authors_inits(tmp_path):
    """DeepNorm's baseline is the authors' `deeppost` (DeepNet's Xavier init), DeepNorm + ProRes their
    `deeppost_prores` (the experiment's plain init): the argv says so, and the models built from it
    differ exactly there (Xavier with gain (8L)^(-1/4) on v against N(0, 0.02))."""
    from experiments import prores as exp
    from experiments.lib.prores_runs import make_run
    from flags import parse_args as train_parse_args
    a = exp.parse_args(["--out", str(tmp_path), "--norms", "deepnorm,pre"])
    argv = {pr: make_run(a, "measure", "deepnorm", pr, 24, 2e-3, 0, 200).argv for pr in (False, True)}
    init = {pr: v[v.index("--init") + 1] for pr, v in argv.items()}
    assert init == {False: "deepnet", True: "plain"}
    assert make_run(a, "measure", "pre", False, 24, 2e-3, 0, 200).argv[argv[False].index("--init") + 1] == "plain"
    args = {pr: train_parse_args(v + ["--out", "x"]) for pr, v in argv.items()}
    assert (args[False].norm, args[True].norm) == ("deepnorm", "deepnorm") and args[True].prores
    import model
    if "deepnet" in model.INITS:  # the model side of it (model.py's own tests check the init itself)
        L, C = 24, 32
        torch.manual_seed(0)
        std = {}
        for pr in (False, True):
            m = GPT(GPTConfig(block_size=16, vocab_size=97, n_layer=L, n_head=4, n_embd=C, norm="deepnorm",
                              init=init[pr]))
            std[pr] = m.transformer.h[0].attn.c_attn.weight[2 * C:].std().item()  # the value projection
        assert std[True] == pytest.approx(0.02, rel=0.1)
        assert std[False] == pytest.approx((8 * L) ** -0.25 * math.sqrt(2 / (C + C)), rel=0.1)


def scan_record(norm, lr, depth, val_loss, diverged=False):
    """A scan run's record as prores_report.analyse makes it: failed = diverged or stuck within
    --stuck-margin (0.1) of the unigram loss (here 3.8)."""
    return dict(norm=norm, lr=lr, depth=depth, val_loss=None if diverged else val_loss, diverged=diverged,
                unigram_loss=3.8, failed=diverged or val_loss >= 3.7)


def test_experiment_choice_rule(tmp_path):
    """lr* = the smallest scan lr >= 2e-3 where a baseline degrades (> margin worse than at the
    shallowest depth) or fails (diverged / stuck near the unigram loss) with depth; L* = the shallowest
    such depth."""
    from experiments import prores as exp
    a = exp.parse_args(["--preset", "depth", "--out", str(tmp_path)])
    assert a.scan_lrs == [1e-3, 2e-3, 4e-3, 8e-3] and a.scan_depths == [8, 24, 48, 96]
    assert a.margin == 0.1 and a.stuck_margin == 0.1

    def scan(pre, post):  # {lr: [val loss per depth]}, None = diverged
        return [scan_record(n, lr, d, v, v is None) for n, table in (("pre", pre), ("post", post))
                for lr, vs in table.items() for d, v in zip(a.scan_depths, vs)]
    fine = [2.5, 2.5, 2.5, 2.5]
    post_fails = {lr: [3.9] * 4 for lr in a.scan_lrs}  # at the unigram loss at every depth: not located
    pre = {1e-3: [2.5, 2.7, 2.8, 2.9], 2e-3: [2.5, 2.58, 2.65, 2.7], 4e-3: fine, 8e-3: fine}
    lr, d, lines = exp.choose(a, scan(pre, post_fails))
    assert (lr, d) == (2e-3, [48])  # 1e-3 is below the authors' lr; 24 layers is within the margin
    assert any("fails already at L=8" in line for line in lines)
    post = {1e-3: fine, 2e-3: fine, 4e-3: [2.5, 2.5, None, None], 8e-3: [2.5, 3.75, 2.5, 2.5]}
    lr, d, _ = exp.choose(a, scan({lr: fine for lr in a.scan_lrs}, post))
    assert (lr, d) == (4e-3, [48])  # a divergence with depth counts (stuck at 8e-3 too, but later)
    lr, d, lines = exp.choose(a, scan({lr: fine for lr in a.scan_lrs}, {lr: fine for lr in a.scan_lrs}))
    assert (lr, d) == (8e-3, [96]) and "no baseline in trouble" in lines[-1]  # nothing found: the hardest point
    post = {lr: [3.0, 3.5, 3.6, 3.7] for lr in a.scan_lrs}  # Post-LN fine at 8 layers, degraded from 24
    lr, d, _ = exp.choose(a, scan(pre, post))
    assert (lr, d) == (2e-3, [24, 48])  # each baseline's own first depth in trouble
    assert exp.measurement_point(a, scan(pre, post))[:2] == (2e-3, [8, 24, 48])
    assert exp.measurement_point(a, scan(pre, post_fails))[:2] == (2e-3, [8, 48])


def test_experiment_end_to_end_tiny(cache, tmp_path, capsys):
    """A tiny scan + measurement on synthetic music: the report's shape, its numbers from its runs,
    a rerun that trains nothing, and --report-only from the runs and from report.json alone."""
    import json
    import shutil
    import statistics
    from experiments import prores as exp
    from experiments.lib.common import VERDICTS
    from experiments.lib.prores_report import count_spikes
    out = tmp_path / "exp"
    argv = ["--preset", "depth", "--out", str(out), "--jobs", "1", "--stage", "music-synthetic", "--train-args",
            "--synthetic-tokens 20000", "--n-embd", "8", "--n-head", "2", "--block-size", "16", "--batch-size", "2",
            "--scan-lrs", "1e-3,3e-3",
            "--scan-depths", "1,3", "--scan-iters", "6", "--iters", "6", "--norms", "pre,post", "--seeds", "3",
            "--evals", "2", "--eval-iters", "2", "--spike-window", "2", "--auto-min-lr", "1e-3", "--threads", "1"]
    exp.main(argv)
    rep = json.loads((out / "report.json").read_text())
    for f in ("report.md", "scan.png", "activation_norms.png", "loss_curves.png", "grad_norms.png", "provenance.json"):
        assert (out / f).exists(), f
    assert len(rep["scan"]) == 2 * 2 * 2 and not any(r["prores"] for r in rep["scan"])
    lr, depths = rep["measurement_point"]["lr"], rep["measurement_point"]["depths"]
    a = exp.parse_args(argv)
    lr_c, d_c, _ = exp.choose(a, rep["scan"])  # the point follows from the scan's records by the rule
    assert lr == lr_c and depths == sorted({1, *d_c})
    assert len(rep["runs"]) == 2 * 2 * 3 * len(depths)
    trained = len({r["name"] for r in rep["scan"] + rep["runs"]})
    assert rep["provenance"]["runs_trained"] == trained and len(rep["provenance"]["invocations"]) == 1
    assert rep["source"]["arxiv"] == "2603.05369" and rep["regime"] and set(rep["figures"]) <= {
        p.name for p in out.glob("*.png")}
    assert rep["verdicts"] and all(v["verdict"] in VERDICTS for v in rep["verdicts"])
    for r in rep["scan"] + rep["runs"]:  # every record from its run's own files
        s = json.loads((out / "runs" / r["name"] / "summary.json").read_text())["stages"][0]
        assert r["val_loss"] == s["val_loss"] and r["unigram_loss"] == pytest.approx(math.log(s["unigram_val_ppl"]))
        assert r["failed"] == (r["val_loss"] >= r["unigram_loss"] - 0.1)
        assert r["steps"] == 6 and r["logged_steps"] == list(range(1, 7)) and r["loss_spikes"] == count_spikes(r["loss"], 2, 1.1)
        assert r["grad_spikes"] == count_spikes(r["grad_norm"], 2, 3.0)
        assert r["max_grad_norm"] == max(r["grad_norm"])
        assert len(r["act_rms"]) == r["depth"] and r["act_growth"] == r["act_rms"][-1] / r["act_rms"][0]
    md = (out / "report.md").read_text()
    table = md.split("### Final validation loss")[1].split("###")[0]
    for norm, name in (("pre", "Pre-LN"), ("post", "Post-LN")):
        for pr in (False, True):
            row = next(line for line in table.splitlines() if line.startswith(f"| {name}{' + ProRes' if pr else ''} |"))
            for d, text in zip(depths, row.split("|")[2:]):
                vs = [r["val_loss"] for r in rep["runs"] if (r["norm"], r["prores"], r["depth"]) == (norm, pr, d)]
                assert text.strip().startswith(f"{statistics.mean(vs):.3f} ± {statistics.stdev(vs):.3f}")
    # each cell's paired test is scipy's ttest_rel over the seeds, ProRes - baseline
    from scipy import stats
    for c in rep["comparisons"]:
        if c["metric"] == "val_loss" and c["paired"]["p"] is not None:
            by = {(r["prores"], r["seed"]): r["val_loss"] for r in rep["runs"]
                  if (r["norm"], r["depth"]) == (c["norm"], c["depth"])}
            want = stats.ttest_rel([by[(True, s)] for s in c["seeds"]], [by[(False, s)] for s in c["seeds"]])
            assert c["paired"]["p"] == pytest.approx(want.pvalue) and c["paired"]["n"] == 3
    capsys.readouterr()
    exp.main(argv)  # everything is finished: nothing trains again, and the provenance records no new invocation
    printed = capsys.readouterr().out
    assert "already finished (skipped)" in printed and "python train.py" not in printed
    assert (out / "report.md").read_text() == md
    assert json.loads((out / "report.json").read_text())["provenance"] == rep["provenance"]
    body = {f: (out / f).read_bytes() for f in ("report.md", "report.json")}
    exp.main(argv + ["--report-only"])  # from the runs
    assert {f: (out / f).read_bytes() for f in body} == body
    bare = tmp_path / "bare"  # the run folders gone: from report.json alone, byte for byte
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("runs", "provenance.json"))
    exp.main(["--report-only", "--out", str(bare)])
    assert {f: (bare / f).read_bytes() for f in body} == body


def committed_report(preset):
    """The committed report folder of a preset: experiments/results/prores holds the default's;
    the earlier default's (preset depth) lives there until it moves to prores-depth."""
    import json
    from pathlib import Path
    results = Path(__file__).resolve().parents[1] / "experiments" / "results"
    for name in ("prores", f"prores-{preset}"):
        f = results / name / "report.json"
        if f.exists() and json.loads(f.read_text())["settings"]["preset"] == preset:
            return f.parent
    return None


@pytest.mark.parametrize("preset", ["depth", "breakdown"])
def test_committed_report_rebuilds_byte_identical(tmp_path, preset):
    """A committed report has no run folders: --report-only rebuilds report.md and report.json
    from its report.json alone, byte for byte (and its provenance is the committed one). The
    depth preset's (the earlier default, no activation fits in its records) must stay reachable;
    the breakdown preset's is checked once it is committed."""
    import json
    import shutil
    from experiments import prores as exp
    src = committed_report(preset)
    if src is None and preset == "breakdown":
        pytest.skip("no committed report of the breakdown preset yet")
    assert src is not None, f"the {preset} preset's committed report is gone"
    out = tmp_path / "prores"
    shutil.copytree(src, out)
    exp.main(["--report-only", "--out", str(out)])
    for f in ("report.md", "report.json"):
        assert (out / f).read_bytes() == (src / f).read_bytes(), f
    rep = json.loads((out / "report.json").read_text())
    if preset == "depth":
        prov = rep["provenance"]
        assert prov["runs_trained"] == 116 and len(prov["invocations"]) == 2 and prov["cpu_seconds"] is None
        assert "breakdown" not in rep and not any("act_fit" in r for r in rep["runs"])
    else:
        assert rep["breakdown"]["loss"] and all("act_fit" in r for r in rep["runs"])


# --- the breakdown report (lib/prores_breakdown.py, lib/prores_growth.py) ------------------------

def test_growth_fit_tells_exponential_from_linear_growth():
    """log RMS = a + b l and a + c log l over layers 1..L: exponential growth gives back its rate b
    and fits the exponential line better; linear growth (RMS = 0.5 l) gives c = 1 and fits the power line."""
    from scipy import stats
    from experiments.lib.prores_growth import growth_curve, growth_fit
    L = 12
    expo = [0.1] + [0.3 * math.exp(0.25 * l) for l in range(1, L + 1)]
    f = growth_fit(expo)
    assert f["b"] == pytest.approx(0.25) and f["a_exp"] == pytest.approx(math.log(0.3)) and f["rss_exp"] < 1e-20
    assert f["better"] == "exponential" and f["rss_pow"] > 0.01
    lin = [0.1] + [0.5 * l for l in range(1, L + 1)]
    f = growth_fit(lin)
    assert f["c"] == pytest.approx(1.0) and f["a_pow"] == pytest.approx(math.log(0.5)) and f["better"] == "power"
    noisy = [0.2] + [1 + 0.1 * l + 0.05 * (-1) ** l for l in range(1, L + 1)]  # against scipy's own fit
    f, want = growth_fit(noisy), stats.linregress(range(1, L + 1), [math.log(v) for v in noisy[1:]])
    assert f["b"] == pytest.approx(want.slope) and f["a_exp"] == pytest.approx(want.intercept)
    assert growth_fit([0.1, 1.0, 2.0]) is None and growth_fit([0.1, 1.0, 0.0, 2.0]) is None  # < 3 layers; no log
    assert growth_fit([0.1, 1.0, float("nan"), 2.0, 3.0]) is None and growth_fit(None) is None
    assert growth_curve([expo, [0.1, 1.0]]) == {"b": [pytest.approx(0.25), None], "c": [growth_fit(expo)["c"], None]}


def breakdown_records(cells, unigram=3.8):
    """Run records as prores_report.analyse makes them, only the fields the breakdown reads:
    cells = {(norm, prores, depth): [final val loss per seed, None = NaN]}."""
    from experiments.lib.prores_breakdown import failure_of
    out = []
    for (norm, pr, d), losses in cells.items():
        for seed, v in enumerate(losses):
            r = dict(norm=norm, prores=pr, depth=d, seed=seed, val_loss=v, diverged=v is None, unigram_loss=unigram,
                     loss=[], grad_norm=[])
            out.append(dict(r, failure=failure_of(r, 0.1)))
    return out


def test_breakdown_rows_follow_their_definitions():
    """The baseline breaks at L when clearly worse than at L0 (Welch) or mostly failed there, never
    when it fails at L0 already; ProRes prevents it when clearly lower (paired) and not failed too."""
    from argparse import Namespace
    from experiments.lib.prores_breakdown import analyse_breakdown, breakdown_verdicts, failure_of
    from scipy import stats
    assert failure_of(dict(diverged=True, val_loss=None, unigram_loss=3.8), 0.1) == "nan"
    assert [failure_of(dict(diverged=False, val_loss=v, unigram_loss=3.8), 0.1) for v in (3.69, 3.71, 4.5)] == \
        [None, "stuck", "stuck"]
    a = Namespace(norms=["pre", "post"], stuck_margin=0.1, loss_spike_pct=10.0, spike_window=20, grad_spike_x=3.0)
    fine, good = [2.40, 2.42, 2.38], [2.45, 2.47, 2.44]
    recs = breakdown_records({
        ("pre", False, 8): fine, ("pre", True, 8): [2.43, 2.46, 2.41],      # ProRes costs at L = 8
        ("pre", False, 48): [3.09, 3.00, 3.20], ("pre", True, 48): good,     # degrades; ProRes prevents it
        ("pre", False, 96): [3.74, 3.75, None], ("pre", True, 96): [3.74, 3.749, 3.76],  # both stuck (one NaN)
        ("post", False, 8): [3.75, 3.76, 3.74], ("post", True, 8): fine,    # stuck already at L = 8
        ("post", False, 48): [3.75, 3.76, 3.75], ("post", True, 48): good})
    s = analyse_breakdown(a, recs, [8, 48, 96])
    rows = {(r["norm"], r["depth"]): r for r in s["depth"]}
    assert set(rows) == {("pre", 48), ("pre", 96), ("post", 48)}  # post has no L = 96 runs
    r = rows["pre", 48]
    assert r["baseline_breaks"] and r["baseline_degrades"] and r["verdict"] == "reproduces"
    want = stats.ttest_ind([3.09, 3.00, 3.20], fine, equal_var=False).pvalue
    assert r["baseline_vs_ref"]["welch"]["p"] == pytest.approx(want)
    assert r["prores_vs_baseline"]["paired"]["p"] == pytest.approx(stats.ttest_rel(good, [3.09, 3.00, 3.20]).pvalue)
    r = rows["pre", 96]  # most baseline runs failed (2 stuck, 1 NaN): broken; ProRes stuck too: not prevented
    assert r["failures"]["base"] == {"runs": 3, "nan": 1, "stuck": 2} and r["baseline_breaks"]
    assert r["prores_vs_baseline"]["paired"]["n"] == 2 and r["verdict"] == "no clear difference"
    assert not rows["post", 48]["baseline_breaks"] and rows["post", 48]["baseline_fails_at_ref"]
    assert rows["post", 48]["verdict"] == "not measured"
    vs = {v["claim"]: v for v in breakdown_verdicts(a, [8, 48, 96], s)}
    pre = vs["ProRes prevents the deep breakdown of Pre-LN"]
    assert pre["verdict"] == "partly" and "ProRes costs there" in pre["ours"]  # +0.033 at L = 8, every seed
    assert vs["ProRes prevents the deep breakdown of Post-LN"]["verdict"] == "not measured"
    assert "fails already at L = 8" in vs["ProRes prevents the deep breakdown of Post-LN"]["ours"]
    loss = {(r["norm"], r["depth"]): r for r in s["loss"]}
    assert loss["pre", 96]["base"] == [3.74, 3.75] and loss["pre", 96]["base_seeds"] == [0, 1]
    assert loss["pre", 96]["welch"]["p"] == pytest.approx(
        stats.ttest_ind([3.74, 3.749, 3.76], [3.74, 3.75], equal_var=False).pvalue)


def test_spikes_split_into_the_batchs_and_the_runs_own():
    """A spike both arms of a seed have at one step is the batch's (shared); the others are each arm's own;
    the raw counts (count_spikes) are shared + own."""
    from argparse import Namespace
    from experiments.lib.prores_breakdown import spike_rows
    from experiments.lib.prores_report import count_spikes
    flat = [2.0] * 40
    base, pro = list(flat), list(flat)
    base[25] = pro[25] = 3.0  # a hard batch: both
    base[30], pro[35] = 2.5, 2.4  # each its own
    recs = [dict(norm="pre", prores=pr, depth=8, seed=0, loss=v, grad_norm=[1.0] * 40)
            for pr, v in ((False, base), (True, pro))]
    a = Namespace(norms=["pre"], loss_spike_pct=10.0, grad_spike_x=3.0, spike_window=20)
    (row,) = spike_rows(a, recs, [8])
    assert row["loss"] == {"shared": [1], "base_own": [1], "prores_own": [1]} and row["seeds"] == [0]
    assert row["grad_norm"] == {"shared": [0], "base_own": [0], "prores_own": [0]}
    assert count_spikes(base, 20, 1.1) == 2 and count_spikes(pro, 20, 1.1) == 2


def test_breakdown_preset_report_tiny(cache, tmp_path):
    """A --quick-sized sweep of the breakdown preset (no scan): every run record carries the fields
    the report states, the tables' p-values recompute with scipy from the records in report.json,
    and --report-only from report.json alone rebuilds it byte for byte."""
    import json
    import shutil
    from scipy import stats
    from experiments import prores as exp
    from experiments.lib.common import VERDICTS, fmt_p
    from experiments.lib.prores_growth import growth_fit
    out = tmp_path / "bd"
    argv = ["--out", str(out), "--jobs", "1", "--stage", "music-synthetic", "--train-args", "--synthetic-tokens 20000",
            "--n-embd", "8", "--n-head", "2", "--block-size", "16", "--batch-size", "2", "--depths", "3,4",
            "--iters", "6", "--seeds", "3", "--evals", "2", "--eval-iters", "2", "--spike-window", "2",
            "--threads", "1"]
    exp.main(argv)
    rep = json.loads((out / "report.json").read_text())
    assert rep["settings"]["preset"] == "breakdown" and not rep["scan"] and len(rep["runs"]) == 2 * 2 * 2 * 3
    for r in rep["runs"]:
        for k in ("norm", "prores", "depth", "lr", "seed", "steps", "val_loss", "best_val_loss", "loss_spikes",
                  "max_grad_norm", "failure"):
            assert k in r, k
        assert len(r["act_rms"]) == r["depth"] and r["act_rms_steps"] == [3, 6]  # one value per layer
        assert [len(x) for x in r["act_rms_curve"]] == [r["depth"] + 1] * 2  # as logged: embeddings first
        assert r["act_fit"] == growth_fit([r["embed_rms"]] + r["act_rms"]) and r["act_fit"]["better"] in ("exponential", "power")
        assert r["act_fit_curve"]["b"] == [pytest.approx(growth_fit(x)["b"]) for x in r["act_rms_curve"]]
        assert r["failure"] == ("stuck" if r["val_loss"] >= r["unigram_loss"] - 0.1 else None)
    # the loss table: Welch's and the paired p from the runs' own final losses, as the table prints them
    md = (out / "report.md").read_text()
    table = md.split("### Final val loss: baseline against ProRes")[1].split("###")[0]
    assert len(rep["breakdown"]["loss"]) == 4
    for row in rep["breakdown"]["loss"]:
        v = {pr: [r["val_loss"] for r in sorted(rep["runs"], key=lambda r: r["seed"])
                  if (r["norm"], r["prores"], r["depth"]) == (row["norm"], pr, row["depth"])] for pr in (False, True)}
        welch = stats.ttest_ind(v[True], v[False], equal_var=False).pvalue
        pair = stats.ttest_rel(v[True], v[False]).pvalue
        assert row["welch"]["p"] == pytest.approx(welch) and row["paired"]["p"] == pytest.approx(pair)
        name = {"pre": "Pre-LN", "post": "Post-LN"}[row["norm"]]
        line = next(x for x in table.splitlines() if x.startswith(f"| {name} | {row['depth']} |"))
        assert line.split("|")[6].strip() == fmt_p(welch)[4:] and line.split("|")[7].strip() == fmt_p(pair)[4:]
    growth = {(g["norm"], g["depth"]): g for g in rep["breakdown"]["growth"]}
    for (norm, d), g in growth.items():
        b = {pr: [r["act_fit"]["b"] for r in sorted(rep["runs"], key=lambda r: r["seed"])
                  if (r["norm"], r["prores"], r["depth"]) == (norm, pr, d)] for pr in (False, True)}
        assert g["b_test"]["welch"]["p"] == pytest.approx(stats.ttest_ind(b[True], b[False], equal_var=False).pvalue)
        assert g["b_test"]["paired"]["p"] == pytest.approx(stats.ttest_rel(b[True], b[False]).pvalue)
    for row in rep["breakdown"]["spikes"]:  # shared + own = the raw counts of each run
        for pr, own in ((False, "base_own"), (True, "prores_own")):
            rs = sorted((r for r in rep["runs"]
                         if (r["norm"], r["prores"], r["depth"]) == (row["norm"], pr, row["depth"])),
                        key=lambda r: r["seed"])
            assert [r["loss_spikes"] for r in rs] == [x + y for x, y in zip(row["loss"]["shared"], row["loss"][own])]
    claims = [v["claim"] for v in rep["verdicts"]]
    for c in ("ProRes prevents the deep breakdown of Pre-LN", "ProRes prevents the deep breakdown of Post-LN",
              "Activation norms grow linearly with depth under ProRes, exponentially without",
              "ProRes has fewer loss spikes"):
        assert c in claims, c
    assert all(v["verdict"] in VERDICTS for v in rep["verdicts"])
    assert "T = 1.0 / 0.8 steps a layer at L = 3 / 4" in rep["regime"] and "6 steps" in rep["regime"]
    assert rep["figures"][0] == "breakdown.png" and "activation_over_time.png" in rep["figures"]
    assert all((out / f).exists() for f in rep["figures"]) and rep["provenance"]["runs_trained"] == 24
    assert "### Every run" in md and "### Definitions" in md
    bare = tmp_path / "bare"  # the run folders gone: from report.json alone, byte for byte
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("runs", "provenance.json"))
    exp.main(["--report-only", "--out", str(bare)])
    for f in ("report.md", "report.json"):
        assert (bare / f).read_bytes() == (out / f).read_bytes(), f


def test_regime_names_the_ramp_per_layer():
    from experiments import prores as exp
    from experiments.lib.prores_breakdown import regime
    a = exp.parse_args(["--out", "x"])
    text = regime(a, a.lr, a.depths)
    assert "1,000 steps" in text and "T = 62.5 / 10.4 / 5.2 steps a layer at L = 8 / 48 / 96" in text
    assert "at L = 96 each layer ramps over fewer than the ~10 steps" in text and "2,000 steps would be" in text
    assert "every layer on by step 500" in text and "T = 500-1,000 steps a layer in runs of 100k" in text


def test_report_only_without_runs_or_report_is_one_line(tmp_path, capsys):
    from experiments import prores as exp
    from experiments.lib.common import main_guard
    with pytest.raises(SystemExit) as e:
        main_guard(lambda: exp.main(["--report-only", "--out", str(tmp_path / "none")]))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error:") and "\n" not in err and "report.json" in err
