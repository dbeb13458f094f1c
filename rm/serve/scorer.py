"""The model a server process holds, and the two things it does: texts to groups (`EncodedGroup`, scoring's unit:
a text alone is a group of one), groups to one reward per response.

Both go through `rm score`'s own functions (rm/evaluation/score_file.py: `encode_texts` for tokenization and
max_length fitting, `default_layout` for the batch layout), so a reward from the server is the reward `rm score`
gives the same text; only the batching differs, and no reward depends on its batch neighbours. An ensemble
(`rm serve --ensemble`) is held the same way: its model runs every member on each batch (rm/scoring/ensemble_model.py)
and its rule combines their outputs per response (rm/scoring/ensemble.py).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Layout, PackedScoring
from rm.data.formats.chat import Renderer
from rm.data.formats.text_rule import TEXT_VERSION
from rm.evaluation.record_texts import ScoreText
from rm.evaluation.score_file import default_layout, encode_texts
from rm.evaluation.steps.step_scoring import step_outputs
from rm.model.cached_prompt import PrefixScoring, prefix_support
from rm.model.pretrained import model_attributes
from rm.scoring.ensemble import EnsembleRule
from rm.scoring.ensemble_model import EnsemblePrefix, ensemble_layout, load_ensemble
from rm.scoring.inference import Loaded, load, normalization
from rm.serve.batch_plan import Output
from rm.tokens.steps.step_tokens import STEP_SEPARATOR, StepIds
from rm.tokens.store import EncodedGroup
from rm.tokens.tokenizer import special_prefix

log = logging.getLogger("rm.serve")


@dataclass
class Scorer:
    """One loaded reward model with everything scoring needs beside it."""

    name: str
    model: nn.Module
    tokenizer: PreTrainedTokenizerBase
    max_length: int
    layout: Layout
    device: torch.device
    norm: dict[str, float] | None
    """{"mean", "std"} applied to every reward (--normalize), or None for raw rewards."""
    groups: PrefixScoring | EnsemblePrefix | None = None
    """Where the model allows it, how a group of responses to one prompt is scored: on the prompt's cached keys
    and values (rm/model/cached_prompt.py); None: in the shared (or padded) layout like single texts."""
    weights: str = ""
    """Which weights of a run rebuilt from a checkpoint are served ("step 16 of 400: the run has not finished", as
    `rm export` says it); '' for an export, whose model card says it."""
    text_version: int = TEXT_VERSION
    """The record -> text rule the model was trained with (data.text_version: rm/data/formats/text_rule.py)."""
    step_separator: str = STEP_SEPARATOR
    """The text after the problem and after every step of /score_steps (`Loaded.step_separator`)."""
    ensemble: EnsembleRule | None = None
    """Several models served as one (`rm serve --ensemble`): `model` runs each on every batch and gives one output
    per member (rm/scoring/ensemble_model.py), which this rule combines (rm/scoring/ensemble.py); None: one model."""
    base_copies: int = 1
    """Transformers models held: an ensemble's LoRA members of one base share one (rm/scoring/ensemble_lora.py)."""
    eos: str = "none"
    """How each response ends (data.eos: rm/data/formats/text_rule.py), as the model was trained (`Loaded.eos`)."""
    concurrent: bool = True
    """Forwards may run in several threads at once (--batch-threads): False for an ensemble whose LoRA members are
    switched for the whole model (rm/scoring/ensemble_lora.py)."""

    def __post_init__(self) -> None:
        self.attributes = model_attributes(self.model)
        """Names of outputs 1.. (model.head.attributes of an rm export); [] for a one-output model."""
        self.prefix = special_prefix(self.tokenizer)
        self.renderer = Renderer(self.tokenizer, version=self.text_version)  # as `rm score` renders

    def batch_threads(self, asked: int) -> int:
        """Parts of a batch scored at once (--batch-threads; 0: 2 on the CPU, 1 on a GPU, where forwards of one
        process queue on one stream); 1 where the model cannot run in several threads (`concurrent`)."""
        if not self.concurrent:
            return 1
        return asked or (1 if self.device.type == "cuda" else 2)

    @property
    def layout_name(self) -> str:
        return "shared" if isinstance(self.layout, PackedScoring) else "padded"

    @property
    def group_layout_name(self) -> str:
        """How a group's responses are scored: `prefix-cache`, or the layout single texts get."""
        return "prefix-cache" if self.groups is not None else self.layout_name

    def encode(self, texts: list[ScoreText]) -> list[EncodedGroup]:
        """One request item's texts (one text, or a group's responses, fitted together as `rm score` fits a
        record's) as groups whose responses, group after group, are the texts in order: usually one group, more
        where a response had to be fitted on its own. The caller keeps items apart, since texts encoded together
        share one fitting."""
        return encode_texts(self.tokenizer, texts, self.max_length, self.prefix, self.eos)

    @torch.inference_mode()
    def forward(self, groups: list[EncodedGroup]) -> list[Output]:
        """Raw rewards of one batch, one per response, group after group (each group's prompt computed once): groups
        of two or more responses to a non-empty prompt on their prompt's cache where the model allows it, the rest
        (single texts) in the layout, in one collate. With attribute outputs each entry is [reward, *attributes].
        A stepwise group's (/score_steps: `step_ends` set) entries are the head's outputs at each kept step's last
        token instead, read by `step_outputs` in one forward of the batch's stepwise groups, as `score_steps` reads
        them."""
        starts = [0]
        for g in groups:
            starts.append(starts[-1] + len(g.response_ids))
        out: list[Output] = [0.0] * starts[-1]
        stepwise = [i for i, g in enumerate(groups) if g.step_ends]
        if stepwise:
            encoded = [StepIds(groups[i], [0] * len(groups[i].response_ids)) for i in stepwise]
            for i, outputs in zip(stepwise, step_outputs(self.model, self.layout, self.device, encoded), strict=True):
                out[starts[i] : starts[i + 1]] = outputs
        cache = [self.groups is not None and len(g.response_ids) > 1 and len(g.prompt_ids) > 0 for g in groups]
        for on_cache in (True, False):
            chosen = [i for i, c in enumerate(cache) if c == on_cache and not groups[i].step_ends]
            if not chosen:
                continue
            if on_cache:
                rewards = self.groups.rewards([groups[i] for i in chosen])
            else:
                batch = {k: v.to(self.device) for k, v in self.layout.collate([groups[i] for i in chosen]).items()}
                rewards = self.layout.rewards(self.model, batch)
            rows = [j for i in chosen for j in range(starts[i], starts[i + 1])]  # their responses' flat indices
            for j, r in zip(rows, rewards.tolist(), strict=True):
                out[j] = r
        return out

    def reward(self, raw: float) -> float | None:
        """What a client gets: normalised when asked; None (JSON null) where the model overflowed, as `rm score`
        writes a non-finite reward."""
        value = raw if self.norm is None else (raw - self.norm["mean"]) / self.norm["std"]
        return value if math.isfinite(value) else None

    def outputs(self, raw: Output) -> tuple[float | None, dict[str, float | None] | None]:
        """(reward, {attribute: value}) of one scored text: --normalize applies to the reward alone (the export's
        mean and std are the reward's); attributes are the head's raw outputs, None where not finite. An ensemble's:
        its chosen reward, and the members' mean attributes."""
        if self.ensemble is not None:
            combined = self.ensemble.combine([raw])[0]
            return combined.reward, combined.attributes
        if not self.attributes:
            return self.reward(raw), None
        values = {n: (v if math.isfinite(v) else None) for n, v in zip(self.attributes, raw[1:], strict=True)}
        return self.reward(raw[0]), values


