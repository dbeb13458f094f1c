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
import re
import struct
from pathlib import Path

import numpy as np

from rm.data.data_report import shown_text
from rm.data.load import Example
from rm.evaluation.ensemble.ensemble_text import about, ensemble_table, uncertainty_text
from rm.evaluation.report import markdown as md
from rm.evaluation.report.length_text import control_text
from rm.evaluation.report.page_assets import SCRIPT, STYLE
from rm.evaluation.report.pair_browser import browser_html, browser_items, margin_of
from rm.evaluation.report.suite_text import OUTSIDE, subset_sections, subset_table, suite_facts, suite_tables

__all__ = ["browser_items", "margin_of", "render_html"]


def _inline(text: str) -> str:
    """Escaped text with report.md's `code` and *emphasis* as HTML, absolute paths cut to their last parts."""
    text = re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(shown_text(text)))
    return re.sub(r"\*([^*\s][^*]*)\*", r"<em>\1</em>", text)


def headline_columns(head: list[str]) -> dict[int, tuple[int, int, int]]:
    """The table's headline numbers: value column -> (its n, 95% CI and chance columns), found by the header
    names the tables use: "X 95% CI" (or "95% CI" right after X), "X chance" (or "chance"), "X n" (or "n", then
    "groups")."""
    out = {}
    for k, name in enumerate(head):
        if not name.endswith("95% CI"):
            continue
        metric = name[: -len(" 95% CI")] if name != "95% CI" else next(h for h in head[k - 1 :: -1] if h != "n")
        chance = f"{metric} chance" if f"{metric} chance" in head else "chance"
        n = next((c for c in (f"{metric} n", "n", "groups") if c in head), None)
        if metric in head and chance in head and n is not None:
            out[head.index(metric)] = (head.index(n), k, head.index(chance))
    return out


def html_table(table: md.Table, name: str, overall: bool = True, sections: dict[str, str | None] | None = None) -> str:
    """A `md.Table` as HTML (cells escaped), `name` its id; its last row is bold where it is the overall one.
    `sections` (row name -> section): each section's rows headed by its name. A headline number's cell carries its
    n, interval and chance level (`headline_columns`) as data attributes, and its verdict against chance is marked."""
    head, align, rows = table
    num = [' class="num"' if a.endswith(":") else "" for a in align]
    headline = headline_columns(head)
    against = head.index("against chance") if "against chance" in head else None
    out = [
        f'<table id="{html.escape(name, quote=True)}"' + (' class="headline"' if headline else "") + ">",
        "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>",
    ]
    last_section = None
    for k, cells in enumerate(rows):
        section = (sections or {}).get(cells[0])
        if section is not None and section != last_section and section != cells[0]:
            out.append(f'<tr class="section"><th colspan="{len(head)}">{html.escape(section)}</th></tr>')
        last_section = section if section is not None else last_section
        last = overall and k == len(rows) - 1 and cells[0] == "overall"
        attrs = ' class="overall"' if last else ""
        cols = []
        for c, (style, x) in enumerate(zip(num, cells, strict=True)):
            if c in headline and x:
                n, ci, chance = (html.escape(cells[i], quote=True) for i in headline[c])
                style = f' class="num headline" data-n="{n}" data-ci95="{ci}" data-chance="{chance}"'
            elif c == against:
                style = ' class="against below"' if x.startswith("BELOW") else ' class="against"'
            cols.append(f"<td{style}>{html.escape(x)}</td>")
        out.append(f'<tr data-row="{html.escape(cells[0], quote=True)}"{attrs}>{"".join(cols)}</tr>')
    return "\n".join(out + ["</tbody></table>"])


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header."""
    return struct.unpack(">II", data[16:24])


def _figure(path: Path, alt: str) -> str:
    """The PNG inline at its own pixel size (`figure_kit.PAGE_WIDTH_PX` and below fit a 1280 px window unscaled)."""
    raw = path.read_bytes()
    width, height = png_size(raw)
    data = base64.b64encode(raw).decode("ascii")
    return (f'<img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
            f'alt="{html.escape(alt, quote=True)}">')  # fmt: skip


def _paragraph(lines: list[str]) -> str:
    return f"<p>{_inline(' '.join(lines))}</p>"


def suite_html(suite: dict) -> list[str]:
    """A suite's overall figure, section scores and tables, and a text as the model saw it."""
    out = [f"<h2>Suite: {html.escape(suite['name'])}</h2>", "<ul>"]
    out += [f"<li>{_inline(fact)}</li>" for fact in suite_facts(suite)] + ["</ul>"]
    sections = subset_table(suite)[1]
    for title, table in suite_tables(suite):
        name = "suite-" + re.sub(r"\W+", "-", title.lower())
        grouped = sections if title == "Subsets" and set(sections.values()) - {None, OUTSIDE} else None
        out += [
            f"<h3>{html.escape(title)}</h3>",
            html_table(table, name, overall=title == "Sections", sections=grouped),
        ]
    example = (suite.get("formatting") or {}).get("example")
    if example:
        out += ["<p>A text as the model saw it:</p>", f"<pre>{html.escape(example)}</pre>"]
    return out


