"""
The results page: RESULTS.md, and the README's blocks (the headline table, the quick start's numbers, each paper's
verdict over every regime), rebuilt from the experiments' report.json files without training anything.

    python results.py            # rewrite RESULTS.md and the README's blocks
    python results.py --check    # exit 1 if either differs from what the reports give
                                 # (exit 2: a report.json missing or unreadable, named in one line)

Each report.json (written by experiments/lib/<name>_report.py) carries what this page shows:
`source` (arXiv id, title), `regime` (our scale and budget, and what differs from the paper),
`verdicts` (per claim of the paper: the claim, the paper's number, ours, the test, the verdict),
`figures`, `provenance` (commit, command, hardware, wall time), and optionally `front_table` (a title and
Markdown table lines the report wants beside its claims). A paper's other presets' reports named in SHOWN are
shown in full beside its own; the earlier presets' (folders <paper>-*) are linked, and every report counts in the
paper's tallies and in its headline claims' verdicts (HEADLINES, each regime in words: REGIMES). Every verdict is
read by the one engine, experiments/lib/claims.py, from the claim table of its paper (experiments/lib/<paper>_claims.py).
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from experiments.lib.claims import RULE, VERDICTS, cell, counts, distinct, table, word_counts  # noqa: E402
from data.common import atomic_write_bytes, one_line_errors  # noqa: E402
from experiments.lib.provenance import provenance_line  # noqa: E402
from flags import ArgumentParser  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
# (folder, heading): the papers in the order the README introduces them
PAPERS = (("ladder", "The ladder: music, then poetry, then prose"),
          ("procedural", "Procedural pre-training: algorithmic data before language"),
          ("data_constrained", "Data-constrained pre-training: Masked-Input Regularization and SoftQ"),
          ("prores", "ProRes: progressive residual warmup"))
# the other presets' reports shown in full (regime, front table) beside their paper's on RESULTS.md
SHOWN = {"ladder": ("ladder-proportions", "ladder-headline", "ladder-scarcity"), "prores": ("prores-warmup", "prores-pilot"),
         "procedural": ("procedural-reference",)}
BUILT_BY = {"procedural-reference": "reference/cross.py"}  # a report not made by experiments/<paper>.py
# per paper, its headline claims: (what the paper says, the claim's text in the reports that read it, the other
# papers' reports that read it too); read in every report of the paper (REGIMES says each one's regime in words)
HEADLINES = {
    "ladder": [("Music before prose lowers prose perplexity", ("music -> prose: lower perplexity after the first prose "
                                                               "epoch",), ()),
               ("The ladder beats prose alone for as many steps (compute-matched)",
                ("a compute-matched prose-only control stays behind the ladder",
                 "the headline command ends below prose alone for as many steps (compute-matched: --iters 1200)",
                 "the ladder ends below prose alone for as many steps (compute-matched), both at their end"), ())],
    "procedural": [("Dyck pre-training lifts HAYSTACK", ("Dyck pre-training lifts HAYSTACK",), ())],
    "data_constrained": [("MIR lowers the validation loss at every size", ("MIR lowers the validation loss at every "
                                                                           "size",), ()),
                         ("MIR is worth more unique data, as much as the paper's", (
                             "MIR is worth at least the paper's ~1.3x more unique data",), ())],
    "prores": [("ProRes lowers the loss with Pre-LN", ("ProRes lowers the loss with Pre-LN",
                                                       "ProRes lowers prose-only perplexity from scratch"),
                ("ladder-headline",))]}
REGIMES = {  # each report's regime, as a phrase after the verdict ({share}: its pre-training share of the prose)
    "ladder": "with pre-training at {share}", "ladder-proportions": "at the paper's share ({share})",
    "ladder-subset": "on an earlier, scarce prose subset (65k tokens, d16-d64, pre-training at {share})",
    "ladder-headline": "in the quick start's command", "ladder-scarcity": "as the prose goes from scarce to plentiful",
    "procedural": "at the authors' scale in our pipeline", "procedural-reference": "in the authors' own code",
    "procedural-table": "in an earlier, smaller table", "data_constrained": "on the authors' baseline",
    "data_constrained-earlier": "on an earlier, smaller grid", "prores": "where the baselines break",
    "prores-pilot": "at the paper's T a layer, a longer run", "prores-depth": "in an earlier depth scan",
    "prores-warmup": "with a longer lr warm-up"}
QUICK_START = "ladder-headline"  # the report of the README's main command, at train.py's defaults


class ReportError(Exception):
    """A report.json that is missing or cannot be read: main() says so in one line, exit status 2."""


def load(name):
    """RESULTS/NAME/report.json, parsed; a missing or torn one is a ReportError naming it and the fix."""
    path = RESULTS / name / "report.json"
    try:
        rep = json.loads(path.read_text())
    except (OSError, ValueError) as e:  # (torn: json's ValueError; not UTF-8: UnicodeDecodeError, a ValueError too)
        rep = e
    if not isinstance(rep, dict):
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        why = "missing" if isinstance(rep, FileNotFoundError) else "not readable (torn, or not a JSON object)"
        script = BUILT_BY.get(name, f"experiments/{name.split('-')[0]}.py")
        raise ReportError(f"{shown}: {why}; restore it with git checkout -- {shown}, or rebuild it with python "
                          f"{script} --report-only --out {shown.parent} (from its runs)")
    return rep


def paper_section(i, name, heading, rep):
    src = rep.get("source", {})
    link = f"experiments/results/{name}"
    lines = [f"## {i}. {heading}", "",
             f"{src.get('title', '')} (arXiv {src.get('arxiv', '?')}). Full report: [{link}/report.md]({link}/report.md).",
             "", provenance_line(rep.get("provenance")), "", f"**Regime.** {rep.get('regime', 'not recorded')}", "",
             *table(rep.get("verdicts", []))]
    if rep.get("front_table"):  # beside its claims
        lines += ["", rep["front_table"]["title"] + ":", ""] + rep["front_table"]["lines"]
    figs = rep.get("figures", [])
    if figs:
        lines += ["", "Figures: " + ", ".join(f"[{f}]({link}/{f})" for f in figs) + "."]
    others = {o: load(o) for o in reports_of(name)[1:]}  # each report.json read once
    for other, shown in ((o, r) for o, r in others.items() if o in SHOWN.get(name, ())):
        at = f"experiments/results/{other}"
        lines += ["", f"{shown['front_table']['title']} ([{at}/report.md]({at}/report.md)). {shown['regime']}", ""]
        lines += shown["front_table"]["lines"]
    claims = {v["claim"] for v in rep.get("verdicts", [])}
    beside = [(o, vs) for o, r in others.items() for vs in [r.get("verdicts", [])] if claims & {v["claim"] for v in vs}]
    if beside:  # each claim's verdict in each regime that reads the same claims, the main report's first
        lines += ["", "Each claim's verdict in each of these reports:", "", "| the paper's claim | " + " | ".join(
            f"[{o}](experiments/results/{o}/report.md)" for o, _ in [(name, 0)] + beside) + " |",
                  "|---|" + "---|" * (1 + len(beside))]
        lines += [f"| {v['claim']} | " + " | ".join(next((w["verdict"] for w in vs if w["claim"] == v["claim"]), "-")
                                                   for vs in [rep["verdicts"]] + [vs for _, vs in beside]) + " |"
                  for v in rep["verdicts"]]
    earlier = earlier_reports(name)
    if earlier:  # the earlier defaults' reports, kept beside the current one
        lines += ["", "Earlier runs of this experiment (other presets): "
                  + ", ".join(f"[{e}/report.md](experiments/results/{e}/report.md)" for e in earlier) + "."]
    return lines + [""]


def results_page(reports):
    lines = ["# Results", "",
             "Made by `python results.py` from the four experiments' `report.json` files (nothing is "
             "trained; change a paper's claim table in `experiments/lib/<paper>_claims.py`, not this page). Each row "
             "sets one claim of a paper beside our measurement. " + RULE, "",
             *headline_table("#"), "",
             "Every claim's verdict over all the reports of its paper (the same two arms read twice count once), and "
             "the distinct tests against the paper's number:", "",
             "| paper | verdicts, every report | against the paper, cell by cell (every report) |", "|---|---|---|"]
    for i, (name, heading) in enumerate(PAPERS, 1):
        every = [v for r in reports_of(name) for v in load(r).get("verdicts", [])]
        lines.append(f"| [{i}. {heading}](#{anchor(i, heading)}) | {tally(name)} | {word_counts(every)} |")
    lines.append("")
    for i, (name, heading) in enumerate(PAPERS, 1):
        lines += paper_section(i, name, heading, reports[name])
    return "\n".join(lines)


def anchor(i, heading):
    """GitHub's anchor of the heading '## i. heading'."""
    text = f"{i}. {heading}".lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def earlier_reports(name):
    """The earlier presets' reports of a paper (folders NAME-*), kept beside the current one but not shown in full."""
    return sorted(p.parent.name for p in RESULTS.glob(f"{name}-*/report.json") if p.parent.name not in
                  SHOWN.get(name, ()))


