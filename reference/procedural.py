"""
The authors' own pipeline for "Procedural Pretraining" (Jiang, Shinnick et al., arXiv 2601.21725), run UNCHANGED
from a checkout of github.com/zlshinnick/procedural-pretraining beside ours, so the two can be compared and crossed
(our pre-trained model into their fine-tuning, theirs into ours: reference/convert.py). Nothing of theirs is copied
here: their scripts run from --authors-repo in a venv of their own (reference/requirements.txt), on CPU, with
wandb off (WANDB_MODE=disabled); every override is a YAML file written to --out, never into their checkout.

    python reference/procedural.py setup --venv V
    python reference/procedural.py pretrain --authors-repo A --venv V --out D [--max-steps N] [--seed S]
    python reference/procedural.py finetune --authors-repo A --venv V --out D --config procedural --pretrained CKPT

pretrain: their Dyck diagnostic, procedural_pretraining/cli.py with dyck.py's defaults (:437-507: 2_4_16 GPT-2,
  k = 16, 128 tokens, p_open 0.5, batch 64, AdamW lr 5e-5 constant, decay 0.01, validation every 100 steps); their
  configs/dyck.yaml is the 12_12_768 model (k = 64, 2,048 tokens), so ours sets only `task: dyck` and the caps.
  Records their loss and accuracy curves, their validation, the checkpoints they keep (the best by validation
  token accuracy, dyck.py:178-191, and the last, :196-206, :404-413) and our exact entropy of the data, the floor
  of their loss (data/procedural_entropy.py).
finetune: downstream/algorithmic_tasks/experiment_stream.py on condattendstream_30 (HAYSTACK) with their
  configs/<config>.yaml, task and seed set; records the accuracy their compute_metrics logs every 50 steps (the
  answer token's, task_condattendstream.py:45-50) in OUT/curve.json. A checkpoint of ours is converted first.
Each command writes OUT/summary.json (a temporary file, then renamed): settings, their commit (with --authors-git
a git dir of theirs, each file run checked against it), steps, curves, wall and CPU seconds.
"""

import argparse
import ast
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # our data modules (the entropy floor, atomic writes)
from data.common import write_json  # noqa: E402
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
PRETRAIN_FILES = ("procedural_pretraining/cli.py", "procedural_pretraining/dyck.py", "procedural_pretraining/utils.py",
                  "procedural_data/dyck.py")
FINETUNE_FILES = ("downstream/algorithmic_tasks/experiment_stream.py", "downstream/algorithmic_tasks/configurator.py",
                  "downstream/algorithmic_tasks/experiment_config.py", "downstream/utils.py",
                  "downstream/algorithmic_tasks/task_condattendstream.py")
DYCK = dict(k=16, length=128, p_open=0.5)  # dyck.py:472-480, the generator's options (max_depth: unused by it)
TASK = "condattendstream_30"
BATCH = 1000                               # task_condattendstream.py:15, records a fine-tuning step
METRIC = "eval_train_testA_accuracy"       # compute_metrics' accuracy on eval_dataset "train_testA" (:292)


class HarnessError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


COMPONENTS = ("everything", "attn", "ffn", "embed")  # what their config accepts (experiment_config.py:85-93)


def their_components(spec):
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or any(p not in COMPONENTS for p in parts):
        raise argparse.ArgumentTypeError(f"{spec!r}: give a comma-separated list of {', '.join(COMPONENTS)}")
    return ",".join(parts)


def venv_python(venv):
    py = Path(venv) / "bin" / "python"
    if not py.exists():
        raise HarnessError(f"--venv {venv}: no bin/python there; run `python reference/procedural.py setup "
                           f"--venv {venv}` first")
    return py


def authors_repo(path, files):
    repo = Path(path).resolve()
    if not repo.is_dir():
        raise HarnessError(f"--authors-repo {path}: no such folder; give a checkout of "
                           "github.com/zlshinnick/procedural-pretraining")
    missing = [f for f in files if not (repo / f).is_file()]
    if missing:
        raise HarnessError(f"--authors-repo {path}: not their checkout (missing {', '.join(missing)})")
    return repo


