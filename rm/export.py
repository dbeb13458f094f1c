"""Export: a standard `AutoModelForSequenceClassification` folder that plain transformers loads.

The folder holds the model (num_labels=1, the head under the architecture's own name, safetensors
only), the tokenizer (with its chat template when it has one), `pad_token_id` in the config, the
run's config as `rm_config.yaml`, the eval.json that describes these weights (when there is one) and
a model card, `README.md`. LoRA weights are merged into the base weights, keeping the trained copy of
the score head (peft's `modules_to_save`), and the saved names are checked against a fresh model of
the same class, so a wrapper prefix or a lost head cannot reach the folder.

The end of `rm train` and `python -m rm export` both call `export_model`, so a run's `export/` and an
export of its last checkpoint are the same files. Plain transformers reads the score at the last
non-pad token; rm's tokenizers keep pad distinct from every real token so both agree.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rm.card import CardFacts, render_card
from rm.collator import EncodedPair, encode_pairs
from rm.config import RunConfig, save_config
from rm.data import load_splits, subset_counts
from rm.model import score_head
from rm.rescore import describe_training_data, normalization, score_encoded, summarize_by_subset
from rm.restore import ExportError, load_model, resolve_source, run_tokenizer

log = logging.getLogger("rm")

__all__ = ["ExportError", "RunData", "export_model", "export_run", "merged"]


@dataclass
class RunData:
    """A run's pairs, encoded as `rm train` encodes them: for normalisation and export-time eval."""

    subsets: list[str]
    train: list[EncodedPair] = field(default_factory=list)
    eval: list[EncodedPair] = field(default_factory=list)

    @classmethod
    def load(cls, cfg: RunConfig, run_dir: Path, tokenizer: PreTrainedTokenizerBase) -> RunData:
        train, held = load_splits(cfg.data, run_dir)
        subsets = sorted(set(subset_counts(train)) | set(subset_counts(held)))
        return cls(
            subsets,
            encode_pairs(train, tokenizer, cfg.collator.max_length, subsets)[0],
            encode_pairs(held, tokenizer, cfg.collator.max_length, subsets)[0],
        )


def merged(model: torch.nn.Module) -> tuple[PreTrainedModel, dict | None]:
    """(the plain transformers model, LoRA settings or None): a PeftModel is merged and unloaded."""
    peft = sys.modules.get("peft")  # a PeftModel cannot exist unless peft was imported
    if peft is None or not isinstance(model, peft.PeftModel):
        return model, None
    config = model.peft_config[model.active_adapter]
    lora = {"r": config.r, "lora_alpha": config.lora_alpha, "target_modules": sorted(config.target_modules)}
    # merge_and_unload folds B @ A * alpha / r into each base weight and puts the trained copy of every
    # `modules_to_save` module (the score head) where the original was.
    return model.merge_and_unload(), lora


def check_names(hf: PreTrainedModel) -> None:
    """The saved names must be those of a fresh model of the class, so from_pretrained fills every tensor."""
    with torch.device("meta"):
        reference = type(hf)(hf.config)
    expected, actual = set(reference.state_dict()), set(hf.state_dict())
    if expected != actual:
        raise ExportError(
            f"{type(hf).__name__} would be saved under names transformers does not expect: "
            f"extra {sorted(actual - expected)[:3]}, missing {sorted(expected - actual)[:3]}"
        )
    if score_head(hf).out_features != 1:
        raise ExportError(f"the score head has {score_head(hf).out_features} outputs; a reward model has 1")


def check_out_dir(out: Path, overwrite: bool) -> None:
    """An absent or empty folder, or with `overwrite` an earlier export; never an arbitrary folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise ExportError(f"{out} is not empty; pass --overwrite to replace an earlier export there")
        if not (out / "config.json").is_file():
            raise ExportError(f"refusing to replace {out}: it is not empty and holds no model (no config.json)")


def export_model(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    cfg: RunConfig,
    *,
    step: int | None,
    final_step: int | None,
    eval_result: dict | None = None,
    data: RunData | None = None,
    normalize: bool = False,
    evaluate: bool = False,
    model_id: str = ".",
    overwrite: bool = False,
) -> Path:
    """Write the export folder for `model` (a transformers model, or a PeftModel to merge) to `out_dir`.

    `eval_result` must describe these weights (the run's eval.json for its final weights). With
    `data`, `normalize` stores reward statistics over its training pairs in the config, and
    `evaluate` scores its eval pairs now and uses that instead. The folder is written next to
    `out_dir` and renamed into place, so an interrupted export leaves no half-written folder.
    """
    out = Path(out_dir)
    check_out_dir(out, overwrite)
    hf, lora = merged(model)
    hf.eval()
    check_names(hf)
    eval_origin = "run"
    if (normalize or evaluate) and data is None:
        raise ExportError("normalising or evaluating at export needs the run's data")
    if evaluate:
        scores = score_encoded(hf, data.eval, tokenizer.pad_token_id, cfg.train.eval_batch_size)
        eval_result = summarize_by_subset(scores, data.subsets) | {"exported_step": step}
        eval_origin = "export"
    norm = None
    if normalize:
        scores = score_encoded(hf, data.train, tokenizer.pad_token_id, cfg.train.eval_batch_size)
        norm = normalization(scores, describe_training_data(cfg, len(data.train)))

    hf.config.num_labels = 1
    hf.config.id2label, hf.config.label2id = {0: "reward"}, {"reward": 0}
    hf.config.pad_token_id = tokenizer.pad_token_id
    if norm is not None:
        hf.config.reward_normalization = norm
    elif hasattr(hf.config, "reward_normalization"):
        del hf.config.reward_normalization
    facts = CardFacts(
        architecture=type(hf).__name__,
        n_parameters=sum(p.numel() for p in hf.parameters()),
        step=step,
        final_step=final_step,
        eval_result=eval_result,
        eval_origin=eval_origin,
        normalization=norm,
        lora=lora,
        chat_template=bool(getattr(tokenizer, "chat_template", None)),
        model_id=model_id,
    )

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    hf.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    save_config(cfg, tmp / "rm_config.yaml")
    if eval_result is not None:
        (tmp / "eval.json").write_text(json.dumps(eval_result, indent=2) + "\n")
    (tmp / "README.md").write_text(render_card(cfg, facts))
    unsafe = [p.name for p in tmp.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    if unsafe:  # transformers 5 writes safetensors only; this keeps it that way
        raise ExportError(f"export would contain pickled files: {unsafe}")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def export_run(
    path: str | Path,
    out_dir: str | Path,
    *,
    normalize: bool | None = None,
    evaluate: bool = False,
    model_id: str = ".",
    overwrite: bool = False,
) -> Path:
    """Export a run directory's final weights, or one of its checkpoints, to `out_dir`.

    `normalize=None` follows the run's `export.normalize`.
    """
    check_out_dir(Path(out_dir), overwrite)  # before minutes of loading, not after
    source = resolve_source(path)
    cfg = source.cfg
    normalize = cfg.export.normalize if normalize is None else normalize
    log.info("export: %s (step %s of %s) -> %s", source.weights, source.step, source.final_step, out_dir)
    tokenizer = run_tokenizer(cfg, source.run_dir)
    model = load_model(source, tokenizer)
    data = RunData.load(cfg, source.run_dir, tokenizer) if normalize or evaluate else None
    return export_model(
        model,
        tokenizer,
        out_dir,
        cfg,
        step=source.step,
        final_step=source.final_step,
        eval_result=source.run_eval if source.is_final else None,
        data=data,
        normalize=normalize,
        evaluate=evaluate,
        model_id=model_id,
        overwrite=overwrite,
    )
