"""
Weights between our GPT (model.py) and the authors' Hugging Face GPT2LMHeadModel (procedural-pretraining's
procedural_pretraining/utils.py:73-115, downstream/utils.py:455), so either side's pre-trained model can start the
other side's fine-tuning.

    theirs = ours_to_theirs(ck["model"], ck["model_config"])       # our checkpoint -> their state dict
    ours = theirs_to_ours(torch.load(p)["model"], model_config)      # theirs -> ours (checked against our model)

The names are the same (our model keeps nanoGPT's, which are GPT-2's); what differs:
  - HF's Conv1D stores a projection as [in, out], the transpose of our nn.Linear [out, in]: attn.c_attn, attn.c_proj,
    mlp.c_fc, mlp.c_proj. q, k, v are fused in c_attn in both, in the same order (q | k | v, heads side by side);
  - our residual_scale buffer (ProRes's alpha) has no counterpart: ones (a plain GPT) are dropped, anything else is
    an error; going back it is set to ones;
  - the causal-mask buffers older transformers saved (.attn.bias, .attn.masked_bias) are constants, dropped.
Not convertible, each an error that names the tensors: biases off (GPTConfig bias=False; GPT-2 has a bias in every
Linear and LayerNorm), a norm placement other than pre-LN (sandwich norms' extra tensors; post / deepnorm / lns
have GPT-2's names but not its function, so model_config is checked), a bidirectional model, a shape that does not
fit the layout or the model it is meant for (another vocabulary, context, width or depth).
What is not in the weights (checked by tests/test_reference_procedural.py): GPT-2's MLP uses the tanh GELU
("gelu_new"), ours the exact one, so logits agree closely (~2e-4 on a tiny model), exactly only with "gelu".
"""

import re

import torch

# one layer's tensors (GPT-2's names), the Conv1D ones with their HF shape [in, out] given as (in, out) multiples of C
LAYER = {"ln_1.weight": (1,), "ln_1.bias": (1,), "attn.c_attn.weight": (1, 3), "attn.c_attn.bias": (3,),
         "attn.c_proj.weight": (1, 1), "attn.c_proj.bias": (1,), "ln_2.weight": (1,), "ln_2.bias": (1,),
         "mlp.c_fc.weight": (1, 4), "mlp.c_fc.bias": (4,), "mlp.c_proj.weight": (4, 1), "mlp.c_proj.bias": (1,)}
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")
# our GPTConfig fields GPT-2 has one value of: (field, GPT-2's value, why)
FIXED = (("norm", "pre", "GPT-2 is pre-LN"), ("bias", True, "GPT-2 has a bias in every Linear and LayerNorm"),
         ("causal", True, "GPT-2 attends causally"))


class ConversionError(ValueError):
    """A state dict that has no exact counterpart on the other side; the message names every tensor and why."""


