"""
One compact GPT-2-style decoder, shared by every stage and every paper in this project.
GPT-2 (Radford et al. 2019) in the nanoGPT formulation, plus two hooks the papers need:
a per-layer residual-scale buffer (ProRes, arXiv 2603.05369, writes it) and a choice of
norm placement (Pre-LN, Post-LN, Sandwich, DeepNorm, LayerNorm-Scaling), a choice of
initialisation (GPT-2's depth-scaled one, the plain one of the ProRes authors' baselines, or
DeepNet's Xavier/beta init for DeepNorm), and a causal switch (the masked-diffusion baseline of
arXiv 2606.06888 attends both ways).

It knows no training loop, corpus, ProRes or MIR; the only module of ours it uses is
lm_loss.py, the fused chunked LM head + cross-entropy (a kernel, kept in its own file to be
read on its own). Parameter names are stable so that transfer.py can copy them by group
(see `group_of`).
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

NORMS = ("pre", "post", "sandwich", "deepnorm", "lns", "lns-init")
INITS = ("gpt2", "plain", "deepnet")
# where --dropout applies. all: GPT-2 / nanoGPT's sites, the embeddings' sum, the attention
# probabilities and the output of both residual branches. attn-out: only the attention block's
# output projection, as the data-constrained authors' model (dc_pretrain dcp/model.py:135 builds
# resid_dropout, :149 applies it to c_proj's output; their MLP and embeddings have none), and
# about half the CPU step of `all` at their sizes (no mask on the T x T probabilities, and the
# fused attention kernel, which has no dropout, stays in use).
DROPOUT_AT = {"all": "embeddings, attention probabilities, both residual branches (GPT-2)",
              "attn-out": "the attention block's output projection only (the data-constrained authors')"}


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has no bias=False before 2.1) and an optional
    fixed output scale: LayerNorm-Scaling (arXiv 2502.05795, eq. 5) multiplies the norm's output
    by 1/sqrt(l), a constant, not a learned weight (`scale`, kept out of the state dict)."""

    def __init__(self, ndim, bias, scale=1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None
        self.scale = scale

    def forward(self, x):
        y = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
        return y if self.scale == 1.0 else y * self.scale


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be divisible by n_head"
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.dropout = config.dropout if config.dropout_at == "all" else 0.0  # on the attention probabilities
        self.causal = config.causal

    def forward(self, x):
        """x (B, T, C) -> (B, T, C): per head, softmax(q k^T / sqrt(hs)) v (each position attends to
        itself and the ones before it when causal), the heads side by side, then the output projection."""
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=self.causal)      # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)               # (B, T, C): heads side by side
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout if config.dropout_at == "all" else 0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    """One transformer layer. `alpha` is this layer's residual scale (a 0-dim tensor).

    Where each placement puts the norm and the scale (the placements the ProRes paper, arXiv
    2603.05369, applies its warmup to; the authors' peft_pretraining/modeling_llama.py of
    dandingsky/ProRes, LlamaDecoderLayer.forward, lines 331-508):
        pre       x = x + alpha * F(LN(x))                   (GPT-2; the default)
        post      x = LN(x + alpha * F(x))                   (original Transformer)
        sandwich  x = x + alpha * LN'(F(LN(x)))              (an extra norm on each branch output)
        deepnorm  x = LN(k * x + alpha * F(x)),  k = (2L)^(1/4)  (DeepNet, arXiv 2203.00555;
                  its own init is a separate choice, init="deepnet": GPT._init_deepnet)
        lns       x = x + alpha * F(LN(x) / sqrt(l))      LayerNorm-Scaling (arXiv 2502.05795):
                  the norm's output times a FIXED 1/sqrt(l), l = 1..L, on both block norms
        lns-init  pre-LN whose learnable norm weights START at 1/sqrt(l): the ProRes authors'
                  `lns` (peft_pretraining/modeling_llama.py:289-293 of dandingsky/ProRes)
    The same alpha multiplies the attention branch and the MLP branch.
    """

    def __init__(self, config, layer_idx):
        super().__init__()
        self.norm = config.norm
        lns_scale = 1.0 / math.sqrt(layer_idx + 1) if self.norm == "lns" else 1.0
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias, scale=lns_scale)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias, scale=lns_scale)
        self.mlp = MLP(config)
        if self.norm == "sandwich":  # the norms on the branch outputs
            self.ln_1_out = LayerNorm(config.n_embd, bias=config.bias)
            self.ln_2_out = LayerNorm(config.n_embd, bias=config.bias)
        self.deepnorm_k = (2 * config.n_layer) ** 0.25 if self.norm == "deepnorm" else 1.0
        self.lns_init = 1.0 / math.sqrt(layer_idx + 1) if self.norm == "lns-init" else 1.0

    def forward(self, x, alpha):
        """x (B, T, C) -> (B, T, C), the placement's equations (the table above)."""
        if self.norm in ("pre", "lns", "lns-init"):
            x = x + alpha * self.attn(self.ln_1(x))
            x = x + alpha * self.mlp(self.ln_2(x))
        elif self.norm == "post":
            x = self.ln_1(x + alpha * self.attn(x))
            x = self.ln_2(x + alpha * self.mlp(x))
        elif self.norm == "sandwich":
            x = x + alpha * self.ln_1_out(self.attn(self.ln_1(x)))
            x = x + alpha * self.ln_2_out(self.mlp(self.ln_2(x)))
        else:  # deepnorm
            x = self.ln_1(self.deepnorm_k * x + alpha * self.attn(x))
            x = self.ln_2(self.deepnorm_k * x + alpha * self.mlp(x))
        return x

    def attention_input(self, x):
        """What this block's attention reads of x: LN(x), or x itself (post, deepnorm). Only the
        counted-positions path (block_at) asks; forward above says the same in each placement."""
        return x if self.norm in ("post", "deepnorm") else self.ln_1(x)


