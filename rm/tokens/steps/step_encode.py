"""Stepwise groups (rm/data/steps/step_groups.py) to encoded groups, chunk by chunk as pairs are encoded.

Each chunk's prompts and step pieces go through one tokenizer call (the pieces alone, no special tokens: the rule
of rm/tokens/steps/step_tokens.py), and each problem is fitted by `fit_steps`: a solution keeps its leading steps
that fit `collator.max_length` beside the prompt, a solution with none left leaves the group, and a group with no
solution left is dropped as a pair too long is (counted, its origin kept). The prompt is not cut: a problem's
statement is the premise of every step, unlike a long chat history whose oldest turns can go.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rm.data.formats.group import Group
from rm.data.labels import registered
from rm.tokens.encode_report import EncodeReport, percentiles
from rm.tokens.steps.step_columns import STEP_COLUMNS
from rm.tokens.steps.step_tokens import StepIds, fit_steps, step_pieces
from rm.tokens.store import EncodedGroup, EncodedSplit, record_batch
from rm.tokens.tokenizer import special_prefix

CHUNK = 256
"""Problems per tokenizer call."""


def encode_step_groups(
    items: Sequence[Group],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    subset_names: list[str],
    prompt_id: Callable[[str], int],
    progress: str = "",
) -> tuple[EncodedSplit, EncodeReport, np.ndarray]:
    """(the split, what fitting did, each kept group's position in `items`), as `encode_kept` gives them for
    preference data. `prompt_id`: the prompt text's id (rm/tokens/encode.py's, the same in every process)."""
    prefix, index, report = special_prefix(tokenizer), {n: i for i, n in enumerate(subset_names)}, EncodeReport()
    batches, positions = [], []
    labels = list(registered())
    bar = tqdm(total=len(items), desc=progress, unit="problems", disable=not progress)
    for start in range(0, len(items), CHUNK):
        chunk = items[start : start + CHUNK]
        texts = [t for item in chunk for t in (item.prompt, *(p for s in item.steps for p in s))]
        ids, at, fitted = step_pieces(tokenizer, texts), 0, []
        for k, item in enumerate(chunk):
            prompt_ids = [*prefix, *ids[at]]
            at += 1
            solutions = []
            for steps in item.steps:
                solutions.append(ids[at : at + len(steps)])
                at += len(steps)
            report.pair_tokens.append(len(prompt_ids) + max(sum(len(p) for p in s) for s in solutions))
            group = kept_group(item, fit_steps(prompt_ids, solutions, max_length), report)
            if group is None:
                report.too_long.append(item.origin or item.prompt[:40])
                continue
            group.subset_id, group.index = index[item.subset], report.kept + len(fitted)
            group.prompt_id = prompt_id(item.prompt)
            fitted.append(group)
            positions.append(start + k)
        report.kept += len(fitted)
        batches.append(record_batch(fitted, list(STEP_COLUMNS), labels))
        bar.update(len(chunk))
    bar.close()
    report.keeps_99 = percentiles(report.pair_tokens).get("p99", 0)
    return EncodedSplit.from_batches(batches), report, np.asarray(positions, dtype=np.int64)


def kept_group(item: Group, fit: StepIds, report: EncodeReport) -> EncodedGroup | None:
    """The fitted problem as an encoded group of the solutions that kept a step (their ranks and labels with them),
    or None when none did; cut steps are counted in `report`."""
    fitted = fit.group
    report.steps_cut += sum(fit.steps_cut)
    keep = [k for k, ends in enumerate(fitted.step_ends) if ends]
    if not keep:
        return None
    return EncodedGroup(
        fitted.prompt_ids,
        [fitted.response_ids[k] for k in keep],
        [item.rank[k] for k in keep],
        0,
        origin=item.origin,
        step_ends=[fitted.step_ends[k] for k in keep],
        step_labels=[list(item.step_labels[k][: len(fitted.step_ends[k])]) for k in keep],
    )


def has_steps(items: Sequence) -> bool:
    """Whether `items` are stepwise groups; a mix of stepwise and preference items is refused by loading."""
    return bool(items) and getattr(items[0], "steps", None) is not None
