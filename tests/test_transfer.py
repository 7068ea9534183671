import pytest
import torch

from model import GPT, GPTConfig, GROUPS, group_of
from transfer import VOCAB_INDEPENDENT, default_groups, merge, parse_groups, transfer


def make(vocab, seed, **kw):
    torch.manual_seed(seed)
    cfg = dict(block_size=16, vocab_size=vocab, n_layer=2, n_head=2, n_embd=16)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg))


@pytest.mark.parametrize("groups", [("attn",), ("mlp",), ("attn", "norm"), VOCAB_INDEPENDENT])
def test_copies_exactly_the_requested_groups(groups):
    src, dst = make(160, 0), make(50257, 1)
    fresh = {k: v.clone() for k, v in dst.state_dict().items()}
    report = transfer(src.state_dict(), dst, groups)
    s = src.state_dict()
    for name, p in dst.named_parameters():
        if group_of(name) in groups:
            assert torch.equal(p, s[name]), name
            assert name in report["copied"]
        else:
            assert torch.equal(p, fresh[name]), name
            assert name in report["skipped"]
    assert torch.equal(dst.residual_scale, torch.ones(2))


def test_new_vocabulary_gets_fresh_embedding_and_head_of_its_own_shape():
    src, dst = make(160, 0), make(50257, 1)
    transfer(src.state_dict(), dst, default_groups(160, 50257))
    assert dst.transformer.wte.weight.shape == (50257, 16)
    assert dst.lm_head.weight.shape == (50257, 16)
    idx = torch.randint(0, 50257, (1, 8))
    assert dst(idx)[0].shape == (1, 8, 50257)


def test_same_vocabulary_copies_everything():
    src, dst = make(97, 0), make(97, 1)
    transfer(src.state_dict(), dst, default_groups(97, 97))
    for k, v in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k], v), k


def test_shape_mismatch_inside_a_requested_group_names_the_tensors():
    src, dst = make(160, 0), make(50257, 1)
    with pytest.raises(ValueError, match="transformer.wte.weight: source \\(160, 16\\) vs destination \\(50257, 16\\)"):
        transfer(src.state_dict(), dst, tuple(GROUPS))
    wide = make(160, 0, n_embd=32)
    with pytest.raises(ValueError, match="c_attn.weight"):
        transfer(wide.state_dict(), dst, ("attn",))


def test_tied_embedding_and_head_move_together():
    src, dst = make(97, 0), make(97, 1)
    with pytest.raises(ValueError, match="ties the LM head"):
        transfer(src.state_dict(), dst, ("embed",))
    untied_src, untied_dst = make(97, 0, tie_weights=False), make(97, 1, tie_weights=False)
    transfer(untied_src.state_dict(), untied_dst, ("head",))
    assert torch.equal(untied_dst.lm_head.weight, untied_src.lm_head.weight)
    assert not torch.equal(untied_dst.transformer.wte.weight, untied_src.transformer.wte.weight)


def test_merge_takes_attention_from_one_model_and_mlp_from_another():
    a, b, dst = make(50, 0), make(50, 1), make(50, 2)
    merge([(a.state_dict(), ["attn"]), (b.state_dict(), ["mlp"])], dst)
    for name, p in dst.named_parameters():
        g = group_of(name)
        if g == "attn":
            assert torch.equal(p, a.state_dict()[name])
        if g == "mlp":
            assert torch.equal(p, b.state_dict()[name])
    with pytest.raises(ValueError, match="more than one source"):
        merge([(a.state_dict(), ["attn"]), (b.state_dict(), ["attn"])], dst)


def test_parse_groups():
    assert parse_groups("attn, norm") == ("attn", "norm")
    assert parse_groups("all") == tuple(GROUPS)
    with pytest.raises(ValueError, match="unknown transfer group"):
        parse_groups("attention")