@dataclass
class GPTConfig:
    block_size: int = 256
    vocab_size: int = 50257
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    dropout_at: str = "all"  # one of DROPOUT_AT: where the dropout applies
    bias: bool = True      # biases in Linears and LayerNorms, like GPT-2
    tie_weights: bool = True  # LM head shares the token-embedding matrix, like GPT-2
    norm: str = "pre"      # one of NORMS
    init: str = "gpt2"     # one of INITS: see GPT._init_weights
    causal: bool = True    # False: every position attends to every other (masked diffusion)
    loss_impl: str = "fused"  # "fused": chunked head + CE (lm_loss.py); "standard": full logits
    head_dtype: str = ""   # fused head + loss precision: "" = the autocast dtype (fp32 without);
                           # "bfloat16" = bf16 even when the body runs in fp32 (see train.resolve_dtype)


# Parameter groups, by name, for selective transfer (transfer.py: the ladder paper, arXiv
# 2604.21265, copies attention, feed-forward and normalisation weights between vocabularies).
# The order matters: the first pattern a name contains wins.
GROUPS = {
    "embed": ("transformer.wte.",),
    "pos": ("transformer.wpe.",),
    "head": ("lm_head.",),
    "attn": (".attn.",),
    "mlp": (".mlp.",),
    "norm": (".ln_", "transformer.ln_f."),
}