def reports_of(name):
    """Every report of a paper: its main one, those SHOWN beside it, the earlier presets'."""
    return [name, *SHOWN.get(name, ()), *earlier_reports(name)]


def regime(folder, rep):
    share = rep.get("pretrain_share") or {}
    return REGIMES.get(folder, f"in {folder}").format(share=f"{100 * share.get('ours', 0):.0f}% of the prose")


def headline(name, texts, extra=()):
    """(the paper's number, one sentence): the claim's verdict in every report that reads it, grouped by verdict
    ('partly' names the cells that reproduce), each regime linked to its report."""
    found = [(f, r, v) for f in reports_of(name) + list(extra) for r in [load(f)]
             for v in r.get("verdicts", []) if v["claim"] in texts and v["verdict"] != "not measured"]
    said = lambda f, r, v: f"[{regime(f, r)}](experiments/results/{f}/report.md)" + (  # noqa: E731
        f" (reproduces at {', '.join(c['name'] for c in v['cells'] if c['verdict'] == 'reproduces')})"
        if v["verdict"] == "partly" else "")
    parts = [f"**{w}** " + " and ".join(said(*x) for x in found if x[2]["verdict"] == w) for w in VERDICTS
             if any(x[2]["verdict"] == w for x in found)]
    return (found[0][2]["paper"] if found else "-"), "; ".join(parts) or "not measured"


