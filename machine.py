"""
The machine a run trains on: its processes (DDP under torchrun: gloo on CPU, nccl on GPU), its
device, and the precision and loss implementation that run fastest there (each choice measured:
the numbers beside it). train.py asks once, at set-up; nothing here knows the loop.
"""

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist

from checkpoint import check_device


class Env(NamedTuple):
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def master(self):
        return self.rank == 0


def setup_distributed(args):
    """The run's Env (rank, world, local_rank, device); initialises the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    check_device(dev)
    if dev == "cuda":
        dev = f"cuda:{local_rank}" if world > 1 else "cuda"
    device = torch.device(dev)
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    threads = args.threads or max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    if device.type == "cpu":
        torch.set_num_threads(threads)
    return Env(rank, world, local_rank, device)


def all_mean(x, world, device):
    """Mean of a python float over the processes. The tensor lives on the run's device: NCCL
    reduces only CUDA tensors (gloo takes CPU ones)."""
    if world == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device)
    dist.all_reduce(t)
    return t.item() / world


@contextmanager
def rank0_first(env):
    """Rank 0 runs the block first (it prepares a corpus into the cache), the other ranks then run it
    (and read the cache); a single process just runs it."""
    if env.world > 1 and not env.master:
        dist.barrier()
    yield
    if env.world > 1 and env.master:
        dist.barrier()


# The fused LM head + loss (lm_loss.py) in bf16 against fp32 on this 2-core AVX-512-bf16 CPU,
# forward + backward of 8,192 rows (ms, fp32 / bf16): d16: V 160 7/7, V 512 15/9, V 2,048 51/24,
# V 8,192 199/78, V 50,257 1,143/891; d64: V 160 22/13, V 50,257 5,511/880 (noisy machine). The
# transformer body at these widths is the other way round: bf16 autocast makes a d32 24-layer
# step 1.8x SLOWER (170 vs 303 ms) and a d16 2-layer step 2.4x slower (10 vs 24 ms): small
# matmuls pay for the casts. `python bench.py --grid` measures the whole step (2026-11-30: auto
# within 4% of the faster of fp32 and bf16 on every shape, 0.86-0.98x of it on the text shapes).
HEAD_BF16_MIN_VOCAB = 1024

# float16 autocast on a CPU is slow, with nothing to gain: CPUs have no fast float16 matmuls. Measured on
# this 2-core CPU (2026-12-03, one thread, d64 4-layer model, 16 x 128 tokens, forward + backward,
# best of 3): vocabulary 160: 189 ms float32, 1,624 ms float16 (8.6x); vocabulary 50,257 (the GPT-2
# text stages): 1,288 ms vs 22,519 ms (17.5x). A warning, not a refusal: float16's numerics (the
# GradScaler path) may be what a CPU run is for.
FLOAT16_ON_CPU = ("warning: --dtype float16 on a CPU runs a step about 9-18x slower than float32 (measured on a "
                  "d64 model: 8.6x at vocabulary 160, 17.5x at 50,257); use --dtype float32 or auto unless "
                  "float16's numerics are the point")


def resolve_dtype(name, device, vocab_size=None):
    """(autocast dtype name, head dtype name) for --dtype. auto: on a GPU, bf16 autocast where
    supported (else fp32); on a CPU, the body in fp32 (no autocast) and the fused LM head + loss
    in bf16 when the CPU has native bf16 instructions (avx512_bf16/amx_bf16) and the vocabulary
    has at least HEAD_BF16_MIN_VOCAB rows, where the numbers above say it pays; else all fp32.
    An explicit dtype is autocast over the whole model, the head included."""
    if name != "auto":
        return name, ""
    if device.type == "cuda":
        return ("bfloat16" if torch.cuda.is_bf16_supported() else "float32"), ""
    native = cpu_info()[1] & {"avx512_bf16", "amx_bf16"}
    return "float32", ("bfloat16" if native and (vocab_size or 0) >= HEAD_BF16_MIN_VOCAB else "")


def cpu_info():
    """(model name, set of instruction-set flags) of this machine's CPU, from /proc/cpuinfo; ("", set()) without it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    return (next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), ""),
            next((set(ln.split(":", 1)[1].split()) for ln in lines if ln.startswith(("flags", "Features"))), set()))


# --loss-impl auto. On a GPU torch.compile fuses the standard head and cross-entropy into a few
# kernels; it cannot do that for the chunked loop of lm_loss.py (kept out of the graph). `python
# bench.py --device cuda --shapes gpt2 --compiled` on one H200 (torch 2.11; 12 layers, d 768, GPT-2's
# vocabulary, 16 x 1,024 tokens, bf16 autocast): 36 ms a compiled step with the standard head, 72 ms
# with the fused one (2.02x; peak memory 8.7 vs 6.2 GB). train.py's own runs there: 417k vs 220k
# tokens/s compiled; eager 203k vs 196k, not worth the full logits' memory.
def resolve_loss_impl(name, device, compiled=False):
    """--loss-impl: auto is the standard LM head + loss where the compiler fuses it (a GPU under
    --compile, numbers above), else the fused, chunked one (on a CPU the full logits are most of a
    step: lm_loss.py). The two compute the same loss and gradients (tests/test_model.py), so a run
    may resume under the other."""
    if name != "auto":
        return name
    return "standard" if device.type == "cuda" and compiled else "fused"


def available_memory_bytes():
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


_MATMUL_RATE = {}


def matmul_flops(device):
    """This machine's float32 matmul speed on `device`, in FLOP/s: the best of 3 products of 512 x 1024 by
    1024 x 1024 (measured once a process, in a second or less). A training step runs slower than its
    matmuls alone (attention, the loss, the optimizer), so a time predicted with it is a lower bound."""
    key = str(device)
    if key not in _MATMUL_RATE:
        a = torch.full((512, 1024), 0.5, device=device)  # (no random numbers drawn: the run's RNG is untouched)
        b = torch.full((1024, 1024), 0.5, device=device)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        best = float("inf")
        for _ in range(3):
            sync()
            t = time.perf_counter()
            a @ b
            sync()
            best = min(best, time.perf_counter() - t)
        _MATMUL_RATE[key] = 2 * 512 * 1024 * 1024 / max(best, 1e-9)
    return _MATMUL_RATE[key]
