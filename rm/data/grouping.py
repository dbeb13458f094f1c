"""Records of one prompt gathered into one group: rows always, pairwise records when `data.group_by_prompt: true`.

A group computes its prompt once for all its responses, so responses that share a prompt are
worth putting together even when the data gives them one per record:

- Rows (`rm/data/formats/rows.py`, HelpSteer2: one response and its score per line) of one prompt text and
  subset become one `Group`, ranked by score (equal scores tie). A row that repeats an earlier one (the same
  response, score and labels) is dropped and counted; a prompt with one scored row, rows that all tie, or two rows
  with the same response text labelled differently are a bad record, named by the lines of its rows
  ("train.jsonl:3+4+9"). `group_by_prompt: false` cannot read rows at all: one line says so.
- With `group_by_prompt: true`, pairwise records (`Pair`s) of one prompt text and subset become one
  `Group` with explicit `pairs` (a, b, tie): each record's comparison, kept as given (a comparison two
  records make counts twice, as the two pairs would have). Equal response texts are one response. The
  group's `rank` is each response's level in the strict order: 0 for nothing above it, else one more than
  the deepest response above it. A prompt with one record stays a `Pair`. Pair margins are not carried
  into a group (its pairs carry no margin) and are counted as dropped.
- Records whose strict comparisons form a cycle (line 3 puts A over B, line 7 B over A) have no ranking: the
  group keeps every given pair (a Bradley-Terry loss needs no ranking), the responses of one cycle share a level,
  and `Group.cycle` names the records, which `loss.type: plackett_luce` turns into a bad record after the
  tokenized-data cache (rm/collate/loss_labels.py), so that what is cached does not depend on the loss.

Everything else (K-response records, which are groups already, and pairs under `auto`) passes through
unchanged; the output keeps the input's order, each group where its first record was. Merges are counted
in the report under `grouped`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from rm.data.data_report import DataReport
from rm.data.formats.argilla import EDIT
from rm.data.formats.group import Group, ranks_from_scores
from rm.data.formats.pair import NO_LABELS, Pair
from rm.data.formats.rows import Row
from rm.data.labels import registered
from rm.errors import DataError, RecordError

_LINE = re.compile(r"^(.*?)(:| row )(\d+)$")


def gather_groups(
    items: Sequence[Pair | Group | Row], group_by_prompt: str | bool, report: DataReport
) -> list[Pair | Group]:
    """`items` (as the parsers gave them, in file order) with rows, and under `group_by_prompt: true` pairs,
    gathered into groups by prompt; bad groups go to `report.reject` (stop, or skip and count)."""
    merge_pairs = group_by_prompt is True
    slots: list[Pair | Group | list] = []
    members: dict[tuple[str, str, str], list] = {}
    for item in items:
        if isinstance(item, Row) or (merge_pairs and isinstance(item, Pair)):
            if isinstance(item, Row) and group_by_prompt is False:
                raise DataError(f"{item.origin}: rows (one response per record) need data.group_by_prompt auto or true")
            key = (type(item).__name__, item.prompt, item.subset)
            if key not in members:
                members[key] = []
                slots.append(members[key])
            members[key].append(item)
        else:
            slots.append(item)
    out: list[Pair | Group] = []
    for slot in slots:
        if not isinstance(slot, list):
            out.append(slot)
            continue
        try:
            out.append(group_rows(slot, report) if isinstance(slot[0], Row) else merge_pairs_of(slot, report))
        except RecordError as e:
            report.reject(joined_origin([m.origin for m in slot]), e)
    return out


def group_rows(rows: list[Row], report: DataReport) -> Group:
    """One prompt's rows as a group ranked by score, or the RecordError that makes them a bad record."""
    field = rows[0].score_field
    kept: dict[str, Row] = {}
    for row in rows:
        first = kept.setdefault(row.response, row)
        if first is row:
            continue
        if (first.score, first.attributes, dict(first.labels)) != (row.score, row.attributes, dict(row.labels)):
            message = f"field 'response' holds the same text at {first.origin} and {row.origin}, labelled differently"
            raise RecordError("duplicate_response", message, "response")
        report.count("grouped", "repeated_rows_dropped")  # the same response, said again: the group keeps one
    rows = list(kept.values())
    if len(rows) < 2:
        message = f"only one row with a {field!r} score has this prompt; a group needs 2 (field 'prompt')"
        raise RecordError("too_few_responses", message, "prompt")
    scores = [row.score for row in rows]
    if len(set(scores)) < 2:
        message = f"field {field!r}: every row of this prompt has the same score ({scores[0]:g}), nothing to learn"
        raise RecordError("all_tied", message, field)
    report.count("grouped", "rows", len(rows))
    report.count("grouped", "groups_from_rows")
    responses = tuple(row.response for row in rows)
    origin = joined_origin([row.origin for row in rows])
    first = rows[0]
    attributes = tuple(row.attributes or {} for row in rows) if any(row.attributes for row in rows) else None
    labels = merged_labels([(row.labels, (k,)) for k, row in enumerate(rows)], len(rows), report)
    return Group(
        first.prompt, responses, ranks_from_scores(scores), first.subset, origin=origin, turn_starts=first.turn_starts,
        scores=tuple(scores), attributes=attributes, labels=labels,
    )  # fmt: skip


