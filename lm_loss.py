"""Fused, chunked LM head + cross-entropy: the loss of `h @ W.T` without the (N, V) logits.

For row i with hidden state h_i (C,), head W (V, C) and target t_i,
    z_i = W h_i                              logits (V,)
    p_i = softmax(z_i)                       loss_i = -log p_i[t_i] = logsumexp(z_i) - z_i[t_i]
    loss = (1/n) sum_i loss_i                over the n rows whose target != ignore_index
and with G the (n, V) matrix of rows p_i - onehot(t_i),
    dloss/dh = G @ W / n                     dloss/dW = G^T @ h / n.
With row weights w_i >= 0 (MIR's lambda on the masked copy, MDLM's 1/t): the weighted mean
    loss = sum_i w_i loss_i / sum_i w_i,     G's row i scaled by w_i, n = sum_i w_i.
The rows are processed `chunk_size` at a time in one reused (r, V) buffer: the matmul writes the
logits, one fused softmax kernel turns them into p in place (each row is still in cache), the
target probabilities are read off, 1 is subtracted at the targets, and the same buffer feeds the
two gradient matmuls. Training needs the gradients anyway, so they are formed in forward and
stashed; backward only scales them by grad_output / n. No (N, V) tensor ever exists, and ignored
rows are dropped before any work. Evaluation (no grad) skips the gradient matmuls.

Precision: the matmuls and the softmax run in `dtype`, the autocast dtype when autocast is on:
the same rounding as autocast's bf16 logits (the softmax kernel sums in fp32), and dW is summed
over chunks in fp32. A row whose target probability underflows `dtype` (loss > 87 nats; > 9.7 in
fp16, so prefer bf16) is re-scored exactly in fp32. In fp32 the result matches
F.cross_entropy(h @ W.T, t) and its gradients to rounding.

Its speed against the standard head is measured by `python bench.py` (ratios in the same run); the memory it
saves is the (rows, V) logits and their gradient, never held whole.
Rows per chunk (`chunk_rows`): 512, except for a narrow head (C <= 16) in fp32 on one CPU thread
(a sweep's runs, 1 thread each), where a logit costs only C multiply-adds, so the three matmuls
are bound by moving the (r, V) buffer through memory rather than by arithmetic: there the buffer
is kept to ~3 MB, which stays in cache (16 rows at V = 50257). `python bench.py --head-chunks`
times both.
"""
import torch

CHUNK_ROWS = 512                # rows per chunk: the (r, V) buffer
NARROW_HEAD = 16                # C at most this: a memory-bound head (fp32, CPU)
NARROW_BUFFER_BYTES = 3 << 20   # ...whose (r, V) buffer is kept this small (at least 16 rows)


