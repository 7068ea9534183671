"""
The results page: RESULTS.md, and the README's short "what reproduces here" table, rebuilt from
the four experiments' report.json files without training anything.

    python results.py            # rewrite RESULTS.md and the README's table
    python results.py --check    # exit 1 if either differs from what the reports give
                                 # (exit 2: a report.json missing or unreadable, named in one line)

Each report.json (written by experiments/lib/<name>_report.py) carries what this page shows:
`source` (arXiv id, title), `regime` (our scale and budget, and what differs from the paper),
`verdicts` (per claim of the paper: the claim, the paper's number, ours, the test, the verdict),
`figures`, `provenance` (commit, command, hardware, wall time), and optionally `front_table`
(a title and Markdown table lines the report wants beside its claims and on the README; with
`readme_only` on the README alone; another preset's report named in SHOWN has its front table and
regime shown beside its paper's on RESULTS.md, and on the README where SHOWN says so). Every verdict is read by the one engine, experiments/lib/claims.py,
from the claim table of its paper (experiments/lib/<paper>_claims.py).
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from experiments.lib.claims import RULE, cell, counts, table, word_counts  # noqa: E402
from data.common import atomic_write_bytes  # noqa: E402
from experiments.lib.provenance import provenance_line  # noqa: E402
from flags import ArgumentParser  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
# (folder, heading): the papers in the order the README introduces them
PAPERS = (("ladder", "The ladder: music, then poetry, then prose"),
          ("procedural", "Procedural pre-training: algorithmic data before language"),
          ("data_constrained", "Data-constrained pre-training: Masked-Input Regularization and SoftQ"),
          ("prores", "ProRes: progressive residual warmup"))
# the other presets' reports whose front table stands beside their paper's on RESULTS.md: (folder, on the README too)
SHOWN = {"ladder": (("ladder-proportions", True), ("ladder-headline", True), ("ladder-scarcity", False)),
         "prores": (("prores-warmup", False), ("prores-pilot", False)),
         "procedural": (("procedural-reference", False),)}
BUILT_BY = {"procedural-reference": "reference/cross.py"}  # a report not made by experiments/<paper>.py
BEGIN, END = "<!-- results table: made by results.py -->", "<!-- end of results table -->"


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
    if rep.get("front_table") and not rep["front_table"].get("readme_only"):  # beside its claims (and on the README)
        lines += ["", rep["front_table"]["title"] + ":", ""] + rep["front_table"]["lines"]
    figs = rep.get("figures", [])
    if figs:
        lines += ["", "Figures: " + ", ".join(f"[{f}]({link}/{f})" for f in figs) + "."]
    others = {o: load(o) for o, _ in SHOWN.get(name, ())}  # each report.json read once
    for other, shown in others.items():
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
    earlier = sorted(p.parent.name for p in RESULTS.glob(f"{name}-*/report.md")
                     if p.parent.name not in dict(SHOWN.get(name, ())))
    if earlier:  # the earlier defaults' reports, kept beside the current one
        lines += ["", "Earlier runs of this experiment (other presets): "
                  + ", ".join(f"[{e}/report.md](experiments/results/{e}/report.md)" for e in earlier) + "."]
    return lines + [""]


def results_page(reports):
    lines = ["# Results", "",
             "Made by `python results.py` from the four experiments' `report.json` files (nothing is "
             "trained; change a paper's claim table in `experiments/lib/<paper>_claims.py`, not this page). Each row "
             "sets one claim of a paper beside our measurement. " + RULE, "",
             "| paper | verdicts | against the paper, cell by cell (the reports on this page) |", "|---|---|---|"]
    for i, (name, heading) in enumerate(PAPERS, 1):
        every = [v for r in [name] + [o for o, _ in SHOWN.get(name, ())] for v in load(r).get("verdicts", [])]
        lines.append(f"| [{i}. {heading}](#{anchor(i, heading)}) | {counts(reports[name].get('verdicts', []))} | "
                     f"{word_counts(every)} |")
    lines.append("")
    for i, (name, heading) in enumerate(PAPERS, 1):
        lines += paper_section(i, name, heading, reports[name])
    return "\n".join(lines)


def anchor(i, heading):
    """GitHub's anchor of the heading '## i. heading'."""
    text = f"{i}. {heading}".lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def readme_table(reports):
    """The README's short table: per paper its headline claim (the first verdict) and the tally."""
    lines = [BEGIN, "| paper | its headline claim (the paper's number) | verdict here | all its claims here |",
             "|---|---|---|---|"]
    for i, (name, heading) in enumerate(PAPERS, 1):
        v = (reports[name].get("verdicts") or [{"claim": "-", "paper": "-", "verdict": "not measured"}])[0]
        lines.append(f"| [{heading}](RESULTS.md#{anchor(i, heading)}) | {cell(v['claim'])} ({cell(v['paper'])}) | "
                     f"**{v['verdict']}** | {counts(reports[name].get('verdicts', []))} |")
    for name, heading in PAPERS:  # the tables the reports want on the front page
        t = reports[name].get("front_table")
        if t:
            lines += ["", f"{heading}: {t['title'][0].lower()}{t['title'][1:]}:", ""] + t["lines"]
        for other in (o for o, on_readme in SHOWN.get(name, ()) if on_readme):
            t = load(other)["front_table"]
            lines += ["", f"{t['title']} ([report](experiments/results/{other}/report.md)):", ""] + t["lines"]
    return "\n".join(lines + [END])


def with_table(readme, table):
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md has no results table markers ({BEGIN} ... {END}); put them where the "
                         "table belongs")
    head, rest = readme.split(BEGIN, 1)
    return head + table + rest.split(END, 1)[1]


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
        readme = with_table(readme_path.read_text(), readme_table(reports))
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
