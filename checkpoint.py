"""
Checkpoints and the run's record on disk: written to a temporary name and renamed, loaded with
weights_only=True, checked against the model and the flags before anything is reused.

    OUT/ckpt.pt            the run's last state (model, optimizer, RNG, stage, step, summaries, args)
    OUT/stage<i>-<name>.pt each finished stage's weights, what the next stage starts from
    OUT/metrics.jsonl      one JSON event per line (train / eval / stage_end)
    OUT/.lock              "PID START HOST" of the run training into OUT, while it runs (train.RunLock)
"""

import json
import os
import re
from pathlib import Path

import torch

from data.common import UserError, atomic_write_bytes

# flags that do not change what a run computes: a resumed run may differ in these
RESUMABLE_WITH_OTHER = {"resume", "no_progress", "no_plot", "threads", "out", "cache_dir", "data_dir",
                        "compile", "device", "log_interval"}


def save_checkpoint(path, obj):
    tmp = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, map_location="cpu"):
    return torch.load(path, map_location=map_location, weights_only=True)


def read_checkpoint(path, flag, map_location="cpu"):
    """load_checkpoint for a path the user gave (`flag` names where): a missing file or one that
    is not a prelude checkpoint is a UserError that says so, not a traceback."""
    path = Path(path)
    if path.is_dir():
        found = sorted(f.name for f in path.glob("*.pt"))
        raise UserError(f"{flag} {path} is a folder; it wants a checkpoint file: "
                        + (f"one of {', '.join(str(path / f) for f in found[:6])}{', ...' if len(found) > 6 else ''}"
                           if found else "this folder holds no .pt files (give OUT/stage<i>-<name>.pt or OUT/ckpt.pt)"))
    if not path.is_file():
        raise UserError(f"{flag} {path}: no such file; give a checkpoint written by train.py "
                        "(OUT/stage<i>-<name>.pt or OUT/ckpt.pt)")
    try:
        ck = load_checkpoint(path, map_location)
    except Exception as e:  # a legacy pickle of any content fails in any of many ways (KeyError, IndexError, ...)
        raise UserError(f"{flag} {path}: not a readable PyTorch checkpoint ({type(e).__name__}); give a "
                        "checkpoint written by train.py (OUT/stage<i>-<name>.pt or OUT/ckpt.pt)") from None
    if not isinstance(ck, dict) or not isinstance(ck.get("model"), dict):
        raise UserError(f"{flag} {path}: a PyTorch file but not a prelude checkpoint (no 'model' weights); "
                        "give OUT/stage<i>-<name>.pt or OUT/ckpt.pt of a train.py run")
    return ck


def stage_file(out, index, name):
    return Path(out) / f"stage{index}-{re.sub(r'[^A-Za-z0-9_-]+', '_', name)}.pt"


def load_state_checked(model, state):
    """load_state_dict that names every tensor whose shape does not fit, and why."""
    own = model.state_dict()
    bad = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
           for k, v in state.items() if k in own and own[k].shape != v.shape]
    missing = [k for k in own if k not in state]
    if bad or missing:
        raise UserError("checkpoint does not fit this model (were --n-layer/--n-embd/--n-head/--block-size, "
                        "--mir/--objective or the stages changed?): " + "; ".join(bad + [f"{k}: missing" for k in missing]))
    model.load_state_dict(state)


# GPTConfig fields that are the machine's choice, not the model's (train.resolve_dtype, --loss-impl):
# a checkpoint does not carry them, so a model trained on one machine loads with another's policy
MACHINE_POLICY = ("head_dtype", "loss_impl")


def model_config(cfg):
    """What a checkpoint keeps of a GPTConfig: everything that defines the model's weights and
    function, nothing of the machine's policy (MACHINE_POLICY)."""
    from dataclasses import asdict
    return {k: v for k, v in asdict(cfg).items() if k not in MACHINE_POLICY}


def load_model(source, device="cpu", **policy):
    """(GPT in eval mode, checkpoint dict) from a checkpoint path or an already loaded dict:
    the one place that rebuilds a model from `model_config` and its weights (shapes checked).
    policy: MACHINE_POLICY fields for this machine (e.g. loss_impl="standard")."""
    from model import GPT, GPTConfig
    ck = read_checkpoint(source, "checkpoint", device) if not isinstance(source, dict) else source
    if "model_config" not in ck:
        raise UserError("checkpoint has no model_config (a merge without a base model?); give a stage "
                        "checkpoint written by train.py")
    cfg = {k: v for k, v in ck["model_config"].items() if k not in MACHINE_POLICY}
    model = GPT(GPTConfig(**cfg, **policy))
    load_state_checked(model, ck["model"])
    return model.to(device).eval(), ck


def check_resume_args(saved, args, path):
    """A resumed run must be the run that wrote the checkpoint: every flag that changes what is
    computed must match, else a UserError listing each difference (flag, now, then)."""
    now = vars(args)
    diff = [f"--{k.replace('_', '-')} {now[k]!r} (the checkpoint's run: {saved.get(k)!r})"
            for k in sorted(now) if k not in RESUMABLE_WITH_OTHER and k in saved and saved[k] != now[k]]
    if diff:
        raise UserError(f"--resume: {path} was written by a run with other flags: {'; '.join(diff)}. "
                        "Use the same flags to resume it, or another --out for a new run")


def trim_metrics(path, resume):
    """Start metrics.jsonl afresh, or on resume keep only the events up to the checkpoint
    (a killed run may have logged steps after it; the resumed run logs them again)."""
    if resume is None:
        Path(path).unlink(missing_ok=True)
        return
    if not Path(path).exists():
        return
    keep = []
    for line in open(path):
        e = json.loads(line)
        si, it = e.get("stage_index", -1), e.get("iter", 0)
        if si < resume["stage_index"] or (si == resume["stage_index"] and e["event"] != "stage_end"
                                          and it <= resume["iter"]):
            keep.append(line)
    atomic_write_bytes(path, "".join(keep).encode())