def chunk_rows(C, V, device, dtype, threads=None):
    """Rows per chunk when the caller names none: CHUNK_ROWS, or for a narrow fp32 head on one
    CPU thread min(CHUNK_ROWS, max(16, NARROW_BUFFER_BYTES / (4 V))), 16 rows for GPT-2's
    vocabulary. threads: torch.get_num_threads() unless given. Measured with bench.py
    --head-chunks (2-core AVX2 EPYC, 2,048 rows, V = 50257, forward + backward, 1 thread, quiet):
    C = 16 618 ms at 512 rows, 293 ms at 16 rows (2.1x; a d16 4-layer training step of 16 x 128
    684 -> 356 ms); C = 24, 32, 64 no faster or slower with small chunks (their matmuls do enough
    arithmetic per logit). With 2 threads on a busy machine
    16-row chunks were several times slower (each small matmul waits for both threads), so the rule stays
    with 1 thread."""
    threads = torch.get_num_threads() if threads is None else threads
    if torch.device(device).type != "cpu" or dtype != torch.float32 or C > NARROW_HEAD or threads != 1:
        return CHUNK_ROWS
    return min(CHUNK_ROWS, max(16, NARROW_BUFFER_BYTES // (4 * V)))


def _exact_loss(x, weight, targets, vocab_size, chunk_size):
    """Per-row loss in fp32 via logsumexp, for the rare rows whose target prob underflowed."""
    w, out = weight.to(torch.promote_types(weight.dtype, torch.float32)), []
    for i in range(0, x.shape[0], chunk_size):
        z = x[i:i + chunk_size].to(w.dtype) @ w.t()           # (r, V)
        z[:, vocab_size:] = float("-inf")
        out.append(torch.logsumexp(z, 1) - z.gather(1, targets[i:i + chunk_size, None])[:, 0])
    return torch.cat(out)


def _loss_and_grads(h, weight, targets, vocab_size, chunk_size, dtype, need_grad, row_weight=None):
    """Summed loss over all rows of h (n, C) (no ignored targets; weighted by row_weight (n,) if
    given), and if need_grad the gradients of that sum: dh (n, C) in `dtype` and dW (V, C) in
    fp32 (fp64 for fp64)."""
    n, (V, C) = h.shape[0], weight.shape
    acc = torch.promote_types(dtype, torch.float32)           # sums: fp32 (fp64 for fp64)
    x_all, w = h.to(dtype), weight.to(dtype)                  # no copy when already `dtype`
    buf = torch.empty(min(chunk_size, n), V, dtype=dtype, device=h.device)
    rows, minus_one = torch.arange(buf.shape[0], device=h.device), buf.new_full((), -1.0)
    p_t = torch.empty(n, dtype=dtype, device=h.device)        # softmax prob of each target
    if need_grad:
        dh = torch.empty_like(x_all)                          # (n, C)
        dWt = torch.zeros(C, V, dtype=acc, device=h.device)  # dW.T: the faster layout
        if dtype != acc:
            part, part32 = torch.empty_like(dWt, dtype=dtype), torch.empty_like(dWt)
    for i in range(0, n, chunk_size):
        x, t = x_all[i:i + chunk_size], targets[i:i + chunk_size]      # (r, C), (r,)
        r = x.shape[0]
        z = torch.mm(x, w.t(), out=buf[:r])                  # (r, V) logits
        if V > vocab_size:                                    # padded head rows are no class
            z[:, vocab_size:] = float("-inf")
        # in place on CPU, where it is fast and checked; a fresh buffer on other devices
        p = torch.softmax(z, 1, out=z if z.is_cpu else None)  # (r, V)
        p_t[i:i + r] = p[rows[:r], t]
        if need_grad:
            p.index_put_((rows[:r], t), minus_one, accumulate=True)   # G = p - onehot(t)
            if row_weight is not None:
                p.mul_(row_weight[i:i + r, None].to(dtype))   # row i of G times w_i
            torch.mm(p, w, out=dh[i:i + r])                   # (r, C) = (r, V) @ (V, C)
            if dtype == acc:
                dWt.addmm_(x.t(), p)                          # (C, V) += (C, r) @ (r, V)
            else:                                             # low-precision product, fp32 sum
                dWt += part32.copy_(torch.mm(x.t(), p, out=part))   # (no temporaries)
    loss = -p_t.to(acc).log()                                 # (n,) = logsumexp(z) - z[t]
    bad = p_t < torch.finfo(dtype).tiny                       # underflowed: re-score exactly
    if bad.any():
        loss[bad] = _exact_loss(h[bad], weight, targets[bad], vocab_size, chunk_size)
    total = loss.sum() if row_weight is None else (loss * row_weight.to(loss.dtype)).sum()
    if not need_grad:
        return total, None, None
    return total, dh, dWt.t().contiguous()


class LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of h @ weight.T; the gradients are computed in forward and stashed."""

    @staticmethod
    def forward(ctx, h, weight, targets, ignore_index, vocab_size, chunk_size, dtype, row_weight):
        keep = (targets != ignore_index).nonzero()[:, 0]
        n = keep.numel()
        ctx.h_dtype, ctx.w_dtype = h.dtype, weight.dtype
        ctx.n = max(n, 1) if row_weight is None else float(row_weight[keep].sum()) if n else 1.0
        if n == 0:                                            # nothing to score: loss 0, grads 0
            ctx.save_for_backward(torch.zeros_like(h), torch.zeros_like(weight))
            return h.new_zeros((), dtype=torch.promote_types(dtype, torch.float32))
        if n == targets.numel():
            loss, dh, dW = _loss_and_grads(h, weight, targets, vocab_size, chunk_size, dtype, True,
                                           row_weight)
        else:                                                 # score the kept rows only
            loss, dh_kept, dW = _loss_and_grads(h[keep], weight, targets[keep], vocab_size, chunk_size,
                                                dtype, True, None if row_weight is None else row_weight[keep])
            dh = torch.zeros_like(h, dtype=dh_kept.dtype).index_copy_(0, keep, dh_kept)
        ctx.save_for_backward(dh, dW)
        return loss / ctx.n

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        dh, dW = ctx.saved_tensors
        g = grad_loss.to(dW.dtype) / ctx.n                    # the 1/n of the mean, deferred
        dh = (dh * g).to(ctx.h_dtype) if ctx.needs_input_grad[0] else None
        dW = (dW * g).to(ctx.w_dtype) if ctx.needs_input_grad[1] else None
        return dh, dW, None, None, None, None, None, None


@torch.compiler.disable  # a python loop with data-dependent sizes: keep it out of compiled graphs
def linear_cross_entropy(h, weight, targets, ignore_index=-1, vocab_size=None,
                         chunk_size=None, dtype=None, row_weight=None):
    """Mean cross-entropy of the logits h @ weight.T over rows whose target != ignore_index.

    h (..., C) final hidden states (after the last norm); weight (V, C) the LM head, may be the
    tied token embedding (its gradient adds to the embedding's); targets (...) long.
    vocab_size: number of real classes when weight is padded (e.g. 50304 rows for 50257 tokens):
    rows beyond it are never predicted and get zero gradient. chunk_size: rows per chunk
    (default `chunk_rows`: 512, fewer for a narrow fp32 head on a CPU).
    dtype: matmul/softmax precision; default the autocast dtype when autocast is on for h's
    device, else h.dtype. Returns a 0-dim fp32 loss (fp64 for fp64); 0 with zero gradients when
    every target is ignored (F.cross_entropy gives nan). Without grad (evaluation) only the loss
    is computed. Not twice differentiable. row_weight (...) >= 0, optional: the weighted mean
    sum_i w_i loss_i / sum_i w_i over the kept rows (rows of weight 0 count as ignored).
    """
    h, targets = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    if row_weight is not None:
        row_weight = row_weight.reshape(-1).float()
        targets = targets.masked_fill(row_weight == 0, ignore_index)
    vocab_size = weight.shape[0] if vocab_size is None else vocab_size
    if dtype is None:
        dev = h.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else h.dtype
    if chunk_size is None:
        chunk_size = chunk_rows(weight.shape[1], weight.shape[0], h.device, dtype)
    with torch.autocast(h.device.type, enabled=False):       # dtypes are handled explicitly
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
            return LinearCrossEntropy.apply(h, weight, targets, ignore_index, vocab_size,
                                            chunk_size, dtype, row_weight)
        keep = targets != ignore_index
        n = int(keep.sum())
        if n == 0:
            return h.new_zeros((), dtype=torch.promote_types(dtype, torch.float32))
        if n < targets.numel():
            h, targets = h[keep], targets[keep]
            row_weight = None if row_weight is None else row_weight[keep]
        total = _loss_and_grads(h, weight, targets, vocab_size, chunk_size, dtype, False, row_weight)[0]
        return total / (n if row_weight is None else row_weight.sum().to(total.dtype))
