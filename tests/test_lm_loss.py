"""lm_loss.linear_cross_entropy against the standard formulation: F.cross_entropy(h @ W.T, t)."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lm_loss import linear_cross_entropy  # noqa: E402


def make(N=300, C=16, V=1000, seed=0, dtype=torch.float32, w_std=0.3):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, C, generator=g, dtype=dtype).requires_grad_()
    W = (torch.randn(V, C, generator=g, dtype=dtype) * w_std).requires_grad_()
    t = torch.randint(0, V, (N,), generator=g)
    return h, W, t


def loss_and_grads(fn, h, W, *args, **kw):
    h.grad = W.grad = None
    loss = fn(h, W, *args, **kw)
    loss.backward()
    return loss.detach(), h.grad.clone(), W.grad.clone()


def standard(h, W, t, ignore_index=-1):
    return F.cross_entropy((h @ W.t()).float(), t, ignore_index=ignore_index)


def assert_close(a, b, rtol=1e-5):
    torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * b.abs().max().item() + 1e-12)


def assert_close_norm(a, b, tol):
    assert ((a.float() - b.float()).norm() / b.float().norm()).item() < tol


@pytest.mark.parametrize("chunk_size", [1, 64, 77, 300, 4096])   # 77, 64 do not divide 300
def test_fp32_matches_standard(chunk_size):
    h, W, t = make()
    ours = loss_and_grads(linear_cross_entropy, h, W, t, chunk_size=chunk_size)
    ref = loss_and_grads(standard, h, W, t)
    for a, b in zip(ours, ref):
        assert_close(a, b)
    assert ours[0].dtype == torch.float32 and ours[0].dim() == 0


def test_chunk_rows_keeps_a_narrow_fp32_heads_buffer_in_cache_on_one_cpu_thread():
    from lm_loss import CHUNK_ROWS, chunk_rows
    cpu, f32 = torch.device("cpu"), torch.float32
    assert chunk_rows(16, 50257, cpu, f32, threads=1) == 16          # GPT-2's vocabulary: 3.2 MB
    assert chunk_rows(8, 4096, cpu, f32, threads=1) == 192           # 3 MiB / (4 B x 4096)
    assert chunk_rows(16, 160, cpu, f32, threads=1) == CHUNK_ROWS    # a small vocabulary: small anyway
    for args in ((24, 50257, cpu, f32, 1), (16, 50257, cpu, torch.bfloat16, 1), (16, 50257, cpu, f32, 2),
                 (16, 50257, torch.device("cuda"), f32, 1)):         # wider, bf16, 2 threads, a GPU
        assert chunk_rows(*args) == CHUNK_ROWS, args


def test_default_chunks_are_the_rules_rows():
    """No chunk_size: the loss and gradients of chunk_size=chunk_rows(...), bit for bit (tests run
    on one thread: 16 rows here), and the standard formulation's to rounding."""
    from lm_loss import chunk_rows
    assert torch.get_num_threads() == 1 and chunk_rows(16, 50257, torch.device("cpu"), torch.float32) == 16
    h, W, t = make(N=100, C=16, V=50257, w_std=0.1)
    default = loss_and_grads(linear_cross_entropy, h, W, t)
    for a, b in zip(default, loss_and_grads(linear_cross_entropy, h, W, t, chunk_size=16)):
        assert torch.equal(a, b)
    for a, b in zip(default, loss_and_grads(standard, h, W, t)):
        assert_close(a, b)


def test_moderate_size_gpt2_vocab_padded():
    # GPT-2 vocabulary padded to a multiple of 64, as nanoGPT does: padded rows are no class
    h, W, t = make(N=512, C=64, V=50304, w_std=0.1)
    t = t % 50257
    ours = loss_and_grads(linear_cross_entropy, h, W, t, vocab_size=50257, chunk_size=200)
    ref = loss_and_grads(lambda h, W, t: standard(h, W[:50257], t), h, W, t)
    for a, b in zip(ours, ref):
        assert_close(a, b)
    assert ours[2][50257:].abs().max() == 0


def test_weight_tying_accumulates_with_embedding_grad():
    torch.manual_seed(0)
    V, C, B, T = 500, 16, 4, 33
    idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
    grads = []
    for use_ours in (True, False):
        torch.manual_seed(1)
        emb, ln = torch.nn.Embedding(V, C), torch.nn.LayerNorm(C)
        h = ln(torch.tanh(emb(idx)))                          # (B, T, C)
        if use_ours:
            loss = linear_cross_entropy(h, emb.weight, tgt, chunk_size=50)
        else:
            loss = F.cross_entropy((h @ emb.weight.t()).view(-1, V), tgt.view(-1))
        loss.backward()
        grads.append((loss.detach(), emb.weight.grad, ln.weight.grad))
    for a, b in zip(*grads):
        assert_close(a, b)


