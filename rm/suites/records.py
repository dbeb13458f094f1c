"""Suite data: the raw records of a file, a folder or a Hub dataset (read by `rm.data.sources`, as training reads
its data), and the `SuiteItem` a suite makes of each: one prompt and all its responses, chosen first.

A suite keeps every response of a record, even one repeated word for word or one longer than `max_length`
(`rm.data.formats` would refuse or drop those for training): dropping a response would change a best-of-4
result, and the leaderboards score every response. Texts are rendered as training renders a group
(`rm.data.formats.ranked.rendered`: a string prompt is one user message, each response one assistant message,
through the model's chat template where it has one, else as HH text).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rm.config.loader import relative_note
from rm.data.data_report import DataReport
from rm.data.formats.chat import Message, Renderer, messages_from
from rm.data.formats.group import Group
from rm.data.formats.pair import Pair, string_of, text_field
from rm.data.formats.ranked import rendered
from rm.data.sources import SUFFIXES, Records, read_file, read_hub
from rm.errors import DataError, RecordError


@dataclass
class SuiteItem:
    """One record of a suite: `prompt + responses[k]` is conversation k as the model sees it."""

    prompt: str
    responses: tuple[str, ...]
    """Rendered responses in the record's order: its `n_chosen` chosen ones first, then the rejected ones."""
    n_chosen: int
    subset: str
    """The record's subset (RewardBench 1 and 2) or domain (RM-Bench)."""
    origin: str
    id: str = ""
    turn_starts: tuple[int, ...] | None = None
    """Where the prompt's user turns start (a long prompt loses whole turns first); None: at its HH tags."""

    def example(self) -> Pair | Group:
        """The item as the pair or group `rm eval`'s usual numbers are computed over (rm.evaluation.eval_result):
        every chosen response ranked above every rejected one."""
        if self.n_chosen == 1 and len(self.responses) == 2:
            return Pair(self.prompt, *self.responses, self.subset, origin=self.origin, turn_starts=self.turn_starts)
        rank = (0,) * self.n_chosen + (1,) * (len(self.responses) - self.n_chosen)
        return Group(self.prompt, self.responses, rank, self.subset, origin=self.origin, turn_starts=self.turn_starts)


Parser = Callable[[dict, str, Renderer], SuiteItem]


def responses_list(record: dict, name: str) -> list[str]:
    """A non-empty list of response texts (RewardBench 2's and RM-Bench's `chosen` and `rejected`)."""
    value = record.get(name)
    if not isinstance(value, list) or not value:
        got = "missing" if value is None else f"{type(value).__name__} {value!r}"[:80]
        raise RecordError("not_a_list", f"field {name!r} must be a non-empty list of responses, got {got}", name)
    return [string_of(t, f"{name}[{k}]") for k, t in enumerate(value)]


def suite_item(
    record: dict, origin: str, renderer: Renderer, chosen: list[str], rejected: list[str], subset_field: str
) -> SuiteItem:
    """The record's prompt (text, or a list of messages ending on a user turn) and its responses, rendered."""
    raw = record.get("prompt")
    prompt: str | list[Message] = (
        messages_from(raw, "prompt") if isinstance(raw, list) else text_field(record, "prompt")
    )
    names = [f"chosen[{k}]" for k in range(len(chosen))] + [f"rejected[{k}]" for k in range(len(rejected))]
    text = rendered(prompt, [*chosen, *rejected], names, renderer)
    subset = record.get(subset_field)
    if subset in (None, ""):
        raise RecordError("missing_field", f"field {subset_field!r} is missing", subset_field)
    rid = record.get("id")
    return SuiteItem(
        text.prompt, text.responses, len(chosen), str(subset), origin, "" if rid is None else str(rid), text.turn_starts
    )


def split_files(folder: Path, split: str) -> list[Path]:
    """A downloaded dataset folder's files of `split`: `<split>.<ext>`, or the Hub's `data/<split>-*.parquet`
    shards (`hf download --repo-type dataset NAME --local-dir DIR` lays them out so)."""
    for ext in SUFFIXES:
        if (folder / f"{split}{ext}").is_file():
            return [folder / f"{split}{ext}"]
    shards = sorted(folder.glob(f"data/{split}-*.parquet")) or sorted(folder.glob(f"{split}-*.parquet"))
    if not shards:
        raise DataError(f"{folder}: no {split}.<ext> or data/{split}-*.parquet files (ext: {', '.join(SUFFIXES)})")
    return shards


def read_records(source: str, split: str, report: DataReport) -> Records:
    """Every record of `source` with its origin: a local file (whatever its split), a folder's `split` files, or
    the `split` of a Hub dataset (offline: from the local cache), through rm's own readers."""
    path = Path(source).expanduser()
    if path.is_file():
        yield from read_file(path, report)
    elif path.is_dir():
        for file in split_files(path, split):
            yield from read_file(file, report)
    elif source.count("/") == 1 and not source.startswith((".", "/", "~")) and not source.endswith(tuple(SUFFIXES)):
        yield from read_hub(source, split, "")
    else:
        raise DataError(f"data source not found: {source}: neither a local path nor a Hub dataset name"
                        f"{relative_note(source)}")  # fmt: skip


def parse_items(records: Iterator[tuple[str, Any]], parse: Parser, renderer: Renderer, report: DataReport) -> list:
    """The suite's items, a record that cannot be one stopping the load (or skipped and counted in skip mode)."""
    items = []
    for origin, record in records:
        try:
            if not isinstance(record, dict):
                raise RecordError("not_an_object", f"expected a JSON object, got {type(record).__name__}")
            items.append(parse(record, origin, renderer))
        except RecordError as e:
            report.reject(origin, e)
    return items
