"""
Training-step speed of our GPT against the standard formulation, measured in one process.

For each named shape, the same model and the same batch are timed through a full training
step (forward, backward, AdamW) with the standard formulation (full logits, then
F.cross_entropy, fp32: nanoGPT's) and with ours (the fused chunked head + loss of lm_loss.py,
in fp32 and in bf16 autocast). Rounds are interleaved and the minimum is kept, because this
machine is shared and noisy. Also: tokens/s, ms/step, MFU against a matmul peak measured here,
peak memory of a step (Linux: VmHWM after resetting it), agreement of loss and gradients, and
data-preparation throughput (GPT-2 BPE via tiktoken; MIDI files via mido).

    python bench.py                 # every shape; the last line is speedup_vs_full_logits=...
    python bench.py --shapes d64 --rounds 2
    python bench.py --grid          # fp32 / bf16 autocast / --dtype auto on the experiments' shapes;
                                    # the last line is worst_auto_ratio=... (auto vs the faster of the two)
    python bench.py --loop          # where a tiny model's train.py step goes, against the bare step
    python bench.py --jobs          # a sweep of small runs: 2 at a time x 1 thread vs 1 at a time x 2
    python bench.py --head-chunks   # the fused head + loss alone at 512 rows a chunk against
                                    # lm_loss.chunk_rows, per head width; the last line is
                                    # narrow_head_speedup=... (d16: 512 rows over the rule's)
    python bench.py --tiny          # the procedural diagnostic shape (d16, 2 layers, batch 1,000): the
                                    # baseline step against each candidate speed-up; the last line is
                                    # fraction_of_matmul=... (the best kept step's FLOP/s over a matmul's)
    python bench.py --against REV   # model.py at git revision REV against the working tree's, one process,
                                    # interleaved: the HAYSTACK and dense tiny steps and the d64 step at
                                    # train.py's default precision; the last line is worst_ratio=...
"""

import copy
import os
import tempfile
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from lm_loss import linear_cross_entropy
from model import GPT, GPTConfig, counted_rows, group_of

# --grid: the shapes the experiments train (vocab, n_layer, n_head, n_embd, batch, block)
GRID = {
    "procedural d16 L2": (102, 2, 4, 16, 32, 64),
    "prores d32 L24": (160, 24, 4, 32, 16, 128),
    "prores d32 L48": (160, 48, 4, 32, 16, 128),
    "music d64 L4": (160, 4, 4, 64, 32, 256),
    "tasks d16 L2": (174, 2, 4, 16, 32, 64),
    "text d16 L4": (50257, 4, 4, 16, 32, 256),
    "text d64 L4": (50257, 4, 4, 64, 32, 256),
    "text d32 L4 (16x128)": (50257, 4, 4, 32, 16, 128),
}

SHAPES = {  # name: (vocab, n_layer, n_head, n_embd, batch, block)
    "d16": (50257, 4, 4, 16, 32, 256),
    "d32": (50257, 4, 4, 32, 32, 256),
    "d64": (50257, 4, 4, 64, 32, 256),
    "music-d64": (160, 4, 4, 64, 32, 256),
    "d256": (50257, 4, 4, 256, 32, 256),
    "gpt2": (50257, 12, 12, 768, 16, 1024),  # GPT-2 small at its context: for a GPU, not in the default list
}
DEFAULT_SHAPES = "d16,d32,d64,music-d64,d256"


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(dtype, device, n=None, reps=5):
    """Achieved FLOP/s of a square matmul: the peak MFU is measured against. n: 2,048 on a CPU; 8,192 on a
    GPU, where a 2,048 product is too short to time (an H200, bf16: 340 TFLOP/s at 2,048; ~790 at 8,192)."""
    n = n or (8192 if device.type == "cuda" else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def _status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return None


def peak_memory_of(fn, device):
    """Peak extra memory (MiB) while fn runs: CUDA's allocator peak, or on Linux the resident
    high-water mark (VmHWM, reset through /proc/self/clear_refs) above the resident size before."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        return (torch.cuda.max_memory_allocated() - before) / 2 ** 20
    try:
        Path("/proc/self/clear_refs").write_text("5")
        before = _status_kib("VmRSS:")
        fn()
        return (_status_kib("VmHWM:") - before) / 1024
    except OSError:
        fn()
        return float("nan")


class Variant:
    """One way to run a training step on a model: loss implementation x autocast dtype (x the
    fused head's own dtype, which --dtype auto sets to bf16 under an fp32 body on this CPU),
    eager or through torch.compile (backend: "inductor", train.py's --compile)."""

    def __init__(self, name, loss_impl, dtype, head_dtype="", backend=None):
        self.name, self.loss_impl, self.dtype, self.head_dtype = name, loss_impl, dtype, head_dtype
        self.backend, self.compiled = backend, None

    def step(self, model, opt, x, y, device):
        model.config.loss_impl = self.loss_impl
        model.config.head_dtype = self.head_dtype
        fwd = model
        if self.backend:  # compiled for each model; the config it reads is guarded, so variants may share one
            if self.compiled is None or self.compiled._orig_mod is not model:  # static: each shape its own kernels
                self.compiled = torch.compile(model, backend=self.backend, dynamic=False)
            fwd = self.compiled
        amp = nullcontext() if self.dtype == torch.float32 else torch.autocast(device.type, dtype=self.dtype)
        with amp:
            _, loss = fwd(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()


def bench_shape(name, device, variants, rounds, peaks):
    vocab, n_layer, n_head, n_embd, B, T = SHAPES[name]
    if any(v.backend for v in variants):  # each shape's graphs afresh: the model's forward keeps at most 8
        torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=T, vocab_size=vocab, n_layer=n_layer, n_head=n_head, n_embd=n_embd)).to(device)
    opt = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), device.type)
    x = torch.randint(0, vocab, (B, T), device=device)
    y = torch.randint(0, vocab, (B, T), device=device)
    best = {v.name: float("inf") for v in variants}
    mem = {}
    for v in variants:  # warm up each path once, and measure its peak memory
        mem[v.name] = peak_memory_of(lambda: v.step(model, opt, x, y, device), device)
    for _ in range(rounds):  # interleaved rounds: every variant sees the same machine load
        for v in variants:
            sync(device)
            t = time.perf_counter()
            v.step(model, opt, x, y, device)
            sync(device)
            best[v.name] = min(best[v.name], time.perf_counter() - t)
    base = best[variants[0].name]
    rows = []
    for v in variants:
        tok_s = B * T / best[v.name]
        mfu = model.estimate_mfu(tok_s, peaks[v.dtype], T)
        rows.append((name, v.name, best[v.name] * 1000, tok_s, mfu, mem[v.name], base / best[v.name]))
    return rows