def test_ignore_index_and_custom_value():
    h, W, t = make(N=200)
    t[::3] = -1
    for a, b in zip(loss_and_grads(linear_cross_entropy, h, W, t, chunk_size=37),
                    loss_and_grads(standard, h, W, t)):
        assert_close(a, b)
    assert h.grad[::3].abs().max() == 0                      # ignored rows get no gradient
    t[::3] = -100
    for a, b in zip(loss_and_grads(linear_cross_entropy, h, W, t, ignore_index=-100),
                    loss_and_grads(standard, h, W, t, ignore_index=-100)):
        assert_close(a, b)


def test_all_ignored_gives_zero_loss_and_zero_grads():
    h, W, t = make(N=50)
    t[:] = -1
    loss, gh, gW = loss_and_grads(linear_cross_entropy, h, W, t)
    assert loss.item() == 0 and gh.abs().max() == 0 and gW.abs().max() == 0
    with torch.no_grad():
        assert linear_cross_entropy(h, W, t).item() == 0


def test_grad_output_scaling_and_3d_inputs():
    h, W, t = make(N=6 * 40)
    h3, t3 = h.detach().view(6, 40, -1).requires_grad_(), t.view(6, 40)
    loss = linear_cross_entropy(h3, W, t3, chunk_size=64)
    (2.5 * loss).backward()
    ref = loss_and_grads(lambda h, W, t: 2.5 * standard(h, W, t), h, W, t)
    assert_close(2.5 * loss.detach(), ref[0])
    assert_close(h3.grad.view_as(h), ref[1])
    assert_close(W.grad, ref[2])


def test_no_grad_path_gives_same_loss():
    h, W, t = make()
    t[::5] = -1
    train_loss = linear_cross_entropy(h, W, t, chunk_size=64)
    with torch.no_grad():
        eval_loss = linear_cross_entropy(h, W, t, chunk_size=64)
    with torch.inference_mode():
        inf_loss = linear_cross_entropy(h, W, t, chunk_size=64)
    frozen = linear_cross_entropy(h.detach(), W.detach(), t, chunk_size=64)
    assert not eval_loss.requires_grad and not frozen.requires_grad
    for other in (eval_loss, inf_loss, frozen):
        assert_close(other, train_loss.detach())


def test_huge_logits_underflow_is_rescored_exactly():
    h, W, t = make(N=64, w_std=40.0)                          # target probs far below 1e-38
    ours = loss_and_grads(linear_cross_entropy, h, W, t, chunk_size=16)
    ref = loss_and_grads(standard, h, W, t)
    assert ref[0] > 100 and torch.isfinite(ours[0])
    for a, b in zip(ours, ref):
        assert_close(a, b)


@pytest.mark.parametrize("vocab", [1000, 1024])
def test_bf16_autocast_close_to_fp32(vocab):
    h, W, t = make(N=256, C=32, V=vocab)
    t[::7] = -1
    ref = loss_and_grads(standard, h, W, t)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ac_ref = loss_and_grads(standard, h, W, t)            # the standard under autocast
        ours = loss_and_grads(linear_cross_entropy, h, W, t, chunk_size=100)
    assert ours[0].dtype == torch.float32
    assert ours[1].dtype == h.dtype and ours[2].dtype == W.dtype
    assert abs(ours[0] - ref[0]) < 1e-2 * ref[0]
    assert abs(ours[0] - ac_ref[0]) < 1e-2 * ref[0]
    for a, b in zip(ours[1:], ref[1:]):
        assert_close_norm(a, b, 2e-2)
    explicit = loss_and_grads(linear_cross_entropy, h, W, t, chunk_size=100,
                              dtype=torch.bfloat16)          # same path without autocast
    for a, b in zip(explicit, ours):
        assert_close(a, b, rtol=1e-3)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert_close(linear_cross_entropy(h, W, t, chunk_size=100), ours[0])   # eval path


def test_fp16_rescores_underflowed_rows():
    # fp16 target probabilities underflow below loss ~9.7: those rows are re-scored in fp32
    h, W, t = make(N=128, C=32, V=2000, w_std=0.5)
    ref = loss_and_grads(standard, h, W, t)
    assert ref[0] > 9.7
    ours = loss_and_grads(linear_cross_entropy, h, W, t, chunk_size=50, dtype=torch.float16)
    assert abs(ours[0] - ref[0]) < 1e-3 * ref[0]
    for a, b in zip(ours[1:], ref[1:]):
        assert_close_norm(a, b, 1e-2)


def test_gradcheck_float64():
    h, W, t = make(N=9, C=4, V=13, dtype=torch.float64, w_std=1.0)
    t[4] = -1
    assert torch.autograd.gradcheck(
        lambda h, W: linear_cross_entropy(h, W, t, chunk_size=4), (h, W))
