"""
Checkpoints and the run's record on disk: written to a temporary name and renamed, loaded with
weights_only=True, checked against the model and the flags before anything is reused.

    OUT/ckpt.pt            the run's last state (model, optimizer, RNG, stage, step, summaries, args)
    OUT/stage<i>-<name>.pt each finished stage's weights, what the next stage starts from
    OUT/metrics.jsonl      one JSON event per line (train / eval / stage_end)
(OUT/.lock and the folder's other rules: run_folder.py.)

A write that fails leaves no temporary file and the previous file as it was; one that fails for lack of
space (a full disk, a quota) is a DiskFull: one line naming the folder, the space it needs and that
--resume continues once space is freed.
"""

import json
import os
import re
import sys
from pathlib import Path

import torch

from data.common import DiskFull, UserError, _tmp_name, atomic_write_bytes, free_space, no_space, size_text

# flags that do not change what a run computes: a resumed run may differ in these
RESUMABLE_WITH_OTHER = {"resume", "baseline", "no_progress", "no_plot", "threads", "out", "cache_dir", "data_dir",
                        "compile", "device", "log_interval", "loss_impl", "stop_grace", "verbose"}


def run_disk_full(path, need):
    """The DiskFull of a failed write of the run's file `path` that needed about `need` bytes: the folder, its
    free space, the space to free (`need`, or the size of its ckpt.pt, which the run writes again at its next
    checkpoint, if larger), what is kept, and that --resume continues once space is freed."""
    folder, kept = Path(path).parent, Path(path).parent / "ckpt.pt"
    need = max(need, kept.stat().st_size if kept.exists() else 0)
    return DiskFull(f"no space left on the disk of {folder} ({free_space(folder)}) to write {Path(path).name}: free "
                    f"at least {size_text(need)} there, then run the same command with --resume to continue "
                    + (f"(the last checkpoint {kept} is kept)" if kept.exists() else "(nothing was saved yet)"), path)


def _tensor_bytes(obj):
    """The bytes of the tensors in a (nested) checkpoint dict: what torch.save writes, less a little."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


class _Recording:
    """A file as torch.save writes it, keeping the exception of a failed write: torch reports that only
    as RuntimeError('[enforce fail at inline_container.cc] . unexpected pos ...')."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, b):
        try:
            return self.f.write(b)
        except BaseException as e:
            self.error = e
            raise

    def flush(self):
        self.f.flush()


def save_checkpoint(path, obj):
    """torch.save to a temporary name, synced, then renamed over `path`: a reader never sees half a file.
    A failed write removes the temporary file, leaves `path` as it was and raises the OSError of the
    write (which torch.save turns into RuntimeError '... unexpected pos ...')."""
    path, tmp = Path(path), _tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            w = _Recording(f)
            try:
                torch.save(obj, w)
            except RuntimeError:
                if w.error is not None:
                    raise w.error from None
                raise
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_run_checkpoint(path, obj):
    """save_checkpoint of a run's file (OUT/ckpt.pt, OUT/stage<i>-<name>.pt): for lack of space a DiskFull
    naming the space needed (the checkpoint's tensors, or OUT/ckpt.pt's size if larger)."""
    try:
        save_checkpoint(path, obj)
    except OSError as e:
        if no_space(e):
            raise run_disk_full(path, _tensor_bytes(obj)) from None
        raise


def write_atomic(path, data):
    """atomic_write_bytes (which removes the temporary file of a failed write, the old file kept) for the
    run's files: for lack of space a DiskFull saying that --resume continues once space is freed."""
    try:
        atomic_write_bytes(path, data)
    except DiskFull:
        raise run_disk_full(path, len(data)) from None


