"""`rm merge`: several reward models fine-tuned from one initialization averaged into one (WARM, Ramé et al. 2024,
arXiv 2401.12187), at the cost of one model when it is read.

What members must share is checked first (rm/scoring/members.py: architecture, tokenizer, template, outputs and the
initialization their run configs record), and then their weights: each member's relative distance from the average,
||w_i - w_mean|| / ||w_mean|| over its weight matrices (norm scales and biases start at the same constants in every
initialization and are left out), must stay under `max_distance` (0.5 by default). Fine-tuning from one start moves
the matrices a little (tests/scoring/test_merge.py's acceptance members: 0.21 to 0.23); two random initializations
stand about 1 apart (independent matrices: each sqrt(2)/2 from their average, which is as far again from zero),
whatever their training, and their average is no model of either. Members fine-tuned too far apart are refused too:
three tiny members trained at lr 1e-2 to about 0.8 from their average merged to 0.644 held-out accuracy against
their 0.654 to 0.681 (at 0.33 apart, lr 3e-3, the merge kept their level). Members must be rm runs or exports: the
run config beside the weights is what records where training started, and the merged export keeps the first
member's.

The average is per weight, in float64, cast back to the members' dtype; `weights` (normalised to sum 1) replace the
uniform one. LoRA members are averaged as their merged weights (base + each member's B A alpha / r, as `rm export`
writes them): the average of their updates, which averaging A and B apart would not give. Tensors that are not
floating point (position buffers) must be equal in every member."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from rm.config import RunConfig
from rm.config.exportdir import ExportDir
from rm.config.loader import load_config
from rm.config.rundir import RunDir
from rm.errors import ConfigError
from rm.export.folder import ExportOptions, RunData, Weights, export_model
from rm.model.reward import transformers_model
from rm.scoring.inference import Loaded, load
from rm.scoring.members import member_of, refuse_unshared, run_config

log = logging.getLogger("rm")

MAX_DISTANCE = 0.5
"""Largest relative distance of a member from the average that `rm merge` accepts (see the module docstring)."""


@dataclass
class MergedMember:
    """What the merged export's card says of a member."""

    name: str
    weight: float
    distance: float
    accuracy: float | None
    n: int | None


def member_weights(n: int, weights: Sequence[float] | None) -> list[float]:
    """The members' weights, normalised to sum 1 (uniform when none are given)."""
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise ConfigError(f"--weights: {len(weights)} weights for {n} members; give one per member")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ConfigError(f"--weights: {list(weights)}: weights must be >= 0 and sum to more than 0")
    return [w / sum(weights) for w in weights]


def averaged(models: Sequence[PreTrainedModel], weights: Sequence[float], names: Sequence[str]) -> dict:
    """The weighted average of the models' state dicts (float64 sums, cast back); equal non-float tensors kept."""
    states = [m.state_dict() for m in models]
    keys = list(states[0])
    for name, state in zip(names[1:], states[1:], strict=True):
        if list(state) != keys:
            raise ConfigError(f"rm merge: {names[0]} and {name} hold different weights; members must be the same model")
    out = {}
    for key in keys:
        first = states[0][key]
        if not first.is_floating_point():
            if any(not torch.equal(s[key], first) for s in states[1:]):
                raise ConfigError(f"rm merge: the members' {key} differ (not a weight that can be averaged)")
            out[key] = first.clone()
            continue
        total = sum(w * s[key].double() for w, s in zip(weights, states, strict=True))
        out[key] = total.to(first.dtype)
    return out


def distances(models: Sequence[PreTrainedModel], merged: dict) -> list[float]:
    """Each model's relative distance from the average over its weight matrices (norms' scales and biases, which
    start at the same constants in every initialization, would hide two random starts)."""
    matrices = [k for k, v in merged.items() if v.is_floating_point() and v.dim() >= 2]
    norm = math.sqrt(sum(float(merged[k].double().pow(2).sum()) for k in matrices))
    out = []
    for model in models:
        state = model.state_dict()
        gap = sum(float((state[k].double() - merged[k].double()).pow(2).sum()) for k in matrices)
        out.append(math.sqrt(gap) / max(norm, 1e-12))
    return out


def held_out(loaded: Loaded) -> tuple[float | None, int | None]:
    """A member's held-out accuracy and pair count from the eval.json beside its weights, (None, None) without."""
    folder = Path(loaded.folder or loaded.name).expanduser()
    for path in (ExportDir(folder).eval_json, RunDir(folder).eval_json):
        if path.is_file():
            overall = json.loads(path.read_text()).get("overall", {})
            return overall.get("accuracy"), overall.get("n")
    return None, None


def merge_models(
    sources: Sequence[str], out: str | Path, *, weights: Sequence[float] | None = None,
    max_distance: float = MAX_DISTANCE, evaluate: bool = True, overwrite: bool = False, dtype: str = "float32",
) -> Path:  # fmt: skip
    """Average `sources` (rm runs or exports) into one standard export at `out`, its card listing the members; with
    `evaluate`, the merged weights are scored on the first member's held-out pairs (its run's data) for the card."""
    if len(sources) < 2:
        raise ConfigError("rm merge: give two or more members to average")
    share = member_weights(len(sources), weights)
    members = [load(s, device="cpu", dtype=dtype, purpose="merging") for s in sources]
    saved = [run_config(m) for m in members]
    if not all(saved):
        lost = next(m.name for m, s in zip(members, saved, strict=True) if not s)
        raise ConfigError(f"rm merge: {lost} holds no rm run config, so where its training started is unknown; "
                          "merge rm runs or exports")  # fmt: skip
    refuse_unshared([member_of(m) for m in members], "rm merge")
    models = [transformers_model(m.model.hf) for m in members]
    state = averaged(models, share, [m.name for m in members])
    gaps = distances(models, state)
    if max(gaps) > max_distance:
        worst = members[gaps.index(max(gaps))].name
        raise ConfigError(
            f"rm merge: {worst} is {max(gaps):.3f} (relative) from the average, above --max-distance {max_distance}: "
            "its weights did not start where the others' did; merge models fine-tuned from one initialization"
        )
    merged = models[0]
    merged.load_state_dict(state)
    cfg = first_config(members[0])
    facts = [MergedMember(m.name, w, g, *held_out(m)) for m, w, g in zip(members, share, gaps, strict=True)]
    data = RunData.load(cfg, Path(cfg.output_dir), members[0].tokenizer) if evaluate else None
    options = ExportOptions(evaluate=evaluate, overwrite=overwrite, members=facts)
    return export_model(merged, members[0].tokenizer, out, cfg, Weights(None, None), data, options)


def first_config(loaded: Loaded) -> RunConfig:
    """The first member's run config, as its run or export keeps it."""
    folder = Path(loaded.folder or loaded.name).expanduser()
    if ExportDir(folder).from_rm:
        return ExportDir(folder).load()
    for run in (folder, *folder.parents[:2]):
        if RunDir(run).config.is_file():
            return load_config(RunDir(run).config)
    raise ConfigError(f"rm merge: {loaded.name} holds no rm run config")