def gpt2_shapes(vocab_size, n_positions, n_embd, n_layer):
    """{name: shape} of an HF GPT2LMHeadModel's state dict (its Conv1D weights [in, out])."""
    C = n_embd
    shapes = {"transformer.wte.weight": (vocab_size, C), "transformer.wpe.weight": (n_positions, C)}
    for i in range(n_layer):
        shapes.update({f"transformer.h.{i}.{k}": tuple(m * C for m in v) for k, v in LAYER.items()})
    shapes.update({"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,), "lm_head.weight": (vocab_size, C)})
    return shapes


def layout(sd, side):
    """(vocab, positions, width, layers) read off a state dict's embeddings and layer numbers."""
    for k in ("transformer.wte.weight", "transformer.wpe.weight"):
        if k not in sd:
            raise ConversionError(f"{side} state dict has no {k}: not a GPT-2 layout (keys: {sorted(sd)[:6]} ...)")
    layers = {int(m.group(1)) for k in sd if (m := re.match(r"transformer\.h\.(\d+)\.", k))}
    if layers != set(range(len(layers))):
        raise ConversionError(f"{side} state dict's layers {sorted(layers)} are not 0..L-1")
    V, C = sd["transformer.wte.weight"].shape
    return V, sd["transformer.wpe.weight"].shape[0], C, len(layers)


def _is_conv(name):
    return name.endswith(CONV1D)


def _convert(sd, expected, flip, side, why):
    """Each tensor of sd checked against `expected` (name -> shape before the flip), Conv1D ones transposed."""
    problems = [f"{k}: {tuple(v.shape)} has no counterpart (in {side}: {why(k)})" for k, v in sd.items()
                if k not in expected]
    problems += [f"{k}: {tuple(sd[k].shape)}, the layout wants {expected[k]}" for k in expected
                 if k in sd and tuple(sd[k].shape) != expected[k]]
    problems += [f"{k}: missing (GPT-2 has it: {why(k)})" for k in expected if k not in sd]
    if problems:
        raise ConversionError(f"cannot convert the {side} state dict:\n  " + "\n  ".join(problems))
    return {k: (v.t() if flip and _is_conv(k) else v).detach().clone().contiguous() for k, v in sd.items()}


def _check_target(out, want, target):
    """Every converted tensor against the model it is meant for (`want`: name -> shape)."""
    def hint(k):
        return (" (another vocabulary)" if k.endswith(("wte.weight", "lm_head.weight")) else
                " (another context length)" if k.endswith("wpe.weight") else "")
    problems = [f"{k}: {tuple(v.shape)} vs {want[k]} in {target}{hint(k)}" for k, v in out.items()
                if k in want and tuple(v.shape) != tuple(want[k])]
    problems += [f"{k}: {target} has no such tensor" for k in out if k not in want]
    problems += [f"{k}: {target} needs it, the source lacks it" for k in want if k not in out]
    if problems:
        raise ConversionError(f"the weights do not fit {target}:\n  " + "\n  ".join(problems))


def _why_ours(name):
    if "_out." in name:
        return "a sandwich norm's extra LayerNorm"
    return "the bias of a layer built with bias=False" if name.endswith("bias") else "a GPT-2 weight"


def ours_to_theirs(state_dict, model_config=None, target=None):
    """Our model's state dict -> an HF GPT2LMHeadModel state dict. model_config: our checkpoint's 'model_config'
    (checked: pre-LN, biases, causal); target: dict(vocab_size, n_positions, n_embd, n_layer) of the GPT2Config
    it will load into (checked tensor by tensor)."""
    cfg = dict(model_config or {})
    bad = [f"model_config {f}={cfg[f]!r}: {why} ({f}={want!r})" for f, want, why in FIXED if cfg.get(f, want) != want]
    sd = dict(state_dict)
    scale = sd.pop("residual_scale", None)
    if scale is not None and not torch.equal(scale, torch.ones_like(scale)):
        bad.append(f"residual_scale {scale.tolist()}: a ProRes warm-up in progress has no GPT-2 counterpart")
    if bad:
        raise ConversionError("our model is not a GPT-2:\n  " + "\n  ".join(bad))
    V, T, C, L = layout(sd, "our")
    ours = {k: (s[::-1] if _is_conv(k) else s) for k, s in gpt2_shapes(V, T, C, L).items()}
    out = _convert(sd, ours, True, "our", _why_ours)
    if target is not None:
        _check_target(out, gpt2_shapes(**target), f"GPT2Config {target}")
    return out


def theirs_to_ours(state_dict, model_config=None):
    """An HF GPT2LMHeadModel state dict (their checkpoint's 'model') -> our model's. A head left out (HF drops a
    tied head when saving safetensors) is the embedding. model_config: our GPTConfig fields to load into; the result
    is checked against that model's names and shapes, and against its tying of the head."""
    sd = {k: v for k, v in state_dict.items() if not k.endswith(MASK_BUFFERS)}
    if "lm_head.weight" not in sd and "transformer.wte.weight" in sd:
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
    shape = layout(sd, "their")
    out = _convert(sd, gpt2_shapes(*shape), True, "their", lambda k: "not a GPT2LMHeadModel tensor")
    out["residual_scale"] = torch.ones(shape[3])
    if model_config is not None:
        from model import GPT, GPTConfig
        cfg = {k: v for k, v in dict(model_config).items() if k in GPTConfig.__dataclass_fields__}
        with torch.device("meta"):
            model = GPT(GPTConfig(**cfg))
        _check_target(out, {k: tuple(v.shape) for k, v in model.state_dict().items()}, f"our GPTConfig {cfg}")
        tied = torch.equal(out["lm_head.weight"], out["transformer.wte.weight"])
        if model.config.tie_weights and not tied:
            raise ConversionError("lm_head.weight: their head is its own matrix (untied, e.g. the fine-tuning's "
                                  "tie_emb=False); our config ties it to transformer.wte.weight: use tie_weights=False")
    return out
