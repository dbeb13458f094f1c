"""A suite's part of the report (report.md and report.html alike): its figures with their n, 95% interval and
chance level, its subsets grouped by section, and the order every per-subset table and figure follows.

A leaderboard figure is read against what random rewards score on the same records (eval.json's
`suite.uncertainty`, rm/suites/suite_intervals.py): RewardBench 2's 0.227 is below best-of-4's 0.25, and a reader
must not have to know that. A result without that block (an older eval.json) shows the figures alone.
"""

from __future__ import annotations

import math

Table = tuple[list[str], list[str], list[list[str]]]
OUTSIDE = "outside the score"


def f4(x: object) -> str:
    if isinstance(x, bool):
        return "yes" if x else "no"
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def ci_text(ci: list | None, digits: int = 3) -> str:
    """[lo, hi] as text; "n/a" where eval.json has none."""
    if not ci or any(x is None or (isinstance(x, float) and math.isnan(x)) for x in ci):
        return "n/a"
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def against_chance(ci: list | None, chance: float | None) -> str:
    """Where the interval lies against the chance level, the one comparison a figure needs to mean anything:
    wholly above it, wholly below it, or holding it ("within reach": random rewards could have scored this)."""
    if chance is None or ci_text(ci) == "n/a":
        return "n/a"
    lo, hi = ci
    return "above" if lo > chance else "BELOW" if hi < chance else "within reach"


def subset_sections(result: dict) -> dict[str, str | None]:
    """eval.json's subsets in report order, each with its suite section: a suite's sections in the suite's order,
    each one's subsets in the suite's published order, then the rest (sorted). A plain eval: sorted, no section."""
    suite = result.get("suite") or {}
    members = (suite.get("uncertainty") or {}).get("section_subsets")
    if members is None:  # an eval.json without the block: the section (domain) each subset names
        members = {}
        for name, m in (suite.get("subsets") or {}).items():
            section = m.get("section") or m.get("domain") or (name if name in (suite.get("sections") or {}) else None)
            if section is not None:
                members.setdefault(section, []).append(name)
    present = result["subsets"]
    out = {name: section for section, names in members.items() for name in names if name in present}
    rest = sorted(name for name in present if name not in out)
    return out | {name: (OUTSIDE if out else None) for name in rest}


def suite_facts(suite: dict) -> list[str]:
    """A suite's overall figure, how its texts were rendered, and its notes (report.md's list items)."""
    u = suite.get("uncertainty") or {}
    where = ""
    if u:
        ci, chance = u["ci95"].get("score"), u["chance"].get("score")
        verdict = against_chance(ci, chance)
        verdict = {"above": "above chance", "BELOW": "BELOW chance"}.get(verdict, "chance is inside it")
        where = f", n={u['n']['score']}, 95% CI {ci_text(ci)}, chance {f4(chance)}: {verdict}"
    facts = [f"score: {f4(suite.get('score'))} ({suite['name']}'s overall figure, as its leaderboard has it{where})"]
    if suite.get("prior_sets") is not None:
        facts.append(f"prior sets: {f4(suite['prior_sets'])} (the optional fifth figure, outside the score)")
    form = suite.get("formatting") or {}
    if form:
        same = "the same as" if form.get("same_as_leaderboard") else "NOT the same as (its numbers may differ)"
        facts.append(f"formatting: {form.get('renderer')}, {same} the leaderboard's: {form.get('leaderboard')}")
    facts += control_facts(suite)
    facts.append(f"texts cut to max_length (never dropped): {suite.get('texts_truncated', 0)}")
    if u:
        facts.append(f"intervals: {u['method']}; chance: what random rewards score on the same records")
    return facts + list(suite.get("notes") or [])


def control_facts(suite: dict) -> list[str]:
    """The length controls in words: the score of always picking the shortest and the longest answer, and each
    section's shortest-answer figure beside the model's (RewardBench 2's Focus: 52.7% reported for the shortest
    answer against 25% chance)."""
    controls = suite.get("length_controls") or {}
    if not controls:
        return []
    short, long = controls["shortest"], controls["longest"]
    line = (f"length controls (the suite's own rule, lengths in characters): always the shortest answer scores "
            f"{f4(short.get('score'))} {ci_text(short['ci95'].get('score'))}, always the longest "
            f"{f4(long.get('score'))} {ci_text(long['ci95'].get('score'))}")  # fmt: skip
    flat = {k: v for k, v in (suite.get("sections") or {}).items() if not isinstance(v, dict)}
    beside = [f"{k} {f4(v)} against {f4((short.get('sections') or {}).get(k))}" for k, v in flat.items()]
    return [line] + ([f"model against the shortest answer, per section: {'; '.join(beside)}"] if beside else [])


def _figure_cells(value, ci, chance, n) -> list[str]:
    return [str(n if n is not None else "n/a"), f4(value), ci_text(ci), f4(chance), against_chance(ci, chance)]


FIGURE_HEAD = ["95% CI", "chance", "against chance"]
CONTROL_HEAD = ["shortest answer", "shortest answer 95% CI", "longest answer", "longest answer 95% CI"]
"""The length controls' columns (eval.json's `suite.length_controls`: rm/suites/suite_length.py) beside a figure:
what always picking the shortest or the longest answer scores by the suite's own rule, with its interval."""


def control_cells(suite: dict, level: str, name: str = "") -> list[str]:
    """The length controls of one figure (`level`: "score", or "sections" / "subsets" with the figure's `name`), as
    `CONTROL_HEAD`'s cells; [] where eval.json has none."""
    controls = suite.get("length_controls") or {}
    cells = []
    for pick in ("shortest", "longest") if controls else ():
        c = controls[pick]
        if level == "score":
            cells += [f4(c.get("score")), ci_text(c["ci95"].get("score"))]
        else:
            cells += [f4((c.get(level) or {}).get(name)), ci_text((c["ci95"].get(level) or {}).get(name))]
    return cells


