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
    transfer(src.state_dict(), dst, default_groups("midi-events-160", "gpt2"))
    assert dst.transformer.wte.weight.shape == (50257, 16)
    assert dst.lm_head.weight.shape == (50257, 16)
    idx = torch.randint(0, 50257, (1, 8))
    assert dst(idx)[0].shape == (1, 8, 50257)


def test_same_vocabulary_copies_everything():
    src, dst = make(97, 0), make(97, 1)
    transfer(src.state_dict(), dst, default_groups("gpt2", "gpt2"))
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


def test_default_cross_vocabulary_transfer_is_the_papers_attn_mlp_norm():
    """The ladder paper copies ONLY attention, feed-forward and normalisation weights between
    music and text; positions, embedding and head stay fresh. Tokenizers are compared by name."""
    assert default_groups("midi-events-160", "gpt2") == ("attn", "mlp", "norm")
    assert default_groups("procedural-102", "tasks-102") == ("attn", "mlp", "norm")  # same size, other tokens
    src, dst = make(160, 0), make(50257, 1)
    fresh = {k: v.clone() for k, v in dst.state_dict().items()}
    report = transfer(src.state_dict(), dst, default_groups("midi-events-160", "gpt2"))
    assert {group_of(n) for n in report["copied"]} == {"attn", "mlp", "norm"}
    assert torch.equal(dst.transformer.wpe.weight, fresh["transformer.wpe.weight"])
    assert torch.equal(dst.transformer.wte.weight, fresh["transformer.wte.weight"])


def test_shared_rows_carry_the_vocabulary_into_a_model_with_a_mask_row():
    src, dst = make(97, 0), make(98, 1)           # 97 tokens -> 97 + [MASK]
    mask_row = dst.transformer.wte.weight[97].clone()
    with pytest.raises(ValueError, match="vocabularies differ"):
        transfer(src.state_dict(), dst, tuple(GROUPS))
    transfer(src.state_dict(), dst, tuple(GROUPS), shared_rows=True)
    assert torch.equal(dst.transformer.wte.weight[:97], src.transformer.wte.weight)
    assert torch.equal(dst.transformer.wte.weight[97], mask_row)
    back = make(97, 2)                              # and back, dropping the [MASK] row
    transfer(dst.state_dict(), back, tuple(GROUPS), shared_rows=True)
    assert torch.equal(back.transformer.wte.weight, dst.transformer.wte.weight[:97])


def test_mean_embedding_init_and_freeze():
    from transfer import freeze, mean_embedding_init
    src, dst = make(102, 0), make(174, 1)
    mean_embedding_init(src.state_dict(), dst)
    want = src.transformer.wte.weight.mean(0)
    assert torch.allclose(dst.transformer.wte.weight, want.expand(174, -1))
    from model import GPT, GPTConfig  # untied, as the authors' diagnostics: the head's rows are the mean too
    untied = GPT(GPTConfig(block_size=16, vocab_size=174, n_layer=1, n_head=2, n_embd=16, tie_weights=False))
    mean_embedding_init(src.state_dict(), untied)
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    assert torch.allclose(untied.lm_head.weight, want.expand(174, -1))
    freeze(dst, ("attn",))
    for name, p in dst.named_parameters():
        assert p.requires_grad == (group_of(name) != "attn"), name
    opt = dst.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    assert sum(len(g["params"]) for g in opt.param_groups) == sum(p.requires_grad for p in dst.parameters())


def test_merge_command_writes_a_checkpoint_usable_with_init_from(tmp_path):
    import transfer as tr
    from checkpoint import load_checkpoint, save_checkpoint
    a, b = make(50, 0), make(50, 1)
    for name, m in (("a", a), ("b", b)):
        save_checkpoint(tmp_path / f"{name}.pt", {"model": m.state_dict(), "model_config": vars(m.config).copy()})
    tr.main(["merge", "--attn", str(tmp_path / "a.pt"), "--mlp", str(tmp_path / "b.pt"), "-o", str(tmp_path / "m.pt")])
    merged = load_checkpoint(tmp_path / "m.pt")["model"]
    for name, p in a.named_parameters():
        want = b.state_dict()[name] if group_of(name) == "mlp" else p
        assert torch.equal(merged[name], want), name
    with pytest.raises(SystemExit):
        tr.main(["merge", "--attn", str(tmp_path / "nope.pt"), "-o", str(tmp_path / "x.pt")])


def test_parse_groups():
    assert parse_groups("attn, norm") == ("attn", "norm")
    assert parse_groups("all") == tuple(GROUPS)
    assert parse_groups("full") == ("attn", "mlp", "norm", "pos")  # the procedural authors' "everything"
    with pytest.raises(ValueError, match="unknown transfer group"):
        parse_groups("attention")


def test_full_transfer_is_everything_but_the_embedding_and_head():
    """The procedural authors' "everything" (downstream/utils.py): every weight but the token
    embedding and the head, positions included; from a longer context the first T position rows."""
    src, dst = make(102, 0, block_size=32), make(174, 1)       # 32 positions -> 16
    fresh = {k: v.clone() for k, v in dst.state_dict().items()}
    report = transfer(src.state_dict(), dst, parse_groups("full"))
    assert {group_of(n) for n in report["copied"]} == {"attn", "mlp", "norm", "pos"}
    assert torch.equal(dst.transformer.wpe.weight, src.transformer.wpe.weight[:16])
    assert torch.equal(dst.transformer.wte.weight, fresh["transformer.wte.weight"])
    for name, p in dst.named_parameters():
        if group_of(name) in ("attn", "mlp", "norm"):
            assert torch.equal(p, src.state_dict()[name]), name
    short = make(102, 0, block_size=8)                          # 8 positions cannot fill 16
    with pytest.raises(ValueError, match=r"transformer.wpe.weight: source \(8, 16\) vs destination \(16, 16\)"
                                         r".*context is shorter.*attn,mlp,norm"):
        transfer(short.state_dict(), dst, parse_groups("full"))


def _save(path, m):
    from checkpoint import save_checkpoint
    save_checkpoint(path, {"model": m.state_dict(), "model_config": vars(m.config).copy()})
    return path


def _one_error_line(capsys, argv):
    import transfer as tr
    with pytest.raises(SystemExit) as e:
        tr.main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_merge_into_a_missing_folder_is_one_line_and_writes_nothing(tmp_path, capsys):
    a = _save(tmp_path / "a.pt", make(50, 0))
    line = _one_error_line(capsys, ["merge", "--attn", str(a), "-o", str(tmp_path / "no/such/dir/m.pt")])
    assert "-o" in line and "no/such/dir" in line and "no folder" in line
    assert not (tmp_path / "no").exists()


def test_merge_shape_error_names_the_files_it_came_from(tmp_path, capsys):
    narrow, wide = _save(tmp_path / "narrow.pt", make(50, 0)), _save(tmp_path / "wide.pt", make(50, 1, n_embd=32))
    line = _one_error_line(capsys, ["merge", "--attn", str(narrow), "--mlp", str(wide), "-o", str(tmp_path / "m.pt")])
    assert f"--mlp {wide}" in line and f"--attn {narrow}" in line and "c_fc.weight" in line
    assert not (tmp_path / "m.pt").exists()
