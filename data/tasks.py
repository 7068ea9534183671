"""
Diagnostic tasks with exact-answer accuracy: haystack, (reversed) addition, multiplication, sorting.
Jiang, Shinnick et al., arXiv 2601.21725, the algorithmic diagnostics (authors' code:
downstream/algorithmic_tasks/task_*.py of github.com/zlshinnick/procedural-pretraining), in
numpy, in two versions:

  task:NAME    ours: one shared 174-token vocabulary, a fixed training set of 40,000 records, the
               loss on the whole answer span (the earlier default of experiments/procedural.py);
  stream:NAME  the authors': their token layout per task, their loss positions, and a fresh
               stream of training records that never yields a test record (section "the
               authors' diagnostics" below).

--- task:NAME, our layout ---

Every record is prompt + answer, PAD-padded to a fixed length S; the loss mask covers the
answer span only (the authors too train on answers only; how their span differs, below).
Vocabulary (174 ids): digits 0-9 = ids 0-9, '+' 10, '*' 11, '=' 12, ',' 13, '?' 14,
END '$' 15, PAD '_' 16, keys k0..k29 = 17..46, values v1..v127 = 47..173.
  haystack           k v k v ... ? k -> v            1..30 pairs (distinct keys), S = 63;
                     as task_condattendstream.py:22-35 (30 keys, values 1..127, answer = the
                     queried key's value, no END), with '?' + key instead of a query-key alphabet
  addition           12345+54321= -> 66666$          5-digit operands, S = 19 (forwardaddition_5)
  reversed_addition  54321+12345= -> 66666$          operands and sum least-significant digit
                     first, 10-digit operands, S = 34 (the authors' additionstream_10)
  multiplication     12345*54321= -> 670592745$      5 x 5 digits, S = 23 (multiplication_5)
  sorting            07,42,07,...= -> 07,07,42,...$  8 two-digit numbers (ours: the authors'
                     code has no sorting task), S = 48

Operands have exactly `digits` digits (no leading zero) as in the authors' drawnum(); results
are written without leading zeros. The END token is part of the answer (the authors train on
their stop token too), so an exact answer also knows where it stops. Train and test records
come from different seeds, and every test record that also occurs in train is dropped.

Exact-answer accuracy: `answer_accuracy(pred, targets, mask)` takes the model's argmax
predictions with the true prefix fed (teacher forcing). It equals greedy decoding of the
answer span: if every earlier answer token was predicted right, the greedy prefix IS the true
prefix, so greedy and teacher-forced argmax agree up to the first wrong token; a record is
exact under greedy decoding iff every teacher-forced argmax on its (contiguous) span is right.
`greedy_decode_accuracy` decodes token by token, as the slow reference.

Loss and accuracy, ours against the authors' task files (task_forwardaddition.py:59-80,
task_additionstream.py:56-77, task_multiplication.py:58-86, task_condattendstream.py:45-66):
  - theirs is token-level, shifted by one: their CustomTrainer.compute_loss and compute_metrics
    score the prediction made at every position whose INPUT token is an answer token
    (`wanted = labels[..., :-1] >= 20`: the result digits 20-29 and the stop 30; haystack: the
    query token) against the next token (`labels[..., 1:]`); the loss is the mean cross-entropy
    over those positions and the accuracy the share of them predicted right, pooled over the
    eval set (np.sum(corr) / np.sum(wanted)). For the arithmetic tasks the shift leaves the
    first answer digit (predicted at '=') out of both, and puts the PAD after the stop in.
  - ours: the mask is on the answer's TARGETS, every answer token and END, each predicted from
    the position before it (the first digit from '='), nothing after END; the loss is the mean
    cross-entropy over them (token-level as theirs, over that span), and the accuracy reported is
    exact-answer, one 0/1 score per record: right only if every answer token is. A record with
    some digits wrong counts 0 here and partly there, so ours is the stricter score (usually well
    below theirs for multi-digit answers); the two are not convertible into each other.
  - haystack has one answer token, the value after the query key, in both: there the two
    spans and the two accuracies coincide.

--- stream:NAME, the authors' version (experiment_stream.py + task_*.py) ---

Layouts, one vocabulary per task as their files (their record length S, PAD included):
  haystack           condattendstream_30 (task_condattendstream.py:1-35): vocabulary 256; 1..30
                     pairs (random.randint(1, 30)), keys = a permutation of 0..29 written as
                     128 + key, values 1..127, then the query key in its own range (158 + key),
                     then the answer value; PAD 0 up to S = 63
  addition           forwardaddition_5 (task_forwardaddition.py:26-49): vocabulary 31; operand
                     digits 0-9, '+' 10, '=' 11, PAD 12, result digits 20-29, stop 30; 5-digit
                     operands; S = 3*5 + 4 = 19
  reversed_addition  additionstream_10 (task_additionstream.py:25-46): the same ids, operands and
                     result least-significant digit first, 10-digit operands, S = 34
  multiplication     multiplication_5 (task_multiplication.py:24-48): '*' 10, 5 x 5 digits,
                     S = 5*5 + 4 = 29 (their padding; the longest record has 23 tokens)
  sorting            ours (the authors have no sorting task), written in their arithmetic
                     convention so their metric applies: 8 two-digit numbers, digits 0-9, ',' 10,
                     '=' 11, PAD 12; the sorted list with digits 20-29, ',' 31, stop 30; S = 48
Loss and accuracy as theirs (compute_loss / compute_metrics of each task file, e.g.
task_forwardaddition.py:59-80): the positions whose INPUT token is an answer token (ids >= 20;
haystack: the query token, ids >= 158) predict the next token; the loss is the mean cross-entropy
over those positions of a batch, their accuracy the share of them predicted right, pooled over
the test set (`token_accuracy`). The corpus's loss mask is exactly that set, moved onto the
targets. Our exact-answer accuracy beside it (`answer_span`): every answer token right, the
first one (predicted at '=', which their loss and metric leave out) included, each from the
true prefix (= greedy decoding, below). Haystack has one answer token: the two coincide.
Data as theirs (experiment_stream.py:76-85, 176-191): a fixed test set of 4,000 records drawn
once (their eval_size), and a training stream from the same generator that skips every record
equal to a test record. Ours draws each step's records from that step's seed (`stream_records`),
so a resumed run sees the same records, and the test set from --data-seed alone, so every model
seed is scored on the same 4,000 records (theirs draw it from the run's seed).
"""

