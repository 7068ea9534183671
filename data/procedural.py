"""
Procedural pre-training data: algorithmic token sequences with a loss mask, and shuffled controls.
Jiang, Shinnick et al., "Procedural Pretraining: Warming Up Language Models with Abstract Data"
(arXiv 2601.21725), its procedural data types; layouts follow the authors' public code
(github.com/zlshinnick/procedural-pretraining, procedural_data/*.py), written anew with numpy.

`generate(kind, n, seed) -> (tokens, loss_mask)`, both (n, S): tokens uint16, mask uint8,
mask[i, j] = 1 iff token j of row i is a target whose loss counts. Layouts (defaults):

  sequence transforms (reference layout): data tokens 1..V-1 with V = 100, SEP = V, PAD = V+1,
  vocabulary V+2 = 102, input length L = 64; sequence = prompt + answer, where the answer is
  f(x) left-aligned in a fixed width of L tokens and PAD after a short answer. The loss covers
  the answer's tokens only: not the prompt, not the SEP, not the PADs after a short answer (the
  authors mask targets equal to PAD, e.g. procedural_data/set.py:103-107), and there is no end
  marker (the authors have none).
    identity, reverse, sort   x + SEP + f(x)                               S = 2L+1 = 129
    set                       x + SEP + first occurrences of x, in order    S = 2L+1 = 129
    union                     x1 + SEP + x2 + SEP + set(x1 + x2), |xi| = L/2 S = 2L+2 = 130
    delete  (delete.py)       x + SEP + r + SEP + x without the FIRST r     S = 2L+3 = 131
    stack   (stack.py)        ops + SEP + final stack, top first            S = 2L+1 = 129
  k-DYCK: openers 0..k-1, closers k..2k-1, PAD = 2k (vocabulary 2k+1), k = 16, loss on every
    token; S = `length`, default 128 (the authors' script for their 2_4_16 model; 2,048 for 12_12_768).
  k-DYCK SHUFFLE: the same tokens, k types each balanced on its own, total depth <= 16.
  eca110 (our layout): `rows` rows of a binary state of width w, cells 0/1, SEP = 2 between
    rows, PAD = 3 (vocabulary 4); row 0 random, row r+1 = Rule 110 of row r on a ring (periodic
    boundary); loss on the cells of rows 1.. (not row 0, not the SEPs). w = 16, rows = 7: S = 118.

`shuffled=True` is the paper's control (the authors' code has none): the same rows with their
non-PAD tokens permuted within each row; the loss mask stays where it was (on the answer span).
`mixture("dyck+stack", n, seed)` mixes kinds in one shared token space (see `mixture_layout`);
`load_procedural(spec, cache, ...)` is the loader for the stage `procedural:SPEC`.
The floor of each kind's val loss, its mean entropy per loss-counted token: data/procedural_entropy.py.

The generators loop over positions (stack, Dyck, CA rows), never over sequences.
"""

import hashlib
import sys

import numpy as np

from .common import Corpus

# The registry: kind -> its token family ("seq": x + SEP + f(x) in ids 0..V+1, "dyck": brackets, "eca":
# cells), which sets its options (DEFAULTS), its ids and its generator (a sequence kind's f is its entry of
# TRANSFORMS below; dyck, dyck_shuffle and eca110 have their own functions in _rows). To add a kind: one
# entry here, its transform in TRANSFORMS (a sequence kind), and a test; its rows are seeded by its name
# (stream_of), so no other kind's rows change wherever it goes in this dict.
KINDS = {"identity": "seq", "reverse": "seq", "sort": "seq", "set": "seq", "union": "seq", "delete": "seq",
         "stack": "seq", "dyck": "dyck", "dyck_shuffle": "dyck", "eca110": "eca"}
FAMILIES = ("seq", "dyck", "eca")          # token families, in the order of the shared space
FAMILY_DEFAULTS = {
    "seq": dict(L=64, V=100),
    # Dyck: k = 16 types in rows of 128 tokens with p_open 0.5, the defaults of the authors' script for
    # their 2_4_16 diagnostic model (procedural_pretraining/dyck.py:471-480; their yaml's k = 64 with
    # 2,048-token rows is for 12_12_768); p_open 0.5 overrides the generator's own 0.49
    # (procedural_data/dyck.py:27)
    "dyck": dict(k=16, length=128, p_open=0.5),
    "eca": dict(width=16, rows=7)}
