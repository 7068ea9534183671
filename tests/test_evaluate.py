"""evaluate.py: a finished run's loss on its whole validation split, every target once, cached, and its command."""
import math

import numpy as np
import pytest

import evaluate
from test_train_mechanisms import run


def test_a_run_is_scored_on_every_validation_target_once_and_cached(cache, text_dir, tmp_path, capsys):
    out = tmp_path / "r"
    run(out, "--stages", f"text:{text_dir}", "--iters", "3")
    e = evaluate.evaluate_run(out)
    summary = evaluate.read_summary(out)
    corpus, T = evaluate.run_corpus(summary["args"]), summary["args"]["block_size"]
    ce = np.load(out / "val_tokens.npy")
    assert e["tokens"] == ce.size == (len(corpus.val) - 1) // T * T   # non-overlapping windows, stride T
    assert e["kind"] == "nll" and e["loss"] == pytest.approx(float(ce.astype(np.float64).mean()), rel=1e-5)
    assert 0 < e["loss"] < math.log(corpus.vocab_size) + 1            # near the uniform guess after 3 steps
    (out / "val_tokens.npy").unlink()
    assert evaluate.evaluate_run(out) == e and not (out / "val_tokens.npy").exists()   # from val_eval.json
    evaluate.main([str(out)])
    assert f"nll {e['loss']:.4f} nats/token over {e['tokens']:,} validation tokens" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        evaluate.main([str(tmp_path / "nothing")])
    assert "no finished run (summary.json)" in capsys.readouterr().err