def control_head(suite: dict) -> tuple[list[str], list[str]]:
    """`CONTROL_HEAD` and its alignment where eval.json has the length controls, else nothing."""
    return (CONTROL_HEAD, ["---:", "---"] * 2) if suite.get("length_controls") else ([], [])


def section_table(suite: dict) -> Table:
    """The sections (RM-Bench: each domain's easy / normal / hard / average), then the overall score, each with its
    n, interval and chance level where eval.json has them."""
    sections = suite.get("sections") or {}
    u = suite.get("uncertainty") or {}
    nested = any(isinstance(v, dict) for v in sections.values())
    if not u:  # an older eval.json: the figures alone
        keys = list(dict.fromkeys(k for v in sections.values() if isinstance(v, dict) for k in v))
        rows = [[name, *([f4(v.get(k)) for k in keys] if nested else [f4(v)])] for name, v in sections.items()]
        head = ["domain", *keys] if nested else ["section", "score"]
        return head, ["---"] + ["---:"] * (len(head) - 1), rows
    n, ci, chance = (u[k].get("sections") or {} for k in ("n", "ci95", "chance"))
    if nested:
        keys = list(dict.fromkeys(k for v in sections.values() for k in v))
        head = ["domain", "n"] + [h for k in keys for h in (k, f"{k} 95% CI", f"{k} chance")]
        rows = [[name, str(n.get(name, "n/a"))] + [c for k in keys for c in (f4(v.get(k)),
                ci_text((ci.get(name) or {}).get(k)), f4((chance.get(name) or {}).get(k)))]
                for name, v in sections.items()]  # fmt: skip
        overall = ["overall", str(u["n"]["score"])] + ["", "", ""] * (len(keys) - 1)
        overall += [f4(suite.get("score")), ci_text(u["ci95"].get("score")), f4(u["chance"].get("score"))]
        return head, ["---"] + ["---:"] * (len(head) - 1), rows + [overall]
    rows = [[name, *_figure_cells(v, ci.get(name), chance.get(name), n.get(name)),
             *control_cells(suite, "sections", name)] for name, v in sections.items()]  # fmt: skip
    rows.append(["overall", *_figure_cells(suite.get("score"), u["ci95"].get("score"), u["chance"].get("score"),
                                           u["n"].get("score")), *control_cells(suite, "score")])  # fmt: skip
    extra, align = control_head(suite)
    return ["section", "n", "score", *FIGURE_HEAD, *extra], ["---", "---:", "---:", "---", "---:", "---", *align], rows


def subset_table(suite: dict) -> tuple[Table, dict[str, str | None]]:
    """The suite's subsets in section order, each with its figure's n, interval and chance level where eval.json
    has them, and the section of each row (report.html heads each section's rows with its name)."""
    subsets = suite.get("subsets") or {}
    u = suite.get("uncertainty") or {}
    order = subset_sections({"subsets": subsets, "suite": suite})
    keys = list(dict.fromkeys(k for v in subsets.values() for k in v))
    if not u:
        rows = [[name, *(f4(subsets[name].get(k)) for k in keys)] for name in order]
        return (["subset", *keys], ["---"] * (len(keys) + 1), rows), order
    value = next((k for k in ("accuracy", "score", "average") if k in keys), keys[0])
    rest = [k for k in keys if k not in (value, "n")]
    ci, chance = u["ci95"].get("subsets") or {}, u["chance"].get("subsets") or {}
    rows = [[name, *_figure_cells(subsets[name].get(value), ci.get(name), chance.get(name), subsets[name].get("n")),
             *control_cells(suite, "subsets", name), *(f4(subsets[name].get(k)) for k in rest)]
            for name in order]  # fmt: skip
    extra, align = control_head(suite)
    head = ["subset", "n", value, *FIGURE_HEAD, *extra, *rest]
    return (head, ["---", "---:", "---:", "---", "---:", "---", *align] + ["---"] * len(rest), rows), order


def suite_tables(suite: dict) -> list[tuple[str, Table]]:
    """(title, table) for a suite's sections, its subsets and RM-Bench's style matrices."""
    tables = [("Sections", section_table(suite)), ("Subsets", subset_table(suite)[0])]
    tables = [(title, table) for title, table in tables if table[2]]  # a suite without subsets shows none
    matrix = suite.get("matrix") or {}
    styles = list(matrix.get("styles") or [])
    for domain, cells in (matrix.get("domains") or {}).items():
        corner = f"{matrix.get('rows', 'row')} \\ {matrix.get('columns', 'column')}"
        rows = [[style, *(f4(x) for x in row)] for style, row in zip(styles, cells, strict=False)]
        tables.append((f"Style matrix: {domain}", ([corner, *styles], ["---"] + ["---:"] * len(styles), rows)))
    return tables


def suite_markdown(suite: dict, md_table) -> list[str]:
    md = [f"## Suite: {suite['name']}", "", *(f"- {fact}" for fact in suite_facts(suite)), ""]
    for title, table in suite_tables(suite):
        md += [f"### {title}", "", *md_table(table), ""]
    example = (suite.get("formatting") or {}).get("example")
    if example:
        runs = [len(line.strip()) for line in example.split("\n") if set(line.strip()) == {"`"}]  # a fence inside
        fence = "`" * max(3, 1 + max(runs, default=0))
        md += ["A text as the model saw it:", "", f"{fence}text", example, fence, ""]
    return md