def run_state(S, it, stage_index, stages, summaries, args, seconds):
    """What OUT/ckpt.pt holds after step `it` of stage S (train.Stage): everything a resumed run needs to
    continue exactly where this one stopped (weights, AdamW's moments, the scaler, the RNG, the stage and
    step, the summaries so far, the --patience state and the flags)."""
    return {"model": S.model.state_dict(), "optimizer": S.optimizer.state_dict(), "scaler": S.scaler.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if next(S.model.parameters()).is_cuda else [],
            "stage_index": stage_index, "stage": S.name, "iter": it, "stages": stages, "summaries": summaries,
            "plateau": S.plateau, "model_config": model_config(S.model.config), "args": vars(args),
            "seconds": seconds}


def restore_run_state(S, state):
    """Stage S as run_state saved it: weights (shapes checked), AdamW, scaler, RNG, step and --patience state."""
    load_state_checked(S.model, state["model"])
    S.optimizer.load_state_dict(state["optimizer"])
    S.scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"])
    if next(S.model.parameters()).is_cuda and state.get("cuda_rng"):
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    S.start_iter, S.plateau = state["iter"], state.get("plateau", S.plateau)
    if S.plateau["stopped_at"]:  # killed after --patience ended the stage: do not train on
        S.start_iter = S.iters


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


def read_summary(folder):
    """A finished run's OUT/summary.json (train.py writes it last), or None while it has not finished."""
    path = Path(folder) / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


# what a checkpoint's weights say of its shape, and how two differ: what a load or a transfer that does not fit
# says in one line (transfer.transfer_checked, load_state_checked)

BLOCK_GROUPS = ("attn", "mlp", "norm")  # the groups (model.GROUPS) of every block: copying them needs the same depth


def shape_of(state):
    """What a model's weights say of its configuration: {n_layer, n_embd, vocab_size, block_size} (the count of
    its blocks, the token and position embeddings' sizes; None where the weights lack the tensor)."""
    blocks = {int(k.split(".")[2]) for k in state if k.startswith("transformer.h.")}
    wte, wpe = state.get("transformer.wte.weight"), state.get("transformer.wpe.weight")
    return {"n_layer": max(blocks) + 1 if blocks else 0, "n_embd": None if wte is None else wte.shape[1],
            "vocab_size": None if wte is None else wte.shape[0], "block_size": None if wpe is None else wpe.shape[0]}


def misfit(src_state, dst_state, groups=("embed", "pos", "attn", "mlp", "norm", "head"), shared_rows=False):
    """[(field, the source's value, the destination's)]: how the weights src_state differ from dst_state's where
    copying `groups` needs them equal: the width always; the depth when blocks are copied (a deeper source too,
    whose extra layers would be lost); the vocabulary for embed and head (unless shared_rows: the same tokenizer,
    one with a [MASK] row); a shorter context for pos. Empty when they fit."""
    s, d, groups = shape_of(src_state), shape_of(dst_state), set(groups)
    need = ["n_embd"] + ["n_layer"] * bool(groups & set(BLOCK_GROUPS)) \
        + ["vocab_size"] * bool(groups & {"embed", "head"} and not shared_rows)
    diffs = [(k, s[k], d[k]) for k in need if s[k] != d[k]]
    if "pos" in groups and (s["block_size"] or 0) < (d["block_size"] or 0):
        diffs.append(("block_size", s["block_size"], d["block_size"]))
    return diffs


NAMES = {"n_embd": "n_embd", "n_layer": "n_layer", "vocab_size": "vocabulary", "block_size": "context"}
FLAGS = {"n_embd": "--n-embd", "n_layer": "--n-layer", "vocab_size": "vocabulary", "block_size": "--block-size"}


def misfit_line(diffs, whose="the checkpoint's vs this run's"):
    """misfit's differences in a few words: 'n_embd 32 vs 16, n_layer 3 vs 1 (the checkpoint's vs this run's)'."""
    def n(v):
        return f"{v:,}" if isinstance(v, int) else str(v)
    return ", ".join(f"{NAMES[k]} {n(a)} vs {n(b)}" for k, a, b in diffs) + f" ({whose})"


