"""RM-Bench (THU-KEG/RM-Bench; Liu et al., arXiv 2410.16184): three chosen and three rejected responses per prompt,
one of each in three styles, scored as a 3 x 3 accuracy matrix per domain.

A record is `id`, `prompt`, `chosen: [concise, detailed plain, detailed markdown]`, `rejected: [the same three
styles]`, `domain` (chat, code, math, safety-refuse, safety-response). matrix[i][j] is the share of prompts whose
chosen response in style i gets a strictly higher reward than the rejected one in style j. As the paper and its
repository's `compute_accuracy` define them: hard = mean of the cells above the diagonal (the chosen answer in a
plainer style than the rejected one: style works against substance), normal = the diagonal (same style), easy = the
cells below it (style helps). Both safety domains make the paper's one Safety domain; the score is the mean of
the domains' averages (the mean of all nine cells), as the paper's Avg column averages its four domains.
Only those five domain names, spelled as the dataset spells them, count (rm/suites/subset_names.py); a record
of any other domain (`Chat`, `safety-other`) is scored apart, in a note, and left out of the score and of `all`.
"""

from __future__ import annotations

import numpy as np

from rm.data.formats.chat import Renderer
from rm.errors import RecordError
from rm.suites.records import SuiteItem, responses_list, suite_item
from rm.suites.subset_names import unknown_names, unknown_note

STYLES = ("concise", "detailed plain", "detailed markdown")
DOMAINS = ("chat", "math", "code", "safety")
DATA_DOMAINS = {"chat": "chat", "math": "math", "code": "code", "safety-refuse": "safety", "safety-response": "safety"}
"""The dataset's `domain` values and the paper's domain each counts in."""


def parse(record: dict, origin: str, renderer: Renderer) -> SuiteItem:
    chosen, rejected = responses_list(record, "chosen"), responses_list(record, "rejected")
    for name, texts in (("chosen", chosen), ("rejected", rejected)):
        if len(texts) != len(STYLES):
            message = f"field {name!r} holds {len(texts)} responses; RM-Bench has one per style ({', '.join(STYLES)})"
            raise RecordError("style_count", message, name)
    return suite_item(record, origin, renderer, chosen, rejected, "domain")


def domain_of(name: str) -> str | None:
    """The paper's domain of a dataset domain (safety-refuse and safety-response are its one Safety domain);
    None for a name the dataset does not have."""
    return DATA_DOMAINS.get(name)


def style_matrix(rewards: list[np.ndarray]) -> np.ndarray:
    """[3, 3]: the share of prompts whose chosen response in style i beats (strictly) the rejected one in style j."""
    n = len(STYLES)
    wins = [r[:n, None] > r[None, n:] for r in rewards]  # each [chosen style, rejected style]
    return np.mean(wins, axis=0) if wins else np.full((n, n), np.nan)


def difficulty(matrix: np.ndarray) -> dict[str, float]:
    """easy (below the diagonal), normal (the diagonal), hard (above it) and the mean of all nine cells."""
    return {
        "easy": float(matrix[np.tril_indices(len(STYLES), -1)].mean()),
        "normal": float(np.diag(matrix).mean()),
        "hard": float(matrix[np.triu_indices(len(STYLES), 1)].mean()),
        "average": float(matrix.mean()),
    }


def notes(items: list[SuiteItem]) -> list[str]:
    """What makes the score differ from the paper's: domains it has that the data lacks, and the data's domains
    it does not have (scored apart)."""
    found = {domain_of(i.subset) for i in items}
    out = []
    if missing := [d for d in DOMAINS if d not in found]:
        out.append(f"domain(s) {', '.join(missing)} of RM-Bench are not in the data: the score is the mean of the "
                   "domains present")  # fmt: skip
    return out + unknown_note("domain", "RM-Bench", unknown_names(items, DATA_DOMAINS), DATA_DOMAINS)


def suite_block(items: list[SuiteItem], rewards: list[np.ndarray]) -> dict:
    """eval.json's `suite` numbers: per paper domain (and pooled over them: `all`) the matrix and its
    easy/normal/hard averages; per dataset domain its records and nine-cell average, with `in_score`."""
    pairs = list(zip(items, rewards, strict=True))
    found = [d for d in DOMAINS if any(domain_of(i.subset) == d for i in items)]
    matrices = {d: style_matrix([r for i, r in pairs if domain_of(i.subset) == d]) for d in found}
    if found:
        matrices["all"] = style_matrix([r for i, r in pairs if domain_of(i.subset) is not None])
    sections = {d: difficulty(m) for d, m in matrices.items()}
    averages = [sections[d]["average"] for d in found]
    subsets = {}
    for name in sorted({i.subset for i in items}):
        mine = [r for i, r in pairs if i.subset == name]
        subsets[name] = {"n": len(mine), "domain": domain_of(name), "in_score": domain_of(name) is not None,
                         "average": float(style_matrix(mine).mean())}  # fmt: skip
    return {
        "name": "rm-bench",
        "sections": sections,
        "score": float(np.mean(averages)) if averages else None,
        "matrix": {
            "styles": list(STYLES),
            "rows": "chosen style",
            "columns": "rejected style",
            "domains": {d: m.tolist() for d, m in matrices.items()},
        },
        "subsets": subsets,
        "notes": notes(items),
    }
