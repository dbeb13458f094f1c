"""The modeling file that lets plain transformers load an export of an architecture it has no reward class for.

For a model type with a `…ForSequenceClassification` in transformers, the export is a standard folder
and needs nothing here. For the others (granite, olmoe, gemma4_text, mamba…; rm/model/architecture.py),
the export carries `modeling_rm_reward.py`: rm's `RewardHead` (rm/model/head.py, copied verbatim;
it imports only torch and transformers) and a few lines naming the architecture's own classes, with
`auto_map` in config.json pointing `AutoModelForSequenceClassification` at it. That is the Hub's usual
way to ship a class transformers lacks, and it asks the user for `trust_remote_code=True`; the model
card says why. rm's own `rm score` and `rm eval` never run the file: they build the same class from rm.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from transformers import PreTrainedModel

from rm.model import head
from rm.model.architecture import is_wrapped

FILE = "modeling_rm_reward.py"
AUTO = "AutoModelForSequenceClassification"


def modeling_source(hf: PreTrainedModel) -> str:
    """The file's text: RewardHead, then `<Arch>ForSequenceClassification` on the architecture's classes."""
    cls = type(hf)
    base = next(c for c in cls.__mro__[1:] if issubclass(c, PreTrainedModel) and c is not cls)
    imports = {c.__module__: [] for c in (cls.backbone_class, base, cls.config_class)}
    for c in (cls.config_class, cls.backbone_class, base):
        if c.__name__ not in imports[c.__module__]:
            imports[c.__module__].append(c.__name__)
    lines = [f"from {module} import {', '.join(names)}  # noqa: E402" for module, names in imports.items()]
    return (
        inspect.getsource(head).rstrip()
        + "\n\n\n# Written by rm for this export: the architecture's own classes under the reward head.\n"
        + "\n".join(lines)
        + f"\n\n\nclass {cls.__name__}(RewardHead, {base.__name__}):\n"
        + f"    config_class = {cls.config_class.__name__}\n"
        + f"    backbone_class = {cls.backbone_class.__name__}\n"
        + f'    base_model_prefix = "{cls.base_model_prefix}"\n'
    )


def remote_code_reason(hf: PreTrainedModel) -> str:
    """Why the export needs `trust_remote_code=True` in plain transformers ('' when it does not)."""
    if not is_wrapped(hf):
        return ""
    return (
        f"transformers has no sequence-classification class for `{hf.config.model_type}`, so this folder carries "
        f"`{FILE}`, written by rm: a `score` layer on the causal LM's own `{type(hf).backbone_class.__name__}`, "
        "read at the last attended token (about 70 lines, importing only torch and transformers; read it before "
        "trusting it). rm itself loads the folder without it (`rm score`, `rm eval`)."
    )


def point_config_at_modeling_file(hf: PreTrainedModel) -> None:
    """Before saving: `auto_map` for wrapped models, and none left over on native ones."""
    if is_wrapped(hf):
        hf.config.auto_map = {AUTO: f"{FILE.removesuffix('.py')}.{type(hf).__name__}"}
    elif AUTO in (getattr(hf.config, "auto_map", None) or {}) and FILE.removesuffix(".py") in hf.config.auto_map[AUTO]:
        del hf.config.auto_map


def write_modeling_file(hf: PreTrainedModel, folder: Path) -> None:
    """After saving: the modeling file next to config.json, for wrapped models only."""
    if is_wrapped(hf):
        (Path(folder) / FILE).write_text(modeling_source(hf))