def provenance(repo, files, git_dir):
    """Their commit: the checkout's own, or --authors-git's HEAD with each file run compared blob by blob."""
    def git(*args, **kw):
        r = subprocess.run(["git", *args], capture_output=True, text=True, **kw)
        return r.stdout.strip() if r.returncode == 0 else None
    if (repo / ".git").exists():
        dirty = git("status", "--porcelain", "--", *files, cwd=repo)
        return {"commit": git("rev-parse", "HEAD", cwd=repo), "source": "checkout", "files_modified": dirty or None}
    if not git_dir:
        return {"commit": None, "source": "not a git checkout, and no --authors-git given"}
    head = git(f"--git-dir={git_dir}", "rev-parse", "HEAD")
    if head is None:
        raise HarnessError(f"--authors-git {git_dir}: not a git directory")
    tree = git(f"--git-dir={git_dir}", "ls-tree", "-r", "HEAD") or ""
    blobs = {line.split("\t")[1]: line.split()[2] for line in tree.splitlines()}
    def blob(p):
        data = (repo / p).read_bytes()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    differ = [f for f in files if blobs.get(f) != blob(f)]
    return {"commit": head, "source": f"--authors-git {git_dir}", "files_identical": not differ, "files_differ": differ}


def run_theirs(cmd, cwd, out, threads):
    """Their command, its output in OUT/stdout.txt, OUT/stderr.txt -> (return code, wall s, CPU s: a busy machine)"""
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env.update(PYTHONPATH=os.pathsep.join([str(cwd), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    print(f"running ({out}/stderr.txt): {' '.join(map(str, cmd))}", flush=True)
    t0, cpu0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out / "stdout.txt", "w") as so, open(out / "stderr.txt", "w") as se:
        rc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=so, stderr=se).returncode
    wall, cpu = time.time() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    if rc:
        tail = (out / "stderr.txt").read_text().strip().splitlines()[-3:]
        print(f"their run exited {rc}: " + " | ".join(tail), file=sys.stderr)
    return rc, round(wall, 1), round(cpu, 1)


def dicts(text, first_key):
    """The dicts their code prints (wandb_log without wandb prints them, utils.py:325-328) that start with first_key."""
    return [ast.literal_eval(m.group(0)) for m in re.finditer(r"\{'%s':[^{}]*\}" % first_key, text)]


def yaml_text(obj):
    return json.dumps(obj, indent=1) + "\n"  # JSON is YAML: yaml.safe_load reads it


def setup(a):
    venv, t0 = Path(a.venv), time.time()
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)]]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-8:])
            raise HarnessError(f"setup failed ({' '.join(cmd)} exited {r.returncode}):\n{tail}")
    pins = [ln for ln in REQUIREMENTS.read_text().splitlines() if ln and not ln.startswith("#")]
    write_json(venv / "reference-setup.json", {"requirements": pins, "wall_seconds": round(time.time() - t0, 1)})
    print(f"{venv}: {', '.join(pins)} ({time.time() - t0:.0f} s)")


