"""
Selective weight transfer: copy named parameter groups from one model's weights into another.
"Listen and Chant Before You Read" (arXiv 2604.21265): between stages whose vocabularies
differ (music 160 -> text 50,257) copy only the vocabulary-independent weights,
    theta_dst[g] <- theta_src[g]   for g in {attn, mlp, norm} (+ pos, our default),
and leave the token embedding and the LM head at their fresh initialisation; between stages
with the same vocabulary copy everything. Also used for procedural pre-training
(arXiv 2601.21725): attention-only or MLP-only transfer, and `merge` for surgical composition
(attention layers from one checkpoint, MLP layers from another).

Groups (model.GROUPS): embed, pos, attn, mlp, norm, head. In a model with a tied head the
embedding and the head are one tensor, so they can only be transferred together.
"""

import torch

from model import GROUPS, group_of

VOCAB_INDEPENDENT = ("attn", "mlp", "norm", "pos")


def default_groups(src_vocab, dst_vocab):
    """Everything when the vocabularies match; the vocabulary-independent groups otherwise."""
    return tuple(GROUPS) if src_vocab == dst_vocab else VOCAB_INDEPENDENT


def parse_groups(spec):
    """'attn,norm' -> ('attn', 'norm'); 'all' -> every group; an unknown name is an error."""
    groups = tuple(GROUPS) if spec.strip() == "all" else tuple(g.strip() for g in spec.split(",") if g.strip())
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        raise ValueError(f"unknown transfer group(s) {unknown or spec!r}; choose from {list(GROUPS)} or 'all'")
    return groups


@torch.no_grad()
def transfer(src_state, dst_model, groups):
    """Copy exactly the parameters of `groups` from src_state (a state dict) into dst_model;
    every other parameter keeps its current (fresh) value. Returns a report:
    {"groups": [...], "copied": [names], "skipped": [names]}. A requested tensor that is missing
    from src_state or has another shape is an error that names every such tensor."""
    groups = tuple(groups)
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown transfer group(s) {unknown}; choose from {list(GROUPS)}")
    tied = dst_model.lm_head.weight is dst_model.transformer.wte.weight
    if tied and (("embed" in groups) != ("head" in groups)):
        raise ValueError("this model ties the LM head to the token embedding (one tensor): transfer "
                         "'embed' and 'head' together or neither, or train with --no-tie")
    copied, skipped, problems = [], [], []
    for name, p in dst_model.named_parameters():  # a tied head appears once, as the embedding
        if group_of(name) not in groups:
            skipped.append(name)
            continue
        src = src_state.get(name)
        if src is None:
            problems.append(f"{name}: not in the source weights")
        elif src.shape != p.shape:
            problems.append(f"{name}: source {tuple(src.shape)} vs destination {tuple(p.shape)}"
                            + (" (the vocabularies differ: leave out 'embed' and 'head')"
                               if group_of(name) in ("embed", "head") else ""))
        else:
            p.copy_(src)
            copied.append(name)
    if problems:
        raise ValueError("cannot transfer groups %s:\n  %s" % (list(groups), "\n  ".join(problems)))
    return {"groups": list(groups), "copied": copied, "skipped": skipped}


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
