"""What other readers of an export need beyond what transformers 5 writes: old transformers, TRL, RewardBench, OpenRLHF.

transformers 5 saves a tokenizer under its own class name (`TokenizersBackend`, unknown to 4.x) and
keeps the rope settings only inside `rope_parameters`, while 4.x reads `rope_theta` at the top level
and silently falls back to 10,000 without it. The fixes here are generated from what the model and
tokenizer hold, not listed per architecture:

- config.json: every key of `rope_parameters` also at the top level (plus `rope_scaling` when the rope
  is not the default one), and `torch_dtype` next to `dtype`; existing keys are never overwritten.
- tokenizer_config.json: `PreTrainedTokenizerFast` (reads tokenizer.json in 4.x and 5.x alike),
  `model_input_names` without `token_type_ids` (decoders' forward rejects them), the chat template
  also inline (readers that predate chat_template.jinja), no `is_local`/`local_files_only` (facts about
  where the run loaded it from, not about the tokenizer).
- the tokenizer: the chat template that writes exactly the text training saw (`template_kind`): HH text's,
  the run's tokenizer's own, one that concatenates (the `prompt` format joins prompt and response as they
  are), or none when the formats were mixed and no one template writes them all; `model_max_length` = the
  trained `collator.max_length`, truncation from the left (as `rm score` cuts: the response, where the
  reward is read, stays).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from rm.config import RunConfig
from rm.config.rundir import RunDir
from rm.tokens.tokenizer import CONCAT_CHAT_TEMPLATE, HH_CHAT_TEMPLATE

# Keys that say where a tokenizer was loaded from on the machine that exported it.
_LOCAL_KEYS = ("is_local", "local_files_only", "name_or_path", "_name_or_path")


TEMPLATES = {"hh": HH_CHAT_TEMPLATE, "concat": CONCAT_CHAT_TEMPLATE, "mixed": None}
"""The chat template an export carries for each kind of training text ("tokenizer": the run's tokenizer's own)."""


def run_formats(cfg: RunConfig) -> set[str]:
    """The record formats the run trained on: `data.format`, or in auto mode those its data_report.json counted
    (empty when neither says)."""
    if cfg.data.format != "auto":
        return {cfg.data.format}
    try:
        return set(json.loads(RunDir(Path(cfg.output_dir)).data_report.read_text()).get("formats", {}))
    except (OSError, ValueError, AttributeError):
        return set()


def template_kind(tokenizer: PreTrainedTokenizerBase, cfg: RunConfig) -> str:
    """How training wrote its text: "hh" (HH text: the `hh` format, and message lists rendered as HH), "tokenizer"
    (message lists through the tokenizer's own template), "concat" (the `prompt` format: prompt + response as
    written), or "mixed" (several of these: no one template writes them all)."""
    own = bool(getattr(tokenizer, "chat_template", None)) and cfg.data.chat_template != "hh"
    messages = "tokenizer" if own else "hh"  # conversation and argilla records: rendered by rm's Renderer
    kinds = {{"hh": "hh", "prompt": "concat"}.get(f, messages) for f in run_formats(cfg)} or {messages}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def export_tokenizer(tokenizer: PreTrainedTokenizerBase, cfg: RunConfig) -> PreTrainedTokenizerBase:
    """A copy of the run's tokenizer as the export saves it (the caller's object is left as it was)."""
    tok = copy.deepcopy(tokenizer)
    kind = template_kind(tokenizer, cfg)
    if kind in TEMPLATES:
        tok.chat_template = TEMPLATES[kind]
    tok.model_max_length = cfg.collator.max_length
    tok.truncation_side = "left"
    tok.padding_side = "right"
    return tok


def _update_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def legacy_config_keys(config: dict) -> dict:
    """Top-level keys that transformers 4.x reads where 5.x nests or renames them, from `config` itself."""
    extra = {}
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and rope and not any(isinstance(v, dict) for v in rope.values()):
        extra.update(rope)  # rope_theta, partial_rotary_factor… (per-layer-type dicts are 5.x only)
        extra.pop("rope_type", None)
        if rope.get("rope_type", "default") != "default":
            extra["rope_scaling"] = dict(rope)
    if config.get("dtype") is not None:
        extra["torch_dtype"] = config["dtype"]
    return {k: v for k, v in extra.items() if k not in config}


def fix_config(folder: Path) -> None:
    _update_json(folder / "config.json", lambda c: c.update(legacy_config_keys(c)))


def fix_tokenizer_config(folder: Path, tokenizer: PreTrainedTokenizerBase) -> None:
    def change(c: dict) -> None:
        for key in _LOCAL_KEYS:
            c.pop(key, None)
        if (folder / "tokenizer.json").is_file():
            c["tokenizer_class"] = "PreTrainedTokenizerFast"
        c["model_input_names"] = ["input_ids", "attention_mask"]
        c["model_max_length"] = tokenizer.model_max_length
        c["truncation_side"], c["padding_side"] = tokenizer.truncation_side, tokenizer.padding_side
        template = getattr(tokenizer, "chat_template", None)
        if isinstance(template, str):
            c["chat_template"] = template
        else:  # mixed formats: no template, rather than one that writes text training never saw
            c.pop("chat_template", None)
            (folder / "chat_template.jinja").unlink(missing_ok=True)

    _update_json(folder / "tokenizer_config.json", change)


def fix_modes(folder: Path) -> None:
    """Every file readable as any new file is (safetensors writes the weights 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(0o666 & ~umask)


def finish_folder(folder: Path, tokenizer: PreTrainedTokenizerBase) -> None:
    """Apply the fixes above to a folder that `save_pretrained` has just written."""
    fix_config(folder)
    fix_tokenizer_config(folder, tokenizer)
    fix_modes(folder)