def group_of(name):
    """The group ('embed', 'pos', 'head', 'attn', 'mlp' or 'norm') a parameter name belongs to."""
    for group, patterns in GROUPS.items():
        if any(p in name for p in patterns):
            return group
    raise KeyError(f"parameter {name!r} belongs to no group; groups are {list(GROUPS)}")


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        if config.norm not in NORMS:
            raise ValueError(f"unknown norm placement {config.norm!r}; choose one of {NORMS}")
        if config.dropout_at not in DROPOUT_AT:
            raise ValueError(f"unknown dropout placement {config.dropout_at!r}; choose one of {tuple(DROPOUT_AT)}")
        if config.init not in INITS:
            raise ValueError(f"unknown init {config.init!r}; choose one of {INITS}")
        if config.init == "deepnet" and config.norm != "deepnorm":
            raise ValueError(f"init 'deepnet' (DeepNet's Xavier/beta init) is only valid with norm 'deepnorm', "
                             f"not norm {config.norm!r}; use init 'plain' or 'gpt2' with it")
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout if config.dropout_at == "all" else 0.0),
            h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight
        # alpha(l) for l = 1..L, multiplying both residual branches of block l. Ones = plain GPT.
        # ProRes writes it in place every step; a buffer (not a Python float) keeps
        # torch.compile from recompiling when the values change.
        self.register_buffer("residual_scale", torch.ones(config.n_layer))
        # Initialisation (_init_weights says what each choice draws, and why).
        self.apply(self._init_weights)
        if config.init in ("plain", "deepnet"):  # the ProRes authors' token embedding: 0.02 * sqrt(d)
            with torch.no_grad():
                self.transformer.wte.weight.mul_(math.sqrt(config.n_embd))
        if config.init == "gpt2":
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        if config.init == "deepnet":
            self._init_deepnet()
        if config.norm == "lns-init":
            for block in self.transformer.h:
                for m in block.modules():
                    if isinstance(m, LayerNorm):
                        m.weight.data.fill_(block.lns_init)

    def _init_weights(self, module):
        """The base draw of every init: each Linear and Embedding N(0, 0.02), biases 0. What each
        init does on top:
            gpt2     (GPT-2, nanoGPT) the projections into the residual stream (c_proj)
                     N(0, 0.02 / sqrt(2L)), itself a depth stabiliser;
            plain    the ProRes authors' baselines, their `pre`: no depth scaling (that is their
                     separate `scale_pre` norm type, peft_pretraining/modeling_llama.py:274-276 and
                     548-552 of dandingsky/ProRes), and the token embedding N(0, 0.02 * sqrt(d))
                     (their LlamaPreTrainedModel._init_weights, `std * hidden_size ** 0.5`,
                     modeling_llama.py:557-558): drawn at 0.02, then multiplied by sqrt(d);
            deepnet  plain, then DeepNet's Xavier/beta init on four matrices per block
                     (_init_deepnet): the authors' `deeppost` baseline (modeling_llama.py:161-164,
                     193-198, 544-547; its embedding is drawn as their plain one).
        Where ours differs from the authors', and why: their LM head is its own matrix at N(0, 0.02)
        (LlamaForCausalLM, untied); ours is tied to the token embedding by default, so under plain
        and deepnet the head starts at 0.02 * sqrt(d) too and the first logits have a std of about
        0.02 * d (0.64 at d = 32) instead of 0.02 * sqrt(d); `tie_weights=False` (--no-tie) gives
        their split (embedding 0.02 * sqrt(d), head 0.02). Their positions are rotary (no weights);
        ours are learned and keep GPT-2's N(0, 0.02), the one draw with no counterpart to match."""
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @torch.no_grad()
    def _init_deepnet(self):
        """DeepNet's init (arXiv 2203.00555, Fig. 2; the ProRes authors' `deeppost`,
        modeling_llama.py:161-164 and 193-198 mark the matrices, 544-547 draw them):
        Xavier-normal with gain beta = (8L)^(-1/4) on the value projection, the attention output
        projection and both MLP matrices; Xavier-normal with gain 1 on the query and key
        projections. Xavier-normal: std = gain * sqrt(2 / (fan_in + fan_out)) for each
        (d_out, d_in) matrix, so the q, k and v slices of the fused c_attn are initialised as the
        three (C, C) matrices they are. As theirs, only the DeepNorm baseline gets it: their
        `deeppost_prores` (DeepNorm + ProRes) runs on the plain init (the marks test
        NORM_TYPE == 'deeppost' exactly), so an experiment passes init="deepnet" or "plain"."""
        beta = (8 * self.config.n_layer) ** -0.25
        C = self.config.n_embd
        for block in self.transformer.h:
            w = block.attn.c_attn.weight                      # (3C, C): rows q | k | v
            for i, gain in enumerate((1.0, 1.0, beta)):
                torch.nn.init.xavier_normal_(w[i * C:(i + 1) * C], gain=gain)
            for lin in (block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                torch.nn.init.xavier_normal_(lin.weight, gain=beta)

    def get_num_params(self, non_embedding=True):
        """Parameter count; by default without the token and position embeddings (the papers'
        "non-embedding parameters"). A tied head counts once, as the embedding; an untied
        head counts as a non-embedding matrix."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wte.weight.numel() + self.transformer.wpe.weight.numel()
        return n

    def forward(self, idx, targets=None, loss_mask=None):
        """idx, targets: (B, T) token ids; loss_mask: (B, T), 1 where a target counts, or float
        weights w >= 0: the loss is then sum(w * CE) / sum(w) (one forward pass can carry
        differently weighted rows, e.g. MIR's clean and masked copies).

        Returns (logits, loss). Without targets: logits (B, T, vocab), loss None. With targets,
        logits is None: the loss comes from the final hidden states without the full (B, T, vocab)
        logits (lm_loss.py). A loss_mask that leaves targets out takes counted_stream (below): the
        same loss and gradients, doing only the work the counted targets need.
        """
        if targets is None:
            return self.lm_head(self.transformer.ln_f(self.residual_stream(idx))), None  # (B, T, vocab)
        if loss_mask is not None and not torch.compiler.is_compiling() and not bool(loss_mask.ne(0).all()):
            h, t, weight = counted_stream(self, idx, targets, loss_mask)  # (N, C), (N,), (N,) or None
        else:
            h, t = self.residual_stream(idx).flatten(0, 1), targets.flatten()  # (B T, C), (B T,)
            weight = loss_mask.flatten() if loss_mask is not None and loss_mask.is_floating_point() else None
            t = t if loss_mask is None else t.masked_fill(loss_mask.flatten() == 0, -1)  # -1: no loss
        h = self.transformer.ln_f(h)
        if self.config.loss_impl == "standard":
            return None, standard_cross_entropy(h, self.lm_head.weight, t, row_weight=weight)
        # imported here, not at the top: lm_loss imports torch._dynamo (its torch.compiler.disable),
        # over a second that `train.py --help` and the modules reading this one's constants need not pay
        from lm_loss import linear_cross_entropy
        dtype = getattr(torch, self.config.head_dtype) if self.config.head_dtype else None
        return None, linear_cross_entropy(h, self.lm_head.weight, t, row_weight=weight, dtype=dtype)

    def residual_stream(self, idx, n_blocks=None):
        """The residual stream (B, T, C): token + position embeddings, then the first n_blocks
        blocks (all by default), block l with its residual scale alpha_l."""
        T = idx.size(1)
        assert T <= self.config.block_size, f"sequence of {T} > block_size {self.config.block_size}"
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        for block, alpha in list(zip(self.transformer.h, self.residual_scale))[:n_blocks]:
            x = block(x, alpha)
        return x

    @torch.no_grad()
    def residual_rms(self, idx):
        """[RMS of the residual stream after the embeddings, after block 1, ..., after block L]
        (the ProRes paper's activation norms)."""
        x = self.residual_stream(idx, n_blocks=0)
        rms = [x.float().pow(2).mean().sqrt().item()]
        for block, alpha in zip(self.transformer.h, self.residual_scale):
            x = block(x, alpha)
            rms.append(x.float().pow(2).mean().sqrt().item())
        return rms

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW with weight decay on the matrices of attention, MLP and an untied head only;
        never on embeddings, norms or biases (the strong-decay baseline of the data-constrained
        paper, arXiv 2606.06888, whose decay skips embeddings, norms and biases)."""
        decay, no_decay = [], []
        seen = set()
        for name, p in self.named_parameters():  # a tied head appears once, as wte
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            is_matrix = p.dim() >= 2 and group_of(name) in ("attn", "mlp", "head")
            (decay if is_matrix else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({"fused": True} if fused else {}))

    def flops_per_token(self, T=None):
        """Training FLOPs per token (forward + backward): 6 per weight it multiplies (the
        non-embedding weights plus the LM head, which dominates at small width and a 50k
        vocabulary) + 12 * L * T * d for attention scores and values (PaLM, appendix B; as in
        nanoGPT, the causal mask's halving is not counted)."""
        cfg = self.config
        T = cfg.block_size if T is None else T
        n = self.get_num_params(non_embedding=True)
        if cfg.tie_weights:
            n += self.lm_head.weight.numel()
        return 6 * n + 12 * cfg.n_layer * T * cfg.n_embd

    def estimate_mfu(self, tokens_per_second, peak_flops, T=None):
        """Model FLOPs utilisation: achieved training FLOP/s over the device's peak FLOP/s."""
        return self.flops_per_token(T) * tokens_per_second / peak_flops

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, vocab_limit=None):
        """Sample max_new_tokens continuations of idx (B, T), one token at a time. vocab_limit:
        sample only ids < vocab_limit (rows beyond it, e.g. MIR's [MASK], are never emitted)."""
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :vocab_limit] / max(temperature, 1e-8)
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, 1, generator=generator)), dim=1)
        return idx


