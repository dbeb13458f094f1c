"""report.html: the eval report as one page to browse, beside report.md and from the same tables and figures.

One self-contained file (styles, script and figures inline, nothing fetched), so it opens from disk, from a
mail or from a run's artefacts alike. Over the tables it adds a pair browser: the worst-ranked items of each
subset with their texts and rewards side by side, filtered by subset and sorted by margin. What a model got
wrong is read in its texts, and a summary number says nothing about which ones.

Every text from the data is untrusted: the tables are escaped here (`html.escape`), and the texts travel as JSON
in a `<script type="application/json">` block (every `<`, `>` and `&` written as a \\u escape, so no text can
close the block) which the page's script puts in with `textContent` (rm/evaluation/report/page_assets.py).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from pathlib import Path

import numpy as np

from rm.data.formats.group import rank_of, responses_of
from rm.data.load import Example
from rm.evaluation.eval_result import comparisons_of
from rm.evaluation.report import markdown as md
from rm.evaluation.report.page_assets import SCRIPT, STYLE

MAX_ITEMS = 300
"""Items the browser holds, shared among the subsets (each gets at least `MIN_PER_SUBSET`): a 10k-pair eval's
page stays a few MB, and the items held are each subset's lowest margins, the ones worth reading."""
MIN_PER_SUBSET = 10
TEXT_CHARS = 3000
"""Characters of a response (its start) or a prompt (its end, where the question is) the browser shows."""


def margin_of(item: Example, rewards: np.ndarray) -> float | None:
    """The smallest reward difference over the item's strictly ordered comparisons (the better response's reward
    minus the other's): below 0 when the model put some pair the wrong way round; None when no strict comparison
    was scored (a tie, or responses too long to score)."""
    pairs = comparisons_of(item, rewards)
    strict = pairs[pairs[:, 2] == 0]
    if not len(strict):
        return None
    margin = float(np.min(rewards[strict[:, 0]] - rewards[strict[:, 1]]))
    return margin if math.isfinite(margin) else None


def _number(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def browser_item(index: int, item: Example, rewards: np.ndarray) -> dict:
    """One item of the browser: its texts (cut to `TEXT_CHARS`), rewards and margin, best-ranked responses first."""
    rank = rank_of(item)
    pairs = comparisons_of(item, rewards)
    strict = pairs[pairs[:, 2] == 0]
    two_levels = len(set(rank)) == 2  # a pair, or RewardBench 2's and RM-Bench's chosen against rejected
    responses = []
    for k in sorted(range(len(rank)), key=lambda k: rank[k]):
        text = responses_of(item)[k]
        label = ("chosen" if rank[k] == min(rank) else "rejected") if two_levels else f"rank {rank[k] + 1}"
        responses.append({
            "label": label, "reward": _number(rewards[k]), "best": rank[k] == min(rank), "chars": len(text),
            "text": text[:TEXT_CHARS], "cut": max(0, len(text) - TEXT_CHARS),
        })  # fmt: skip
    return {
        "i": index,
        "origin": item.origin,
        "subset": item.subset,
        "margin": _number(margin_of(item, rewards)),
        "right": int(np.sum(rewards[strict[:, 0]] > rewards[strict[:, 1]])),
        "pairs": len(strict),
        "prompt": item.prompt[-TEXT_CHARS:],
        "prompt_chars": len(item.prompt),
        "prompt_cut": max(0, len(item.prompt) - TEXT_CHARS),
        "responses": responses,
    }


def browser_items(kept: list[Example], rewards: list[np.ndarray], limit: int = MAX_ITEMS) -> tuple[list[dict], int]:
    """The lowest-margin items of each subset (unscored margins last), in input order, and how many each subset
    may hold."""
    by_subset: dict[str, list[tuple[float, int]]] = {}
    for k, (item, r) in enumerate(zip(kept, rewards, strict=True)):
        margin = margin_of(item, r)
        by_subset.setdefault(item.subset, []).append((math.inf if margin is None else margin, k))
    quota = max(MIN_PER_SUBSET, limit // max(1, len(by_subset)))
    held = sorted(k for ranked in by_subset.values() for _, k in sorted(ranked)[:quota])
    return [browser_item(k, kept[k], rewards[k]) for k in held], quota


def _inline(text: str) -> str:
    """Escaped text with report.md's `code` and *emphasis* as HTML."""
    text = re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text))
    return re.sub(r"\*([^*\s][^*]*)\*", r"<em>\1</em>", text)


def html_table(table: md.Table, name: str, overall: bool = True) -> str:
    """A `md.Table` as HTML (cells escaped), `name` its id; its last row is bold where it is the overall one."""
    head, align, rows = table
    num = [' class="num"' if a.endswith(":") else "" for a in align]
    out = [
        f'<table id="{html.escape(name, quote=True)}">',
        "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>",
    ]
    for k, cells in enumerate(rows):
        last = overall and k == len(rows) - 1 and cells[0] == "overall"
        attrs = ' class="overall"' if last else ""
        cols = "".join(f"<td{c}>{html.escape(x)}</td>" for c, x in zip(num, cells, strict=True))
        out.append(f'<tr data-row="{html.escape(cells[0], quote=True)}"{attrs}>{cols}</tr>')
    return "\n".join(out + ["</tbody></table>"])