import numpy as np

from .common import Corpus
from .procedural import drop_seen

TASKS = ("haystack", "addition", "reversed_addition", "multiplication", "sorting")
PLUS, TIMES, EQ, COMMA, QUERY, END, PAD = range(10, 17)
N_KEYS, N_VALUES = 30, 127
KEY0, VAL0 = 17, 17 + N_KEYS
VOCAB = VAL0 + N_VALUES                      # 174
DEFAULTS = {"haystack": dict(pairs=N_KEYS), "addition": dict(digits=5), "reversed_addition": dict(digits=10),
            "multiplication": dict(digits=5), "sorting": dict(items=8)}
TRAIN, TEST = 40_000, 4_000                  # the authors' train_size / eval_size


def check_task(name):
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return name


def _digits(x, width):
    """(n, width) decimal digits of x, most significant first, zero-padded."""
    return (x[:, None] // 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)) % 10


def _number(x, width, reverse=False):
    """x written without leading zeros (least significant first if reverse), then END, then
    PAD, in width + 1 columns."""
    n_digits = 1 + sum((x >= 10 ** j).astype(np.int64) for j in range(1, width))
    d = _digits(x, width)
    d = d[:, ::-1] if reverse else np.take_along_axis(
        d, np.minimum(np.arange(width) + (width - n_digits)[:, None], width - 1), axis=1)
    out = np.full((len(x), width + 1), PAD, np.int64)
    cols = np.arange(width + 1)
    out[cols < n_digits[:, None]] = d[cols[:width] < n_digits[:, None]]
    out[np.arange(len(x)), n_digits] = END
    return out


def _arithmetic(rng, n, digits, op):
    if digits > (9 if op == "*" else 17):
        raise ValueError(f"{digits}-digit operands overflow int64")
    a, b = (rng.integers(10 ** (digits - 1), 10 ** digits, n) for _ in range(2))
    rev = op == "r+"
    res, width = (a * b, 2 * digits) if op == "*" else (a + b, digits + 1)
    da, db = (_digits(v, digits)[:, ::-1] if rev else _digits(v, digits) for v in (a, b))
    col = lambda v: np.full((n, 1), v, np.int64)
    prompt = np.hstack([da, col(TIMES if op == "*" else PLUS), db, col(EQ)])
    return prompt, _number(res, width, rev)


def _haystack(rng, n, pairs):
    """1..pairs key/value pairs, distinct keys, a query '?' + one of the keys, answer its value."""
    m = rng.integers(1, pairs + 1, n)                        # how many pairs
    keys = np.argsort(rng.random((n, N_KEYS)), axis=1)[:, :pairs]
    values = rng.integers(1, N_VALUES + 1, (n, pairs))
    q = (rng.random(n) * m).astype(np.int64)                 # which pair is asked
    rows = np.arange(n)
    rec = np.full((n, 2 * pairs + 3), PAD, np.int64)
    rec[:, 0:2 * pairs:2], rec[:, 1:2 * pairs:2] = KEY0 + keys, VAL0 - 1 + values
    rec[np.arange(2 * pairs + 3) >= 2 * m[:, None]] = PAD
    rec[rows, 2 * m], rec[rows, 2 * m + 1] = QUERY, KEY0 + keys[rows, q]
    rec[rows, 2 * m + 2] = VAL0 - 1 + values[rows, q]
    mask = np.zeros(rec.shape, np.uint8)
    mask[rows, 2 * m + 2] = 1
    return rec, mask


def _sorting(rng, n, items):
    """items two-digit numbers (00..99) separated by ',', then '=', then the same sorted, END."""
    x = rng.integers(0, 100, (n, items))

    def listing(v):
        d = np.stack([v // 10, v % 10, np.full_like(v, COMMA)], axis=2).reshape(n, 3 * items)
        return d[:, :-1]
    return np.hstack([listing(x), np.full((n, 1), EQ)]), np.hstack([listing(np.sort(x, 1)), np.full((n, 1), END)])


def generate_task(name, n, seed=0, **options):
    """n records of a task: (tokens uint16 (n, S), loss_mask uint8 (n, S)), the mask 1 on the
    answer span (END included), deterministic in (name, n, seed, options). Options: pairs
    (haystack), digits (the arithmetic tasks), items (sorting)."""
    o = {**DEFAULTS[check_task(name)], **options}
    if set(o) != set(DEFAULTS[name]):
        raise ValueError(f"{name} takes the options {sorted(DEFAULTS[name])}, not {sorted(set(o) - set(DEFAULTS[name]))}")
    seed = [int(s) for s in seed] if isinstance(seed, (tuple, list)) else [int(seed)]
    rng = np.random.default_rng([*seed, TASKS.index(name)])
    if name == "haystack":
        tokens, mask = _haystack(rng, n, o["pairs"])
    else:
        prompt, answer = (_sorting(rng, n, o["items"]) if name == "sorting" else
                          _arithmetic(rng, n, o["digits"], {"addition": "+", "reversed_addition": "r+",
                                                            "multiplication": "*"}[name]))
        tokens = np.hstack([prompt, answer])
        mask = np.zeros(tokens.shape, np.uint8)
        mask[:, prompt.shape[1]:] = answer != PAD
    return tokens.astype(np.uint16), mask


def task_split(name, seed=0, n_train=TRAIN, n_test=TEST, **options):
    """The fixed split: train from seed (seed, 0), test from (seed, 1) minus every record that
    also occurs in train. Returns train_tokens, train_mask, test_tokens, test_mask."""
    train, train_mask = generate_task(name, n_train, (seed, 0), **options)
    test, test_mask = generate_task(name, n_test + n_test // 4 + 10, (seed, 1), **options)
    fresh = drop_seen(test, train)
    if fresh.sum() < n_test:
        raise ValueError(f"task {name}: only {fresh.sum()} of the test problems are not in the training "
                         f"set; ask for fewer (task_test) or a larger problem space")
    return train, train_mask, test[fresh][:n_test], test_mask[fresh][:n_test]


# ----------------------------------------------------------------------------------------------
# exact-answer accuracy

def _np(a):
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def answer_accuracy(pred, targets, mask):
    """Share of records whose answer is exactly right: pred (B, T) are argmax next-token
    predictions with the true prefix fed, aligned with targets (B, T) and mask (B, T) (for
    records `rows`, pred = argmax(model(rows[:, :-1])), targets = rows[:, 1:], mask =
    mask[:, 1:]). A record counts iff every masked position is right; records without an
    answer position are left out. Equal to greedy decoding of the span (module docstring)."""
    pred, targets, mask = _np(pred), _np(targets), _np(mask).astype(bool)
    has = mask.any(-1)
    right = ~((pred != targets) & mask).any(-1)
    return float(right[has].mean()) if has.any() else float("nan")


def greedy_decode_accuracy(next_token_fn, tokens, mask):
    """The slow reference: feed each record's prompt, decode its answer span token by token
    (next_token_fn: (B, t) int64 array -> (B,) next ids, fed its own earlier outputs), and count
    the records whose decoded span equals the answer at every masked position."""
    tokens, mask = _np(tokens).astype(np.int64), _np(mask).astype(bool)
    has = mask.any(1)
    if mask[:, 0].any():
        raise ValueError("position 0 has no context to be predicted from")
    S = tokens.shape[1]
    start = np.where(has, mask.argmax(1), S)
    end = np.where(has, S - 1 - mask[:, ::-1].argmax(1), -1)
    cur = tokens.copy()
    for t in range(int(start.min()), int(end.max()) + 1):
        rows = (start <= t) & (t <= end)
        if rows.any():
            cur[rows, t] = _np(next_token_fn(cur[rows, :t])).reshape(-1)
    right = ((cur == tokens) | ~mask).all(1)
    return float(right[has].mean()) if has.any() else float("nan")


# ----------------------------------------------------------------------------------------------
# the loader for the stage of a task

SYMBOLS = [str(d) for d in range(10)] + list("+*=,?$_") + [f" k{i} " for i in range(N_KEYS)] + \
          [f" v{i} " for i in range(1, N_VALUES + 1)]


def decode(ids):
    """Token ids -> text: '12345+54321=66666$', 'k3 v17 k8 v2 ? k3 v17'."""
    return " ".join("".join(SYMBOLS[i] for i in np.asarray(ids).reshape(-1).tolist()).split())


def load_task(name, cache=None, seed=0, task_train=None, task_test=None, **_):
    """Corpus for a task: train = task_train records (default 40,000), val = the fixed TEST
    split (task_test, default 4,000), both flattened record after record (info["seq_len"] = S),
    masks likewise. Generation takes well under a second: nothing is cached (`cache` unused)."""
    train, train_mask, test, test_mask = task_split(check_task(name), seed, int(task_train or TRAIN),
                                                    int(task_test or TEST))
    S = train.shape[1]
    info = dict(seq_len=S, task=name, tokenizer=f"tasks-{VOCAB}", options=DEFAULTS[name],
                train_records=len(train), test_records=len(test), source="generated, arXiv 2601.21725 diagnostics")
    return Corpus(name=f"task:{name}", vocab_size=VOCAB, train=train.reshape(-1), val=test.reshape(-1),
                  decode=decode, train_mask=train_mask.reshape(-1), val_mask=test_mask.reshape(-1), info=info)


# ----------------------------------------------------------------------------------------------
# the authors' diagnostics (stream:NAME): their layouts, their loss positions, a fresh stream

# name -> the authors' task id, vocabulary, record length S, the first id of the tokens whose
# position is scored (their `wanted = labels[..., :-1] >= ...`)
AUTHORS = {"haystack": dict(task_id="condattendstream_30", vocab=256, seq_len=63, scored_from=158),
           "addition": dict(task_id="forwardaddition_5", vocab=31, seq_len=19, scored_from=20),
           "reversed_addition": dict(task_id="additionstream_10", vocab=31, seq_len=34, scored_from=20),
           "multiplication": dict(task_id="multiplication_5", vocab=31, seq_len=29, scored_from=20),
           "sorting": dict(task_id="ours (sorting_8)", vocab=32, seq_len=48, scored_from=20)}
A_OP, A_EQ, A_PAD, A_DIGIT0, A_STOP, A_COMMA = 10, 11, 12, 20, 30, 31
H_PAIRS, H_HALF = 30, 128                    # condattendstream_30: max_len 30, vocab_size // 2


def check_stream(name):
    if name not in AUTHORS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(AUTHORS)}")
    return name


def _their_haystack(rng, n):
    """task_condattendstream.py:22-35: m = 1..30 pairs, keys a permutation of 0..29 (128 + key),
    values 1..127, the query 158 + key (one of the m keys, uniform), its value, PAD 0 to 63."""
    m = rng.integers(1, H_PAIRS + 1, n)
    keys = np.argsort(rng.random((n, H_PAIRS)), axis=1)
    values = rng.integers(1, H_HALF, (n, H_PAIRS))
    q = (rng.random(n) * m).astype(np.int64)
    rows, S = np.arange(n), 2 * H_PAIRS + 3
    rec = np.zeros((n, S), np.int64)
    rec[:, 0:2 * H_PAIRS:2], rec[:, 1:2 * H_PAIRS:2] = keys + H_HALF, values
    rec[np.arange(S) >= 2 * m[:, None]] = 0
    rec[rows, 2 * m] = keys[rows, q] + H_PAIRS + H_HALF
    rec[rows, 2 * m + 1] = values[rows, q]
    return rec


def _their_answer(ids):
    """Our answer columns (digits 0-9, ',', END, PAD) in the authors' ids (20-29, 31, 30, 12)."""
    return np.select([ids == END, ids == PAD, ids == COMMA], [A_STOP, A_PAD, A_COMMA], ids + A_DIGIT0)


def _their_record(name, rng, n):
    """(n, S) records of one task in the authors' layout."""
    if name == "haystack":
        return _their_haystack(rng, n)
    if name == "sorting":
        prompt, answer = _sorting(rng, n, DEFAULTS["sorting"]["items"])
        prompt = np.select([prompt == COMMA, prompt == EQ], [A_OP, A_EQ], prompt)
    else:   # task_forwardaddition.py:34-49, task_additionstream.py:33-46, task_multiplication.py:33-48
        op = {"addition": "+", "reversed_addition": "r+", "multiplication": "*"}[name]
        prompt, answer = _arithmetic(rng, n, DEFAULTS[name]["digits"], op)
        prompt = np.select([prompt == PLUS, prompt == TIMES, prompt == EQ], [A_OP, A_OP, A_EQ], prompt)
    rec = np.full((n, AUTHORS[name]["seq_len"]), A_PAD, np.int64)
    rec[:, :prompt.shape[1] + answer.shape[1]] = np.hstack([prompt, _their_answer(answer)])
    return rec


def their_loss_mask(name, tokens):
    """The authors' loss positions moved onto the targets: mask[:, j] = 1 iff the INPUT token
    j - 1 is an answer token (ids >= 20; haystack: the query, >= 158), i.e. the target j is
    what their compute_loss scores there (task_forwardaddition.py:73-79)."""
    mask = np.zeros(tokens.shape, np.uint8)
    mask[:, 1:] = tokens[:, :-1] >= AUTHORS[name]["scored_from"]
    return mask


def answer_span(name, tokens):
    """Our exact answer on the authors' layout, target-aligned (B, S-1) like answer_accuracy's
    mask: every answer token (ids >= 20, the stop included, the first digit too); haystack:
    the value after the query."""
    tokens = np.asarray(tokens)
    if name == "haystack":
        return tokens[:, :-1] >= AUTHORS[name]["scored_from"]
    return tokens[:, 1:] >= A_DIGIT0


def token_accuracy(pred, targets, scored):
    """The authors' metric (compute_metrics, e.g. task_forwardaddition.py:59-64): the share of
    the scored positions whose argmax is the next token, pooled over all records (not a mean
    of per-record shares). pred, targets, scored: (B, S-1), target-aligned."""
    pred, targets, scored = _np(pred), _np(targets), _np(scored).astype(bool)
    return float((pred == targets)[scored].mean()) if scored.any() else float("nan")


def generate_stream(name, n, seed=0):
    """n records of stream:NAME and their loss mask (tokens uint16 (n, S), mask uint8 (n, S)),
    deterministic in (name, n, seed); seed: an int or a tuple of ints."""
    seed = [int(s) for s in seed] if isinstance(seed, (tuple, list)) else [int(seed)]
    tokens = _their_record(check_stream(name), np.random.default_rng([*seed, 7, TASKS.index(name)]), n)
    return tokens.astype(np.uint16), their_loss_mask(name, tokens)


def stream_records(corpus, key, n):
    """The training records of one step: n fresh records drawn from the step's key (and the
    corpus's --data-seed), any record equal to a test record replaced by a further draw (the
    authors' CustomIterDataset.generate, experiment_stream.py:186-191). Returns (tokens, mask)."""
    name, S = corpus.info["task"], corpus.info["seq_len"]
    test = np.asarray(corpus.val).reshape(-1, S)
    base = [int(k) for k in key] + [int(corpus.info["data_seed"]), 2]
    tokens, mask = generate_stream(name, n, base)
    fresh, draw = drop_seen(tokens, test), 0
    while not fresh.all():                 # rare: a draw that is one of the 4,000 test records
        draw += 1
        more, more_mask = generate_stream(name, n, base + [draw])
        ok = drop_seen(more, test)
        take = np.flatnonzero(~fresh)[:int(ok.sum())]
        tokens[take], mask[take] = more[ok][:len(take)], more_mask[ok][:len(take)]
        fresh[take] = True
    return tokens, mask


def decode_stream(name, ids):
    """Token ids of stream:NAME -> text: '12345+54321=66666$', 'k3 v17 k8 v2 ? k3 v17'."""
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
        if name == "haystack":
            out.append("_" if i == 0 else f"k{i - H_HALF}" if H_HALF <= i < H_HALF + H_PAIRS else
                       f"?k{i - H_HALF - H_PAIRS}" if i >= H_HALF + H_PAIRS else f"v{i}")
        else:
            op = ("*" if name == "multiplication" else "," if name == "sorting" else "+")
            out.append(str(i) if i < 10 else str(i - A_DIGIT0) if A_DIGIT0 <= i < A_STOP else
                       {A_OP: op, A_EQ: "=", A_PAD: "_", A_STOP: "$", A_COMMA: ","}.get(i, "?"))
    return (" " if name == "haystack" else "").join(out)


def load_stream(name, cache=None, seed=0, task_train=None, task_test=None, **_):
    """Corpus for the stage stream:NAME. val = the fixed test set (task_test records, default
    4,000) from --data-seed; train = the first task_train records (default 40,000) of the stream,
    kept only as a sample (its unigram statistics, what a summary calls the training tokens):
    the loop draws every training batch afresh through stream_records (info["stream"]).
    Nothing is cached (`cache` unused)."""
    a = AUTHORS[check_stream(name)]
    n_test = int(task_test or TEST)
    test, test_mask = generate_stream(name, n_test, (seed, 1))
    corpus = Corpus(name=f"stream:{name}", vocab_size=a["vocab"], train=np.zeros(0, np.uint16), val=test.reshape(-1),
                    decode=lambda ids: decode_stream(name, ids), val_mask=test_mask.reshape(-1),
                    info=dict(seq_len=a["seq_len"], task=name, layout="authors", stream=True, data_seed=int(seed),
                              task_id=a["task_id"], tokenizer=f"authors-{name}-{a['vocab']}", test_records=n_test,
                              source="generated as the authors' task files, arXiv 2601.21725 diagnostics"))
    sample, sample_mask = stream_records(corpus, [int(seed), 3], int(task_train or TRAIN))
    corpus.train, corpus.train_mask = sample.reshape(-1), sample_mask.reshape(-1)
    return corpus