def tally(name):
    """Every claim's verdict over all the reports of a paper, a repeated test once; "not measured" for a claim
    that no report measures."""
    entries = [e for r in reports_of(name) for e in load(r).get("verdicts", [])]
    measured = [e for e in entries if e["verdict"] != "not measured"]
    never = {e["claim"] for e in entries} - {e["claim"] for e in measured}
    return ", ".join(x for x in (counts(distinct(measured)) if measured else "", f"{len(never)} not measured"
                                 if never else "") if x)


def headline_table(link="RESULTS.md#"):
    """Per paper, its headline claims: the paper's number, and one sentence with the verdict in every regime."""
    rows = []
    for i, (name, heading) in enumerate(PAPERS, 1):
        for k, (what, texts, extra) in enumerate(HEADLINES[name]):
            paper, sentence = headline(name, texts, extra)
            rows.append(f"| {f'[{heading}]({link}{anchor(i, heading)})' if k == 0 else ''} | {cell(what)} "
                        f"({cell(paper)}) | {cell(sentence)} | {tally(name) if k == 0 else ''} |")
    return ["| paper | its headline claim (the paper's number) | here, in every regime we ran | all its claims, "
            "every report |", "|---|---|---|---|", *rows]


def verdict_line(name):
    """The README's sentence on one paper: each headline claim's verdict in every regime."""
    i = [n for n, _ in PAPERS].index(name) + 1
    said = " ".join(f"{what}: {headline(name, texts, extra)[1]}." for what, texts, extra in HEADLINES[name])
    return f"Verdict over every regime ([RESULTS.md]({f'RESULTS.md#{anchor(i, dict(PAPERS)[name])}'})): {said}"


def quick_start_line():
    """What the README's main command prints, in one sentence from its report (the means over seeds)."""
    rep = load(QUICK_START)
    arms = {}
    for r in rep["runs"]:
        arms.setdefault(r["condition"], []).append(r["ppl_final"])
    m = {c: f"{sum(v) / len(v):,.0f}" for c, v in arms.items()}
    matched = next(v for v in rep["verdicts"] if "compute-matched" in v["claim"])["verdict"]
    n = sorted({len(v) for v in arms.values()})
    return (f"Over {' to '.join(map(str, n[::len(n) - 1 or 1]))} seeds an arm at this budget ([report](experiments/results/{QUICK_START}/report.md)) the "
            f"curriculum ends at a prose perplexity of {m['curriculum+prores']}, prose alone at {m['prose-only+prores']} "
            f"with `--prores` and {m['prose-only']} without, and prose alone for as many steps at "
            f"{m['compute-matched']}: " + ("the same steps spent on prose do better, so at this scale the "
                                           "curriculum's gain is its extra training." if matched == "opposite" else
                                           f"against that compute-matched control the curriculum's verdict is "
                                           f"**{matched}**."))


def readme_blocks():
    """{marker: text} of every block results.py writes on the README."""
    return {"headline table": "\n".join(headline_table()), "quick start": quick_start_line(),
            **{f"verdict {name}": verdict_line(name) for name, _ in PAPERS}}


def with_blocks(readme, blocks):
    """The README with each block between its markers '<!-- results.py: KEY -->' and '<!-- end: KEY -->'."""
    for key, text in blocks.items():
        begin, end = f"<!-- results.py: {key} -->", f"<!-- end: {key} -->"
        if begin not in readme or end not in readme:
            raise SystemExit(f"README.md has no markers {begin} ... {end}; put them where the {key} belongs")
        head, rest = readme.split(begin, 1)
        readme = head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1]
    return readme


@one_line_errors("results.py")
def main(argv=None):
    p = ArgumentParser(description="Rebuild RESULTS.md and the README's results table from the experiments' "
                                   "report.json files (no training).")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if either file is out of date (2: a report.json cannot be read)")
    a = p.parse_args(argv)
    readme_path = ROOT / "README.md"
    try:  # every report.json is read before anything is compared or written
        reports = {name: load(name) for name, _ in PAPERS}
        page = results_page(reports)
        readme = with_blocks(readme_path.read_text(), readme_blocks())
    except ReportError as e:
        print(f"results.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    stale = [path.name for path, text in ((ROOT / "RESULTS.md", page), (readme_path, readme))
             if not path.exists() or path.read_text() != text]
    if a.check:
        if stale:
            print(f"out of date: {', '.join(stale)}; run python results.py", file=sys.stderr)
            sys.exit(1)
        print("RESULTS.md and the README's table match the reports")
        return
    atomic_write_bytes(ROOT / "RESULTS.md", page.encode())  # a temporary name, then a rename
    atomic_write_bytes(readme_path, readme.encode())
    print(f"wrote RESULTS.md and the README's table ({', '.join(stale) or 'no change'})")


if __name__ == "__main__":
    main()