def head_chunks(device, rounds, widths=(16, 24, 32, 64), rows=2048, vocab=50257):
    """The fused LM head + loss alone (forward and backward, fp32) at lm_loss.CHUNK_ROWS rows a
    chunk against the rows lm_loss.chunk_rows picks, per head width C; rounds interleaved,
    minimum kept. Returns {C: (ms at CHUNK_ROWS, ms at the rule's rows, the rule's rows)}."""
    from lm_loss import CHUNK_ROWS, chunk_rows
    out = {}
    for C in widths:
        g = torch.Generator().manual_seed(0)
        h = torch.randn(rows, C, generator=g, device="cpu").to(device).requires_grad_()
        w = (torch.randn(vocab, C, generator=g) * 0.1).to(device).requires_grad_()
        t = torch.randint(0, vocab, (rows,), generator=g).to(device)
        rule = chunk_rows(C, vocab, device, torch.float32)

        def step(r):
            h.grad = w.grad = None
            linear_cross_entropy(h, w, t, chunk_size=r).backward()

        best = {CHUNK_ROWS: float("inf"), rule: float("inf")}
        for r in best:  # warm-up
            step(r)
        for _ in range(rounds):
            for r in best:
                sync(device)
                t0 = time.perf_counter()
                step(r)
                sync(device)
                best[r] = min(best[r], time.perf_counter() - t0)
        out[C] = (best[CHUNK_ROWS] * 1000, best[rule] * 1000, rule)
    return out


def grid(device, rounds, shapes=None):
    """fp32, bf16 autocast and train.py's --dtype auto on each GRID shape, one process, rounds
    interleaved, minimum kept. Returns rows (shape, {variant: ms}, auto / min(fp32, bf16))."""
    from machine import resolve_dtype
    rows = []
    for name in shapes or GRID:
        vocab, n_layer, n_head, n_embd, B, T = GRID[name]
        auto_dtype, head = resolve_dtype("auto", device, vocab)
        torch.manual_seed(0)
        model = GPT(GPTConfig(block_size=T, vocab_size=vocab, n_layer=n_layer, n_head=n_head, n_embd=n_embd)).to(device)
        opt = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), device.type)
        x = torch.randint(0, vocab, (B, T), device=device)
        y = torch.randint(0, vocab, (B, T), device=device)
        variants = {"fp32": (torch.float32, ""), "bf16": (torch.bfloat16, ""),
                    "auto": (getattr(torch, auto_dtype), head)}

        def step(dtype, head_dtype):
            model.config.head_dtype = head_dtype
            with (nullcontext() if dtype == torch.float32 else torch.autocast(device.type, dtype=dtype)):
                _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        best = {k: float("inf") for k in variants}
        for v in variants.values():  # warm-up
            step(*v)
        for _ in range(rounds):
            for k, v in variants.items():
                sync(device)
                t = time.perf_counter()
                step(*v)
                sync(device)
                best[k] = min(best[k], time.perf_counter() - t)
        label = f"{auto_dtype}{' + ' + head + ' head' if head else ''}"
        rows.append((name, {k: v * 1000 for k, v in best.items()}, best["auto"] / min(best["fp32"], best["bf16"]), label))
        print(f"{name:<22}{best['fp32'] * 1000:>9.0f}{best['bf16'] * 1000:>9.0f}{best['auto'] * 1000:>9.0f}"
              f"{rows[-1][2]:>9.2f}   {label}", flush=True)
    return rows