# ---------------------------------------------------------------------------------------------
# The counted-positions path: a speed path, to skip on a first reading. When a loss mask leaves most
# targets out (a HAYSTACK record of the procedural paper's diagnostics, arXiv 2601.21725, scores 1
# target of its 63), GPT.forward's loss needs far less than the whole forward pass. Same loss, same
# gradients (tests/test_model.py holds it to the plain path for every norm placement).

def counted_stream(model, idx, targets, loss_mask):
    """(h, t, weight): what GPT.forward's loss needs for a loss_mask that leaves targets out, the
    last block's output at the counted positions (N, C), their targets (N,) and weights (N,) or
    None (a 0/1 mask), computing only what they need: (1) causal: each group of rows cut after its
    last counted position (length_groups: nothing later reaches them), (2) the last block at the
    counted positions only, when they are at most 1/8 of them (block_at). The last norm, the head
    and the loss then act on the N rows only."""
    groups = length_groups(loss_mask, LENGTH_GROUPS) if model.config.causal else None
    parts = [_counted_stream(model, idx[r, :n], targets[r, :n], loss_mask[r, :n]) for r, n in groups] \
        if groups else [_counted_stream(model, idx, targets, loss_mask)]
    if len(parts) == 1:
        return parts[0]
    weight = None if parts[0][2] is None else torch.cat([p[2] for p in parts])
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]), weight


