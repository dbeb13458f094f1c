"""What an export folder holds: the one definition of its files, and the one reader of the run config kept there.

<export>/config.json            the transformers model config (with pad_token_id, the outputs' names, the
                                normalisation where asked): a folder that holds one is a model plain transformers loads
<export>/model*.safetensors     the weights (safetensors only)
<export>/tokenizer*, ...        the tokenizer, with the chat template that rendered the training text
<export>/rm_config.yaml         the run's config as the run kept it (`rundir.saved_config`): what rm reads back of
                                its training (max_length, the hold-out rule, the loss, the training data's place)
<export>/eval.json              the eval that describes these weights, where there is one
<export>/README.md              the model card

`RunDir` (rm/config/rundir.py) is to a run directory what `ExportDir` is to an export: every module that names one
of these files or reads the saved run config goes through here, so that the file cannot be renamed in one place
and looked for under its old name in another (tests/meta/test_one_home.py keeps the name in this module alone).

The saved run config is read two ways: whole, as a `RunConfig` (`load`), where a caller rebuilds or checks the
run; or as the raw mapping (`saved`), where a caller needs a few keys of a folder that an older rm may have
written with keys today's schema would refuse (exports of the Hub are read by `rm eval` and `rm score` as they are).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rm.config.checks import TEXT_VERSIONS
from rm.config.loader import load_config, read_yaml, recorded_eos, saved_split_version, saved_text_version
from rm.config.rundir import EVAL, WEIGHTS, RunDir
from rm.config.schema import LossConfig, RunConfig
from rm.errors import ConfigError, ExportError, RMError

RUN_CONFIG = "rm_config.yaml"
"""The run's config inside an export (a run directory keeps it as config.yaml: rundir.CONFIG)."""
MODEL_CONFIG = "config.json"
"""transformers' model config: what makes a folder a model `from_pretrained` loads."""
CARD = "README.md"
"""The model card (rm/export/card.py)."""
EOS_KEY = "rm_eos"
"""config.json's record of data.eos (how each response ends: rm/data/formats/text_rule.py); absent means none."""

EXPORT_FILES = (CARD, RUN_CONFIG, EVAL, MODEL_CONFIG, "generation_config.json",
                "model*.safetensors", "model.safetensors.index.json", "modeling_*.py", "tokenizer*",
                "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "*.model",
                "chat_template.*")  # fmt: skip
"""The names an export's files can have (save_pretrained's, the tokenizer's, rm's own): what an export's
--overwrite and a run's train.overwrite remove from an export, and nothing else."""


@dataclass(frozen=True)
class ExportDir:
    """An export folder (a run's export/, `rm export --out`'s, or a Hub snapshot): the path of each file rm names
    there, and what the run config saved with it says."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser())  # a model name given as a str

    @property
    def run_config(self) -> Path:
        return self.root / RUN_CONFIG

    @property
    def model_config(self) -> Path:
        return self.root / MODEL_CONFIG

    @property
    def eval_json(self) -> Path:
        return self.root / EVAL

    @property
    def card(self) -> Path:
        return self.root / CARD

    @property
    def weights(self) -> Path:
        return self.root / WEIGHTS

    @property
    def holds_model(self) -> bool:
        """A transformers model folder (rm's export or any other): its config.json is there."""
        return self.model_config.is_file()

    @property
    def from_rm(self) -> bool:
        """Written by rm: it keeps the run's config (a model folder of one's own has none)."""
        return self.run_config.is_file()

    def is_export_file(self, path: Path) -> bool:
        """Whether `path` (a file in the folder) has a name an export writes."""
        return path.is_file() and any(map(path.match, EXPORT_FILES))

    def load(self) -> RunConfig:
        """The saved run config, checked against today's schema (raises ConfigError naming the file)."""
        return load_config(self.run_config)

    def saved(self) -> dict[str, Any]:
        """The saved run config as written (keys an older rm wrote included), {} where the folder keeps none."""
        return read_yaml(self.run_config) if self.from_rm else {}

    def section(self, name: str) -> dict[str, Any]:
        """One section of the saved run config (`data`, `loss`, ...), {} where there is none."""
        found = self.saved().get(name)
        return found if isinstance(found, dict) else {}

    def max_length(self) -> int | None:
        """The run's collator.max_length (the length training fitted its texts to), None where nothing is saved."""
        if not self.from_rm:
            return None
        value = self.section("collator").get("max_length", RunConfig().collator.max_length)  # unsaved: the default
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.run_config}: collator.max_length must be an integer, got {value!r}")
        return value

    def split_version(self, default: int) -> int:
        """The hold-out rule the run drew with (data.split_version; 1 where its rm saved none), `default` for a
        folder rm did not write: so that `rm eval --holdout` draws that run's held-out pairs again."""
        return saved_split_version(self.run_config) if self.from_rm else default

    def text_version(self) -> int:
        """The record -> text rule the run trained with (data.text_version; 1 where its rm saved none), the newest
        for a folder rm did not write (its own chat template writes every prompt): so scoring builds training's
        text."""
        return saved_text_version(self.run_config) if self.from_rm else TEXT_VERSIONS[-1]

    def soft_loss(self) -> LossConfig | None:
        """The loss of a run trained with soft labels (loss.strength=soft), which reads each pair's strength as
        its target; None for any other run, or a folder rm did not write."""
        loss = self.section("loss")
        if loss.get("strength") != "soft":
            return None
        return LossConfig(
            strength="soft", strength_map=loss.get("strength_map", "linear"), strength_max=loss.get("strength_max", 0)
        )

    def training_data(self) -> tuple[dict[str, Any], str]:
        """(the run's data section, where its training data lies): data.source, or for data.source=synthetic the
        run directory's data/ folder, where the run wrote what it generated. ({}, "") where nothing is saved."""
        saved = self.saved()
        data = saved.get("data") if isinstance(saved.get("data"), dict) else {}
        source = str(data.get("source", ""))
        if source == "synthetic":
            source = str(RunDir(str(saved.get("output_dir", ""))).data)
        return data, source


def model_eos(config: Any) -> str:
    """How a loaded model's responses end (data.eos), as its config records it: config.json's `rm_eos`, which an
    export writes beside the run config's data.eos. A model that records none (an export of an rm before the key,
    any model rm did not train) is read as none."""
    return recorded_eos(getattr(config, EOS_KEY, None), f"the model's config.json: {EOS_KEY}")


def check_out_dir(out: Path, overwrite: bool) -> None:
    """An absent or empty folder, or with `overwrite` an earlier export; never an arbitrary folder, and never
    one holding a file an export does not write (overwrite deletes only what rm wrote)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise ExportError(f"{out} is not empty; pass --overwrite to replace an earlier export there")
        folder = ExportDir(out)
        if not folder.from_rm:  # only what rm wrote: a model folder of one's own is kept
            raise ExportError(f"refusing to replace {out}: it is not empty and holds no rm export (no {RUN_CONFIG})")
        try:
            folder.load()
        except (RMError, OSError, ValueError, TypeError, AttributeError):
            raise ExportError(f"refusing to replace {out}: its {RUN_CONFIG} is not an rm run config") from None
        foreign = sorted(p.name for p in out.iterdir() if not folder.is_export_file(p))
        if foreign:
            raise ExportError(
                f"refusing to replace {out}: it holds {', '.join(foreign[:3])}, which an rm export does not write; "
                "move them or choose another --out"
            )