def loop_profile(steps=60):
    """Where a tiny model's train.py step goes, against the bare model step: the components the
    loop adds (batch assembly, per-row generators, clipping, the optimizer, the .item() syncs),
    each timed alone over `steps` steps, and the whole train.run step from its own log."""
    import numpy as np
    import train
    from batches import get_batch, row_generators
    from data.common import Corpus
    from flags import parse_args
    torch.manual_seed(0)
    V, B, T = 102, 32, 64
    cfg = GPTConfig(block_size=T, vocab_size=V, n_layer=2, n_head=4, n_embd=16)
    model = GPT(cfg)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    rows = np.random.default_rng(0).integers(0, V, size=(2000, T + 1)).astype(np.uint16)
    corpus = Corpus("bench", V, rows.reshape(-1), rows.reshape(-1), str, info={"seq_len": T + 1},
                    train_mask=np.ones(rows.size, np.uint8), val_mask=np.ones(rows.size, np.uint8))
    dev = torch.device("cpu")
    x, y, m = get_batch(corpus, "train", B, T, [0, 0, 0], 0, 1, dev)

    def timed(fn):
        fn()
        t = time.perf_counter()
        for i in range(steps):
            fn(i)
        return (time.perf_counter() - t) / steps * 1000

    def bare(i=0):
        _, loss = model(x, y, m)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    parts = {
        "bare step (forward, backward, AdamW)": timed(bare),
        "batch assembly (get_batch)": timed(lambda i=0: get_batch(corpus, "train", B, T, [0, 0, i], 0, 1, dev)),
        "per-row generators (MIR/MDLM only)": timed(lambda i=0: row_generators([0, 0, i], 0, B)),
        "gradient clipping": None, "loss .item() + grad-norm .item()": None,
    }
    bare()
    params = list(model.parameters())
    _, loss = model(x, y, m)
    loss.backward()
    parts["gradient clipping"] = timed(lambda i=0: torch.nn.utils.clip_grad_norm_(params, 1.0))
    parts["loss .item() + grad-norm .item()"] = timed(lambda i=0: (loss.item(), loss.detach().item()))
    with tempfile.TemporaryDirectory() as d:  # the real loop, from its own metrics (tok/s per log)
        import json
        import data
        orig = data.load
        data.load = lambda name, **kw: corpus
        try:
            train.run(parse_args(["--stages", "prose", "--iters", str(steps + 20), "--n-layer", "2",
                                  "--n-embd", "16", "--n-head", "4", "--batch-size", str(B), "--block-size",
                                  str(T), "--log-interval", str(steps // 3), "--eval-interval", "100000",
                                  "--eval-iters", "1", "--no-progress", "--out", d, "--dtype", "float32"]))
        finally:
            data.load = orig
        ev = [json.loads(l) for l in open(Path(d) / "metrics.jsonl") if '"train"' in l]
        tok_s = max(e["tok_s"] for e in ev[:-1]) if len(ev) > 1 else ev[0]["tok_s"]
        parts["train.run step (best logged interval)"] = B * T / tok_s * 1000
    return parts


def jobs_comparison(n_runs=4, iters=150):
    """Wall time of a sweep of n_runs small runs (d16, 2 layers, procedural data): one at a time
    with 2 threads against two at a time with 1 thread each (experiments.lib.common.run_sweep)."""
    import shutil
    from experiments.lib.common import Run, run_sweep
    res = {}
    for jobs, threads in ((1, 2), (2, 1)):
        root = Path(tempfile.mkdtemp(prefix=f"bench-jobs{jobs}-"))
        runs = [Run(f"r{i}", root / f"r{i}", ["--stages", "procedural:dyck", "--iters", str(iters), "--n-embd", "16",
                                              "--n-layer", "2", "--batch-size", "32", "--seed", str(i),
                                              "--eval-interval", str(iters), "--eval-iters", "5"]) for i in range(n_runs)]
        t = time.perf_counter()
        run_sweep(runs, jobs=jobs, threads=threads)
        res[f"{jobs} job(s) x {threads} thread(s)"] = time.perf_counter() - t
        shutil.rmtree(root, ignore_errors=True)
    return res


# --tiny: the procedural paper's diagnostic model (Jiang, Shinnick et al., arXiv 2601.21725;
# the authors train it 10,000 steps x 1,000 records): 2 layers, 4 heads, d 16, context 64, a
# vocabulary of ~128, fp32, batch 1,000. Its step is bound by per-op overhead and memory
# traffic, not by FLOPs (4-wide attention heads, 16-wide matmuls).
TINY = dict(vocab_size=128, n_layer=2, n_head=4, n_embd=16, block_size=64)
KEEP = 1.03  # a candidate is kept when the baseline's step takes more than KEEP x its own


def tiny_batch(B, mask, seed=0):
    """(x, y, loss_mask) of B random rows of the tiny shape. mask 'haystack': one counted target
    per row at a random position (a haystack record scores its one answer token of 63);
    'dense': every target counts (a Dyck corpus), loss_mask None."""
    g = torch.Generator().manual_seed(seed)
    V, T = TINY["vocab_size"], TINY["block_size"]
    x, y = (torch.randint(0, V, (B, T), generator=g) for _ in range(2))
    if mask == "dense":
        return x, y, None
    m = torch.zeros(B, T, dtype=torch.long)
    m[torch.arange(B), torch.randint(0, T, (B,), generator=g)] = 1
    return x, y, m


def loss_scoring_every_row(model, x, y, m):
    """The loss as GPT.forward took it before it scored only the counted positions: every block,
    the last norm and the head over all B x T positions, those that do not count dropped inside
    lm_loss (its ignore index). The baseline GPT.forward's counted positions are timed against."""
    B, T = x.shape
    h = model.transformer.ln_f(model.residual_stream(x)).view(B * T, -1)
    t = y if m is None else y.masked_fill(m == 0, -1)
    return linear_cross_entropy(h, model.lm_head.weight, t.reshape(-1))


def gpt_loss(model, x, y, m):
    """The loss as GPT.forward takes it: only the rows that count reach the head."""
    return model(x, y, m)[1]


def head_path_calls(batch, threads):
    """{name: (threads, fn)}: the head's share of what counting only some positions changes,
    alone: from a fixed residual stream, the last norm, the head and the loss, forward and
    backward, over every row (those that do not count ignored) and over the counted rows only."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    x, y, m = batch
    with torch.no_grad():
        stream = model.residual_stream(x).view(-1, TINY["n_embd"])
    y, m = y.reshape(-1), None if m is None else m.reshape(-1)

    def every_row():
        h = stream.detach().requires_grad_()
        t = y if m is None else y.masked_fill(m == 0, -1)
        linear_cross_entropy(model.transformer.ln_f(h), model.lm_head.weight, t).backward()

    def counted():
        h = stream.detach().requires_grad_()
        rows, t, _ = (h, y, None) if m is None else counted_rows(h, y, m)
        linear_cross_entropy(model.transformer.ln_f(rows), model.lm_head.weight, t).backward()
    return {"every row": (threads, every_row), "counted rows": (threads, counted)}


@dataclass(frozen=True)
class Tiny:
    """One way to run the tiny shape's training step."""
    name: str
    threads: int
    gather: bool = False      # GPT.forward: the counted positions only (else loss_scoring_every_row)
    compile: bool = False     # torch.compile of the loss function (the model's forward)
    lean: bool = False        # AdamW(fused=True) on CPU, and one host read per step instead of two


_COMPILED = {}  # (loss function, threads) -> its compiled form, shared by every model of the shape


def tiny_optimizer(model, fused=False):
    """The AdamW of model.configure_optimizers (decay 0.1, lr 1e-3, betas 0.9/0.95), fused on CPU if asked."""
    groups = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu").param_groups
    return torch.optim.AdamW([{"params": g["params"], "weight_decay": g["weight_decay"]} for g in groups],
                             lr=1e-3, betas=(0.9, 0.95), **({"fused": True} if fused else {}))


class TinyRun:
    """A model of the tiny shape, its AdamW and a batch; step() is one training step as
    train.train_step takes it: forward, backward, gradient clipping at 1.0, AdamW, and the
    loss and gradient norm read back. It takes its first step when built: first_step_s is its
    seconds (the compile time, compiled), first_step its (loss, gradient norm before clipping)."""

    def __init__(self, cfg, batch, seed=0):
        torch.set_num_threads(cfg.threads)
        torch.manual_seed(seed)
        self.cfg, self.batch = cfg, batch
        self.model = GPT(GPTConfig(**TINY))
        self.params = list(self.model.parameters())
        self.opt = tiny_optimizer(self.model, fused=cfg.lean)
        self.loss = gpt_loss if cfg.gather else loss_scoring_every_row
        if cfg.compile:
            key = (self.loss, cfg.threads)  # inductor's CPU kernels keep the thread count they were built with
            self.loss = _COMPILED.setdefault(key, torch.compile(self.loss))
        t = time.perf_counter()
        self.first_step = self.step()
        self.first_step_s = time.perf_counter() - t

    def step(self):
        loss = self.loss(self.model, *self.batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.cfg.lean:
            return torch.stack([loss.detach(), norm]).tolist()
        return loss.item(), norm.item()


class _Stream(torch.nn.Module):
    """GPT.residual_stream as a module's forward: what torch.func.functional_call calls."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx):
        return self.gpt.residual_stream(idx)


class SeedBatch:
    """K seeds of one condition trained as one batched model: the K GPTs' parameters stacked
    along a new first dimension (torch.func.stack_module_state) and the transformer body run
    once for all K under torch.func.vmap, so a seed sweep pays each op's overhead once. The
    last norm, the head and the loss run per seed on its counted rows (the row gather is
    data-dependent and lm_loss's autograd.Function has no vmap rule). Each seed keeps its own
    init (torch.manual_seed(seed)) and its own batch; each seed's gradient is clipped by its
    own norm; AdamW is elementwise, so one AdamW over the stacked tensors is K independent ones.
    step() returns the K losses and the K gradient norms before clipping."""

    def __init__(self, batches, threads, seeds):
        torch.set_num_threads(threads)
        models = []
        for seed in seeds:
            torch.manual_seed(seed)
            models.append(GPT(GPTConfig(**TINY)))
        params, buffers = torch.func.stack_module_state(models)
        self.params = {n: p.detach().requires_grad_() for n, p in params.items()}  # K x each tensor
        self.buffers = buffers
        self.stream = _Stream(copy.deepcopy(models[0]).to("meta"))
        self.x, self.y = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
        self.masks = [b[2] for b in batches]
        decay = [p for n, p in self.params.items() if p.dim() >= 3 and group_of(n) in ("attn", "mlp", "head")]
        rest = [p for p in self.params.values() if all(p is not q for q in decay)]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                     lr=1e-3, betas=(0.9, 0.95))

    def hidden(self, params, buffers, x):
        named = {"gpt." + n: t for d in (params, buffers) for n, t in d.items()}
        return torch.func.functional_call(self.stream, named, (x,))

    def step(self):
        with warnings.catch_warnings():  # vmap's notice that CPU flash attention has no batching rule
            warnings.filterwarnings("ignore", message="There is a performance drop")
            h = torch.func.vmap(self.hidden)(self.params, self.buffers, self.x)   # (K, B, T, C)
        P, C = self.params, h.shape[-1]
        losses = []
        for k, m in enumerate(self.masks):
            rows, t = h[k].reshape(-1, C), self.y[k].reshape(-1)
            if m is not None:
                rows, t, _ = counted_rows(rows, t, m.reshape(-1))
            rows = F.layer_norm(rows, (C,), P["transformer.ln_f.weight"][k], P["transformer.ln_f.bias"][k], 1e-5)
            losses.append(linear_cross_entropy(rows, P["transformer.wte.weight"][k], t))  # the tied head
        losses = torch.stack(losses)
        losses.sum().backward()                              # seed k's loss reaches only seed k's slices
        sq = sum(p.grad.flatten(1).pow(2).sum(1) for p in P.values())
        norms = sq.sqrt()                                    # (K,): each seed's gradient norm
        coef = (1.0 / (norms + 1e-6)).clamp(max=1.0)         # clip_grad_norm_'s rule at max norm 1.0
        for p in P.values():
            p.grad.mul_(coef.view(-1, *[1] * (p.dim() - 1)))
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return losses.detach().tolist(), norms.tolist()


class Timings:
    """Seconds of each call in `rounds` interleaved rounds: calls maps a name to (threads, fn),
    and each fn runs under its own thread count. Two clocks: the CPU time of the calling thread
    (time.thread_time) and wall-clock. At one thread the CPU time is the step's own cost: it
    leaves out the time the scheduler gives other processes (the noise of a shared machine);
    at more threads only the wall-clock time means anything. Every other round runs the calls
    in reverse order, so that no call always follows the same one (a large matmul leaves the
    caches cold and can lower the clock for the call after it)."""

    def __init__(self, calls, rounds):
        self.cpu, self.wall = {n: [] for n in calls}, {n: [] for n in calls}
        for r in range(rounds):
            for name, (threads, fn) in list(calls.items())[::1 if r % 2 == 0 else -1]:
                torch.set_num_threads(threads)
                t, c = time.perf_counter(), time.thread_time()
                fn()
                self.cpu[name].append(time.thread_time() - c)
                self.wall[name].append(time.perf_counter() - t)

    def best(self, name, by_cpu):
        """The fastest round's seconds."""
        return min((self.cpu if by_cpu else self.wall)[name])

    def ratio(self, base, name, by_cpu):
        """The median over rounds of base's seconds / name's in the same round: a paired ratio,
        steadier than a ratio of minima when the load drifts between rounds."""
        t = self.cpu if by_cpu else self.wall
        r = sorted(a / b for a, b in zip(t[base], t[name]))
        return (r[(len(r) - 1) // 2] + r[len(r) // 2]) / 2


def plural(n, word):
    return f"{n} {word}{'s' if n != 1 else ''}"


def matmul_call(threads, n=2048):
    """(threads, fn): one n x n float32 matmul, the machine's own rate (2 n^3 FLOPs)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return threads, lambda: a @ b


def attention_call(batch_size, threads):
    """(threads, fn): the tiny shape's attention alone, forward and backward of its n_layer
    F.scaled_dot_product_attention calls (4 heads of 4 dimensions, causal)."""
    B, H, T, C = batch_size, TINY["n_head"], TINY["block_size"], TINY["n_embd"]
    q, k, v = (torch.randn(B, H, T, C // H, requires_grad=True) for _ in range(3))
    g = torch.randn(B, H, T, C // H)

    def fn():
        for _ in range(TINY["n_layer"]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
    return threads, fn


class TinyTable:
    """The --tiny table: one row per timed configuration, with its ratio to a stage's baseline.
    A stage at one thread is judged by CPU time (Timings), at more threads by wall time."""

    def __init__(self, tokens, flops, out):
        self.tokens, self.flops, self.out, self.rows = tokens, flops, out, []

    def header(self, title):
        self.out(f"\n{title}\n  {'configuration':<38}{'thr':>3}{'ms/step':>9}{'wall ms':>9}{'tokens/s':>11}"
                 f"{'GFLOP/s':>8}{'ratio':>8}")

    def stage(self, stage, times, runs, base, judged=(), by_cpu=False, seeds=1):
        """Rows for runs {name: (threads, first_step_s or None)}: the fastest round and the ratio
        to base (Timings.ratio); those in `judged` are kept when the ratio is above KEEP.
        Returns the names kept."""
        kept_names = []
        for name, (threads, first) in runs.items():
            sec, ratio = times.best(name, by_cpu), times.ratio(base, name, by_cpu)
            kept = ("kept" if ratio > KEEP else "not kept") if name in judged else ""
            kept_names += [name] if kept == "kept" else []
            tok_s = seeds * self.tokens / sec
            self.rows.append(dict(stage=stage, name=name, threads=threads, ms=sec * 1000,
                                  wall_ms=times.best(name, False) * 1000, tok_s=tok_s, ratio=ratio, kept=kept))
            note = f" (first step, compiling: {first:.1f} s)" if first is not None else ""
            self.out(f"  {name:<38}{threads:>3}{sec * 1000:>9.1f}{times.best(name, False) * 1000:>9.1f}"
                     f"{tok_s:>11,.0f}{self.flops * tok_s / 1e9:>8.1f}{ratio:>7.2f}x  {kept}{note}")
        return kept_names


def tiny(batch_size=1000, rounds=5, mask="haystack", seeds=3, compile_=True, out=print):
    """The tiny shape's training step: the baseline (today's loop at train.py's default thread
    count, cores / processes) against each candidate, in interleaved stages: (1) thread count,
    (2) each candidate alone, (3) the kept ones together, with attention alone and a large
    matmul timed in the same rounds, (4) K seeds batched against K sequential models. Prints a
    table; returns its rows and fraction_of_matmul: the kept configuration's FLOP/s over a
    2048^2 float32 matmul's at the same thread count, timed the same way.

    FLOPs per token: model.flops_per_token, 6 per weight multiplied (the non-embedding weights
    and the tied head: 8,640 here) + 12 L T d for attention's scores and values (the causal
    mask's halving not counted): 76,416 at T = 64."""
    threads = torch.get_num_threads()
    try:
        return _tiny(batch_size, rounds, mask, seeds, compile_, out)
    finally:
        torch.set_num_threads(threads)  # the stages set their own


def _tiny(batch_size, rounds, mask, seeds, compile_, out):
    """tiny()'s stages; tiny restores the thread count they leave set."""
    cores = os.cpu_count() or 1
    flops = GPT(GPTConfig(**TINY)).flops_per_token()
    batch = tiny_batch(batch_size, mask)
    table = TinyTable(batch_size * TINY["block_size"], flops, out)
    calls = lambda runs: {n: (r.cfg.threads, r.step) for n, r in runs.items()}
    info = lambda runs: {n: (r.cfg.threads, r.first_step_s if r.cfg.compile else None) for n, r in runs.items()}
    out(f"tiny shape: {TINY['n_layer']} layers, {TINY['n_head']} heads, d {TINY['n_embd']}, vocab "
        f"{TINY['vocab_size']}, context {TINY['block_size']}, batch {batch_size}, fp32, mask {mask}; "
        f"{plural(cores, 'core')}, load average {os.getloadavg()[0]:.2f}; best of {rounds} interleaved rounds")
    out(f"FLOPs per token {flops:,}: 6 x the 8,640 weights multiplied (tied head included) + 12 L T d for "
        "attention. ms/step: the fastest round, CPU time of the step's thread at 1 thread, wall-clock at "
        "more; ratio: the median over rounds of the stage's baseline time / this one's in the same round; "
        f"kept: ratio > {KEEP}")

    # 1. threads: today's step at every thread count, by wall-clock time (what a user waits for)
    table.header("1. thread count (torch.set_num_threads), wall-clock")
    counts = sorted({cores, 1}, reverse=True)
    name = lambda n: f"baseline, {plural(n, 'thread')}"
    runs = {name(n): TinyRun(Tiny("baseline", n), batch) for n in counts}
    times = Timings(calls(runs), rounds)
    table.stage("threads", times, info(runs), name(cores), judged=list(runs)[1:])
    threads = min(counts, key=lambda n: times.best(name(n), False))
    by_cpu = threads == 1

    # 2. each candidate alone on the baseline at the faster thread count
    table.header(f"2. each candidate alone, {plural(threads, 'thread')}")
    b = Tiny("baseline", threads)
    cands = [b, replace(b, name="+ counted positions only (GPT.forward)", gather=True),
             replace(b, name="+ fused AdamW, one host read", lean=True)]
    if compile_:
        cands.append(replace(b, name="+ torch.compile", compile=True))
    runs = {c.name: TinyRun(c, batch) for c in cands}
    kept = table.stage("candidates", Timings(calls(runs), rounds), info(runs), "baseline",
                       judged=list(runs)[1:], by_cpu=by_cpu)
    head = Timings(head_path_calls(batch, threads), 3 * rounds)
    every, counted = (head.best(n, by_cpu) * 1000 for n in ("every row", "counted rows"))
    out(f"  of it, the last norm, head and loss alone (forward + backward): every row "
        f"{every:.2f} ms, the counted rows {counted:.2f} ms ({head.ratio('every row', 'counted rows', by_cpu):.2f}x)")

    # 3. the kept candidates together, against the baseline; then the kept step, attention alone and the matmul
    changes = {k: True for n in kept for k in ("gather", "lean", "compile") if getattr(runs[n].cfg, k)}
    best_cfg = Tiny("kept: " + (", ".join(changes) or "nothing"), threads, **changes)
    table.header(f"3. the kept candidates together, {plural(threads, 'thread')}")
    runs = {"baseline": TinyRun(Tiny("baseline", threads), batch), best_cfg.name: TinyRun(best_cfg, batch)}
    times = Timings(calls(runs), rounds)
    table.stage("kept", times, info(runs), "baseline", by_cpu=by_cpu)
    extra = {"step": (threads, runs[best_cfg.name].step), "attention": attention_call(batch_size, threads),
             "matmul": matmul_call(threads)}
    again = Timings(extra, rounds)  # the kept step again, beside attention alone and the matmul
    step = min(times.best(best_cfg.name, by_cpu), again.best("step", by_cpu))  # its fastest round of both
    matmul = 2 * 2048 ** 3 / again.best("matmul", by_cpu)
    fraction = flops * table.tokens / step / matmul
    att = again.best("attention", by_cpu)
    out(f"  kept step (fastest round) {step * 1000:.1f} ms, {flops * table.tokens / step / 1e9:.1f} GFLOP/s; "
        f"attention alone (F.scaled_dot_product_attention, {TINY['n_layer']} layers, forward + backward) "
        f"{att * 1000:.1f} ms: {att / step:.0%} of it")

    # 4. K seeds as one batched model against K sequential models of the kept configuration
    if seeds > 1:
        table.header(f"4. {seeds} seeds: one vmapped model (torch.func) against {seeds} sequential models of the "
                     f"kept configuration, {plural(threads, 'thread')}; ms per step of all {seeds}, tokens/s over all")
        batches = [tiny_batch(batch_size, mask, seed=k) for k in range(seeds)]
        singles = [TinyRun(best_cfg, bk, seed=k) for k, bk in enumerate(batches)]
        batched = SeedBatch(batches, threads, range(seeds))
        batched.step()
        times = Timings({"sequential": (threads, lambda: [r.step() for r in singles]),
                         "batched": (threads, batched.step)}, rounds)
        table.stage("seeds", times, {"sequential": (threads, None), "batched": (threads, None)}, "sequential",
                    judged=["batched"], by_cpu=by_cpu, seeds=seeds)

    out(f"\nmatmul: {matmul / 1e9:.0f} GFLOP/s (2048 x 2048 float32, {plural(threads, 'thread')}, timed as the "
        f"steps); load average now {os.getloadavg()[0]:.2f}")
    return table.rows, fraction


def model_at(rev):
    """model.py as git revision `rev` has it, imported as its own module (the rest of the tree as it is now)."""
    import importlib.util
    import subprocess
    root = Path(__file__).resolve().parent
    r = subprocess.run(["git", "show", f"{rev}:model.py"], cwd=root, capture_output=True, text=True)
    if r.returncode:
        raise ValueError(f"--against {rev}: git cannot show model.py there ({r.stderr.strip()[:200]})")
    path = Path(tempfile.mkdtemp(prefix="bench-against-")) / "model_at_rev.py"
    path.write_text(r.stdout)
    spec = importlib.util.spec_from_file_location(f"model_at_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def against(rev, rounds, out=print):
    """model.py at `rev` against the working tree's: a full training step (forward, backward, clipping, AdamW)
    of each on the same batch and init, interleaved rounds in one process; the HAYSTACK step (bench --tiny's
    shape, one counted target a row), the same shape with every target counted, and the d64 text step at
    train.py's default precision here (--dtype auto). Returns {shape: (ms at rev, ms now, rev / now)}: the
    median over rounds of the paired ratio, above 1 where the working tree is faster."""
    import model as now
    from machine import resolve_dtype
    old, res = model_at(rev), {}
    d64 = dict(vocab_size=50257, n_layer=4, n_head=4, n_embd=64, block_size=256,
               head_dtype=resolve_dtype("auto", torch.device("cpu"), 50257)[1])
    shapes = {"haystack (tiny, B 1000)": (TINY, tiny_batch(1000, "haystack"), 1),
              "dense (tiny, B 1000)": (TINY, tiny_batch(1000, "dense"), 1),
              "d64 (32 x 256, auto)": (d64, (*(torch.randint(0, 50257, (32, 256), generator=torch.Generator()
                                                              .manual_seed(k)) for k in (0, 1)), None),
                                       torch.get_num_threads())}
    for name, (cfg, batch, threads) in shapes.items():
        calls = {}
        for label, M in ((rev, old), ("now", now)):
            torch.manual_seed(0)
            m = M.GPT(M.GPTConfig(**cfg))
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

            def step(m=m, opt=opt):
                m(*batch)[1].backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            step()                                               # warm-up
            calls[label] = (threads, step)
        t = Timings(calls, rounds)
        by_cpu = threads == 1
        res[name] = (t.best(rev, by_cpu) * 1000, t.best("now", by_cpu) * 1000, t.ratio(rev, "now", by_cpu))
        out(f"{name:<26}{plural(threads, 'thread'):>10}  {rev}: {res[name][0]:8.1f} ms   now: {res[name][1]:8.1f} ms"
            f"   {rev} / now (median paired): {res[name][2]:.3f}")
    return res


def check_agreement(device):
    """Loss and gradients of ours against the standard formulation on one d64 batch:
    max relative error of the loss and of every gradient tensor (fp32 and bf16)."""
    vocab, n_layer, n_head, n_embd, B, T = SHAPES["d64"]
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=T, vocab_size=vocab, n_layer=n_layer, n_head=n_head, n_embd=n_embd)).to(device)
    x = torch.randint(0, vocab, (8, T), device=device)
    y = torch.randint(0, vocab, (8, T), device=device)

    def loss_and_grads(impl, dtype, head=""):
        model.config.loss_impl, model.config.head_dtype = impl, head
        model.zero_grad(set_to_none=True)
        with (nullcontext() if dtype == torch.float32 else torch.autocast(device.type, dtype=dtype)):
            _, loss = model(x, y)
        loss.backward()
        return loss.item(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}

    ref_loss, ref = loss_and_grads("standard", torch.float32)
    out = {}
    for impl, dtype, head, label in (("fused", torch.float32, "", "fused fp32"),
                                     ("fused", torch.float32, "bfloat16", "fused auto"),
                                     ("fused", torch.bfloat16, "", "fused bf16"),
                                     ("standard", torch.bfloat16, "", "standard bf16")):
        loss, grads = loss_and_grads(impl, dtype, head)
        gerr = max(((grads[n] - ref[n]).norm() / ref[n].norm().clamp_min(1e-30)).item() for n in ref)
        out[label] = (abs(loss - ref_loss) / ref_loss, gerr)
    model.config.head_dtype = ""
    return ref_loss, out


def data_throughput():
    """GPT-2 BPE tokens/s through tiktoken (1 thread and all cores) and MIDI files/s (mido)."""
    from data import music
    from data.common import cache_dir
    from data.text import gpt2_encoding
    enc = gpt2_encoding(cache_dir())
    words = ("the ladder of music poetry and prose teaches a small model what to attend to before "
             "it reads, and every stage keeps the weights that do not depend on the vocabulary. ").split()
    docs = [" ".join(words[(i * 7 + j) % len(words)] for j in range(400)) for i in range(2000)]
    res = {}
    for threads in sorted({1, os.cpu_count() or 1}):
        t = time.perf_counter()
        n = sum(len(ids) for ids in enc.encode_ordinary_batch(docs, num_threads=threads))
        res[f"tiktoken tokens/s ({threads} thread{'s' if threads > 1 else ''})"] = n / (time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, tokens in enumerate(music.synthetic(n_pieces=40, seed=0)):
            paths.append(Path(d) / f"{i}.mid")
            music.decode(tokens).save(paths[-1])
        t = time.perf_counter()
        _, stats = music.encode_files(paths)
        dt = time.perf_counter() - t
        res["MIDI files/s (mido parse + encode)"] = len(paths) / dt
        res["MIDI notes/s"] = stats["notes"] / dt
    return res


def loss_curves(steps, out):
    """--dtype auto (fp32 body, bf16 LM head + loss here) against fp32 by their loss curves: the
    same short run (prose stage, defaults otherwise) through train.run; returns per-step train
    losses, final val loss and seconds for each."""
    import json
    import train
    from flags import parse_args
    curves = {}
    for dtype in ("float32", "auto"):
        folder = Path(out) / dtype
        res = train.run(parse_args(["--stages", "prose", "--iters", str(steps), "--log-interval", "1",
                                    "--eval-interval", str(steps), "--dtype", dtype, "--no-progress",
                                    "--out", str(folder)]))
        losses = [json.loads(l)["loss"] for l in open(folder / "metrics.jsonl") if '"train"' in l]
        curves[dtype] = (losses, res["stages"][0]["val_loss"], res["seconds"])
    return curves


CURVE_PNG = Path("out") / "bench_curve.png"  # --curve's plot (out/ is ignored by git)


def main(argv=None):
    from data.common import ArgumentParser
    p = ArgumentParser(description="Time full training steps of our GPT against the standard "
                                   "full-logits formulation, in one process.")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated, from {list(SHAPES)} (default: "
                                                            f"{DEFAULT_SHAPES})")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds per variant, minimum kept (default 3; --tiny 5)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--no-data", action="store_true", help="skip the data-preparation throughput")
    p.add_argument("--compiled", action="store_true",
                   help="also time the standard and the fused head under torch.compile (at --dtype auto's "
                        "dtypes): on a GPU the compiler fuses the standard one, hence train.py's --loss-impl auto")
    p.add_argument("--curve", type=int, default=0, metavar="STEPS",
                   help="also train STEPS steps on prose in fp32 and with --dtype auto and compare the loss curves")
    p.add_argument("--grid", action="store_true",
                   help="fp32 / bf16 autocast / --dtype auto on the experiments' shapes (GRID); nothing else")
    p.add_argument("--loop", action="store_true", help="profile a tiny model's train.py step; nothing else")
    p.add_argument("--head-chunks", action="store_true",
                   help="time the fused head + loss (2,048 rows, GPT-2's vocabulary, fp32) at 512 rows a chunk "
                        "against lm_loss.chunk_rows for head widths 16-64; nothing else")
    p.add_argument("--jobs", action="store_true",
                   help="time a sweep of 4 small runs, 2 at a time x 1 thread vs 1 at a time x 2; nothing else")
    p.add_argument("--tiny", action="store_true",
                   help="the procedural diagnostic shape (2 layers, d 16, vocab 128, context 64, fp32): the "
                        "baseline step against each candidate speed-up; nothing else")
    p.add_argument("--tiny-batch", type=int, default=1000, help="--tiny: rows per step (default 1000)")
    p.add_argument("--tiny-mask", choices=("haystack", "dense"), default="haystack",
                   help="--tiny: one counted target per row (haystack, the default) or every target (dense)")
    p.add_argument("--tiny-seeds", type=int, default=3, metavar="K",
                   help="--tiny: K seeds batched against K sequential runs (default 3; 1 skips it)")
    p.add_argument("--no-compile", action="store_true", help="--tiny: leave torch.compile out (it compiles for ~20 s)")
    p.add_argument("--against", metavar="REV", default=None,
                   help="time model.py at git revision REV against the working tree's (the HAYSTACK, dense tiny and "
                        "d64 steps, interleaved in one process); nothing else")
    args = p.parse_args(argv)
    if args.rounds is not None and args.rounds <= 0:
        p.error(f"--rounds must be positive, got {args.rounds}")
    args.rounds = args.rounds or (5 if args.tiny else 3)
    from data.common import UserError, check_output
    from checkpoint import check_device
    try:
        device = check_device(args.device)
    except UserError as e:
        p.error(str(e))
    if args.curve < 0:
        p.error(f"--curve must be 0 (no loss curves) or a positive number of steps, got {args.curve}")
    if args.curve:  # its plot's folder, before minutes of training
        try:
            CURVE_PNG.parent.mkdir(exist_ok=True)
            check_output(CURVE_PNG, "--curve: its plot", example="bench_curve.png")
        except OSError as e:
            p.error(f"--curve: cannot make the folder {CURVE_PNG.parent} for its plot ({e.strerror or e}); run "
                    "bench.py where ./out can be a writable folder")
        except UserError as e:
            p.error(str(e))
    if args.against:
        print(f"model.py at {args.against} against the working tree's: a training step, ms (CPU time of the step's "
              f"thread at 1 thread, wall-clock at more), best of {args.rounds} interleaved rounds; "
              f"load average {os.getloadavg()[0]:.2f}")
        try:
            res = against(args.against, args.rounds)
        except ValueError as e:
            p.error(str(e))
        print(f"worst_ratio={min(r[2] for r in res.values()):.3f}")
        return
    if args.tiny:
        if args.tiny_batch <= 0 or args.tiny_seeds <= 0:
            p.error(f"--tiny-batch and --tiny-seeds must be positive, got {args.tiny_batch} and {args.tiny_seeds}")
        _, fraction = tiny(args.tiny_batch, args.rounds, args.tiny_mask, args.tiny_seeds, not args.no_compile)
        print(f"fraction_of_matmul={fraction:.3g}")
        return
    if args.grid:
        print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; ms per training step "
              f"(forward, backward, AdamW), best of {args.rounds} interleaved rounds\n")
        print(f"{'shape':<22}{'fp32':>9}{'bf16':>9}{'auto':>9}{'ratio':>9}   auto = (ratio: auto / faster of fp32, bf16)")
        rows = grid(device, args.rounds)
        worst = max(rows, key=lambda r: r[2])
        print(f"\nworst: {worst[0]} (auto {worst[2]:.2f}x the faster of fp32 and bf16)")
        print(f"worst_auto_ratio={worst[2]:.3f}")
        return
    if args.head_chunks:
        from lm_loss import CHUNK_ROWS
        print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; the fused head + loss "
              f"(2,048 rows, V = 50,257, fp32, forward + backward), ms, best of {args.rounds} interleaved rounds\n")
        print(f"{'C':>4}{f'{CHUNK_ROWS} rows':>11}{'rule':>9}{'rule rows':>11}{'speedup':>9}")
        res = head_chunks(device, args.rounds)
        for C, (fixed, rule, r) in res.items():
            print(f"{C:>4}{fixed:>11.0f}{rule:>9.0f}{r:>11}{fixed / rule:>8.2f}x")
        print(f"narrow_head_speedup={res[16][0] / res[16][1]:.3f}")
        return
    if args.loop:
        parts = loop_profile()
        print("tiny model (d16, 2 layers, vocab 102, batch 32 x 64), ms per step:")
        for k, v in parts.items():
            print(f"  {k:<42}{v:>8.2f}")
        return
    if args.jobs:
        for k, v in jobs_comparison().items():
            print(f"{k:<24}{v:>8.1f} s")
        return
    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        p.error(f"unknown shape(s) {unknown}; choose from {list(SHAPES)}")
    default_bench(args, device, shapes)


def default_bench(args, device, shapes):
    """bench.py with no mode flag: every shape's step through each variant (fp32 standard and fused, --dtype
    auto, compiled with --compiled), their agreement, data throughput and --curve's loss curves."""
    from machine import resolve_dtype
    body, head = resolve_dtype("auto", device, 50257)  # what train.py runs by default here (GPT-2 vocab)
    variants = [Variant("standard fp32", "standard", torch.float32), Variant("fused fp32", "fused", torch.float32)]
    if body != "float32" or head:
        variants.append(Variant("fused auto", "fused", getattr(torch, body), head))
    if args.compiled:
        variants += [Variant("standard compiled", "standard", getattr(torch, body), "", "inductor"),
                     Variant("fused compiled", "fused", getattr(torch, body), head, "inductor")]
    peaks = {torch.float32: matmul_peak(torch.float32, device), torch.bfloat16: matmul_peak(torch.bfloat16, device)}
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; matmul peak "
          f"fp32 {peaks[torch.float32] / 1e9:.0f} GFLOP/s, bf16 {peaks[torch.bfloat16] / 1e9:.0f} GFLOP/s")

    ref_loss, agree = check_agreement(device)
    print(f"\nagreement with the standard fp32 formulation (d64, one batch of 8x256, loss {ref_loss:.4f}):")
    for label, (lerr, gerr) in agree.items():
        print(f"  {label:<14} loss rel err {lerr:.1e}   worst gradient rel err {gerr:.1e}")

    print(f"\n{'shape':<10}{'variant':<15}{'ms/step':>9}{'tokens/s':>10}{'MFU':>7}{'peak MiB':>10}{'speedup':>9}")
    results = {}
    for name in shapes:
        for row in bench_shape(name, device, variants, args.rounds, peaks):
            results[(row[0], row[1])] = row
            print(f"{row[0]:<10}{row[1]:<15}{row[2]:>9.0f}{row[3]:>10.0f}{row[4]:>7.1%}{row[5]:>10.0f}{row[6]:>8.2f}x")
    if not args.no_data:
        print()
        for k, v in data_throughput().items():
            print(f"{k:<40}{v:>14,.0f}")
    if args.curve:
        curves = loss_curves(args.curve, tempfile.mkdtemp(prefix="bench-curve-"))
        (f32, v32, s32), (b16, v16, s16) = curves["float32"], curves["auto"]
        diffs = [abs(a - b) for a, b in zip(f32, b16)]
        print(f"\nloss curve, {args.curve} steps on prose: fp32 {s32:.0f} s, auto {s16:.0f} s; train loss "
              f"max |diff| {max(diffs):.3f}, mean |diff| {sum(diffs) / len(diffs):.3f}, last 10 steps fp32 "
              f"{sum(f32[-10:]) / 10:.3f} vs auto {sum(b16[-10:]) / 10:.3f}; final val loss fp32 {v32:.3f} vs auto {v16:.3f}")
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.plot(f32, label="fp32")
            ax.plot(b16, label="--dtype auto", alpha=0.8)
            ax.set_xlabel("step")
            ax.set_ylabel("train loss")
            ax.legend()
            fig.tight_layout()
            tmp = CURVE_PNG.with_name(f".{CURVE_PNG.name}.tmp-{os.getpid()}.png")
            fig.savefig(tmp, dpi=100)
            os.replace(tmp, CURVE_PNG)
            print(f"wrote {CURVE_PNG}")
        except ImportError:
            pass
    for name in shapes if args.compiled else ():
        std, fused = results[(name, "standard compiled")], results[(name, "fused compiled")]
        print(f"\n{name}, compiled: the standard head {fused[2] / std[2]:.2f}x the fused one's speed")
    if "d64" in shapes:
        best = [v.name for v in variants if not v.backend][-1]  # what train.py runs by default here (--dtype auto)
        print(f"\nd64 ({best} vs standard fp32): {results[('d64', best)][6]:.2f}x faster, peak memory "
              f"{results[('d64', best)][5]:.0f} vs {results[('d64', 'standard fp32')][5]:.0f} MiB")
        print(f"speedup_vs_full_logits={results[('d64', best)][6]:.2f}")


if __name__ == "__main__":
    main()
