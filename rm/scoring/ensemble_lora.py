"""LoRA members of an ensemble on one copy of their base model: the base loaded once, each member's LoRA matrices and
score head a named peft adapter on it, switched to before that member's forward.

A LoRA run (`model.lora.r > 0`) keeps its unmerged weights in its checkpoints: `model.safetensors` holds the frozen
base, the LoRA matrices and the trained copy of the score head (peft's `modules_to_save`, adapter "default"), with
peft's adapter_config.json beside them (rm/export/restore.py rebuilds such a model). Its end-of-run export is merged
(rm/export/folder.py), so a member's adapter is found in:
- a checkpoint given as the member (`RUN/checkpoints/step-N`);
- a run directory without an export (its newest checkpoint, which `rm serve RUN` loads too);
- a run directory with an export whose newest checkpoint holds the final weights (`train.save_steps` divides
  `train.max_steps`): the export's weights, unmerged.
A LoRA run whose final weights exist merged only (its export alone) is loaded whole, said in one log line.

The first member of a base is rebuilt as `rm export` rebuilds it (`load_model`). Another member whose run config has
the same `model` section (its `lora` apart) is added to it as an adapter once its checkpoint's frozen tensors are
found equal to the ones in memory: one that differs (another base, a vocabulary resized with other random rows) is
loaded whole instead, said in one log line. A member's rewards equal those it gets loaded alone (merged) within float
rounding (tests/scoring/ checks 1e-5).

Which adapter a forward runs is set per thread (`activate`), not by peft's `set_adapter`, one setting for the whole
model: `rm serve` scores the parts of a batch in several threads at once (rm/serve/batcher.py), each going through
the members in its own order. Every LoRA layer and score-head copy of a shared base reads the thread's adapter
(`per_thread_adapters`); a base holding a layer that cannot (a LoRA variant such as DoRA, another kind of adapted
layer) is switched with `set_adapter` instead, and its ensemble is run in one thread (`Ensemble.threads_safe`).

A member's forward on a large batch runs on its merged weights, built per layer as it is reached and dropped after:
peft's unmerged forward adds two thin matrix products per layer per token, which on the CPU cost more than building
W + s B A once per layer, while merging in place and back would drift the shared base by a rounding error per
switch, and merged copies kept per member would hold the base M times.
"""

from __future__ import annotations

import json
import logging
import threading
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors import safe_open
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedTokenizerBase

from rm.config.exportdir import ExportDir
from rm.config.loader import read_yaml
from rm.config.rundir import CONFIG, RunDir
from rm.errors import ExportError
from rm.export.restore import Source, load_model, newest_checkpoint, resolve_source, run_tokenizer, unwrapped_name
from rm.model.build import DTYPES, check_positions
from rm.model.reward import reward_module
from rm.scoring.inference import SPLIT_KEYS, Loaded, recorded_normalization, run_to_restore, saved_separator
from rm.tokens.tokenizer import load_tokenizer

log = logging.getLogger("rm.scoring")

SAVED_ADAPTER = "default"
"""The adapter name training saves under (peft's default): `.default.` in every LoRA and head-copy tensor name."""

ACTIVE = threading.local()
"""`ACTIVE.name`: the adapter this thread's forwards run on the bases whose layers read it (`per_thread_adapters`)."""