def _counted_stream(model, idx, targets, loss_mask):
    """(h, t, weight): the last block's output at the counted positions (N, C), their targets (N,)
    and weights (N,), or None for a 0/1 mask. The last block asks only the N queries when N <= B T / 8
    (each attends over its row's T keys, a gathered copy: N T against the B T^2 of the whole block);
    with more (a masked-diffusion batch counts about half) it runs everywhere, only the head gathered."""
    B, T = idx.size()
    sel, weight = counted_positions(loss_mask.reshape(-1))
    if sel is None:  # every position of these rows counts
        return model.residual_stream(idx).reshape(B * T, -1), targets.reshape(-1), weight
    L, last, alpha = model.config.n_layer, model.transformer.h[-1], model.residual_scale[-1]
    x = model.residual_stream(idx, n_blocks=L - 1)                           # (B, T, C)
    if 8 * sel.numel() <= B * T:
        h = block_at(last, x, alpha, sel // T, sel % T)                      # (N, C)
    else:
        h = last(x, alpha).reshape(B * T, -1).index_select(0, sel)           # (N, C)
    return h, targets.reshape(-1)[sel], weight


def block_at(block, x, alpha, rows, pos):
    """block(x, alpha)[rows, pos], (N, C), computing only those N positions. Every part of a block
    but attention acts on each position alone, so the block's own forward runs on the N positions
    (N rows of one position), with its attention swapped for one whose N queries attend over every
    key of their row (their position and the ones before it, when causal)."""
    return Block.forward(_Asking(block, x, rows, pos), x[rows, pos].unsqueeze(1), alpha).squeeze(1)


class _Asking:
    """A Block as Block.forward sees it (its norms, MLP, scale) whose `attn` takes the N asking
    positions' attention inputs (N, 1, C) and returns their attention outputs (N, 1, C), over the
    keys and values of the whole stream x's rows."""

    def __init__(self, block, x, rows, pos):
        self._block, self._keys, self._rows, self._pos = block, block.attention_input(x), rows, pos

    def __getattr__(self, name):
        return getattr(self._block, name)

    def attn(self, h):
        att, rows, pos = self._block.attn, self._rows, self._pos
        (N, _, C), T, nh = h.shape, self._keys.shape[1], att.n_head
        w, b = att.c_attn.weight, att.c_attn.bias
        q = F.linear(h, w[:C], None if b is None else b[:C]).view(N, 1, nh, C // nh).transpose(1, 2)  # (N, nh, 1, hs)
        k, v = F.linear(self._keys, w[C:], None if b is None else b[C:]).split(C, dim=2)             # (B, T, C)
        k = k[rows].view(N, T, nh, C // nh).transpose(1, 2)                                          # (N, nh, T, hs)
        v = v[rows].view(N, T, nh, C // nh).transpose(1, 2)                                          # (N, nh, T, hs)
        mask = (torch.arange(T, device=h.device) <= pos[:, None]).view(N, 1, 1, T) if att.causal else None
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=att.dropout if att.training else 0.0)
        return att.resid_dropout(att.c_proj(y.reshape(N, 1, C)))


def counted_positions(loss_mask):
    """(positions, weights) of a flat loss_mask (N,): the indices where it is != 0, or None when
    every position counts (then nothing needs gathering); weights: the mask's values there for a
    float mask, None for an integer or bool 0/1 mask."""
    weight = loss_mask if loss_mask.is_floating_point() else None
    sel = loss_mask.nonzero()[:, 0]
    if sel.numel() == loss_mask.numel():
        return None, weight
    return sel, None if weight is None else weight[sel]


LENGTH_GROUPS = 4  # GPT.forward's groups of rows by length (bench.py --tiny measures the choice)


def length_groups(loss_mask, k):
    """[(rows, n)]: the B rows of loss_mask (B, T) sorted by how far they need the sequence
    (their last counted position + 1) and cut into k groups of equal size, n the longest need
    in each; None where grouping saves little (every row needs 7/8 of T or more, or fewer than
    64 rows a group). A causal model's output at a position depends on that position and the
    ones before it, so a row's positions after its last counted target can be left out: the
    same loss and gradients, less work where records are padded (a haystack record of 1..30
    pairs needs 3 to 61 of its 63 positions)."""
    B, T = loss_mask.shape
    if k < 2 or B < 64 * k:
        return None
    need = torch.where(loss_mask != 0, torch.arange(1, T + 1, device=loss_mask.device), 0).amax(1)
    if int(need.min()) * 8 >= 7 * T:
        return None
    groups = [(rows, int(need[rows].max())) for rows in need.argsort().tensor_split(k)]
    return [(rows, n) for rows, n in groups if n > 0]


def counted_rows(h, targets, loss_mask):
    """The rows that carry loss: (h[r], targets[r], weights[r]) for the rows r where loss_mask
    (N,) != 0, from h (N, C) and targets (N,); weights None for an integer 0/1 mask. The last
    norm, the head and the cross-entropy act on each row alone, so scoring only these rows
    gives the loss and gradients of scoring all N with the others ignored. All rows come back
    uncopied when every one counts (a Dyck corpus, plain text)."""
    sel, weight = counted_positions(loss_mask)
    if sel is None:
        return h, targets, weight
    return h.index_select(0, sel), targets[sel], weight


def standard_cross_entropy(h, weight, targets, row_weight=None):
    """Mean next-token cross-entropy of logits h @ weight.T against targets (-1 = no loss;
    weighted by row_weight if given): the standard (nanoGPT) formulation with the full
    (N, vocab) logits. The baseline that bench.py times lm_loss.linear_cross_entropy against;
    equal loss and gradients."""
    logits = h @ weight.t()
    if row_weight is None:
        return F.cross_entropy(logits.float(), targets, ignore_index=-1)
    ce = F.cross_entropy(logits.float(), targets, ignore_index=-1, reduction="none")
    w = row_weight.float() * (targets != -1)
    return (ce * w).sum() / w.sum().clamp_min(1e-30)  # 0 (not nan) when nothing counts
