"""report.html's pair browser: the worst-ranked items of each subset with their texts and rewards side by side.

What a model got wrong is read in its texts, and a summary number says nothing about which ones. Each item is
named by its record's id (or its file, relative to the data's folder, and line: rm/evaluation/report/record_refs.py);
a group's responses are shown highest reward first, the best-ranked ones marked, so what the model preferred is the
first thing read. The page's script (page_assets.py) builds the cards from this JSON, texts as `textContent`.
"""

from __future__ import annotations

import html
import math

import numpy as np

from rm.data.formats.group import rank_of, responses_of
from rm.data.load import Example
from rm.evaluation.eval_result import comparisons_of
from rm.evaluation.report.record_refs import record_refs

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


def response_order(rank: list[int], rewards: np.ndarray) -> list[int]:
    """A pair: chosen then rejected, as the data gives them. A group of three or more: highest reward first
    (an unscored response last), ties by rank, so the model's own order is read top to bottom."""
    if len(rank) <= 2:
        return sorted(range(len(rank)), key=lambda k: rank[k])
    r = [float(x) if math.isfinite(x) else -math.inf for x in rewards]
    return sorted(range(len(rank)), key=lambda k: (-r[k], rank[k], k))


def browser_item(index: int, item: Example, rewards: np.ndarray, ref: tuple[str, str] = ("", "")) -> dict:
    """One item of the browser: its record (`ref`: id, where), texts (cut to `TEXT_CHARS`), rewards and margin."""
    rank = rank_of(item)
    pairs = comparisons_of(item, rewards)
    strict = pairs[pairs[:, 2] == 0]
    two_levels = len(set(rank)) == 2  # a pair, or RewardBench 2's and RM-Bench's chosen against rejected
    responses = []
    for place, k in enumerate(response_order(rank, rewards), 1):
        text = responses_of(item)[k]
        label = ("chosen" if rank[k] == min(rank) else "rejected") if two_levels else f"rank {rank[k] + 1}"
        responses.append({
            "label": label, "reward": _number(rewards[k]), "best": rank[k] == min(rank), "chars": len(text),
            "text": text[:TEXT_CHARS], "cut": max(0, len(text) - TEXT_CHARS),
            "place": place if len(rank) > 2 else None,
        })  # fmt: skip
    return {
        "i": index,
        "origin": ref[0] or ref[1],
        "id": ref[0],
        "where": ref[1],
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
    refs = record_refs([kept[k].origin for k in held])
    return [browser_item(k, kept[k], rewards[k], refs[kept[k].origin]) for k in held], quota


def browser_html(subsets: list[str], items: list[dict], quota: int, total: int) -> list[str]:
    """The pair browser's controls (`subsets` in the report's order) and what it holds; the script fills `#items`
    from the JSON block."""
    held = (
        f"all {total} scored items"
        if len(items) == total
        else (f"the {quota} lowest-margin items of each subset, {len(items)} of the {total} scored")
    )
    options = "".join(f'<option value="{html.escape(n, quote=True)}">{html.escape(n)}</option>' for n in subsets)
    return [
        "<h2>Pairs</h2>",
        f'<p class="note">Held here: {held}; texts longer than {TEXT_CHARS} characters are cut (a prompt keeps '
        "its end). Each item is named by its record's id, or by its file (relative to the data's folder) and line. "
        "The margin is the better response's reward minus the other's; for a group, the smallest over its ordered "
        "pairs, and its responses are listed highest reward first (the best-ranked marked). Below 0: the model "
        "ordered a pair the wrong way round. Every item is in rewards.jsonl.</p>",
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