@dataclass
class Adapter:
    """Where a LoRA member's unmerged weights are, and what its export says about them where it has one."""

    source: Source
    export: Path | None = None
    """The run's export, whose tokenizer and normalisation are the member's (`load` reads them from there)."""

    def norm(self) -> dict[str, float] | None:
        """The normalisation the export recorded (`rm export --normalize`), None without one."""
        if self.export is None:
            return None
        return recorded_normalization(SimpleNamespace(**json.loads(ExportDir(self.export).model_config.read_text())))

    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The tokenizer `load` gives the member: its export's, else the run's."""
        if self.export is not None:
            return load_tokenizer(str(self.export), self.source.cfg.model.trust_remote_code)
        return run_tokenizer(self.source.cfg, self.source.run_dir)


def adapter_source(name: str) -> Adapter | None:
    """Where member `name`'s unmerged LoRA weights are, or None where it has none to share a base with: not a LoRA
    run of rm (QLoRA's 4-bit base is not shared either), or a finished run whose final weights are merged only."""
    path = Path(name).expanduser()
    if not path.is_dir():
        return None
    if run_to_restore(name) is not None:  # a run directory without an export, or a checkpoint: as `load` reads it
        source = resolve_source(path)
        return Adapter(source) if is_lora(source) else None
    run = RunDir(path)
    if not (run.config.is_file() and ExportDir(run.export).holds_model) or ExportDir(path).holds_model:
        return None
    newest = newest_checkpoint(path)
    source = resolve_source(newest) if newest is not None else None
    if source is not None and is_lora(source) and source.is_final:
        return Adapter(source, run.export)
    lora = read_yaml(run.config).get("model", {}).get("lora", {}) or {}
    if lora.get("r"):
        log.info("%s: its LoRA weights are merged into its export and no checkpoint holds its final weights (a run "
                 "keeps them where train.save_steps divides its last step): loaded whole, with a base of its own",
                 name)  # fmt: skip
    return None


def is_lora(source: Source) -> bool:
    return source.adapter_dir is not None and source.cfg.model.lora.r > 0 and not source.cfg.model.lora.qlora


def base_key(source: Source) -> str:
    """What builds the same base: the run config's `model` section without its `lora`."""
    model = asdict(source.cfg.model)
    model.pop("lora")
    return json.dumps(model, sort_keys=True, default=str)


class SharedBases:
    """LoRA members loaded onto as few bases as their weights allow (one per `base_key` whose frozen tensors agree)."""

    def __init__(self, purpose: str):
        self.purpose = purpose
        self.bases: dict[str, tuple[nn.Module, list[str]]] = {}
        """base_key -> (the peft model holding the base, the members on it in order: the first's adapter is
        "default", the n-th's "member{n}")."""

    def add(self, name: str, adapter_of: Adapter, max_length: int) -> tuple[Loaded, Callable[[], None]] | None:
        """(member `name` on a base already held, or on a new one; what switches that base to its adapter), or None
        where its frozen tensors differ from the held base's (the caller loads it whole)."""
        source = adapter_of.source
        if source.final_step is None:  # as `restored` warns for a run it loads alone
            log.warning("%s %s (%s)", self.purpose, source.weights.parent, source.describe())
        tokenizer = adapter_of.tokenizer()
        key = base_key(source)
        if key not in self.bases:
            peft = load_model(source, tokenizer)  # the base and adapter "default"
            self.bases[key] = (peft, [name])
            adapter = SAVED_ADAPTER
        else:
            peft, members = self.bases[key]
            adapter = f"member{len(members)}"
            if not add_adapter(peft, source, adapter):
                log.info("%s: its frozen base weights differ from %s's: loaded whole, with a base of its own", name,
                         members[0])  # fmt: skip
                return None
            members.append(name)
        loaded = member(name, peft, tokenizer, source, max_length, adapter_of.norm())
        return loaded, lambda: activate(peft, adapter)

    def finish(self, dtype: str, device: str) -> bool:
        """Every base, with its adapters, to the dtype and device asked (after every comparison, made as saved);
        whether every base reads each thread's adapter (its members may run in several threads at once)."""
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        own = True
        for peft, _ in self.bases.values():
            peft.to(DTYPES[dtype]).eval().to(device)
            peft.rm_per_thread = per_thread_adapters(peft)
            own = own and peft.rm_per_thread
        return own


def activate(peft: nn.Module, adapter: str) -> None:
    """`adapter` for this thread's next forwards on `peft`; with peft's `set_adapter` too where a layer of it does
    not read the thread's (then the ensemble runs in one thread)."""
    ACTIVE.name = adapter
    if not getattr(peft, "rm_per_thread", False):
        peft.set_adapter(adapter, True)


def per_thread_adapters(peft: nn.Module) -> bool:
    """Every plain LoRA linear layer and score-head copy of `peft` made to run the thread's adapter (`ACTIVE`);
    whether none is left that reads peft's one active adapter (a LoRA variant, another adapted layer)."""
    from peft.tuners.lora import Linear, LoraLayer
    from peft.utils.other import ModulesToSaveWrapper

    own = True
    for module in peft.modules():
        if isinstance(module, Linear) and not module.lora_variant:
            module.forward = types.MethodType(lora_forward, module)
        elif isinstance(module, ModulesToSaveWrapper):
            module.forward = types.MethodType(head_forward, module)
        elif isinstance(module, LoraLayer):
            own = False
    return own


def lora_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """peft's LoRA forward for the thread's adapter: on its merged weight W + s B A, built for this call, where that
    costs fewer multiply-adds than the unmerged product (rows x (in + out) > in x out: a batch of more rows than
    about half a square layer) and the base is a plain linear layer; else base + s B A x."""
    from peft.tuners.lora import Linear

    adapter = getattr(ACTIVE, "name", None)
    if adapter is None or args or kwargs or self.disable_adapters or self.merged:
        return Linear.forward(self, x, *args, **kwargs)
    if adapter not in self.lora_A:  # a member whose run adapted other layers
        return self.base_layer(x)
    rows = x.numel() // x.shape[-1]
    large = rows * (self.in_features + self.out_features) > self.in_features * self.out_features
    if large and isinstance(self.base_layer, nn.Linear) and not self.fan_in_fan_out:
        weight = self.base_layer.weight + self.get_delta_weight(adapter)
        return F.linear(x.to(weight.dtype), weight, self.base_layer.bias)
    result = self.base_layer(x)
    lora_a, lora_b = self.lora_A[adapter], self.lora_B[adapter]
    delta = lora_b(lora_a(self.lora_dropout[adapter](x.to(lora_a.weight.dtype)))) * self.scaling[adapter]
    return (result + delta).to(result.dtype)


def head_forward(self, *args, **kwargs) -> torch.Tensor:
    """peft's score-head wrapper for the thread's adapter: its trained copy, or the original where it has none."""
    from peft.utils.other import ModulesToSaveWrapper

    adapter = getattr(ACTIVE, "name", None)
    if adapter is None or kwargs.get("adapter_names") is not None or self.disable_adapters:
        return ModulesToSaveWrapper.forward(self, *args, **kwargs)
    module = self.modules_to_save[adapter] if adapter in self.modules_to_save else self.original_module
    return module(*args, **kwargs)


def member(name: str, peft: nn.Module, tokenizer, source: Source, max_length: int,
           norm: dict[str, float] | None) -> Loaded:  # fmt: skip
    """The member as `load` describes a run rebuilt from a checkpoint: its model the shared base, which scores as this
    member once switched to its adapter."""
    loaded = Loaded(name, reward_module(peft), tokenizer, max_length or source.cfg.collator.max_length)
    loaded.weights, loaded.normalization = source.describe(), norm
    loaded.text_version = source.cfg.data.text_version  # the run's saved rule (`resolve_source`)
    loaded.eos = source.cfg.data.eos
    saved = source.weights.parent / CONFIG
    data = read_yaml(saved if saved.is_file() else RunDir(source.run_dir).config).get("data")
    data = data if isinstance(data, dict) else {}
    loaded.split = {k: v for k, v in data.items() if k in SPLIT_KEYS}
    loaded.step_separator = saved_separator(data)
    check_positions(loaded.max_length, loaded.model.hf.config, "--max-length", name)
    return loaded


def add_adapter(peft: nn.Module, source: Source, adapter: str) -> bool:
    """The checkpoint's LoRA matrices and score head as `adapter` on `peft`, once every frozen tensor it holds is
    found equal to the one in memory; False (and nothing added) where one differs."""
    from peft import PeftConfig

    peft.add_adapter(adapter, PeftConfig.from_pretrained(str(source.adapter_dir)))
    held = {unwrapped_name(k): t for k, t in peft.state_dict().items()}  # views of the parameters
    mine = {k for k in held if f".{adapter}." in k}
    frozen = {k for k in held if not any(f".{a}." in k for a in peft.peft_config)}
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(source.weights), framework="pt") as f:
        for key in f.keys():
            if not key.startswith("hf."):  # the reward model's state beside the transformers weights (learned nu...)
                continue
            name = unwrapped_name(key)
            if f".{SAVED_ADAPTER}." in name:
                state[name.replace(f".{SAVED_ADAPTER}.", f".{adapter}.")] = f.get_tensor(key)
            elif name not in frozen or not torch.equal(f.get_tensor(key).to(held[name].dtype), held[name]):
                peft.delete_adapter(adapter)
                return False
    if set(state) != mine:
        raise ExportError(
            f"{source.weights} does not fit its adapter_config.json: {len(mine - set(state))} LoRA tensors missing "
            f"(e.g. {sorted(mine - set(state))[:2]}), {len(set(state) - mine)} unexpected"
        )
    broken = [k for k, t in state.items() if not t.isfinite().all()]
    if broken:
        raise ExportError(f"{source.weights}: its LoRA weights are not finite (e.g. {broken[0]}): the run diverged")
    with torch.no_grad():
        for k, t in state.items():
            held[k].copy_(t)
    return True