def _figure(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt, quote=True)}">'


def _paragraph(lines: list[str]) -> str:
    return f"<p>{_inline(' '.join(lines))}</p>"


def suite_html(suite: dict) -> list[str]:
    """A suite's overall figure, section scores and tables, and a text as the model saw it."""
    out = [f"<h2>Suite: {html.escape(suite['name'])}</h2>", "<ul>"]
    out += [f"<li>{_inline(fact)}</li>" for fact in md.suite_facts(suite)] + ["</ul>"]
    for title, table in md.suite_tables(suite):
        out += [
            f"<h3>{html.escape(title)}</h3>",
            html_table(table, "suite-" + re.sub(r"\W+", "-", title.lower()), overall=False),
        ]
    example = (suite.get("formatting") or {}).get("example")
    if example:
        out += ["<p>A text as the model saw it:</p>", f"<pre>{html.escape(example)}</pre>"]
    return out


def browser_html(result: dict, items: list[dict], quota: int, total: int) -> list[str]:
    """The pair browser's controls and what it holds; the script fills `#items` from the JSON block."""
    held = (
        f"all {total} scored items"
        if len(items) == total
        else (f"the {quota} lowest-margin items of each subset, {len(items)} of the {total} scored")
    )
    options = "".join(
        f'<option value="{html.escape(n, quote=True)}">{html.escape(n)}</option>' for n in result["subsets"]
    )
    return [
        "<h2>Pairs</h2>",
        f'<p class="note">Held here: {held}; texts longer than {TEXT_CHARS} characters are cut (a prompt keeps '
        "its end). The margin is the "
        "better response's reward minus the other's; for a group, the smallest over its ordered pairs. Below 0: "
        "the model ordered a pair the wrong way round. Every item is in rewards.jsonl.</p>",
        '<div class="controls">',
        f'<label>subset <select id="subset"><option value="">all subsets</option>{options}</select></label>',
        '<label>sort <select id="sort"><option value="margin">margin, worst first</option>'
        '<option value="-margin">margin, best first</option><option value="order">input order</option>'
        "</select></label>",
        '<label><input type="checkbox" id="wrong"> only the wrongly ordered</label>',
        '<span id="shown"></span>',
        "</div>",
        '<div id="items"></div>',
    ]


def render_html(result: dict, kept: list[Example], rewards: list[np.ndarray], figures: dict[str, Path]) -> str:
    """report.html for eval.json's `result`, its scored items `kept` with their `rewards`, and the figures
    report.md shows (`figures`: file name -> the PNG written)."""
    o = result["overall"]
    items, quota = browser_items(kept, rewards)
    body = ["<h1>Reward model evaluation</h1>", "<ul>"]
    body += [f"<li>{_inline(line)}</li>" for line in md.header_lines(result)] + ["</ul>"]
    if result.get("suite"):
        body += suite_html(result["suite"])
    body += ["<h2>Accuracy</h2>", _paragraph(md.ACCURACY_TEXT), html_table(md.accuracy_table(result), "accuracy")]
    body.append(_figure(figures["accuracy.png"], "accuracy per subset"))
    if md.has_groups(o):
        body += ["<h2>Groups</h2>", _paragraph(md.GROUP_TEXT), html_table(md.group_table(result), "groups")]
        body.append(_figure(figures["groups.png"], "group metrics per subset"))
    body += [
        "<h2>Calibration</h2>",
        _paragraph(md.CALIBRATION_TEXT),
        html_table(md.calibration_table(result), "calibration"),
    ]
    if result.get("soft_calibration"):
        body += [_paragraph(md.SOFT_TEXT), html_table(md.soft_table(result["soft_calibration"]), "soft_calibration")]
    body += [_figure(figures["calibration.png"], "reliability diagram"), "<h2>Rewards</h2>"]
    body += [_figure(figures["reward_hist.png"], "reward histograms"), "<h2>Length bias</h2>"]
    body += [_paragraph(md.length_text(o)), html_table(md.length_table(result), "length", overall=False)]
    body.append(_figure(figures["length_bias.png"], "length bias"))
    if result.get("attributes") and "attributes.png" in figures:
        body += ["<h2>Attributes</h2>", _paragraph(md.ATTRIBUTE_TEXT)]
        body += [html_table(md.attribute_table(result), "attributes", overall=False)]
        body.append(_figure(figures["attributes.png"], "attribute outputs against scores"))
    body += browser_html(result, items, quota, len(kept))
    data = json.dumps({"items": items}, ensure_ascii=False, allow_nan=False)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode("ascii")
    policy = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"
    title = html.escape(f"Reward model evaluation: {result['eval']['model']}")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{title}</title>",
        '<link rel="icon" href="data:,">', f"<style>{STYLE}</style>", "</head>", "<body>", *body,
        f'<script type="application/json" id="rm-items">{data}</script>', f"<script>{SCRIPT}</script>",
        "</body>", "</html>", "",
    ])  # fmt: skip
