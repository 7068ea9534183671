"""
Selective weight transfer: copy named parameter groups from one model's weights into another.
"Listen and Chant Before You Read" (arXiv 2604.21265), its stage-to-stage transfer: between
stages whose vocabularies differ (music 160 -> text 50,257) copy ONLY attention, feed-forward
and normalisation weights,
    theta_dst[g] <- theta_src[g]   for g in {attn, mlp, norm},
and leave the token embedding, the LM head and the position embeddings at their fresh
initialisation (positions are not in the paper's list; `pos` is available as an option);
between stages with the same tokenizer copy everything.

Also used for procedural pre-training (Jiang, Shinnick et al., arXiv 2601.21725, the transfer
modes of its downstream experiments; the authors' downstream/utils.py of
github.com/zlshinnick/procedural-pretraining, load_pretrained_weights):
  - full = attn, mlp, norm, pos: their "everything" loads every weight but the token embedding
    and the head (utils.py:273-302) and moves the position embeddings too (utils.py:224-261:
    the first T rows when the source's context is at least as long; `transfer` does the same);
    their "everything" also sets every embedding row to the pretrained rows' mean, which is
    `mean_embedding_init` here (train.py --embed-init mean), a separate choice;
  - attention-only (`attn`) or MLP-only (`mlp`) transfer, everything else fresh;
  - the new vocabulary's embedding rows either random or every row the mean of the pretrained
    rows (`mean_embedding_init`, their default "average" strategy, utils.py:132-143);
  - transferred groups optionally frozen (`freeze`, their weights_to_be_trained);
  - `merge` for surgical composition (attention layers from one checkpoint, MLP layers from
    another), also as a command:

    python transfer.py merge --attn dyck.pt --mlp eca.pt [--norm dyck.pt] -o merged.pt
    python train.py --stages task:haystack --init-from merged.pt

Groups (model.GROUPS): embed, pos, attn, mlp, norm, head. In a model with a tied head the
embedding and the head are one tensor, so they can only be transferred together.
"""

import sys

import torch

from checkpoint import BLOCK_GROUPS, FLAGS, misfit, misfit_fix, misfit_line, tensor_table
from model import GROUPS, group_of

VOCAB_INDEPENDENT = BLOCK_GROUPS              # the ladder paper's list: the cross-vocabulary default
FULL = VOCAB_INDEPENDENT + ("pos",)           # the procedural authors' "everything"
ALIASES = {"all": tuple(GROUPS), "full": FULL}


def default_groups(src_tokenizer, dst_tokenizer):
    """Everything when both stages use the same tokenizer (e.g. "gpt2"); the vocabulary-
    independent groups (attn, mlp, norm) otherwise. Tokenizers are compared by name, not by
    vocabulary size, so two vocabularies of the same size are still told apart."""
    return tuple(GROUPS) if src_tokenizer == dst_tokenizer else VOCAB_INDEPENDENT


def parse_groups(spec):
    """'attn,norm' -> ('attn', 'norm'); 'all' -> every group; 'full' -> attn, mlp, norm, pos (the
    procedural authors' "everything": all but the token embedding and the head); an unknown
    name is an error."""
    groups = []
    for g in (g.strip() for g in spec.split(",") if g.strip()):
        groups += ALIASES.get(g, (g,))
    groups = tuple(dict.fromkeys(groups))
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        raise ValueError(f"unknown transfer group(s) {unknown or spec!r}; choose from {list(GROUPS)}, "
                         f"'full' (= attn,mlp,norm,pos) or 'all'")
    return groups


