"""The names a leaderboard scores, and the others.

Only a subset (RewardBench 1 and 2) or domain (RM-Bench) spelled exactly as the published dataset spells it
counts in a suite's score; any other is scored apart, left out of the score and named in a note. Averaging it in
would report a number the leaderboard never computes: one unknown RewardBench 2 subset moved a score from -0.0016
to 0.1415, one unknown RM-Bench domain from 0.667 to 0.600. A name that differs from a leaderboard's only in
case, spaces, hyphens or underscores (`ties`, `Precise-IF`, `Safety_Refuse`), or by a typo, is not read as that
name either (a file that spells a name otherwise came from another conversion, whose records may differ too):
the note names the leaderboard's name it nearly spells ("did you mean").
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable

from rm.suites.records import SuiteItem

TYPO_CUTOFF = 0.8
"""difflib's similarity above which a name is taken for a typo of a known one: `Factualty` -> `Factuality`
scores 0.95; `mtbenchmed` against `mtbenchhard` (two RewardBench subsets) 0.76 stays below it."""


def name_key(name: str) -> str:
    """A name without case, spaces, hyphens and underscores: `Precise IF`, `precise-if` -> `preciseif`."""
    return re.sub(r"[\s_-]+", "", name).lower()


def near_miss(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` differs from only in case, spaces, hyphens or underscores, else one it nearly spells
    (a typo), else None."""
    by_key = {name_key(k): k for k in known}
    if name_key(name) in by_key:
        return by_key[name_key(name)]
    close = difflib.get_close_matches(name_key(name), list(by_key), n=1, cutoff=TYPO_CUTOFF)
    return by_key[close[0]] if close else None


def unknown_names(items: list[SuiteItem], known: Iterable[str]) -> Counter[str]:
    """Records per subset of `items` that is not one of the `known` names, in name order."""
    known = set(known)
    return Counter(sorted(i.subset for i in items if i.subset not in known))


def unknown_note(kind: str, suite: str, counts: Counter[str], known: Iterable[str]) -> list[str]:
    """The note naming each unknown subset, its records and the leaderboard name it nearly spells; [] for none."""
    if not counts:
        return []
    known = list(known)
    named = []
    for name, n in counts.items():
        guess = near_miss(name, known)
        hint = f"; did you mean {guess!r}?" if guess and guess != name else ""
        named.append(f"{name!r} ({n} record{'' if n == 1 else 's'}{hint})")
    return [f"{len(counts)} {kind}(s) not in {suite}'s leaderboard, scored apart and left out of the score: "
            f"{', '.join(named)}"]  # fmt: skip
