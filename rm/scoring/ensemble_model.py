"""An ensemble's members loaded, checked and run as one model: each batch collated once, every member's forward on the
same tensors, their outputs side by side ([n, M], or [n, M, 1 + A] with attribute outputs).

Members are what `load` reads (rm/scoring/inference.py). They must share what makes one batch plan valid for all of
them: the architecture, the tokenizer, the chat template and text rule, max_length and the outputs
(rm/scoring/members.py's `refuse_unshared`, one line naming the two members that differ). Their initialisation is
not compared, unlike `rm merge`'s: averaging weights needs one starting point, averaging rewards does not (an
ensemble of models trained from different seeds is the usual kind). LoRA members of one base hold it once
(rm/scoring/ensemble_lora.py); a source given twice is loaded once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rm.collate.scoring import Layout, PackedScoring, PaddedLayout
from rm.errors import ConfigError
from rm.evaluation.score_file import default_layout
from rm.model.cached_prompt import PrefixScoring, prefix_support
from rm.model.threads import set_threads
from rm.scoring.ensemble import EnsembleRule
from rm.scoring.ensemble_lora import SharedBases, adapter_source
from rm.scoring.inference import Loaded, load, normalization
from rm.scoring.members import member_of, refuse_unshared
from rm.tokens.store import EncodedGroup

log = logging.getLogger("rm.scoring")

SHARED = ("architecture", "tokenizer", "template", "max_length", "outputs")
"""What the members of an ensemble must share (every `Member` field but the initialisation)."""


class EnsembleModel(nn.Module):
    """The members' forwards on one batch, called as one member is (`Layout.rewards`, `outputs_at`): [n, M] rewards,
    column m member m's, or [n, M, 1 + A] with attribute outputs. A member that is an adapter on a shared base has
    its base switched to it first (`switches`)."""

    def __init__(self, members: Sequence[nn.Module], switches: Sequence[Callable[[], None] | None]):
        super().__init__()
        self.members = nn.ModuleList(members)  # a shared base appears once among the parameters
        self.switches = list(switches)

    @property
    def hf(self) -> nn.Module:
        """The first member's transformers model: the config and outputs every member shares (checked at load)."""
        return self.members[0].hf

    def using(self, m: int) -> nn.Module:
        """Member m, ready to run (its adapter active where it is one)."""
        if self.switches[m] is not None:
            self.switches[m]()
        return self.members[m]

    def forward(self, **batch: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.using(m)(**batch) for m in range(len(self.members))], dim=1)


class EnsemblePrefix:
    """Groups on their prompt's cache (rm/model/cached_prompt.py) for every member: the members' `PrefixScoring`
    rewards of the same groups, side by side as `EnsembleModel` gives them."""

    def __init__(self, model: EnsembleModel, scorings: list[PrefixScoring]):
        self.model, self.scorings = model, scorings

    def rewards(self, groups: list[EncodedGroup]) -> torch.Tensor:
        out = []
        for m, scoring in enumerate(self.scorings):
            self.model.using(m)
            out.append(scoring.rewards(groups))
        return torch.stack(out, dim=1)


@dataclass
class Ensemble:
    """Loaded members, checked to share what one batch plan needs, as one model with its rule."""

    members: list[Loaded]
    model: EnsembleModel
    rule: EnsembleRule
    base_copies: int
    """Transformers models held in memory: one per base that LoRA members share, one per other distinct member."""
    threads_safe: bool = True
    """Its forwards may run in several threads at once: each shared base reads the thread's adapter."""

    @property
    def first(self) -> Loaded:
        """What every member shares (tokenizer, max_length, text rule) is read from the first."""
        return self.members[0]


def load_ensemble(
    sources: Sequence[str],
    *,
    device: str = "auto",
    dtype: str = "float32",
    max_length: int = 0,
    trust_remote_code: bool = False,
    num_threads: int = 0,
    purpose: str = "scoring",
    k: float = 1.0,
    reward: str = "mean",
    normalize: bool = False,
) -> Ensemble:
    """The members at `sources`, each as `load` reads it, LoRA runs of one base on one copy of it; refused in one line
    where two differ in what a batch plan needs (`SHARED`), or where --normalize finds a member without statistics."""
    if len(sources) < 2:
        raise ConfigError(f"an ensemble needs two or more members, got {len(sources)}: score one model on its own")
    rule = EnsembleRule(tuple(sources), k, reward)  # refuses a bad k or reward before minutes of loading
    set_threads(num_threads)
    shared, seen, members, switches = SharedBases(purpose), {}, [], []
    for name in sources:
        key = str(Path(name).expanduser().resolve()) if Path(name).expanduser().exists() else name
        if key in seen:  # the same source again: the same model, run again (its rewards are the same)
            members.append(members[seen[key]])
            switches.append(switches[seen[key]])
            continue
        lora = adapter_source(name)
        added = shared.add(name, lora, max_length) if lora is not None else None
        if added is None:
            alone = load(name, device=device, dtype=dtype, max_length=max_length,
                         trust_remote_code=trust_remote_code, num_threads=num_threads, purpose=purpose)  # fmt: skip
            added = alone, None
        seen[key] = len(members)
        members.append(added[0])
        switches.append(added[1])
    threads_safe = shared.finish(dtype, device)
    refuse_unshared([member_of(m) for m in members], "ensemble", SHARED)
    norms = tuple(normalization(m.model.hf.config, m.name) if m.normalization is None else m.normalization
                  for m in members) if normalize else None  # fmt: skip
    rule = EnsembleRule(tuple(m.name for m in members), k, reward, norms, tuple(members[0].attributes))
    copies = len({id(m.model.hf) for m in members})
    return Ensemble(members, EnsembleModel([m.model for m in members], switches), rule, copies, threads_safe)


def ensemble_layout(ensemble: Ensemble, prefix_cache: bool = True) -> tuple[Layout, EnsemblePrefix | None]:
    """(the batch layout every member reproduces separate forwards in, the groups' prompt cache where every member
    allows one): the shared layout only where each member's probe finds it exact (rm/model/probe.py), as
    `default_layout` decides for one model."""
    model, pad = ensemble.model, ensemble.first.tokenizer.pad_token_id
    shared = all(isinstance(default_layout(model.using(m), pad), PackedScoring) for m in range(len(model.members)))
    if not shared:
        return PaddedLayout(pad), None
    scorings = []
    for m in range(len(model.members) if prefix_cache else 0):
        found, why_not = prefix_support(model.using(m), pad, ensemble.first.device)
        if found is None:
            log.info("groups are scored in the shared layout, not on a cached prompt: %s", why_not)
            return PackedScoring(pad), None
        scorings.append(found)
    return PackedScoring(pad), EnsemblePrefix(model, scorings) if scorings else None
