"""Several reward models read as one (`rm merge`, ensembles): what they must share, checked before any weight is
averaged or any text scored, each difference refused in one line naming the two members and what differs.

A member is anything `load` reads (rm/scoring/inference.py). What is compared (`Member`):
- architecture: the transformers class and the config fields that fix every weight's shape;
- tokenizer: a digest of the tokenizer's serialized state (vocabulary, merges, special tokens: the ids a text gets);
- template: the text a probe conversation is written as (the chat template, or HH text where there is none, under
  the record -> text rule data.text_version and the end-of-sequence convention data.eos): a run's tokenizer without
  a template and its export's, whose template writes HH text, write the same text and are one template; a template
  that cannot write the probe is compared as written;
- max_length: where texts are cut (one batch plan for an ensemble);
- outputs: the names of the outputs beside the reward (attributes), and a process reward model's step separator;
- init: where training started, read from the run config rm keeps beside the weights: `model.name_or_path` (a
  pretrained model or an rm export) or `model.random_init`, with `train.seed`, which seeds a random backbone and a
  fresh head alike. A member with no run config (a folder rm did not write) has no known init: `rm merge` refuses
  it (rm/scoring/weight_average.py), and an ensemble, whose members need not share one, does not ask.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rm.config.exportdir import ExportDir
from rm.config.loader import read_yaml
from rm.config.rundir import RunDir
from rm.data.formats.chat import Message, Renderer
from rm.errors import ConfigError, RecordError
from rm.model.reward import transformers_model
from rm.scoring.inference import Loaded
from rm.tokens.cache import digest, tokenizer_state

SHAPE_KEYS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "intermediate_size", "num_labels")  # fmt: skip
"""Config fields that fix the weights' shapes (those a config has)."""


@dataclass(frozen=True)
class Member:
    """One model of a merge or an ensemble, with what it must share with the others."""

    name: str
    architecture: str
    tokenizer: str
    template: str
    max_length: int
    outputs: str
    init: str | None


LABELS = {"architecture": "architecture", "tokenizer": "tokenizer (vocabulary, merges or special tokens)",
          "template": "chat template, data.text_version or data.eos", "max_length": "max_length",
          "outputs": "outputs (attribute names or step separator)", "init": "initialization"}  # fmt: skip


def run_config(loaded: Loaded) -> dict[str, Any]:
    """The run config rm keeps beside the member's weights ({} for a folder rm did not write)."""
    folder = Path(loaded.folder or loaded.name).expanduser()
    if ExportDir(folder).from_rm:
        return ExportDir(folder).saved()
    for run in (folder, *folder.parents[:2]):  # a run directory, or one of its checkpoints
        if RunDir(run).config.is_file():
            return read_yaml(RunDir(run).config)
    return {}


def init_of(saved: dict[str, Any]) -> str | None:
    """Where training started, as a digest of the run config's model source and its train.seed; None: unknown."""
    if not saved:
        return None
    model, train = saved.get("model") or {}, saved.get("train") or {}
    source = model.get("name_or_path") or {"random_init": model.get("random_init") or {}}
    return digest(source, train.get("seed", 42))


def member_of(loaded: Loaded) -> Member:
    hf = transformers_model(loaded.model.hf)
    config = hf.config.to_dict()
    shape = {k: config[k] for k in SHAPE_KEYS if k in config}
    tokenizer = digest(tokenizer_state(loaded.tokenizer))
    template = written(loaded)
    outputs = json.dumps([loaded.attributes, getattr(hf.config, "rm_step_separator", None)])
    return Member(loaded.name, f"{type(hf).__name__} {json.dumps(shape, sort_keys=True)}", tokenizer, template,
                  loaded.max_length, outputs, init_of(run_config(loaded)))  # fmt: skip


PROBE = [Message("user", "Is the sky blue?"), Message("assistant", "Yes."), Message("user", "Why?")]
"""A conversation every template can write: what two members' templates are compared on."""


def written(loaded: Loaded) -> str:
    """A digest of the text `loaded`'s scoring writes for `PROBE` and two answers (as `rm score` renders messages)."""
    renderer = Renderer(loaded.tokenizer, version=loaded.text_version)
    try:
        text = renderer.group(
            PROBE, [[Message("assistant", "Rayleigh.")], [Message("assistant", "Light.")]], ["a", "b"]
        )
    except RecordError:
        return digest(getattr(loaded.tokenizer, "chat_template", None), loaded.text_version, loaded.eos)
    return digest(text.prompt, list(text.responses), loaded.text_version, loaded.eos)


def refuse_unshared(members: list[Member], purpose: str, keys: tuple[str, ...] | None = None) -> None:
    """Raise ConfigError naming the first two members that differ in one of `keys` (every field but the name by
    default); an init that one member does not record is not compared."""
    for key in keys or tuple(f.name for f in fields(Member) if f.name != "name"):
        known = [m for m in members if getattr(m, key) is not None]
        odd = next((m for m in known if getattr(m, key) != getattr(known[0], key)), None)
        if odd is not None:
            first = known[0]
            detail = ""
            if key in ("architecture", "max_length", "outputs"):
                detail = f" ({getattr(first, key)} against {getattr(odd, key)})"
            raise ConfigError(
                f"{purpose}: {first.name} and {odd.name} differ in their {LABELS[key]}{detail}; {HINTS[key]}"
            )


HINTS = {
    "architecture": "members must be the same model",
    "tokenizer": "members must read the same token ids: train them with one tokenizer",
    "template": "members must be trained on text written the same way (one chat template, one data.text_version, "
    "one data.eos)",
    "max_length": "give them one --max-length",
    "outputs": "members must have the same outputs: the same model.head.attributes, or the same step separator",
    "init": "members must be fine-tuned from one initialization (the same model.name_or_path or model.random_init, "
    "and the same train.seed; vary train.data_seed or the hyperparameters instead)",
}
