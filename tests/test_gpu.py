"""train.py's CUDA paths against its CPU ones, on a machine with a GPU: python -m pytest -m gpu
(kept out of the default run, and skipped without CUDA). fp32 on CUDA follows the CPU step by step
(TF32 matmuls: to 1e-3 nats); a bf16 run killed mid-stage resumes bit-for-bit; --compile, which
makes --loss-impl auto the standard head, follows the eager fused run."""
import pytest
import torch

import machine
import train
from flags import parse_args
from test_train import TINY, killed_run_resumes_exactly, losses

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def run(out, text_dir, *flags):
    train.run(parse_args(["--stages", f"text:{text_dir}", "--iters", "10", "--eval-interval", "5", "--out", str(out)]
                         + TINY + list(flags)))
    return losses(out)


def test_cuda_fp32_follows_the_cpu(cache, text_dir, tmp_path):
    cpu, cuda = run(tmp_path / "cpu", text_dir), run(tmp_path / "cuda", text_dir, "--device", "cuda")
    assert cpu.keys() == cuda.keys() and len(cpu) == 10
    assert max(abs(cpu[k] - cuda[k]) for k in cpu) < 1e-3


def test_killed_cuda_bf16_run_resumes_exactly(cache, text_dir, tmp_path):
    killed_run_resumes_exactly(cache, text_dir, tmp_path, ["--device", "cuda", "--dtype", "bfloat16"])


def test_compiled_standard_head_follows_the_eager_fused_one(cache, text_dir, tmp_path):
    assert machine.resolve_loss_impl("auto", torch.device("cuda"), True) == "standard"
    eager = run(tmp_path / "eager", text_dir, "--device", "cuda", "--loss-impl", "fused")
    compiled = run(tmp_path / "compiled", text_dir, "--device", "cuda", "--compile")
    assert eager.keys() == compiled.keys() and max(abs(eager[k] - compiled[k]) for k in eager) < 1e-3