@torch.no_grad()
def transfer(src_state, dst_model, groups, shared_rows=False):
    """Copy exactly the parameters of `groups` from src_state (a state dict) into dst_model;
    every other parameter keeps its current (fresh) value. Returns a report:
    {"groups": [...], "copied": [names], "skipped": [names]}. A requested tensor that is missing
    from src_state or has another shape is an error that names every such tensor, with two
    exceptions that differ only in the number of rows:
      - positions from a longer context: the destination's T rows get the source's first T
        (the procedural authors' downstream/utils.py:241-261; from a SHORTER context they keep
        the fresh rows without a word, utils.py:262-265; ours is an error that says so);
      - shared_rows=True (the same tokenizer, one model with an extra [MASK] row, MIR/MDLM): an
        embedding or head gets the rows both have, and the extra row keeps its fresh value."""
    groups = tuple(groups)
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown transfer group(s) {unknown}; choose from {list(GROUPS)}")
    tied = dst_model.lm_head.weight is dst_model.transformer.wte.weight
    if tied and (("embed" in groups) != ("head" in groups)):
        raise ValueError("this model ties the LM head to the token embedding (one tensor): transfer "
                         "'embed' and 'head' together or neither, or train with --no-tie")
    copied, skipped, problems, misfits = [], [], [], []
    for name, p in dst_model.named_parameters():  # a tied head appears once, as the embedding
        if group_of(name) not in groups:
            skipped.append(name)
            continue
        src = src_state.get(name)
        rows_only = src is not None and src.shape[1:] == p.shape[1:] and src.shape[0] != p.shape[0]
        if src is None:
            problems.append(f"{name}: not in the source weights")
            misfits.append((name, None, tuple(p.shape), ""))
        elif src.shape == p.shape:
            p.copy_(src)
            copied.append(name)
        elif rows_only and group_of(name) == "pos" and src.shape[0] > p.shape[0]:
            p.copy_(src[:p.shape[0]])
            copied.append(name)
        elif shared_rows and rows_only and group_of(name) in ("embed", "head"):
            n = min(src.shape[0], p.shape[0])
            p[:n].copy_(src[:n])
            copied.append(name)
        else:
            problems.append(f"{name}: source {tuple(src.shape)} vs destination {tuple(p.shape)}" + _why(name, rows_only))
            misfits.append((name, tuple(src.shape), tuple(p.shape), _why(name, rows_only)))
    if problems:
        raise TransferError("cannot transfer groups %s:\n  %s" % (list(groups), "\n  ".join(problems)),
                            misfits)
    return {"groups": list(groups), "copied": copied, "skipped": skipped}


class TransferError(ValueError):
    """transfer()'s error: its message lists every tensor that does not fit; `misfits` holds them
    as (name, source shape or None when the source lacks it, destination shape, why) for callers
    that say it shorter (transfer.py merge)."""

    def __init__(self, message, misfits=()):
        super().__init__(message)
        self.misfits = list(misfits)


def _why(name, rows_only):
    """What a shape mismatch of this tensor means, and the way out (a width that differs is said by misfit)."""
    if group_of(name) in ("embed", "head") and rows_only:
        return " (the vocabularies differ: leave out 'embed' and 'head')"
    if group_of(name) == "pos" and rows_only:
        return " (the source's context is shorter: leave out 'pos', e.g. --transfer attn,mlp,norm)"
    return ""


def transfer_checked(src_state, dst_model, groups, shared_rows, source):
    """transfer() of weights the user gave (`source` names them, e.g. '--init-from PATH'): weights that do not
    fit are a UserError of one short line (what differs, misfit_line, and the flag that fixes it), with every
    tensor that does not fit in its details (which --verbose prints)."""
    from data.common import UserError
    own = dst_model.state_dict()
    if diffs := misfit(src_state, own, groups, shared_rows):
        raise UserError(f"{source} does not fit this run's model: {misfit_line(diffs)}; {misfit_fix(diffs)} "
                        "(--verbose lists the tensors)", details="\n".join(tensor_table(src_state, own)))
    try:
        return transfer(src_state, dst_model, groups, shared_rows=shared_rows)
    except TransferError as e:  # another architecture: biases, norms, an untied head
        name, src, dst, _ = e.misfits[0]
        raise UserError(f"{source} does not fit this run's model: {len(e.misfits)} tensor(s) differ, e.g. {name} "
                        f"{src or 'missing'} vs {dst}; were --no-bias, --no-tie or --norm other? (--verbose lists "
                        "them)", details=str(e)) from None
    except ValueError as e:
        raise UserError(f"{source}: {e}") from None