OWN_DEFAULTS = {"dyck_shuffle": dict(k=16, length=128, p_open=0.5, max_depth=16)}  # dyck_shuffle.py:27-28


class _Defaults(dict):
    """DEFAULTS[kind]: a kind's options, its family's unless it has its own (looked up live, so a kind
    added to KINDS has them at once)."""

    def __missing__(self, kind):
        return OWN_DEFAULTS.get(kind) or FAMILY_DEFAULTS[KINDS[kind]]


DEFAULTS = _Defaults()
# The number each of the first ten kinds' rows were seeded by: their place in the tuple KINDS was then.
# Frozen, so that their rows (and every committed report made from them) stay as they were.
FIRST_STREAMS = {k: i for i, k in enumerate(("identity", "reverse", "sort", "set", "union", "delete", "stack",
                                             "dyck", "dyck_shuffle", "eca110"))}


def stream_of(kind):
    """The number a kind's rows are seeded by (with the seed): FIRST_STREAMS for the first ten kinds, else
    from the kind's name (sha256), never from its place in KINDS."""
    if kind in FIRST_STREAMS:
        return FIRST_STREAMS[kind]
    return int.from_bytes(hashlib.sha256(kind.encode()).digest()[:4], "little") + len(FIRST_STREAMS)


def seq_kinds():
    """The kinds of the reference layout x + SEP + f(x), in registry order."""
    return tuple(k for k, f in KINDS.items() if f == "seq")


SHUFFLED = "-shuffled"
DEFAULT_SEQUENCES = 20_000


def family(kind):
    return KINDS[kind]


def _options(kind, options, strict=True):
    unknown = set(options) - set(DEFAULTS[kind])
    if strict and unknown:
        raise ValueError(f"options {sorted(unknown)} do not apply to {kind!r}; it takes {sorted(DEFAULTS[kind])}")
    return {**DEFAULTS[kind], **{k: v for k, v in options.items() if k in DEFAULTS[kind]}}


def _n_ids(kind, o):
    """How many non-PAD ids a kind uses (its PAD is this number)."""
    return {"seq": lambda: o["V"] + 1, "dyck": lambda: 2 * o["k"], "eca": lambda: 3}[family(kind)]()


def vocab_size(kind, **options):
    """Vocabulary of one kind: V+2 (sequence kinds), 2k+1 (Dyck), 4 (eca110)."""
    return _n_ids(_check_kind(kind), _options(kind, options)) + 1


def seq_len(kind, **options):
    """S, the fixed length of every row of a kind."""
    o = _options(_check_kind(kind), options)
    if family(kind) == "seq":  # the prompt's width, read off one row of its transform, + the answer's L
        return TRANSFORMS[kind](np.random.default_rng(0), 1, o["L"], o["V"])[0].shape[1] + o["L"]
    if family(kind) == "dyck":
        return o["length"]
    return o["rows"] * (o["width"] + 1) - 1