def misfit_fix(diffs):
    """The flags of train.py that make a run fit a checkpoint that differs by `diffs` (misfit)."""
    shape = [f"{FLAGS[k]} {a}" for k, a, _ in diffs if k in ("n_embd", "n_layer")]
    fix = [f"give {' '.join(shape)} to match it"] if shape else []
    if any(k == "vocab_size" for k, _, _ in diffs):
        fix.append("leave embed and head out of --transfer (e.g. --transfer attn,mlp,norm)")
    fix += [f"give --block-size {a} or leave pos out of --transfer" for k, a, _ in diffs if k == "block_size"]
    return "; ".join(fix)


def tensor_table(src_state, dst_state):
    """Every tensor whose shape differs between two sets of weights, one a line ('none': that side lacks it)."""
    names = list(dst_state) + [k for k in src_state if k not in dst_state]
    shape = lambda st, k: tuple(st[k].shape) if k in st else "none"  # noqa: E731
    return [f"{k}: checkpoint {shape(src_state, k)} vs model {shape(dst_state, k)}"
            for k in names if shape(src_state, k) != shape(dst_state, k)]


RUN_FLAGS_CHANGED = "were --n-layer/--n-embd/--block-size, --mir/--objective or the stages changed?"


def load_state_checked(model, state, whose="the checkpoint's vs this model's", fix=RUN_FLAGS_CHANGED):
    """load_state_dict that refuses weights of another shape in one short line: the configuration that differs
    (transfer.misfit: n_embd 32 vs 16, ...), or the first tensor that does not fit; every such tensor in the
    error's details (which --verbose prints). A tensor that only one side has does not fit either."""
    own = model.state_dict()
    table = tensor_table(state, own)
    if table:
        diffs = misfit(state, own)
        said = misfit_line(diffs, whose) if diffs else f"{len(table)} tensor(s) differ, e.g. {table[0]}"
        raise UserError(f"checkpoint does not fit this model: {said}; {fix} (--verbose lists the tensors)",
                        details="\n".join(table))
    model.load_state_dict(state)


# GPTConfig fields that are the machine's choice, not the model's (train.resolve_dtype, --loss-impl):
# a checkpoint does not carry them, so a model trained on one machine loads with another's policy
MACHINE_POLICY = ("head_dtype", "loss_impl")


def model_config(cfg):
    """What a checkpoint keeps of a GPTConfig: everything that defines the model's weights and
    function, nothing of the machine's policy (MACHINE_POLICY)."""
    from dataclasses import asdict
    return {k: v for k, v in asdict(cfg).items() if k not in MACHINE_POLICY}


def load_model(source, device="cpu", name=None, **policy):
    """(GPT in eval mode, checkpoint dict) from a checkpoint path or an already loaded dict (`name`: its file,
    which errors name): the one place that rebuilds a model from `model_config` and its weights (shapes
    checked). policy: MACHINE_POLICY fields for this machine (e.g. loss_impl="standard")."""
    from model import GPT, GPTConfig
    ck = read_checkpoint(source, "checkpoint", device) if not isinstance(source, dict) else source
    name = name or ("checkpoint" if isinstance(source, dict) else source)
    if "model_config" not in ck:
        raise UserError(f"{name} has no model_config (a merge without a base model?); give a stage "
                        "checkpoint written by train.py")
    cfg = {k: v for k, v in ck["model_config"].items() if k not in MACHINE_POLICY}
    model = GPT(GPTConfig(**cfg, **policy))
    try:
        load_state_checked(model, ck["model"], "its weights' vs its model_config's",
                           "the file was changed after train.py wrote it; give a checkpoint as train.py wrote it")
    except UserError as e:
        raise UserError(f"{name}: {e}", e.details) from None
    return model.to(device).eval(), ck


def same_prores(key, saved, now):
    """Whether two runs differ in a ProRes flag that changes nothing: every --prores-* flag when neither
    run has --prores; --prores-scope fresh (the default now) and stage (the default before)
    in a run of one stage from scratch, where both warm that stage up. So a run written before the
    default changed still resumes, and a finished one is still recognised by the experiments' sweeps."""
    if not key.startswith("prores_") or key == "prores":
        return False
    if not saved.get("prores") and not now.get("prores"):
        return True
    one_fresh_stage = "," not in str(now.get("stages")) and not now.get("init_from")
    return key == "prores_scope" and one_fresh_stage and {saved[key], now[key]} <= {"fresh", "stage"}


