"""red-team-attempts: transcripts to *score*, never pairs to train on.

Each record of `red_team_attempts.jsonl.gz` is one whole conversation ("\\n\\nHuman: …\\n\\nAssistant: …")
with its harm measurements: `min_harmlessness_score_transcript`, `num_params`, `model_type`, `rating`,
`task_description`, `task_description_harmlessness_score`, `red_team_member_id`, `is_upworker`, `tags`.
There is no chosen/rejected pair, and the HH-RLHF card says these data are not meant for fine-tuning
or preference modelling, so the pair loader refuses them with `REFUSAL`; `load_transcripts` reads
them for scoring a trained model against the human and automated harm measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rm.data.data_report import DataReport
from rm.data.formats.hh import HH_SUBSETS, parse_turns
from rm.data.formats.pair import lf_only, text_field
from rm.data.sources import Records, read_file, read_hub
from rm.errors import DataError, RecordError

SUBSET = "red-team-attempts"
FILE = "red_team_attempts.jsonl.gz"
REFUSAL = (
    f"{SUBSET} holds red-team transcripts (one conversation and its harm scores per record), not preference "
    "pairs, and the HH-RLHF card says they are not meant for fine-tuning or preference modelling. Train on the "
    f"preference subsets ({', '.join(HH_SUBSETS)}); read the transcripts for scoring with "
    "rm.data.transcripts.load_transcripts, or look at them with `python -m rm data inspect SOURCE`."
)
NUMBERS = ("min_harmlessness_score_transcript", "rating", "task_description_harmlessness_score")
STRINGS = ("num_params", "model_type", "task_description")


@dataclass
class Transcript:
    """One red-team conversation, in HH text, and what the card says was measured about it."""

    text: str
    origin: str
    min_harmlessness_score_transcript: float | None = None
    rating: float | None = None
    task_description_harmlessness_score: float | None = None
    num_params: str | None = None
    model_type: str | None = None
    task_description: str | None = None
    red_team_member_id: Any = None
    is_upworker: bool | None = None
    tags: list[str] = field(default_factory=list)


def parse_transcript(record: Any, origin: str, report: DataReport) -> Transcript:
    if not isinstance(record, dict):
        raise RecordError("not_an_object", f"expected a JSON object, got {type(record).__name__}")
    text = lf_only(text_field(record, "transcript"), "transcript", origin, report)
    try:
        turns = parse_turns(text)
    except ValueError as e:
        raise RecordError("bad_turns", f"field 'transcript' {e}", "transcript") from None
    if not turns:
        raise RecordError("empty_response", "field 'transcript' has no turns", "transcript")
    out = Transcript(text, origin, red_team_member_id=record.get("red_team_member_id"))
    for name in NUMBERS:
        value = record.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise RecordError("not_a_number", f"field {name!r} must be a number, got {value!r}", name)
        setattr(out, name, None if value is None else float(value))
    for name in STRINGS:
        value = record.get(name)
        if value is not None and not isinstance(value, str):
            raise RecordError("not_a_string", f"field {name!r} must be a string, got {type(value).__name__}", name)
        setattr(out, name, value)
    if record.get("is_upworker") is not None and not isinstance(record["is_upworker"], bool):
        raise RecordError("not_a_bool", "field 'is_upworker' must be true or false", "is_upworker")
    out.is_upworker = record.get("is_upworker")
    tags = record.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise RecordError("bad_tags", "field 'tags' must be a list of strings", "tags")
    out.tags = tags
    return out


def red_team_records(source: str, report: DataReport) -> Records:
    """The raw records: a file, an hh-rlhf copy (`<root>/red-team-attempts/…`), or the Hub's data_dir."""
    path = Path(source).expanduser()
    if path.is_dir():
        found = [p for p in (path / SUBSET / FILE, path / FILE) if p.is_file()]
        if not found:
            raise DataError(f"{path}: no {SUBSET}/{FILE} here")
        path = found[0]
    if path.is_file():
        return read_file(path, report)
    return read_hub(source, "train", SUBSET if source == "Anthropic/hh-rlhf" else "")


def load_transcripts(source: str, on_bad_record: str = "error", report: DataReport | None = None) -> list[Transcript]:
    """Every transcript of `source`; bad records stop the load or are skipped and counted, as for pairs."""
    report = report or DataReport(on_bad_record)
    out = []
    for origin, record in red_team_records(source, report):
        try:
            out.append(parse_transcript(record, origin, report))
        except RecordError as e:
            report.reject(origin, e)
    return out
