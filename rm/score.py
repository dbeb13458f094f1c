"""Scoring: load any reward model, and stream a file of conversations through it in batches.

`python -m rm score --model M --input FILE [--out FILE]` reads JSON lines one window at a time, so
memory stays bounded by the window whatever the file's size, and writes each record back with its
reward(s) added, in input order.

Each text becomes a `ScoreSeq` (prompt ids, response ids) and a `Layout` turns a list of them into a
batch and the batch into one reward per sequence. `PaddedLayout` (each sequence its own right-padded
row) works with every model; a shared-prefix layout plugs in through the same two methods, packing
consecutive sequences whose `prompt_ids` are equal (a pair's chosen and rejected come out adjacent).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, Any, Protocol

import torch
import yaml
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForSequenceClassification, PreTrainedModel, PreTrainedTokenizerBase

from rm.data import DataError
from rm.hh import ASSISTANT, split_pair
from rm.model import DTYPES, RewardModel, score_head
from rm.tokenizer import load_tokenizer, special_prefix


class ModelError(ValueError):
    """A model that cannot be loaded or is not a one-output reward model, named by its path."""


class PooledLogits(nn.Module):
    """Models without a decoder `score` head (BERT, DeBERTa...) pool the sequence themselves; their
    logits are the reward. Same call as `RewardModel`: (input_ids, attention_mask) -> [rows] fp32."""

    def __init__(self, hf: PreTrainedModel):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0].float()


def load_reward_model(
    name_or_path: str, dtype: str = "float32", trust_remote_code: bool = False, device: str = "cpu"
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    """(model, tokenizer) for any `AutoModelForSequenceClassification` with num_labels=1, in eval mode.

    Decoders are wrapped in `RewardModel`, which reads the reward at the last attended token exactly as
    training does; other architectures use their own pooling through `PooledLogits`. `device="auto"`
    picks the GPU when there is one.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        if config.num_labels != 1:
            raise ModelError(
                f"{name_or_path}: has num_labels={config.num_labels}; a reward model has one output (num_labels=1)"
            )
        tokenizer = load_tokenizer(name_or_path, trust_remote_code)
        hf = AutoModelForSequenceClassification.from_pretrained(
            name_or_path, config=config, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as e:
        if isinstance(e, ModelError):
            raise
        raise ModelError(f"{name_or_path}: cannot load a sequence-classification model ({e})") from None
    try:
        score_head(hf)
        model: nn.Module = RewardModel(hf)
    except TypeError:
        model = PooledLogits(hf)
    return model.eval().to(device), tokenizer


def default_max_length(model_path: str, model: nn.Module) -> int:
    """The training run's `collator.max_length` when the folder carries rm's config, else the model's limit."""
    saved = Path(model_path) / "rm_config.yaml"
    if saved.is_file():
        return int(yaml.safe_load(saved.read_text())["collator"]["max_length"])
    return min(getattr(model.hf.config, "max_position_embeddings", None) or 1024, 2048)


@dataclass
class ScoreSeq:
    """One text to score, tokenized as prompt and response (the reward is read at the response's end)."""

    prompt_ids: list[int]
    response_ids: list[int]
    truncated: bool = False
    """True when tokens were cut from the left to fit `max_length`."""

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


class Layout(Protocol):
    """How sequences become a batch, and a batch becomes rewards: [len(seqs)] in the order given."""

    def collate(self, seqs: list[ScoreSeq]) -> dict[str, torch.Tensor]: ...

    def rewards(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...


class PaddedLayout:
    """Each sequence its own row, right-padded, as `rm.collator.PaddedCollator` lays out pairs.

    Two sequences, pad id 0, prompts [5, 6] and [7], responses [8] and [9, 10, 11]:
        input_ids      = [[5, 6, 8, 0], [7, 9, 10, 11]]
        attention_mask = [[1, 1, 1, 0], [1, 1, 1, 1]]
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def collate(self, seqs: list[ScoreSeq]) -> dict[str, torch.Tensor]:
        width = max(len(s) for s in seqs)
        input_ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            row = s.prompt_ids + s.response_ids
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def rewards(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


def default_layout(model: nn.Module, pad_token_id: int) -> Layout:
    """Packed rows with shared prompts where the model reproduces separate forwards that way (decoders
    through `RewardModel`, checked by `rm.layout.choose_layout`'s probe); one padded row per text else."""
    from rm.layout import PackedScoring, choose_layout

    if isinstance(model, RewardModel) and choose_layout(model, "auto", pad_token_id)[0] == "shared":
        return PackedScoring(pad_token_id)
    return PaddedLayout(pad_token_id)


def split_last_turn(text: str) -> tuple[str, str]:
    """(prompt, response): the prompt runs to the last "\\n\\nAssistant:" tag; without a tag it is empty."""
    cut = text.rfind(ASSISTANT)
    if cut < 0:
        return "", text
    return text[: cut + len(ASSISTANT)], text[cut + len(ASSISTANT) :]


def texts_of(record: Any, origin: str, field: str = "") -> list[tuple[str, str, str]]:
    """(output key, prompt, response) for each text a record asks to score.

    `field` names the text column explicitly; otherwise, in this order: `transcript` (red-team
    attempts), `text`, `prompt`+`response`, `chosen`+`rejected` (HH pairs or prompt/chosen/rejected,
    scored as two texts: `chosen_reward` and `rejected_reward`).
    """
    if not isinstance(record, dict):
        raise DataError(f"{origin}: expected a JSON object, got {type(record).__name__}")

    def text(name: str) -> str:
        value = record.get(name)
        if not isinstance(value, str):
            got = "missing" if name not in record else f"a {type(value).__name__}"
            raise DataError(f"{origin}: field {name!r} must be a string, got {got}")
        return value

    if field:
        return [("reward", *split_last_turn(text(field)))]
    for name in ("transcript", "text"):
        if name in record:
            return [("reward", *split_last_turn(text(name)))]
    if "response" in record:
        return [("reward", text("prompt") if "prompt" in record else "", text("response"))]
    if "chosen" in record or "rejected" in record:
        chosen, rejected = text("chosen"), text("rejected")
        if "prompt" in record:
            prompt = text("prompt")
            return [("chosen_reward", prompt, chosen), ("rejected_reward", prompt, rejected)]
        try:
            prompt, chosen, rejected = split_pair(chosen, rejected)
        except ValueError:  # identical or unsplittable: score the two conversations whole
            return [("chosen_reward", *split_last_turn(chosen)), ("rejected_reward", *split_last_turn(rejected))]
        return [("chosen_reward", prompt, chosen), ("rejected_reward", prompt, rejected)]
    raise DataError(
        f"{origin}: no text to score: expected a 'transcript', 'text', 'prompt'+'response' or "
        f"'chosen'+'rejected' field (or name one with --field); fields are {sorted(record)}"
    )


def encode_text(
    tokenizer: PreTrainedTokenizerBase, prompt: str, response: str, max_length: int, prefix: list[int]
) -> ScoreSeq:
    """Tokenize prompt and response apart (as training does); cut the oldest tokens to fit `max_length`."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
    r = tokenizer(response, add_special_tokens=False)["input_ids"]
    room = max_length - len(prefix)
    cut = len(p) + len(r) > room
    if len(r) > room:  # the response alone does not fit: keep its end, where the reward is read
        p, r = [], r[len(r) - room :]
    elif cut:
        p = p[len(p) - (room - len(r)) :]
    return ScoreSeq(prefix + p, r, truncated=cut)


@torch.inference_mode()
def score_seqs(
    model: nn.Module, seqs: list[ScoreSeq], layout: Layout, batch_size: int, device: torch.device
) -> list[float]:
    """Rewards for `seqs` in the order given.

    Batches are cut after sorting by prompt (length, then ids) and response length: each batch pads to
    similar lengths, and sequences with the same prompt sit side by side for a shared-prefix layout
    (a batch boundary can still split such a group; the layout then simply shares less).
    """
    order = sorted(
        range(len(seqs)), key=lambda i: (len(seqs[i].prompt_ids), seqs[i].prompt_ids, len(seqs[i].response_ids))
    )
    out = [0.0] * len(seqs)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = {k: v.to(device) for k, v in layout.collate([seqs[i] for i in idx]).items()}
        for i, r in zip(idx, layout.rewards(model, batch).tolist(), strict=True):
            out[i] = r
    return out


def _open(path: str | Path, mode: str) -> IO[str]:
    if str(path).endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8", newline="")
    return open(path, mode, encoding="utf-8", newline="")


def _is_json_array(path: str | Path) -> bool:
    """True when the file's first non-blank character is "[": one JSON array rather than JSON lines
    (the hh-rlhf red-team file is distributed that way despite its .jsonl.gz name)."""
    with _open(path, "r") as f:
        for line in f:
            if line.strip():
                return line.lstrip().startswith("[")
    return False


def read_records(path: str | Path) -> Iterator[tuple[str, Any]]:
    """(origin, record) for every record: "file:line" for JSON lines (streamed, blank lines skipped),
    "file[item i]" for a file holding one JSON array (read whole: an array cannot be streamed with json)."""
    try:
        if _is_json_array(path):
            with _open(path, "r") as f:
                try:
                    items = json.load(f)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
            yield from ((f"{path}[item {i}]", rec) for i, rec in enumerate(items))
            return
        with _open(path, "r") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                origin = f"{path}:{lineno}"
                try:
                    yield origin, json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{origin}: malformed JSON ({e.msg} at column {e.colno})") from None
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None


def count_records(path: str | Path) -> int | None:
    """Non-blank lines, for the progress bar's total (one cheap pass next to the model's); None for an array."""
    try:
        if _is_json_array(path):
            return None
        with _open(path, "r") as f:
            return sum(1 for line in f if line.strip())
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None


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
) -> dict[str, int]:
    """Score every record of a JSON-lines file into another, in order; returns counts.

    At most `window` records (default 16 batches' worth) are held at once: read, tokenized, scored
    length-sorted, written, dropped. Each output record is the input record plus `reward` (or
    `chosen_reward` and `rejected_reward`) and, where tokens were cut, `"truncated": true`.
    """
    layout = layout or default_layout(model, tokenizer.pad_token_id)
    window = window or 16 * batch_size
    device = next(model.parameters()).device
    prefix = special_prefix(tokenizer)
    counts = {"records": 0, "texts": 0, "records_truncated": 0}
    records = read_records(input_path)
    bar = tqdm(total=count_records(input_path), desc="score", unit="rec", disable=not progress, dynamic_ncols=True)
    with _open(output_path, "w") as out:
        while True:
            chunk = list(islice(records, window))  # the next `window` (origin, record)
            if not chunk:
                break
            seqs, keys = [], []
            for origin, record in chunk:
                parts = texts_of(record, origin, field)
                keys.append([key for key, _, _ in parts])
                seqs += [encode_text(tokenizer, p, r, max_length, prefix) for _, p, r in parts]
            rewards = iter(zip(score_seqs(model, seqs, layout, batch_size, device), seqs, strict=True))
            for (_, record), names in zip(chunk, keys, strict=True):
                scored = [next(rewards) for _ in names]
                record.update({name: reward for name, (reward, _) in zip(names, scored, strict=True)})
                if any(seq.truncated for _, seq in scored):
                    record["truncated"] = True
                    counts["records_truncated"] += 1
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            counts["records"] += len(chunk)
            counts["texts"] += len(seqs)
            bar.update(len(chunk))
    bar.close()
    return counts
