"""Encoded groups kept in Arrow columns, not as Python lists: what a split of 160,000 pairs costs in memory.

The unit is a group: one prompt and its K >= 2 responses, with what is known about their order (`rank`: 0 is the
best; equal ranks tie). A pair is a group of two, chosen (rank 0) over rejected (rank 1). A group of `list[int]`s
costs ~36 bytes a token, an Arrow `list<int32>` column 4, a memory-mapped one nothing until read, shared by every
process (Python lists peaked at 2.3 GiB on 168,000 HH pairs). A text scored is a group of one. Files: entry.py.

`EncodedSplit` is a read-only `Sequence[EncodedGroup]` over a `pyarrow.Table` of `SCHEMA`: its groups' ids are numpy
int32 views into the table's buffers (no copy); planning reads whole length arrays (`GroupLengths`), never groups.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, overload

import numpy as np
import pyarrow as pa

from rm.data.formats.pair import NO_LABELS
from rm.data.labels import registered
from rm.errors import DataError
from rm.tokens.lengths import GroupLengths, lengths_of, list_array
from rm.tokens.steps.step_columns import STEP_COLUMNS, StepViews, step_arrays

SCHEMA = pa.schema(
    [
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.list_(pa.int32()))),
        ("rank", pa.list_(pa.int32())),
        ("subset_id", pa.int32()),
        ("margin", pa.float64()),
        ("index", pa.int64()),
        ("scores", pa.list_(pa.float64())),
        ("pairs", pa.list_(pa.int32())),
        ("prompt_id", pa.int64()),
        ("origin", pa.utf8()),
    ]
)
"""The columns of an encoded split (an Arrow cache file holds exactly these, or `schema_with`'s)."""
OPTIONAL = {
    "attributes": pa.list_(pa.float64()), "strength": pa.float64(), "target": pa.float64(), "cycle": pa.utf8(),
    **STEP_COLUMNS,
}  # fmt: skip
"""Columns after SCHEMA's, in this order, where the split has them: flat [responses x A] attribute scores (NaN =
missing; in the cache every name the data has, after it the head's: rm/collate/loss_labels.py); a pair's
preference strength (NaN = none); its soft label p (NaN = hard; made from the strength under loss.strength=soft,
after the cache); a merged group's records whose order has a cycle ("" = none); steps (steps/step_columns.py)."""


def schema_with(optional: Iterable[str] = (), labels: Sequence[str] = ()) -> pa.Schema:
    """SCHEMA, the OPTIONAL columns named, then one column per registered label named (rm/data/labels.py):
    float64 for a group's value, list<float64> for one per response; NaN where a group has none."""
    levels = {name: label.level for name, label in registered().items()}
    extra = [pa.field(n, pa.float64() if levels[n] == "group" else pa.list_(pa.float64())) for n in labels]
    return pa.schema([*SCHEMA, *(pa.field(n, kind) for n, kind in OPTIONAL.items() if n in set(optional)), *extra])


def optional_of(groups: Sequence[EncodedGroup]) -> list[str]:
    """The OPTIONAL columns some of `groups` have a value of."""
    has = {"attributes": lambda g: len(g.attributes), "strength": lambda g: not math.isnan(g.strength),
           "target": lambda g: not math.isnan(g.target), "cycle": lambda g: g.cycle,
           **dict.fromkeys(STEP_COLUMNS, lambda g: len(g.step_ends))}  # fmt: skip
    return [name for name, given in has.items() if any(given(g) for g in groups)]


TokenIds = Sequence[int] | np.ndarray
"""A list of ids (tests, probes, benchmarks) or an int32 view into an `EncodedSplit`: collators take both."""


@dataclass
class EncodedGroup:
    """One prompt's token ids and its responses', with their order."""

    prompt_ids: TokenIds
    response_ids: Sequence[TokenIds]
    rank: Sequence[int]
    """Per response: 0 is the best, a larger rank is worse, equal ranks are ties."""
    subset_id: int
    _: KW_ONLY  # what the record says beyond its order, by name: 11 positional values read as anything
    margin: float = 0.0
    """How much better the best response is than the next (pairs with a margin; `loss.use_margin`)."""
    index: int = -1
    """Position in the encoded split: lets multi-process eval count each group exactly once."""
    scores: Sequence[float] = ()
    """Per response, the score its rank came from (`loss.use_margin` reads their differences); empty if none."""
    pairs: Sequence[int] = ()
    """Explicit comparisons as flat triples (a, b, tie): a beats b, or ties it when tie is 1 (groups merged from
    pairwise records, whose given pairs need not form a ranking); empty: every pair ordered by `rank`."""
    prompt_id: int = -1
    """Equal prompts share one id (eval resamples prompts, not pairs)."""
    attributes: Sequence[float] = ()
    """Attribute scores, flat [responses x A] (response k's are [k * A, (k + 1) * A)), NaN = missing; () = none."""
    strength: float = math.nan
    """A pair's preference strength (rm/data/formats/strength.py); NaN: none."""
    target: float = math.nan
    """A pair's soft label, the target of P(chosen > rejected) (loss.strength=soft); NaN: a hard label."""
    cycle: str = ""
    """The records whose order has a cycle, in a group merged from pairwise ones (rm/data/grouping.py)."""
    origin: str = ""
    """Where it came from ("file:line"), for the messages of a bad record found after the cache (stored where the
    split has a label that can make one: rm/tokens/encode.py); not read back by `EncodedSplit[i]`
    (`EncodedSplit.origin(i)` reads it)."""
    labels: Mapping[str, Any] = NO_LABELS
    """Registered labels by name (rm/data/labels.py): a group's float, or a list of one per response."""
    truncated: bool = False
    """Scoring only, not stored: its texts lost turns or tokens to fit max_length (truncation.py's Fit.KEEP_END)."""
    step_ends: Sequence[Sequence[int]] = ()
    """Stepwise data: per response, the offset in its ids of each step's last token (rm/tokens/steps/); () = none."""
    step_labels: Sequence[Sequence[float]] = ()
    """Stepwise data: per response, each step's target in [0, 1]; () = none (scoring)."""

    @classmethod
    def pair(cls, prompt_ids: TokenIds, chosen_ids: TokenIds, rejected_ids: TokenIds, subset_id: int, *,
             margin: float = 0.0, index: int = -1) -> EncodedGroup:  # fmt: skip
        """A pair: the group (prompt, [chosen, rejected]) with chosen ranked first."""
        return cls(prompt_ids, [chosen_ids, rejected_ids], [0, 1], subset_id, margin=margin, index=index)

    @property
    def chosen_ids(self) -> TokenIds:
        return self._of_pair(0)

    @property
    def rejected_ids(self) -> TokenIds:
        return self._of_pair(1)

    def _of_pair(self, k: int) -> TokenIds:
        if len(self.response_ids) != 2:
            raise ValueError(f"a group of {len(self.response_ids)} responses has no chosen/rejected: use response_ids")
        return self.response_ids[k]


def join_ids(*parts: TokenIds) -> np.ndarray:
    """The id sequences one after another, as int64. Never `a + b`: on numpy views that adds elementwise."""
    return np.concatenate([np.asarray(p, dtype=np.int64).reshape(-1) for p in parts])


def record_batch(
    groups: Iterable[EncodedGroup], optional: Sequence[str] | None = None, labels: Sequence[str] | None = None
) -> pa.RecordBatch:
    """One record batch of `SCHEMA` with the `optional` columns and a column per label of `labels` (None: those
    some of the groups have), from groups."""
    groups = list(groups)
    labels = sorted({n for g in groups for n in g.labels}) if labels is None else labels
    optional = optional_of(groups) if optional is None else optional
    prompts = [np.asarray(g.prompt_ids, dtype=np.int32).reshape(-1) for g in groups]
    responses = [np.asarray(r, dtype=np.int32).reshape(-1) for g in groups for r in g.response_ids]
    counts = [np.zeros(len(g.response_ids)) for g in groups]  # only their lengths are read
    columns = [
        list_array(prompts),
        list_array(counts, list_array(responses)),
        list_array([np.asarray(g.rank, dtype=np.int32) for g in groups]),
        pa.array([g.subset_id for g in groups], type=pa.int32()),
        pa.array([float(g.margin) for g in groups], type=pa.float64()),
        pa.array([g.index for g in groups], type=pa.int64()),
        list_array([np.asarray(g.scores, dtype=np.float64) for g in groups], None, pa.float64()),
        list_array([np.asarray(g.pairs, dtype=np.int32) for g in groups]),
        pa.array([g.prompt_id for g in groups], type=pa.int64()),
        pa.array([g.origin for g in groups], type=pa.utf8()),
    ]
    if "attributes" in optional:
        columns.append(list_array([np.asarray(g.attributes, dtype=np.float64) for g in groups], None, pa.float64()))
    for name in [n for n in ("strength", "target", "cycle") if n in optional]:
        columns.append(pa.array([getattr(g, name) for g in groups], type=OPTIONAL[name]))
    columns += step_arrays(groups) if "step_ends" in optional else []
    schema = schema_with(optional, labels)
    for name in labels:
        if schema.field(name).type == pa.float64():
            columns.append(pa.array([float(g.labels.get(name, math.nan)) for g in groups], type=pa.float64()))
        else:
            values = [np.asarray(g.labels.get(name, [math.nan] * len(g.response_ids)), np.float64) for g in groups]
            columns.append(list_array(values, None, pa.float64()))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class EncodedSplit(Sequence[EncodedGroup]):
    """A split's encoded groups over an Arrow table of `SCHEMA`, e.g. memory-mapped from a cache file.

    The table's record batches are kept as they are (no `combine_chunks`, which would copy a memory-mapped
    file into this process's memory): `_starts` says where each batch begins, and group i is read from its
    batch's flat `values` between two `offsets` (responses: two levels of offsets).
    """

    def __init__(self, table: pa.Table):
        extra = [n for n in table.schema.names[len(SCHEMA) :] if n not in OPTIONAL]
        if set(extra) - set(registered()) or not table.schema.equals(schema_with(table.schema.names, extra)):
            raise DataError(f"encoded groups need the columns {SCHEMA.names} typed as {SCHEMA}; got {table.schema}")
        if nulls := [name for name in SCHEMA.names if table.column(name).null_count]:
            raise DataError(f"encoded groups have missing values in column(s) {', '.join(nulls)}")
        self.table = table
        # to_batches() aligns every column on the same row ranges (zero-copy slices); empty ones add nothing.
        batches = [b for b in table.to_batches() if b.num_rows]
        self._starts = np.cumsum([0] + [b.num_rows for b in batches[:-1]], dtype=np.int64)
        # Per batch, numpy views of the Arrow buffers. A sliced ListArray's offsets already point into its
        # unsliced `values`, so group j's prompt is values[offsets[j]:offsets[j + 1]].
        self._prompt = [_views(b.column("prompt_ids")) for b in batches]
        self._outer = [b.column("response_ids").offsets.to_numpy() for b in batches]
        self._inner = [_views(b.column("response_ids").values) for b in batches]
        self._rank = [_views(b.column("rank")) for b in batches]
        self._scores = [_views(b.column("scores")) for b in batches]
        self._pairs = [_views(b.column("pairs")) for b in batches]
        self._scored = [_views(b.column("attributes")) for b in batches] if "attributes" in table.schema.names else []
        self._steps = StepViews(batches) if "step_ends" in table.schema.names else None
        self._prompt_id = table.column("prompt_id").to_numpy()
        self._subset = table.column("subset_id").to_numpy()
        self._margin = table.column("margin").to_numpy()
        self._target, self._strength = (table.column(n).to_numpy() if n in table.schema.names else None
                                        for n in ("target", "strength"))  # fmt: skip
        self._index = table.column("index").to_numpy()
        self._labels = {n: table.column(n).to_numpy() if registered()[n].level == "group" else
                        [_views(b.column(n)) for b in batches] for n in extra}  # fmt: skip

    @classmethod
    def from_batches(cls, batches: list[pa.RecordBatch]) -> EncodedSplit:
        return cls(pa.Table.from_batches(batches, schema=batches[0].schema if batches else SCHEMA))

    @classmethod
    def from_groups(cls, groups: Iterable[EncodedGroup]) -> EncodedSplit:
        """From groups held as lists (tests, small sets): one record batch."""
        return cls.from_batches([record_batch(groups)])

    def __len__(self) -> int:
        return self.table.num_rows

    def origin(self, i: int) -> str:
        """Group i's origin ("file:line"), for the message of a bad record found after the cache."""
        return self.table.column("origin")[i].as_py()

    def without(self, rows: Sequence[int]) -> EncodedSplit:
        """The split less `rows` (bad records found after the cache, skipped), each group's index its new position:
        a copy in memory, made only when something is dropped."""
        keep = np.ones(len(self), dtype=bool)
        keep[np.asarray(rows, dtype=np.int64)] = False
        table = self.table.filter(pa.array(keep))
        index = pa.array(np.arange(table.num_rows), pa.int64())
        return EncodedSplit(table.set_column(table.schema.get_field_index("index"), "index", index))

    @property
    def labels(self) -> dict[str, str]:
        """The registered labels this split has a column of, with their level ("group" or "response")."""
        return {name: registered()[name].level for name in self._labels}

    def __reduce__(self):  # pickled (a spawned data-loader worker) as the table alone: the views are rebuilt
        return EncodedSplit, (self.table,)

    @overload
    def __getitem__(self, i: int) -> EncodedGroup: ...

    @overload
    def __getitem__(self, i: slice) -> list[EncodedGroup]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"group {i} of an encoded split of {len(self)}")
        i %= len(self)
        b = int(np.searchsorted(self._starts, i, side="right")) - 1
        j = i - int(self._starts[b])
        (offsets, values), (inner, tokens), outer = self._prompt[b], self._inner[b], self._outer[b]
        responses = [tokens[inner[k] : inner[k + 1]] for k in range(outer[j], outer[j + 1])]
        (r_at, ranks), (s_at, scores), (p_at, pairs) = self._rank[b], self._scores[b], self._pairs[b]
        prompt, scored = values[offsets[j] : offsets[j + 1]], self._scored[b] if self._scored else None
        step_ends, step_labels = self._steps.of(b, j) if self._steps else ((), ())
        return EncodedGroup(
            prompt, responses, ranks[r_at[j] : r_at[j + 1]].tolist(), int(self._subset[i]),
            margin=float(self._margin[i]), index=int(self._index[i]), prompt_id=int(self._prompt_id[i]),
            scores=scores[s_at[j] : s_at[j + 1]].tolist(), pairs=pairs[p_at[j] : p_at[j + 1]].tolist(),
            attributes=scored[1][scored[0][j] : scored[0][j + 1]].tolist() if scored else (),
            target=float(self._target[i]) if self._target is not None else math.nan,
            strength=float(self._strength[i]) if self._strength is not None else math.nan,
            labels={n: float(v[i]) if isinstance(v, np.ndarray) else v[b][1][v[b][0][j] : v[b][0][j + 1]].tolist()
                    for n, v in self._labels.items()} if self._labels else NO_LABELS,
            step_ends=step_ends, step_labels=step_labels,
        )  # fmt: skip

    def lengths(self) -> GroupLengths:
        """Token counts of every group's prompt and responses, from the Arrow offsets alone."""
        prompt = [np.diff(offsets).astype(np.int64) for offsets, _ in self._prompt]
        counts = [np.diff(outer).astype(np.int64) for outer in self._outer]
        responses = []
        for outer, (inner, _) in zip(self._outer, self._inner, strict=True):
            responses.append(np.diff(inner[outer[0] : outer[-1] + 1]).astype(np.int64))
        return lengths_of(prompt, counts, responses)

    def __repr__(self) -> str:
        return f"EncodedSplit({len(self)} groups, {self.table.nbytes / 2**20:.1f} MiB)"


def _views(column: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of a list column as numpy views of its buffers."""
    return column.offsets.to_numpy(), column.values.to_numpy()


def split_to_table(split: Sequence[EncodedGroup]) -> pa.Table:
    """An encoded split as an Arrow table of `schema_with` (a columnar split's own `.table` as it is)."""
    return split.table if isinstance(split, EncodedSplit) else EncodedSplit.from_groups(split).table