def pretrain(a):
    repo, py = authors_repo(a.authors_repo, PRETRAIN_FILES), venv_python(a.venv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # their cli.py forwards only --config (cli.py:77), and a config value replaces only a flag left at its default
    # (utils.py:457): every change is in this file. num_workers: 4 loader processes only collate pre-made rows
    cfg = dict(task="dyck", seed=a.seed, max_steps=a.max_steps, save_every_steps=a.val_every,
               save_dir=str(out / "checkpoints"), num_workers=0, wandb_enable=False)
    (cfg_file := out / "dyck.yaml").write_text(yaml_text(cfg))
    rc, wall, cpu = run_theirs([py, "-m", "procedural_pretraining.cli", "--config", cfg_file], repo, out, a.threads)
    text = (out / "stdout.txt").read_text()
    train = [[d["global_step"] + 1, d["train_loss"], d["train_accuracy"]] for d in dicts(text, "train_loss")]
    val = [[d["global_step"], d["val_loss"], d["val_accuracy"]] for d in dicts(text, "val_loss")]
    folder = out / "checkpoints" / f"dyck-{DYCK['length']}-2_4_16-{a.max_steps}steps"  # utils.py:361-375
    files = sorted(p.name for p in folder.glob("*.pth")) if folder.is_dir() else []
    step = lambda f: int(re.search(r"step(\d+)", f).group(1))  # noqa: E731
    best, last = [f for f in files if f.startswith("best_")], sorted((f for f in files if f.startswith("py")), key=step)
    best_step = step(best[-1]) if best else None
    from data.procedural_entropy import entropy
    floor = entropy("dyck", **DYCK)
    summary = dict(
        command="pretrain", returncode=rc, wall_seconds=wall, cpu_seconds=cpu, threads=a.threads,
        authors=provenance(repo, PRETRAIN_FILES, a.authors_git), config_file=str(out / "dyck.yaml"), overrides=cfg,
        settings=dict(gpt2_size="2_4_16", vocab_size=2 * DYCK["k"] + 1, batch_size=64, lr=5e-5, lr_schedule="constant",
                      weight_decay=0.01, dropout=0.1, rows_per_epoch=64_000, **DYCK,
                      source="procedural_pretraining/dyck.py:437-507 defaults, utils.py:45 (dropout)"),
        steps=train[-1][0] if train else 0, train_curve={"columns": ["step", "loss", "token_accuracy"], "rows": train},
        val_curve={"columns": ["step", "loss", "token_accuracy"], "rows": val, "rows_in_val_set": 640},
        checkpoints=dict(folder=str(folder), files=files, best=str(folder / best[-1]) if best else None,
                         best_step=best_step, best_val_accuracy=next((v[2] for v in val if v[0] == best_step), None),
                         last=str(folder / last[-1]) if last else None,
                         rule="best_pytorch_model_*: best validation token accuracy (dyck.py:178-191); "
                              "pytorch_model_*: the last (dyck.py:196-206, 404-413); their README fine-tunes "
                              "from pytorch_model_* (README.md:56, 64)"),
        entropy=dict(nats_per_token=floor, source="data/procedural_entropy.py entropy('dyck', k=16, length=128, "
                     "p_open=0.5): mean over the 127 targets their loss counts (procedural_data/dyck.py:129-132)",
                     final_val_loss_above=val[-1][1] - floor if val else None,
                     final_train_loss_above=train[-1][1] - floor if train else None))
    write_json(out / "summary.json", summary)
    print(f"{out}/summary.json: {summary['steps']} steps in {wall:.0f} s; train loss {train[-1][1] if train else None}"
          f", val {val[-1][1:] if val else None} (loss, accuracy); entropy floor {floor:.4f}")
    return rc


def their_pretrained(path, out):
    """The checkpoint their fine-tuning loads: theirs as it is; one of ours (train.py's, with 'model_config')
    converted to their layout in OUT/pretrained-theirs.pth."""
    import torch
    if not Path(path).is_file():
        raise HarnessError(f"--pretrained {path}: no such file")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return Path(path).resolve(), "theirs"
    if not (isinstance(ck, dict) and "model_config" in ck):
        return Path(path).resolve(), "theirs"
    from reference.convert import ours_to_theirs
    dest = out / "pretrained-theirs.pth"
    torch.save({"model": ours_to_theirs(ck["model"], ck["model_config"])}, dest)
    return dest, "ours, converted by reference/convert.py"


def finetune(a):
    repo, py = authors_repo(a.authors_repo, FINETUNE_FILES), venv_python(a.venv)
    if a.config == "baseline" and (a.pretrained or a.transfer or a.embeddings):
        raise HarnessError("--config baseline trains from scratch: --pretrained, --transfer, --embeddings are for "
                           "--config procedural")
    if a.config == "procedural" and not a.pretrained:
        raise HarnessError("--config procedural needs --pretrained CKPT (theirs names set_model.pth)")
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    conf = f"downstream/algorithmic_tasks/configs/{a.config}.yaml"
    r = subprocess.run([py, "-c", "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
                        repo / conf], capture_output=True, text=True)
    if r.returncode:
        raise HarnessError(f"cannot read their {conf} with the venv's yaml: {r.stderr.strip()[-300:]}")
    cfg, origin = dict(json.loads(r.stdout), task=TASK, device="cpu"), None
    if a.seed is not None:
        cfg["seed"] = a.seed
    if a.pretrained:
        path, origin = their_pretrained(a.pretrained, out)
        cfg["pretrained_model_path"] = str(path)
        cfg.update({"weights_to_be_transferred": a.transfer.split(",")} if a.transfer else {},
                   **({"embedding_init_strategy": a.embeddings} if a.embeddings else {}))
    if a.steps:  # max_steps = train_steps * train_size // batch (experiment_stream.py:283): train_size = batch
        cfg.update(train_steps=a.steps, train_size=BATCH)
    (out / "finetune.yaml").write_text(yaml_text(cfg))
    # their script opens downstream/... and writes TASK/<random>/ below the current folder (experiment_stream.py:52,
    # 69, 74, 92-102, 260): it runs in OUT/work, where downstream is a link to theirs
    work = out / "work"  # on PYTHONPATH too (run_theirs), for `from downstream.utils import` (:13)
    work.mkdir(exist_ok=True)
    if not (work / "downstream").exists():
        (work / "downstream").symlink_to(repo / "downstream")
    script = repo / "downstream/algorithmic_tasks/experiment_stream.py"
    rc, wall, cpu = run_theirs([py, script, out / "finetune.yaml"], work, out, a.threads)
    states = sorted(work.glob(f"{TASK}/*/checkpoint-*/trainer_state.json"), key=lambda p: p.stat().st_mtime)
    state = json.loads(states[-1].read_text()) if states else {}
    log = state.get("log_history", [])
    evals = [e for e in log if METRIC in e]
    curve = dict(metric=METRIC, what="token accuracy at the answer position (the token after the query), 4,000 test "
                 "records (task_condattendstream.py:45-50)", steps=[e["step"] for e in evals],
                 accuracy=[e[METRIC] for e in evals], eval_loss=[e.get("eval_train_testA_loss") for e in evals])
    write_json(out / "curve.json", curve)
    end = (dicts((out / "stdout.txt").read_text(), "train_runtime") or [{}])[-1]  # logged after the last save
    summary = dict(command="finetune", returncode=rc, wall_seconds=wall, cpu_seconds=cpu, threads=a.threads,
                   authors=provenance(repo, FINETUNE_FILES + (conf,), a.authors_git), their_config=conf,
                   config_file=str(out / "finetune.yaml"), settings=cfg, pretrained_from=origin,
                   full_run_steps=250 * 40_000 // BATCH, steps=state.get("global_step"), curve=curve, final_train_loss=end.get("train_loss"),
                   their_train_runtime=end.get("train_runtime"),
                   trainer_state=str(states[-1]) if states else None,
                   note=None if not a.steps else "--steps sets max_steps, and their schedule follows it: 500 warm-up "
                   "steps, then cosine to 0 at max_steps (experiment_stream.py:27, 33): under 500, lr stays < 1e-3")
    write_json(out / "summary.json", summary)
    print(f"{out}/curve.json: accuracy {list(zip(curve['steps'], curve['accuracy']))} in {wall:.0f} s")
    return rc


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup", help="create a venv with reference/requirements.txt")
    s.add_argument("--venv", required=True, help="folder of the virtual environment to create")
    for name, text in (("pretrain", "their Dyck pre-training"), ("finetune", "their HAYSTACK fine-tuning")):
        c = sub.add_parser(name, help=text)
        c.add_argument("--authors-repo", required=True, help="their checkout (only read)")
        c.add_argument("--venv", required=True, help="the venv `setup` made")
        c.add_argument("--out", required=True, help="folder for the override YAML, their outputs, summary.json")
        c.add_argument("--authors-git", help="a git dir of theirs (e.g. a bare mirror): records its commit and "
                       "checks each file run against it")
        c.add_argument("--threads", type=int, default=1, help="torch threads (OMP_NUM_THREADS; default 1)")
    pre, fin = sub.choices["pretrain"], sub.choices["finetune"]
    pre.add_argument("--max-steps", type=int, default=1000, help="optimizer steps (theirs: up to 1,000,000)")
    pre.add_argument("--seed", type=int, default=42, help="their seed (default: theirs, 42)")
    pre.add_argument("--val-every", type=int, default=100, help="validation and checkpoint every N steps "
                     "(their save_every_steps, default 100)")
    fin.add_argument("--config", required=True, choices=("baseline", "procedural"), help="their configs/<name>.yaml")
    fin.add_argument("--pretrained", help="checkpoint to start from: theirs (.pth), or ours (converted)")
    fin.add_argument("--transfer", type=their_components, help="their weights_to_be_transferred, comma-separated "
                     "(their experiment_config.py:85-93): everything (default; with --embeddings), or of attn, ffn, embed: "
                     "attn,ffn is every block's attention and MLP, with fresh rows, positions and norms")
    fin.add_argument("--embeddings", choices=("average", "retain"), help="their embedding_init_strategy (default "
                     "average; retain needs the same vocabulary, 256)")
    fin.add_argument("--steps", type=int, help="optimizer steps of 1,000 records (theirs: 10,000)")
    fin.add_argument("--seed", type=int, help="their seed (default: the config's, baseline 42, procedural 0)")
    return p


def main(argv=None):
    a = parser().parse_args(argv)
    try:
        return {"setup": setup, "pretrain": pretrain, "finetune": finetune}[a.command](a) or 0
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