def merge_pairs_of(pairs: list[Pair], report: DataReport) -> Pair | Group:
    """One prompt's pairwise records as a group with their comparisons; one record stays a pair."""
    if len(pairs) < 2:
        return pairs[0]
    index: dict[str, int] = {}
    for p in pairs:
        for text in (p.chosen, p.rejected):
            index.setdefault(text, len(index))
    triples = tuple((index[p.chosen], index[p.rejected], p.tie) for p in pairs)
    strict = [(a, b) for a, b, tie in triples if not tie]
    rank, cyclic = levels(len(index), strict)
    lines = [p.origin for p, (a, b, tie) in zip(pairs, triples, strict=True) if not tie and (a, b) in cyclic]
    if cyclic:
        report.count("grouped", "groups_with_cycles")
    report.count("grouped", "pairs_merged", len(pairs))
    report.count("grouped", "groups_from_pairs")
    dropped = sum(p.margin is not None for p in pairs)
    if dropped:
        report.count("grouped", "margins_dropped", dropped)
    first = pairs[0]
    origin = joined_origin([p.origin for p in pairs])
    attributes = merged_attributes(pairs, index)
    labels = merged_labels([(p.labels, (index[p.chosen], index[p.rejected])) for p in pairs], len(index), report)
    return Group(
        first.prompt, tuple(index), rank, first.subset, origin=origin, turn_starts=first.turn_starts, pairs=triples,
        attributes=attributes, labels=labels, cycle=", ".join(lines),
    )  # fmt: skip


def merged_labels(given: list[tuple[dict, tuple[int, ...]]], k: int, report: DataReport) -> dict:
    """A group's registered labels from its records' (labels, the group's positions of their responses): per
    response the first value given; a group value all records give alike, else none (counted as dropped)."""
    out: dict = {}
    for name in dict.fromkeys(n for labels, _ in given for n in labels):
        values = [(labels[name], at) for labels, at in given if name in labels]
        if registered()[name].level == "response":
            row = [math.nan] * k
            for value, at in values:
                for position, v in zip(at, value if isinstance(value, tuple) else (value,), strict=True):
                    row[position] = v if math.isnan(row[position]) else row[position]
            out[name] = tuple(row)
        elif len(values) == len(given) and len({v for v, _ in values}) == 1:
            out[name] = values[0][0]
        else:
            report.count("grouped", f"{name}_dropped", len(values))
    return out or NO_LABELS


def merged_attributes(pairs: list[Pair], index: dict[str, int]) -> tuple[dict[str, float], ...] | None:
    """Each response's attribute scores in a merged group: per name, the first record that gives it."""
    if all(p.attributes is None for p in pairs):
        return None
    out: list[dict[str, float]] = [{} for _ in index]
    for p in pairs:
        for text, scores in zip((p.chosen, p.rejected), p.attributes or (), strict=False):
            out[index[text]] = scores | out[index[text]]
    return tuple(out)


def levels(k: int, edges: list[tuple[int, int]]) -> tuple[tuple[int, ...], set[tuple[int, int]]]:
    """(each of k responses' level under `edges` (a above b), the edges on a cycle). The responses of one
    cycle (a strongly connected set) share a level: the order collapsed to the acyclic order between cycles.
    K is a handful, so the transitive closure is computed outright (k^3)."""
    reach = [[False] * k for _ in range(k)]
    for a, b in edges:
        reach[a][b] = True
    for m in range(k):
        for i in range(k):
            if reach[i][m]:
                reach[i] = [x or y for x, y in zip(reach[i], reach[m], strict=True)]
    comp = [next(u for u in range(k) if u == v or (reach[u][v] and reach[v][u])) for v in range(k)]
    above: dict[int, set[int]] = {c: set() for c in comp}
    for a, b in edges:
        if comp[a] != comp[b]:
            above[comp[b]].add(comp[a])
    level: dict[int, int] = {}

    def of(c: int) -> int:
        if c not in level:
            level[c] = 1 + max((of(p) for p in above[c]), default=-1)
        return level[c]

    return tuple(of(comp[v]) for v in range(k)), {(a, b) for a, b in edges if reach[b][a]}


def joined_origin(origins: list[str]) -> str:
    """One origin naming every record of a group: "train.jsonl:3+7+9" when they share a file, else each in full.
    Pairs made from one Argilla record's edits name that record once."""
    bases = list(dict.fromkeys(o.split(EDIT)[0] for o in origins))
    found = [_LINE.match(o) for o in bases]
    if all(found) and len({(m.group(1), m.group(2)) for m in found}) == 1:
        head, sep = found[0].group(1), found[0].group(2)
        return head + sep + "+".join(m.group(3) for m in found)
    return " + ".join(bases)