def _check_kind(kind):
    if kind not in KINDS:
        raise ValueError(f"unknown procedural kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    if KINDS[kind] == "seq" and kind not in TRANSFORMS:
        raise ValueError(f"procedural kind {kind!r} is a sequence kind with no transform: add its function "
                         "to data.procedural.TRANSFORMS")
    return kind


# ----------------------------------------------------------------------------------------------
# sequence transforms: prompt (n, P) ending in SEP, answer (n, L) padded with PAD

def _compact(x, keep, pad):
    """The kept tokens of each row, in order, left-aligned; PAD after."""
    order = np.argsort(~keep, axis=1, kind="stable")
    out = np.take_along_axis(x, order, axis=1)
    out[np.arange(x.shape[1]) >= keep.sum(1, keepdims=True)] = pad
    return out


def _first_occurrences(x, pad):
    """SET: every token's first occurrence, in order of appearance (procedural_data/set.py:76-81)."""
    order = np.argsort(x, axis=1, kind="stable")          # equal tokens: the earliest first
    xs = np.take_along_axis(x, order, axis=1)
    first_sorted = np.ones(x.shape, bool)
    first_sorted[:, 1:] = xs[:, 1:] != xs[:, :-1]
    first = np.empty_like(first_sorted)
    np.put_along_axis(first, order, first_sorted, axis=1)
    return _compact(x, first, pad)


def _stack_program(rng, n, L, V):
    """STACK, following procedural_data/stack.py:79-125: L ops, push v (v in 1..V-1, a token not
    already on the stack, uniform) or pop (0). A stack of <= 1 item always pushes, so a pop never
    meets an empty stack and the answer is never empty; otherwise push with p 0.75 in the first
    int(2L/3) steps and with p 0.25 after; the last step pops if the stack holds > 1 item; a push
    with no free token pops instead. Returns ops (n, L) and the final stack top first (n, L)."""
    rows = np.arange(n)
    ops = np.zeros((n, L), np.int64)
    stack = np.zeros((n, L), np.int64)
    depth = np.zeros(n, np.int64)
    on_stack = np.zeros((n, V), bool)
    for t in range(L):
        p_push = 0.75 if t < int(L * 2 / 3) else 0.25
        push = (depth <= 1) | ((rng.random(n) < p_push) & (t < L - 1))
        push &= depth < V - 1
        tok = rng.integers(1, V, n)
        redo = push & on_stack[rows, tok]
        while redo.any():                                  # rejection: uniform over free tokens
            tok[redo] = rng.integers(1, V, int(redo.sum()))
            redo = push & on_stack[rows, tok]
        p, q = rows[push], rows[~push]
        stack[p, depth[p]] = tok[p]
        on_stack[p, tok[p]] = True
        ops[p, t] = tok[p]
        on_stack[q, stack[q, depth[q] - 1]] = False        # ops[q, t] stays 0 = pop
        depth += np.where(push, 1, -1)
    idx = depth[:, None] - 1 - np.arange(L)
    top_first = np.take_along_axis(stack, np.maximum(idx, 0), axis=1)
    top_first[idx < 0] = V + 1
    return ops, top_first


# Each sequence transform: (rng, n, L, V) -> (prompt (n, P) ending in SEP = V, answer (n, L), PAD = V+1
# after a short one). It draws its own random input, so each keeps the order of its draws.
def _col(n, v):
    return np.full((n, 1), v, np.int64)


def _identity(rng, n, L, V):
    x = rng.integers(1, V, (n, L))
    return np.hstack([x, _col(n, V)]), x


def _reverse(rng, n, L, V):
    x = rng.integers(1, V, (n, L))
    return np.hstack([x, _col(n, V)]), x[:, ::-1]


def _sort(rng, n, L, V):
    x = rng.integers(1, V, (n, L))
    return np.hstack([x, _col(n, V)]), np.sort(x, axis=1)


def _set(rng, n, L, V):
    x = rng.integers(1, V, (n, L))
    return np.hstack([x, _col(n, V)]), _first_occurrences(x, V + 1)


def _union(rng, n, L, V):
    """procedural_data/union.py:73-95: two inputs of L/2, the answer the set of both."""
    if L % 2:
        raise ValueError(f"union needs an even L (two inputs of L/2), got L={L}")
    x = rng.integers(1, V, (n, L))
    x1, x2 = x[:, :L // 2], x[:, L // 2:]
    return np.hstack([x1, _col(n, V), x2, _col(n, V)]), _first_occurrences(x, V + 1)


def _delete(rng, n, L, V):
    """procedural_data/delete.py:73-94: r is drawn uniformly from 1..V-1, independently of x, so r
    occurs in x in a share 1 - (1 - 1/(V-1))**L of rows (47.8% for V=100, L=64); when it does not,
    the answer is x itself."""
    x = rng.integers(1, V, (n, L))
    r = rng.integers(1, V, n)
    hit = x == r[:, None]
    first_hit = hit & (np.cumsum(hit, axis=1) == 1)
    return np.hstack([x, _col(n, V), r[:, None], _col(n, V)]), _compact(x, ~first_hit, V + 1)


def _stack(rng, n, L, V):
    ops, answer = _stack_program(rng, n, L, V)
    return np.hstack([ops, _col(n, V)]), answer


TRANSFORMS = {"identity": _identity, "reverse": _reverse, "sort": _sort, "set": _set, "union": _union,
              "delete": _delete, "stack": _stack}


# ----------------------------------------------------------------------------------------------
# formal languages and the cellular automaton

def _dyck(rng, n, k, length, p_open):
    """k-DYCK, following procedural_data/dyck.py:40-71: an empty stack opens; a bracket opens with
    p_open only while there is room to close everything before the end (depth+1 <= remaining-1);
    otherwise the most recent open bracket closes, so the row ends balanced and nested."""
    if length % 2:
        raise ValueError(f"a balanced Dyck row needs an even length, got {length}")
    rows, tokens = np.arange(n), np.zeros((n, length), np.int64)
    stack, depth = np.zeros((n, length // 2 + 1), np.int64), np.zeros(n, np.int64)
    for t in range(length):
        remaining = length - t
        opens = (depth + 1 <= remaining - 1) & ((depth == 0) | (rng.random(n) < p_open))
        typ = rng.integers(0, k, n)
        o, c = rows[opens], rows[~opens]
        tokens[o, t] = stack[o, depth[o]] = typ[o]
        tokens[c, t] = stack[c, depth[c] - 1] + k
        depth += np.where(opens, 1, -1)
    return tokens


def _dyck_shuffle(rng, n, k, length, p_open, max_depth):
    """k-DYCK SHUFFLE, following procedural_data/dyck_shuffle.py:42-75: k bracket types, each
    balanced on its own, interleaved; depth 0 opens, total depth max_depth closes, otherwise open
    with p_open; a close picks a type uniformly among the OPEN types (not the most recent), so
    no prefix closes a type that is not open. One change: like Dyck, a bracket opens only while
    there is room to close everything, so each row ends with every type balanced (the authors'
    2048-token rows stop wherever they are)."""
    if length % 2:
        raise ValueError(f"a balanced Dyck-shuffle row needs an even length, got {length}")
    rows, tokens = np.arange(n), np.zeros((n, length), np.int64)
    count = np.zeros((n, k), np.int64)                     # open brackets per type
    open_types = np.zeros((n, min(k, max_depth)), np.int64)  # the distinct open types, unordered
    n_types, depth = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for t in range(length):
        remaining = length - t
        opens = (depth + 1 <= remaining - 1) & (depth < max_depth) & ((depth == 0) | (rng.random(n) < p_open))
        o, c = rows[opens], rows[~opens]
        typ = rng.integers(0, k, n)[o]
        new = count[o, typ] == 0
        open_types[o[new], n_types[o[new]]] = typ[new]
        n_types[o[new]] += 1
        count[o, typ] += 1
        slot = (rng.random(len(c)) * n_types[c]).astype(np.int64)   # a uniform open type
        typ_c = open_types[c, slot]
        count[c, typ_c] -= 1
        gone = count[c, typ_c] == 0                        # its last bracket: drop the type
        cg = c[gone]
        open_types[cg, slot[gone]] = open_types[cg, n_types[cg] - 1]
        n_types[cg] -= 1
        tokens[o, t], tokens[c, t] = typ, typ_c + k
        depth += np.where(opens, 1, -1)
    return tokens


def _eca110(rng, n, width, rows):
    return _eca110_rollout(rng.integers(0, 2, (n, width)), rows)


def _eca110_rollout(state, rows):
    """Rule 110 rows on a ring from the first rows STATE: new[i] = bit (4*old[i-1] + 2*old[i] + old[i+1]) of 110."""
    out = [state]
    for _ in range(rows - 1):
        state = (110 >> (4 * np.roll(state, 1, axis=1) + 2 * state + np.roll(state, -1, axis=1))) & 1
        out.append(state)
    return out


def _rows(kind, n, entropy, shuffled, o):
    """(tokens int64, mask uint8) of one kind in its own token ids."""
    rng = np.random.default_rng([*entropy, stream_of(kind)])
    if family(kind) == "seq":
        prompt, answer = TRANSFORMS[kind](rng, n, o["L"], o["V"])
        tokens = np.hstack([prompt, answer])
        mask = np.zeros(tokens.shape, np.uint8)
        mask[:, prompt.shape[1]:] = answer != o["V"] + 1
    elif family(kind) == "dyck":
        tokens = (_dyck(rng, n, o["k"], o["length"], o["p_open"]) if kind == "dyck" else
                  _dyck_shuffle(rng, n, o["k"], o["length"], o["p_open"], o["max_depth"]))
        mask = np.ones(tokens.shape, np.uint8)             # mask[:, 0] is never a target anyway
    else:
        w, state_rows = o["width"], _eca110(rng, n, o["width"], o["rows"])
        sep = np.full((n, 1), 2, np.int64)
        tokens = np.hstack([p for r in state_rows for p in (r, sep)][:-1])
        mask = np.ones(tokens.shape, np.uint8)
        mask[:, :w + 1] = 0                                 # row 0 is given
        mask[:, w::w + 1] = 0                               # the SEPs
    if shuffled:
        tokens = shuffle_rows(tokens, _n_ids(kind, o), np.random.default_rng([*entropy, stream_of(kind), 1]))
    return tokens, mask


def shuffle_rows(tokens, pad, rng):
    """The shuffled control: each row's non-PAD tokens permuted among its non-PAD positions."""
    is_pad = tokens == pad
    keys = np.where(is_pad, np.float32(2), rng.random(tokens.shape, dtype=np.float32))
    src = np.argsort(keys, axis=1)                          # non-PAD in random order, PAD last
    dst = np.argsort(is_pad, axis=1, kind="stable")         # non-PAD positions in order, PAD last
    out = np.empty_like(tokens)
    np.put_along_axis(out, dst, np.take_along_axis(tokens, src, axis=1), axis=1)
    return out


def _entropy(seed):
    return [int(s) for s in seed] if isinstance(seed, (tuple, list)) else [int(seed)]


def generate(kind, n, seed=0, shuffled=False, **options):
    """n rows of one kind: (tokens uint16 (n, S), loss_mask uint8 (n, S)), deterministic in
    (kind, n, seed, options). seed: an int or a tuple of ints. Options (defaults in DEFAULTS):
    L, V (sequence kinds); k, length, p_open, max_depth (Dyck); width, rows (eca110)."""
    o = _options(_check_kind(kind), options)
    tokens, mask = _rows(kind, n, _entropy(seed), shuffled, o)
    return tokens.astype(np.uint16), mask


# ----------------------------------------------------------------------------------------------
# mixtures in one shared token space

def parse(kinds):
    """[(kind, shuffled)] from "a+b-shuffled", "shuffled:a+b" (all shuffled) or a list of names."""
    all_shuffled = isinstance(kinds, str) and kinds.startswith("shuffled:")
    names = kinds[len("shuffled:"):].split("+") if isinstance(kinds, str) and all_shuffled else \
        kinds.split("+") if isinstance(kinds, str) else list(kinds)
    parts = []
    for name in names:
        if isinstance(name, tuple):                        # already parsed: (kind, shuffled)
            name = name[0] + (SHUFFLED if name[1] else "")
        shuf = name.endswith(SHUFFLED)
        base = name[:-len(SHUFFLED)] if shuf else name
        if base not in KINDS:
            raise ValueError(f"unknown procedural kind {base!r} in {kinds!r}; valid kinds: {', '.join(KINDS)} "
                             f"(join with '+', add '{SHUFFLED}' to a name for its shuffled control, "
                             "or prefix 'shuffled:' to shuffle all)")
        parts.append((base, shuf or all_shuffled))
    return parts


def check_spec(spec):
    """The parsed spec of a stage `procedural:SPEC`, or a ValueError listing the valid kinds."""
    if not spec or not isinstance(spec, str):
        raise ValueError(f"empty procedural spec; valid kinds: {', '.join(KINDS)}")
    return parse(spec)


def mixture_layout(kinds, **options):
    """The shared token space of a mixture. Each token family keeps its own ids, shifted by an
    offset, in the fixed order seq, dyck, eca over the families present: sequence kinds 0..V
    (0 = stack pop, V = SEP), then Dyck brackets (dyck and dyck_shuffle share them), then CA
    cells and their SEP; the one shared PAD is the last id. A single family keeps its own ids
    and PAD, so a one-kind mixture uses the kind's own vocabulary. Returns dict(vocab_size, pad,
    offset={kind: offset}, seq_len=max S)."""
    parts = parse(kinds)
    opts = {k: _options(k, options, strict=False) for k, _ in parts}
    n_ids = {}
    for k, _ in parts:
        n_ids[family(k)] = max(n_ids.get(family(k), 0), _n_ids(k, opts[k]))
    start, offset = 0, {}
    for f in FAMILIES:
        if f in n_ids:
            offset[f], start = start, start + n_ids[f]
    return dict(vocab_size=start + 1, pad=start, offset={k: offset[family(k)] for k, _ in parts},
                seq_len=max(seq_len(k, **opts[k]) for k, _ in parts))


def mixture(kinds, n, seed=0, shuffled=False, **options):
    """n rows mixing several kinds ("dyck+stack", or a list of names, each may end in
    '-shuffled'; shuffled=True shuffles all) in the shared space of `mixture_layout`, all padded
    to the longest S with the shared PAD (mask 0). Each kind gets an equal share of the rows
    (the first kinds one more when n does not divide), interleaved by a seeded permutation.
    Returns (tokens uint16 (n, S), mask uint8 (n, S), which (n,): index of each row's kind)."""
    parts = parse(kinds)
    known = set().union(*(DEFAULTS[k] for k, _ in parts))
    if set(options) - known:
        raise ValueError(f"options {sorted(set(options) - known)} apply to none of {[k for k, _ in parts]}")
    lay, ent = mixture_layout(kinds, **options), _entropy(seed)
    which = np.random.default_rng([*ent, 999]).permutation(np.arange(n) % len(parts)).astype(np.int16)
    tokens = np.full((n, lay["seq_len"]), lay["pad"], np.uint16)
    mask = np.zeros((n, lay["seq_len"]), np.uint8)
    for i, (kind, shuf) in enumerate(parts):
        o = _options(kind, options, strict=False)
        t, m = _rows(kind, int((which == i).sum()), [*ent, 1000 + i], shuf or shuffled, o)
        t = np.where(t == _n_ids(kind, o), lay["pad"], t + lay["offset"][kind])
        tokens[which == i, :t.shape[1]], mask[which == i, :t.shape[1]] = t, m
    return tokens, mask, which


def decode(ids, kinds="identity", **options):
    """Token ids of a mixture's shared space (or one kind's) -> a readable string: data tokens
    as numbers, '|' SEP, 'pop' a stack pop, '(7' and '7)' Dyck brackets, '0'/'1' cells, '_' PAD."""
    lay, words = mixture_layout(kinds, **options), []
    ranges = sorted(((off, k) for k, off in lay["offset"].items()), reverse=True)
    for i in np.asarray(ids).reshape(-1).tolist():
        if i >= lay["pad"]:
            words.append("_")
            continue
        off, kind = next((off, k) for off, k in ranges if i >= off)
        j, o = i - off, _options(kind, options, strict=False)
        if family(kind) == "seq":
            words.append("|" if j == o["V"] else "pop" if j == 0 else str(j))
        elif family(kind) == "dyck":
            words.append(f"({j}" if j < o["k"] else f"{j - o['k']})")
        else:
            words.append("|" if j == 2 else str(j))
    return " ".join(words)


# ----------------------------------------------------------------------------------------------
# the loader for the stage `procedural:SPEC`

def fit_options(kinds, block_size):
    """Options that make every row fit a model context of block_size (S <= block_size + 1):
    Dyck rows fill it (the largest even length), eca110 takes as many rows of width 16 as fit,
    and the sequence kinds keep the paper's L = 64 when it fits, else the largest even L that
    does (said on stderr: e.g. union and delete need block_size 129 and 130 for L = 64)."""
    parts, cap, opts = parse(kinds), block_size + 1, {}
    fams = {family(k) for k, _ in parts}
    if "dyck" in fams:
        opts["length"] = cap - cap % 2
    if "eca" in fams:
        opts["rows"] = (cap + 1) // (DEFAULTS["eca110"]["width"] + 1)
        if opts["rows"] < 2:
            raise ValueError(f"block_size {block_size} is too small for two Rule 110 rows of width 16")
    seq = [k for k, _ in parts if family(k) == "seq"]
    if seq:
        L = DEFAULTS["identity"]["L"]
        while L > 2 and max(seq_len(k, L=L) for k in seq) > cap:
            L -= 2
        if max(seq_len(k, L=L) for k in seq) > cap:
            raise ValueError(f"block_size {block_size} is too small for {seq}")
        if L < DEFAULTS["identity"]["L"]:
            print(f"[data] procedural {'+'.join(seq)}: input length L={L} so that a row fits "
                  f"block_size {block_size} (the paper's L=64 needs block_size "
                  f"{max(seq_len(k) for k in seq) - 1})", file=sys.stderr)
        opts["L"] = L
    return opts


def drop_seen(rows, seen):
    """A boolean per row of `rows`: True where the row (all its tokens) is not a row of `seen`."""
    def keys(a):
        a = np.ascontiguousarray(a)
        return a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()
    return ~np.isin(keys(rows), keys(seen))


def load_procedural(spec, cache=None, seed=0, block_size=128, procedural_sequences=None, procedural_vocab=None, **_):
    """Corpus for the stage `procedural:SPEC`. SPEC is a kind (`dyck`), a mixture (`dyck+stack`),
    a name with '-shuffled' for its control (`dyck-shuffled`, `dyck+stack-shuffled` shuffles
    stack only) or 'shuffled:' before a mixture to shuffle all (`shuffled:dyck+stack`).
    procedural_sequences training rows (default 20,000) from seed (seed, 0); validation rows
    (5%, at least 200) from seed (seed, 1), with any row that also appears in train dropped.
    Rows are sized by fit_options(block_size); the sequence kinds' V is procedural_vocab (default
    DEFAULTS'). Generation takes well under a second, so the arrays live in memory and nothing is
    cached (`cache` is unused). train/val are the rows flattened (record after record,
    info["seq_len"] = S tokens each), masks likewise."""
    parts = check_spec(spec)
    opts = fit_options(parts, block_size)
    if procedural_vocab and "L" in opts:
        opts["V"] = int(procedural_vocab)
    n_train = int(procedural_sequences or DEFAULT_SEQUENCES)
    n_val = max(200, round(0.05 * n_train))
    train, train_mask, _ = mixture(parts, n_train, (seed, 0), **opts)
    val, val_mask, _ = mixture(parts, 2 * n_val, (seed, 1), **opts)
    fresh = drop_seen(val, train)
    val, val_mask = val[fresh][:n_val], val_mask[fresh][:n_val]
    if len(val) == 0:
        raise ValueError(f"procedural:{spec}: every validation row also occurs in train")
    lay = mixture_layout(parts, **opts)
    info = dict(seq_len=lay["seq_len"], kind=spec, tokenizer=f"procedural-{lay['vocab_size']}",
                kinds=[k + (SHUFFLED if s else "") for k, s in parts], options=opts, pad=lay["pad"],
                offset=lay["offset"], train_sequences=n_train, val_sequences=len(val),
                source="generated, arXiv 2601.21725 layouts")
    return Corpus(name=f"procedural:{spec}", vocab_size=lay["vocab_size"],
                  train=train.reshape(-1), val=val.reshape(-1),
                  decode=lambda ids: decode(ids, parts, **opts),
                  train_mask=train_mask.reshape(-1), val_mask=val_mask.reshape(-1), info=info)