def check_resume_args(saved, args, path):
    """A resumed run must be the run that wrote the checkpoint: every flag that changes what is
    computed must match, else a UserError listing each difference (flag, now, then)."""
    now = vars(args)
    diff = [f"--{k.replace('_', '-')} {now[k]!r} (the checkpoint's run: {saved.get(k)!r})"
            for k in sorted(now) if k not in RESUMABLE_WITH_OTHER and k in saved and saved[k] != now[k]
            and not same_prores(k, saved, now)]
    if diff:
        raise UserError(f"--resume: {path} was written by a run with other flags: {'; '.join(diff)}. "
                        "Use the same flags to resume it, or another --out for a new run")


def trim_metrics(path, resume):
    """Start metrics.jsonl afresh, or on resume keep only the events up to the checkpoint
    (a killed run may have logged steps after it; the resumed run logs them again). A last line
    cut off (a run killed, or a disk filled, while writing it) is dropped with a warning; a damaged
    line before it is a UserError naming the line."""
    if resume is None:
        Path(path).unlink(missing_ok=True)
        return
    if not Path(path).exists():
        return
    lines = [ln for ln in Path(path).read_bytes().decode("utf-8", "replace").splitlines(keepends=True) if ln.strip()]
    keep = []
    for n, line in enumerate(lines, 1):
        try:
            e = json.loads(line)
            assert isinstance(e, dict) and "event" in e
        except (ValueError, AssertionError):
            if n < len(lines):
                raise UserError(f"--resume: {path} line {n} is not a JSON event, and lines follow it: the log is "
                                "damaged there; delete that line (the log loses that event) and run the same "
                                "command again, or give a fresh --out") from None
            print(f"warning: {path}: its last line is cut off (the run was stopped while writing it); dropped it",
                  file=sys.stderr)
            break
        si, it = e.get("stage_index", -1), e.get("iter", 0)
        if si < resume["stage_index"] or (si == resume["stage_index"] and e["event"] != "stage_end"
                                          and it <= resume["iter"]):
            keep.append(line if line.endswith("\n") else line + "\n")
    write_atomic(path, "".join(keep).encode())


def check_device(name, flag="--device"):
    """A device the user named must exist here: a UserError of one line naming the fix, not a
    RuntimeError (or a misleading 'not a readable checkpoint') later."""
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise UserError(f"{flag} {name!r}: not a device; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"{flag} {name}: torch sees no CUDA device; use {flag} cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"{flag} {name}: torch sees {torch.cuda.device_count()} CUDA device(s); use cuda:0 .. "
                            f"cuda:{torch.cuda.device_count() - 1} or cpu")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise UserError(f"{flag} {name}: torch sees no MPS device; use {flag} cpu")
    elif dev.type != "cpu":
        raise UserError(f"{flag} {name}: not a supported device; use cpu, cuda or cuda:N")
    return dev


class MetricsLog:
    """OUT/metrics.jsonl, one JSON event a line (rank 0 only). Opened at the first event or
    checkpoint, not before: a run that fails before it has anything to record leaves no file.
    Opening starts the file afresh, or on --resume keeps the events up to the checkpoint."""

    def __init__(self, path, resume, active):
        self.path, self.resume, self.active, self.f = path, resume, active, None

    def open(self):
        if self.active and self.f is None:
            trim_metrics(self.path, self.resume)
            self.f = open(self.path, "a")

    def write(self, event):
        if self.active:
            self.open()
            try:
                self.f.write(json.dumps(event) + "\n")
                self.f.flush()
            except OSError as e:  # (a line cut off by it is dropped on --resume: trim_metrics)
                if no_space(e):
                    raise run_disk_full(self.path, 2**20) from None  # (a MiB of events, or the next checkpoint)
                raise

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None
