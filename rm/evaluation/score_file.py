"""Scoring: stream a file of conversations through a reward model in batches.

`python -m rm score --model M --input FILE [--out FILE]` reads records one window at a time (through
the same reader training uses, `rm.data.sources`), so memory stays bounded by the window whatever the
file's size, and writes each record back with its reward(s) added, in input order. A record of K responses to
one prompt (UltraFeedback, Nectar, RewardBench 2, the generic `responses` layout: detected as training detects
them) gets `rewards`, one per response in the record's order, its prompt computed once where the layout shares.
A model with attribute outputs adds `attributes: {name: value}` beside each reward.

Which texts a record asks to score, and which fields their outputs fill (`output_fields`), is
`rm.evaluation.record_texts`; this module turns them into rewards. A record's texts become training's unit, groups
of one prompt and its responses (`encode_texts`; a lone text is a group of one), fitted into `max_length` by the rule
training and `rm eval` use (`rm/tokens/truncation.py`), so a long conversation gets the reward they give it;
`rm.collate.scoring` plans the batches and lays them out, one output row per response.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Layout, PackedScoring, PaddedLayout, batches, responses, scored
from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.data.formats.text_rule import TEXT_VERSION
from rm.data.sources import count_records, read_file
from rm.errors import ConfigError, RecordError
from rm.evaluation.record_texts import ScoreText, output_fields, texts_of
from rm.model.pretrained import model_attributes
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel
from rm.tokens.ids import EndOfSequence
from rm.tokens.store import EncodedGroup
from rm.tokens.tokenizer import special_prefix
from rm.tokens.truncation import Fit, fit_group
from rm.tokens.turn_search import fitting_turns, longest_token


def default_layout(model: nn.Module, pad_token_id: int) -> Layout:
    """Packed rows with shared prompts where the model reproduces separate forwards that way (decoders
    through `RewardModel`, checked by `rm.model.probe.choose_layout`'s probe); one padded row per text else."""

    if isinstance(model, RewardModel) and choose_layout(model, "auto", pad_token_id)[0] == "shared":
        return PackedScoring(pad_token_id)
    return PaddedLayout(pad_token_id)


def encode_texts(
    tokenizer: PreTrainedTokenizerBase, texts: list[ScoreText], max_length: int, prefix: list[int], eos: str = "none"
) -> list[EncodedGroup]:
    """A record's texts tokenized as training tokenizes a pair (prompt and responses apart, no special tokens,
    the tokenizer's `prefix` in front, each response ended as data.eos `eos` ends it: `EndOfSequence`) and fitted
    into `max_length` by its rule (`rm/tokens/truncation.py`), as groups whose responses are the texts in order.

    Texts that share a prompt (a pair's chosen and rejected) are fitted together, as training fits a pair:
    the prompt loses whole leading turns, then tokens from its left, until the longer response fits beside
    it. A response that cannot fit even alone (training and `rm eval` drop such a pair) keeps its last
    tokens, where the reward is read; its pair's texts are then fitted one by one. `truncated` marks a group
    whose texts lost anything.
    """

    def ids(parts: list[str]) -> list[list[int]]:
        # verbose=False: no warning about a text past model_max_length, which the rule below fits
        return tokenizer(parts, add_special_tokens=False, verbose=False)["input_ids"] if parts else []

    sharing: dict[tuple[str, tuple[int, ...] | None], list[int]] = {}  # (prompt, turn starts) -> its texts
    for i, t in enumerate(texts):
        sharing.setdefault((t.prompt, t.turn_starts), []).append(i)
    fitted: dict[int, tuple[EncodedGroup, int]] = {}  # per text: its fitted part and its slot there
    longest, end = longest_token(tokenizer), EndOfSequence.of(tokenizer, eos)
    for (prompt, starts), members in sharing.items():
        answers = end.texts([texts[i].response for i in members])
        parts = _truncated(ids, prompt, starts, answers, max_length, prefix, longest, end)
        slots = [(g, k) for g in parts for k in range(len(g.response_ids))]
        for i, (g, k) in zip(members, slots, strict=True):
            if not len(g.prompt_ids) + len(g.response_ids[k]):  # nothing to read a reward at (a neighbour's token)
                raise RecordError("empty_text", "the text to score is empty (and the tokenizer adds no BOS token)")
            fitted[i] = (g, k)
    out: list[EncodedGroup] = []  # neighbours in text order from one fitted part stay one group
    for i in range(len(texts)):
        g, k = fitted[i]
        if i and fitted[i - 1][0] is g:
            out[-1].response_ids.append(g.response_ids[k])
        else:
            out.append(scored(g.prompt_ids, [g.response_ids[k]], g.truncated))
    return out


def _truncated(
    ids: Callable[[list[str]], list[list[int]]], prompt: str, turn_starts: tuple[int, ...] | None,
    responses: list[str], max_length: int, prefix: list[int], longest: int | None, end: EndOfSequence,
) -> list[EncodedGroup]:  # fmt: skip
    """One prompt's responses, fitted by the rule's `Fit.KEEP_END`: together, or each on its own where one of them
    cannot fit even alone. Only the later turn the rule keeps is tokenized (`rm.tokens.turn_search`: not every
    later turn, which a prompt of thousands of turns made quadratic)."""
    p, *rs = ids([prompt, *responses])
    end.checked(rs)

    def shorter(room: int) -> list[list[int]]:
        return fitting_turns(prompt, turn_starts, room, longest, ids)

    fitted = fit_group(p, rs, max_length, prefix, shorter, Fit.KEEP_END)
    return [scored(f.prompt_ids, [list(r) for r in f.response_ids], f.truncated) for f in fitted.parts]


def score_rewards(
    model: nn.Module, groups: list[EncodedGroup], layout: Layout, batch_size: int, device: torch.device
) -> list[float]:
    """One reward per response of `groups`, group after group (output 0 of a model with attribute outputs)."""
    return [row[0] for row in score_outputs(model, groups, layout, batch_size, device)]


@torch.inference_mode()
def score_outputs(
    model: nn.Module, groups: list[EncodedGroup], layout: Layout, batch_size: int, device: torch.device
) -> list[list[float]]:
    """Every output of every response of `groups`, group after group: [reward] each, or [reward, attribute 1, …] for
    a model with attribute outputs (rm/model/pretrained.py: output 0 is the reward). Batches as
    `rm.collate.scoring.batches` plans them: equal prompts computed once, each batch of similar lengths."""
    out: list[list[float]] = [[0.0]] * responses(groups)
    for batch in batches(groups, batch_size):
        tensors = {k: v.to(device) for k, v in layout.collate(batch.groups).items()}
        rows = layout.rewards(model, tensors)  # [n], [n, 1 + A]; an ensemble's [n, M (, 1 + A)]
        for i, r in zip(batch.rows, (rows if rows.dim() > 1 else rows[:, None]).tolist(), strict=True):
            out[i] = r
    return out


def score_file(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    input_path: str | Path,
    output_path: str | Path,
    *,
    batch_size: int = 16,
    max_length: int = 1024,
    field: str = "",
    window: int = 0,
    layout: Layout | None = None,
    progress: bool = True,
    on_bad_record: str = "error",
    overwrite: bool = False,
    text_version: int = TEXT_VERSION,
    eos: str = "none",
    wrap_job: Callable[[RecordScoring], Any] | None = None,
    record_fields: FieldsOf | None = None,
) -> dict[str, Any]:
    """Score every record of a file (JSON lines or array, CSV, Parquet) into a JSON-lines file, in order.

    At most `window` records (default 16 batches' worth) are held at once: read, tokenized, scored
    length-sorted, written, dropped. Each output record is the input record plus `reward` (or
    `chosen_reward` and `rejected_reward`, or `rewards` for a K-response record) and, where a text did not
    fit `max_length` and lost turns or tokens (`encode_texts`), `"truncated": true`; for a model with attribute
    outputs, `attributes: {name: value}` beside each reward (`output_fields`). A NaN or infinite output is null, a
    reward so counted in `rewards_nonfinite` with its records' origins in `nonfinite_origins`. A bad record stops
    the job naming file and line, or with `on_bad_record="skip"` is left out and counted (`skipped` in the
    counts, by reason). The output is written as `<output>.partial` and renamed when every record is done,
    so a file under the output's name is always complete; a job that stops removes its `.partial`. An
    output that is the input, or that exists (unless `overwrite`), is refused up front. `wrap_job`: a job around
    the record job, with its `lines` and `summary` (`rm score` scores stepwise records so: rm/scoring/step_file.py).
    `record_fields`: a record's fields from its texts' outputs, in place of one model's (an ensemble's model gives
    one output per member: rm/scoring/ensemble.py). `eos`: the model's data.eos (`Loaded.eos`), how responses end.
    """
    check_output(Path(input_path), Path(output_path), overwrite)
    # Lossless fixes (a byte-order mark, CRLF line ends) are applied as in training.
    report = DataReport(on_bad_record, repair_always=True)
    job = RecordScoring(
        model, tokenizer, layout or default_layout(model, tokenizer.pad_token_id),
        # message lists: the model's chat template where it has one, as training; string prompts by its text rule
        Renderer(tokenizer, version=text_version), report, field, max_length, batch_size, record_fields, eos,
    )  # fmt: skip
    job = wrap_job(job) if wrap_job is not None else job
    records = read_file(Path(input_path), report)
    bar = tqdm(
        total=count_records(Path(input_path)), desc="score", unit="rec", disable=not progress, dynamic_ncols=True
    )
    final = Path(output_path)
    partial = final.with_name(final.name + ".partial")
    final.parent.mkdir(parents=True, exist_ok=True)  # as `rm eval --out` makes its folder
    opener = gzip.open if final.name.endswith(".gz") else open  # by the final name: .partial is appended
    try:
        with opener(partial, "wt", encoding="utf-8", newline="") as out:
            for chunk in windows(records, window or 16 * batch_size, report, bar):
                out.writelines(job.lines(chunk))
                bar.update(len(chunk))
    except BaseException:  # a bad record, Ctrl-C, out of memory: no half-written file is left behind
        partial.unlink(missing_ok=True)
        raise
    finally:
        bar.close()
    partial.replace(final)
    return job.summary()


def windows(
    records: Iterator[tuple[str, dict]], size: int, report: DataReport, bar: tqdm
) -> Iterator[list[tuple[str, dict]]]:
    """The records `size` at a time, (origin, record) each; the records the reader left out (bad JSON…) move the
    bar too."""
    while True:
        skipped_before = len(report.skipped)
        chunk = list(islice(records, size))
        bar.update(len(report.skipped) - skipped_before)
        if not chunk:
            return
        yield chunk


FieldsOf = Callable[[list[str], list[Any]], tuple[dict[str, Any], int]]
"""A record's output fields from its texts' field names and raw outputs (one row each), with how many of its rewards
are not finite."""


class RecordScoring:
    """One window of records at a time: their texts, fitted and scored, back as output lines; the counts add up.

    Each output record is the input record plus its reward fields (`output_fields`) and `"truncated": true` where a
    text lost turns or tokens; a NaN or infinite output is null (JSON has neither), counted with its record."""

    def __init__(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, layout: Layout, renderer: Renderer,
        report: DataReport, field: str, max_length: int, batch_size: int, fields_of: FieldsOf | None = None,
        eos: str = "none",
    ):  # fmt: skip
        self.model, self.tokenizer, self.layout, self.renderer = model, tokenizer, layout, renderer
        self.report, self.field, self.max_length, self.batch_size = report, field, max_length, batch_size
        self.attributes = model_attributes(model)  # [] for a one-output model: nothing new in the output
        self.fields_of = fields_of or self.model_fields
        self.device = next(model.parameters()).device
        self.prefix, self.eos = special_prefix(tokenizer), eos  # eos: data.eos, how the model's responses end
        self.counts: dict[str, Any] = {"records": 0, "texts": 0, "records_truncated": 0}
        self.nonfinite: list[str] = []  # origins of the records with a NaN or infinite reward (a model that overflows)

    def scored(self, chunk: list[tuple[str, dict]]) -> list[tuple[dict, dict[str, Any]]]:
        """(record, its output fields) of each record of `chunk` that could be scored, in order; a bad one is the
        report's (it raises, or counts the record as skipped). The counts add up here."""
        encoded, keys, kept = [], [], []
        for origin, record in chunk:
            try:
                parts = texts_of(record, origin, self.field, self.renderer, self.report)
                encoded.append(encode_texts(self.tokenizer, parts, self.max_length, self.prefix, self.eos))
            except RecordError as e:
                self.report.reject(origin, e)  # raises in error mode
                continue
            kept.append((origin, record))
            keys.append([t.key for t in parts])
        rows = iter(
            score_outputs(self.model, [g for e in encoded for g in e], self.layout, self.batch_size, self.device)
        )
        out = []
        for (origin, record), names, groups in zip(kept, keys, encoded, strict=True):
            fields, bad = self.fields_of(names, [next(rows) for _ in names])
            if bad:
                self.counts["rewards_nonfinite"] = self.counts.get("rewards_nonfinite", 0) + bad
                self.nonfinite.append(origin)
            if any(g.truncated for g in groups):
                fields["truncated"] = True
                self.counts["records_truncated"] += 1
            out.append((record, fields))
        self.counts["records"] += len(kept)
        self.counts["texts"] += sum(len(names) for names in keys)
        return out

    def model_fields(self, names: list[str], rows: list[list[float]]) -> tuple[dict[str, Any], int]:
        """One model's fields (`output_fields`) of a record whose texts got `rows`, and its non-finite rewards."""
        values = [[v if math.isfinite(v) else None for v in row] for row in rows]
        return output_fields(names, values, self.attributes), sum(v[0] is None for v in values)

    def lines(self, chunk: list[tuple[str, dict]]) -> list[str]:
        """Each record of `chunk` that could be scored, with its output fields, as a JSON line."""
        return [json.dumps(record | fields, ensure_ascii=False) + "\n" for record, fields in self.scored(chunk)]

    def summary(self) -> dict[str, Any]:
        """The counts `score_file` returns: records, texts, truncated, skipped (by reason, with origins), non-finite."""
        counts = dict(self.counts)
        if self.report.skipped:
            counts["skipped"] = self.report.skipped_counts()
            counts["skipped_origins"] = [b.origin for b in self.report.skipped]
        if self.nonfinite:
            counts["nonfinite_origins"] = self.nonfinite
        return counts


def check_output(input_path: Path, output_path: Path, overwrite: bool) -> None:
    """Refuse to write over the input (it would be replaced by its scores) or, without `overwrite`, over a file."""
    if output_path.exists() and input_path.exists() and output_path.resolve() == input_path.resolve():
        raise ConfigError(f"--out {output_path} is the input file: scoring would replace it; choose another --out")
    if output_path.exists() and not overwrite:
        raise ConfigError(f"{output_path} exists; pass --overwrite to replace it, or choose another --out")