def render_html(result: dict, kept: list[Example], rewards: list[np.ndarray], figures: dict[str, Path]) -> str:
    """report.html for eval.json's `result`, its scored items `kept` with their `rewards`, and the figures
    report.md shows (`figures`: file name -> the PNG written)."""
    o = result["overall"]
    items, quota = browser_items(kept, rewards)
    body = ["<h1>Reward model evaluation</h1>", "<ul>"]
    body += [f"<li>{_inline(line)}</li>" for line in md.header_lines(result)] + ["</ul>"]
    if result.get("suite"):
        body += suite_html(result["suite"])
    if result.get("ensemble"):  # several models: the rest of the page is their mean's
        block = result["ensemble"]
        body += ["<h2>Ensemble</h2>", _paragraph(about(block))]
        body += [html_table(ensemble_table(block), "ensemble", overall=False), _paragraph(uncertainty_text(block))]
    order = subset_sections(result)
    grouped = order if set(order.values()) - {None, OUTSIDE} else None
    body += ["<h2>Accuracy</h2>", _paragraph(md.ACCURACY_TEXT)]
    body.append(html_table(md.accuracy_table(result), "accuracy", sections=grouped))
    body.append(_figure(figures["accuracy.png"], "accuracy per subset"))
    if md.has_groups(o):
        body += ["<h2>Groups</h2>", _paragraph(md.GROUP_TEXT)]
        body.append(html_table(md.group_table(result), "groups", sections=grouped))
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
    body += [
        _paragraph(control_text(md.has_groups(o))),
        html_table(md.length_controls(result), "length-controls", sections=grouped),
    ]
    body.append(_figure(figures["length_bias.png"], "length bias"))
    if result.get("attributes") and "attributes.png" in figures:
        body += ["<h2>Attributes</h2>", _paragraph(md.ATTRIBUTE_TEXT)]
        body += [html_table(md.attribute_table(result), "attributes", overall=False)]
        body.append(_figure(figures["attributes.png"], "attribute outputs against scores"))
    body += browser_html(list(order), items, quota, len(kept))
    data = json.dumps({"items": items}, ensure_ascii=False, allow_nan=False)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode("ascii")
    policy = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"
    title = html.escape(shown_text(f"Reward model evaluation: {result['eval']['model']}"))
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{title}</title>",
        '<link rel="icon" href="data:,">', f"<style>{STYLE}</style>", "</head>", "<body>", *body,
        f'<script type="application/json" id="rm-items">{data}</script>', f"<script>{SCRIPT}</script>",
        "</body>", "</html>", "",
    ])  # fmt: skip
