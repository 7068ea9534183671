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
"""

import os
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from model import GPT, GPTConfig

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
}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(dtype, device, n=2048, reps=5):
    """Achieved FLOP/s of a square matmul: the peak MFU is measured against."""
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
    fused head's own dtype, which --dtype auto sets to bf16 under an fp32 body on this CPU)."""

    def __init__(self, name, loss_impl, dtype, head_dtype=""):
        self.name, self.loss_impl, self.dtype, self.head_dtype = name, loss_impl, dtype, head_dtype

    def step(self, model, opt, x, y, device):
        model.config.loss_impl = self.loss_impl
        model.config.head_dtype = self.head_dtype
        amp = nullcontext() if self.dtype == torch.float32 else torch.autocast(device.type, dtype=self.dtype)
        with amp:
            _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()


def bench_shape(name, device, variants, rounds, peaks):
    vocab, n_layer, n_head, n_embd, B, T = SHAPES[name]
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


def grid(device, rounds, shapes=None):
    """fp32, bf16 autocast and train.py's --dtype auto on each GRID shape, one process, rounds
    interleaved, minimum kept. Returns rows (shape, {variant: ms}, auto / min(fp32, bf16))."""
    from train import resolve_dtype
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


def main(argv=None):
    from flags import ArgumentParser
    p = ArgumentParser(description="Time full training steps of our GPT against the standard "
                                   "full-logits formulation, in one process.")
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, from {list(SHAPES)}")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per variant (minimum kept)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--no-data", action="store_true", help="skip the data-preparation throughput")
    p.add_argument("--curve", type=int, default=0, metavar="STEPS",
                   help="also train STEPS steps on prose in fp32 and with --dtype auto and compare the loss curves")
    p.add_argument("--grid", action="store_true",
                   help="fp32 / bf16 autocast / --dtype auto on the experiments' shapes (GRID); nothing else")
    p.add_argument("--loop", action="store_true", help="profile a tiny model's train.py step; nothing else")
    p.add_argument("--jobs", action="store_true",
                   help="time a sweep of 4 small runs, 2 at a time x 1 thread vs 1 at a time x 2; nothing else")
    args = p.parse_args(argv)
    if args.rounds <= 0:
        p.error(f"--rounds must be positive, got {args.rounds}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device; use --device cpu")
    device = torch.device(args.device)
    if args.grid:
        print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; ms per training step "
              f"(forward, backward, AdamW), best of {args.rounds} interleaved rounds\n")
        print(f"{'shape':<22}{'fp32':>9}{'bf16':>9}{'auto':>9}{'ratio':>9}   auto = (ratio: auto / faster of fp32, bf16)")
        rows = grid(device, args.rounds)
        worst = max(rows, key=lambda r: r[2])
        print(f"\nworst: {worst[0]} (auto {worst[2]:.2f}x the faster of fp32 and bf16)")
        print(f"worst_auto_ratio={worst[2]:.3f}")
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
    from train import resolve_dtype
    body, head = resolve_dtype("auto", device, 50257)  # what train.py runs by default here (GPT-2 vocab)
    variants = [Variant("standard fp32", "standard", torch.float32), Variant("fused fp32", "fused", torch.float32)]
    if body != "float32" or head:
        variants.append(Variant("fused auto", "fused", getattr(torch, body), head))
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
            Path("out").mkdir(exist_ok=True)
            fig.savefig("out/bench_curve.png", dpi=100)
            print("wrote out/bench_curve.png")
        except ImportError:
            pass
    if "d64" in shapes:
        best = variants[-1].name  # what train.py runs by default here (--dtype auto)
        print(f"\nd64 ({best} vs standard fp32): {results[('d64', best)][6]:.2f}x faster, peak memory "
              f"{results[('d64', best)][5]:.0f} vs {results[('d64', 'standard fp32')][5]:.0f} MiB")
        print(f"speedup_vs_full_logits={results[('d64', best)][6]:.2f}")


if __name__ == "__main__":
    main()