def load_scorer(
    name: str,
    *,
    device: str,
    dtype: str,
    trust_remote_code: bool,
    max_length: int,
    normalize: bool,
    num_threads: int,
    prefix_cache: bool = True,
) -> Scorer:
    """`name` loaded by the one loader (rm/scoring/inference.py: an export, any sequence-classification model, a run
    directory or a checkpoint), with what serving adds: the batch layout, the prompt cache, --normalize."""
    loaded = load(
        name,
        device=device,
        dtype=dtype,
        max_length=max_length,
        trust_remote_code=trust_remote_code,
        num_threads=num_threads,
        purpose="serving",
    )
    return scorer_of(loaded, normalize=normalize, prefix_cache=prefix_cache)


def load_ensemble_scorer(names: tuple[str, ...], *, device: str, dtype: str, trust_remote_code: bool,
                         max_length: int, normalize: bool, num_threads: int, prefix_cache: bool = True, k: float = 1.0,
                         reward: str = "mean") -> Scorer:  # fmt: skip
    """The members at `names` loaded and checked as one ensemble (rm/scoring/ensemble_model.py), served as one model
    is: one batch plan and one collate for all of them, every member's forward on the same tensors."""
    ensemble = load_ensemble(
        names, device=device, dtype=dtype, max_length=max_length, trust_remote_code=trust_remote_code,
        num_threads=num_threads, purpose="serving", k=k, reward=reward, normalize=normalize,
    )  # fmt: skip
    layout, groups = ensemble_layout(ensemble, prefix_cache)
    first = ensemble.first
    weights = "; ".join(f"{m.name}: {m.weights}" for m in ensemble.members if m.weights)
    return Scorer(
        ", ".join(names), ensemble.model, first.tokenizer,
        first.max_length, layout, first.device, None, groups, weights, first.text_version, first.step_separator,
        ensemble.rule, ensemble.base_copies, first.eos, ensemble.threads_safe,
    )  # fmt: skip


def scorer_of(loaded: Loaded, *, normalize: bool = False, prefix_cache: bool = True) -> Scorer:
    """A loaded model with its batch layout (`rm score`'s), and its prompt cache where the model allows one."""
    model, tokenizer = loaded.model, loaded.tokenizer
    norm = normalization(model.hf.config, loaded.name) if normalize else None
    layout = default_layout(model, tokenizer.pad_token_id)
    dev = loaded.device
    groups = None
    if prefix_cache and isinstance(layout, PackedScoring):
        groups, why_not = prefix_support(model, tokenizer.pad_token_id, dev)
        if why_not:
            log.info("groups are scored in the shared layout, not on a cached prompt: %s", why_not)
    return Scorer(
        loaded.name, model, tokenizer, loaded.max_length, layout, dev, norm, groups, loaded.weights,
        loaded.text_version, loaded.step_separator, eos=loaded.eos,
    )  # fmt: skip