@torch.no_grad()
def mean_embedding_init(src_state, dst_model):
    """Every row of the destination's token embedding AND of its LM head <- the mean of the
    source's embedding rows: the procedural authors' default for a new vocabulary (arXiv
    2601.21725; their downstream/utils.py:132-140, "average", which sets wte and lm_head rows
    alike). Tied or untied, the first prediction is then uniform over the new vocabulary."""
    mean = src_state["transformer.wte.weight"].float().mean(0)
    with torch.no_grad():
        dst_model.transformer.wte.weight.copy_(mean.expand_as(dst_model.transformer.wte.weight))
        dst_model.lm_head.weight.copy_(mean.expand_as(dst_model.lm_head.weight))  # (the same tensor when tied)


def freeze(model, groups):
    """requires_grad = False for every parameter of `groups` (the optimizer then skips them)."""
    for name, p in model.named_parameters():
        if group_of(name) in groups:
            p.requires_grad_(False)


def merge(sources, dst_model):
    """Surgical composition: sources is a list of (state_dict, groups), applied in order, e.g.
    [(dyck_state, ["attn"]), (rule110_state, ["mlp"])]. A group given twice is an error."""
    seen = set()
    reports = []
    for state, groups in sources:
        twice = seen.intersection(groups)
        if twice:
            raise ValueError(f"group(s) {sorted(twice)} come from more than one source")
        seen.update(groups)
        reports.append(transfer(state, dst_model, groups))
    return reports


def merge_checkpoints(paths_by_group, base=None):
    """{group: checkpoint path} -> a checkpoint dict whose weights take each group from its
    checkpoint; the groups no path names come from `base` (default: the first path given). All
    checkpoints must share the architecture of the vocabulary-independent groups: a tensor that
    does not fit, or one of the group's tensors that the base model has no place for (a deeper
    source), is a ValueError of one short line naming the file it came from, the base it did not
    fit, a few of the tensors with their shapes, how many more, and the fix."""
    from checkpoint import load_model, read_checkpoint
    from data.common import UserError
    cks = {g: read_checkpoint(p, f"--{g}") for g, p in paths_by_group.items()}
    base_path, base_flag = (base, "--base") if base else next((p, f"--{g}") for g, p in paths_by_group.items())
    base_ck = read_checkpoint(base, "--base") if base else next(iter(cks.values()))
    if "model_config" not in base_ck:
        raise ValueError(f"{base_flag} {base_path}: the base checkpoint has no model_config; give a stage "
                         "checkpoint of train.py")
    try:
        model = load_model(base_ck)[0]
    except UserError as e:
        raise UserError(f"{base_flag} {base_path}: {e}") from None
    own = model.state_dict()
    for g, ck in cks.items():
        where = f"--{g} {paths_by_group[g]}"
        if f"--{g}" != base_flag:
            where += f" does not fit the base model ({base_flag} {base_path})"
        try:
            transfer(ck["model"], model, [g])
        except TransferError as e:
            raise ValueError(f"{where}: {_short_misfits(g, e.misfits, misfit(ck['model'], own, [g]))}") from None
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        extra = [(k, tuple(v.shape), None, "") for k, v in ck["model"].items() if k not in own and _group(k) == g]
        if extra:
            raise ValueError(f"{where}: {_short_misfits(g, extra)}")
    return {"model": model.state_dict(), "model_config": base_ck["model_config"],
            "tokenizer": base_ck.get("tokenizer"), "stage": "merge",
            "merged_from": {g: str(p) for g, p in paths_by_group.items()}}


SHOWN = 3  # tensors a merge error names; the rest are counted


def _group(name):
    try:
        return group_of(name)
    except KeyError:  # a buffer (e.g. residual_scale): in no group
        return None


