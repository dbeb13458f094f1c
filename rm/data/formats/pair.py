"""A preference pair, what a record parser needs besides the record, and the field checks every format shares.

Every format (`rm/data/formats.py`, `rm/data/argilla.py`) turns a raw record into `Pair`s with these
helpers, so a missing field or an empty answer is the same `RecordError` whatever the format.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.errors import RecordError


class _NoLabels(Mapping):
    """An item's labels until one is read: one shared, immutable empty mapping rather than an empty dict per item
    (10 MB for 168,000 pairs); rm/data/labels.py gives an item a dict of its own at its first label."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:  # immutable, so a dataclass field may default to it
        return 0


NO_LABELS: Mapping[str, Any] = _NoLabels()
FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: margins, scores and attributes train as float32 (or bf16, of the same range)."""
LOSS_TERM_MAX = 1e30
"""The most one number of a record may add to the training loss. float32 sums a micro-batch's terms, a step's
micro-batches and the logged loss of many steps; 1e30 leaves a factor of 3.4e8 below FLOAT32_MAX for those sums,
where a number merely finite as float32 overflows them and its step is skipped with no record named."""
MARGIN_MAX = LOSS_TERM_MAX
"""A margin m adds -log sigmoid(d - m) ~= |m| to the loss once it dwarfs the reward gap d (3e38 in two pairs of a
micro-batch sums to inf)."""
MARGIN_WHY = "a pair's loss grows as its margin, and a batch's sum of them must stay finite in float32"
SCORE_MAX = MARGIN_MAX / 2
"""The difference of two scores is their pair's margin (`loss.use_margin`), so each is at most half a margin."""
SCORE_WHY = f"two scores' difference is a margin, which the loss takes up to ±{MARGIN_MAX:g}"
ATTRIBUTE_MAX = math.sqrt(LOSS_TERM_MAX)
"""1e15: the attribute loss squares the error (pred - y)^2 (or scales it by 1/sigma first, gaussian), which is
infinite in float32 past |y| ~ 1.8e19 while the head's output is small, as it is from the start."""
ATTRIBUTE_WHY = "the attribute loss squares it, and a batch's sum of squares must stay finite in float32"


@dataclass
class Pair:
    """One preference: a shared prompt and two continuations of it, the first preferred."""

    prompt: str
    chosen: str
    rejected: str
    subset: str
    _: KW_ONLY  # what the record says beyond its texts, by name
    margin: float | None = None
    origin: str = ""
    """Where it came from, "file:line", for error messages and reports."""
    turn_starts: tuple[int, ...] | None = None
    """Offsets in `prompt` where a long prompt may be cut (user turns); None: at its "\\n\\nHuman:" tags."""
    parts_early: bool = False
    """True when chosen and rejected part before the final assistant turn."""
    tie: bool = False
    """The record says the two are equally good (`"tie": true`, or equal `chosen_score`/`rejected_score`): rank
    (0, 0), a term only under `loss.ties: davidson`. The texts must still differ."""
    attributes: tuple[dict[str, float], dict[str, float]] | None = None
    """(chosen's, rejected's) attribute scores by name (rm/data/formats/attributes.py); None: none given."""
    strength: float | None = None
    """How much chosen is preferred (rm/data/formats/strength.py); None: none."""
    target: float | None = None
    """The soft label p that `strength` maps to once the scale is known (NaN: a hard label); None: not soft."""
    labels: Mapping[str, Any] = NO_LABELS
    """Registered labels' values by name (rm/data/labels.py): a float, or (chosen's, rejected's)."""


@dataclass
class ParseContext:
    """What a parser needs besides the record: defaults, options and where problems go."""

    report: DataReport
    renderer: Renderer = field(default_factory=Renderer)
    subset: str = "default"
    """Subset of records that do not name their own (the folder or dataset name)."""
    argilla: Any = None
    """`ArgillaConfig` (options for Argilla exports); None: all off."""
    score_field: str = ""
    """`data.score_field`: the score that orders a K-response group or a row; "" takes the format's own."""


def text_field(record: dict, name: str) -> str:
    if record.get(name) is None:
        raise RecordError("missing_field", f"field {name!r} is missing", name)
    return string_of(record[name], name)


def user_prompt(record: dict, name: str) -> str:
    """A string prompt that its format renders as a user message (UltraFeedback's `instruction`, RewardBench 2's,
    HelpSteer2's `prompt`…): an empty one would train as an empty user turn, so it is a bad record. The `prompt`
    format trains `prompt + response` as written, so there an empty prompt stays allowed (`text_field`)."""
    text = text_field(record, name)
    if not text.strip():
        raise RecordError("empty_prompt", f"field {name!r} is empty: it would train as an empty user turn", name)
    return text


def string_of(value: Any, name: str) -> str:
    """`value` if it is a string, else the RecordError that names field `name` (a path such as "answers[2].answer")."""
    if not isinstance(value, str):
        raise RecordError("not_a_string", f"field {name!r} must be a string, got {type(value).__name__}", name)
    return value


def number_of(value: Any, name: str, limit: float, why: str) -> float:
    """A finite number from a JSON number or a string holding one (CSV cells are strings), no larger in size than
    `limit` (what the loss can take: MARGIN_MAX, SCORE_MAX, ATTRIBUTE_MAX), else the RecordError that names field
    `name` and says `why` the limit is there."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise RecordError("not_a_number", f"field {name!r} must be a number, got {value!r}", name) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError("not_a_number", f"field {name!r} must be a finite number, got {value!r}", name)
    if abs(value) > limit:
        message = f"field {name!r} is {value:g}, beyond ±{limit:.4g}: {why}"
        raise RecordError("out_of_range", message, name)
    return float(value)


def lf_only(text: str, name: str, origin: str, report: DataReport) -> str:
    """Formats whose turns are found by newlines cannot keep CRLF: stop, or repair and count it."""
    if "\r\n" not in text:
        return text
    report.repair(origin, "crlf", f"field {name!r} has CRLF (\\r\\n) line breaks inside its text", name)
    return text.replace("\r\n", "\n")


def margin_of(record: dict) -> float | None:
    value = record.get("margin")
    if value is None or value == "":
        return None
    return number_of(value, "margin", MARGIN_MAX, MARGIN_WHY)


def tie_of(record: dict) -> bool:
    """Whether a pairwise record says its two answers tie: `"tie": true`, or equal `chosen_score` and
    `rejected_score`. A record saying both a tie and different scores contradicts itself: a bad record."""
    tie = record.get("tie")
    if tie is not None and not isinstance(tie, bool):
        raise RecordError("not_a_bool", f"field 'tie' must be true or false, got {tie!r}", "tie")
    names = ("chosen_score", "rejected_score")
    if any(record.get(k) is None or record.get(k) == "" for k in names):
        return bool(tie)
    chosen, rejected = (number_of(record[k], k, SCORE_MAX, SCORE_WHY) for k in names)
    if tie and chosen != rejected:
        message = f"field 'tie' is true but chosen_score {chosen:g} and rejected_score {rejected:g} differ"
        raise RecordError("tie_conflict", message, "tie")
    return chosen == rejected


def subset_of(record: dict, default: str) -> str:
    value = record.get("subset")
    return str(value) if value not in (None, "") else default


def check_responses(chosen: str, rejected: str) -> None:
    for name, text in (("chosen", chosen), ("rejected", rejected)):
        if not text.strip():
            raise RecordError("empty_response", f"field {name!r} has an empty response after the prompt", name)
    if chosen == rejected:
        raise RecordError("identical", "fields 'chosen' and 'rejected' are identical")