def _short_misfits(group, misfits, diffs=()):
    """One short sentence of (name, source shape, base shape, why) tuples: the first SHOWN
    tensors with their shapes, the count of the rest, and the way out (diffs: misfit's, said with it)."""
    def one(name, src, dst, _):
        return f"{name} {'missing' if src is None else src} vs {'none' if dst is None else dst}"
    shown = ", ".join(one(*m) for m in misfits[:SHOWN])
    more = f" and {len(misfits) - SHOWN} more" if len(misfits) > SHOWN else ""
    whys = {m[3] for m in misfits}
    if any("vocabularies" in w for w in whys):
        fix = "the vocabularies differ: take embed and head from the base (leave out --embed and --head)"
    elif any("context" in w for w in whys):
        fix = "its context is shorter than the base's: leave out --pos, or make the shorter-context checkpoint --base"
    elif any(m[1] is None or m[2] is None for m in misfits):
        fix = "the models differ in depth: merge checkpoints with the same --n-layer"
    elif diffs:
        whose = "its vs the base's"
        fix = (f"the models differ: {misfit_line(diffs, whose)}; merge checkpoints with the same "
               + " and ".join(FLAGS[k] for k, _, _ in diffs))
    else:
        fix = "merge checkpoints of one architecture (the same --n-layer, --n-embd and --n-head)"
    n = len(misfits)
    return (f"{n} {group} tensor{'s' if n > 1 else ''} do{'' if n > 1 else 'es'} not fit (its shape vs the base's): "
            f"{shown}{more}; {fix}")


def write_merged(path, ck):
    """save_checkpoint, with a path the user gave: an unwritable path is a UserError of one line."""
    from checkpoint import save_checkpoint
    from data.common import UserError, check_output
    check_output(path)
    try:
        save_checkpoint(path, ck)
    except (OSError, RuntimeError) as e:
        raise UserError(f"-o {path}: cannot write it ({getattr(e, 'strerror', None) or e}); choose a writable path") from None


def check_not_overwriting(output, inputs, force):
    """-o must not be one of the merge's inputs ({flag name: path}; compared as resolved paths), which it
    would replace, nor an existing file unless `force`: a UserError of one line, before anything is read."""
    from pathlib import Path
    from data.common import UserError
    out = Path(output).resolve()
    same = [f"--{g}" for g, p in inputs.items() if Path(p).resolve() == out]
    if same:
        raise UserError(f"-o {output}: is the merge's {' and '.join(same)} input, which it would replace; write the "
                        f"merge to another path, e.g. -o {out.with_name(out.stem + '-merged.pt')}")
    if out.exists() and not force:
        raise UserError(f"-o {output}: the file exists; give another path, or add --force to replace it")


def main(argv=None):
    from data.common import ArgumentParser, UserError, check_output
    p = ArgumentParser(prog="transfer.py", description="Weight surgery on train.py checkpoints.")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="take each parameter group from a chosen checkpoint "
                                     "(attention from one, MLP from another), for --init-from")
    for g in GROUPS:
        m.add_argument(f"--{g}", default=None, metavar="CKPT", help=f"take the {g} group from CKPT")
    m.add_argument("--base", default=None, help="where the groups nobody names come from (default: the first given)")
    m.add_argument("-o", "--output", required=True,
                   help="the merged checkpoint to write: not one of its inputs, nor an existing file unless --force")
    m.add_argument("--force", action="store_true", help="replace the -o file if it exists (never one of the inputs)")
    a = p.parse_args(argv)
    paths = {g: getattr(a, g) for g in GROUPS if getattr(a, g)}
    if not paths:
        m.error("name at least one group, e.g. --attn A.pt --mlp B.pt")
    try:
        check_output(a.output)
        check_not_overwriting(a.output, {**paths, **({"base": a.base} if a.base else {})}, a.force)
        write_merged(a.output, merge_checkpoints(paths, a.base))
    except (UserError, ValueError) as e:
        one_line = str(e).replace(":\n  ", ": ").replace("\n  ", "; ")  # transfer's list of tensors
        print(f"transfer.py merge: error: {' '.join(one_line.split())}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {a.output}: " + ", ".join(f"{g} from {p}" for g, p in paths.items()))


if __name__ == "__main__":
    main()
