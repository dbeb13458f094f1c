"""Export: a standard `AutoModelForSequenceClassification` folder that plain transformers loads.

The folder holds the model (num_labels=1, or 1 + A named attribute outputs: rm/export/outputs.py; the head
under the architecture's own name, safetensors only), the tokenizer (with the chat template that rendered the
training text, and what transformers 4.x, TRL, RewardBench and OpenRLHF need: rm/export/compat.py),
`pad_token_id` in the config, the run's config, the eval.json that describes these weights (when there is one)
and a model card, `README.md` (each file named by rm/config/exportdir.py). LoRA weights are merged into the base
weights, keeping the trained copy of the score head (peft's `modules_to_save`), and the saved names are checked
against a fresh model of the same class, so a wrapper prefix or a lost head cannot reach the folder.

The end of `rm train` and `python -m rm export` both call `export_model`, so a run's `export/` and an
export of its last checkpoint are the same files. Plain transformers reads the score at the last
non-pad token; rm's tokenizers keep pad distinct from every real token so both agree.
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rm.collate.loss_labels import for_loss
from rm.config import RunConfig
from rm.config.atomic import disk_full_explained, write_text
from rm.config.exportdir import EOS_KEY, ExportDir, check_out_dir
from rm.config.rundir import RunDir, partial_folder, record_written, write_config
from rm.data.formats.text_rule import response_end
from rm.errors import ExportError
from rm.evaluation.metrics import write_eval
from rm.evaluation.summary import summarize_by_subset
from rm.export.card import CardFacts, render_card
from rm.export.compat import export_tokenizer, finish_folder, template_kind
from rm.export.length_output import append_length_row, run_length_row
from rm.export.modeling import point_config_at_modeling_file, remote_code_reason, write_modeling_file
from rm.export.outputs import attribute_names, attribute_scales, keep_reward_only, set_reward_config, unnamed_outputs
from rm.export.rescore import describe_training_data, normalization, score_encoded
from rm.export.restore import load_model, resolve_source, run_tokenizer
from rm.export.steps.step_card import render_step_card
from rm.export.steps.token_export import as_token_classification, run_step_separator
from rm.export.usage import held_out_example
from rm.model.reward import transformers_model
from rm.tokens.prepare import prepare_data
from rm.tokens.store import EncodedGroup

log = logging.getLogger("rm")

__all__ = ["ExportOptions", "RunData", "Weights", "export_model", "export_run", "merged"]


@dataclass
class RunData:
    """A run's pairs, encoded as `rm train` encodes them: for normalisation and export-time eval."""

    subsets: list[str]
    train: Sequence[EncodedGroup] = field(default_factory=list)
    eval: Sequence[EncodedGroup] = field(default_factory=list)

    @classmethod
    def load(cls, cfg: RunConfig, run_dir: Path, tokenizer: PreTrainedTokenizerBase) -> RunData:
        """As `rm train` prepared them (a named tokenizer rendering message lists): from the tokenized-data
        cache when the run left its entry there, so an export reads no source text either."""
        run_cfg = replace(cfg, output_dir=str(run_dir))  # a moved run directory: its data/ is here now
        data = prepare_data(run_cfg, tokenizer)
        for_loss(run_cfg, data)  # what the run's loss and head made of the cached data (rm/collate/loss_labels.py)
        return cls(data.subsets, data.train, data.eval)


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


def lora_facts(cfg: RunConfig, hf: PreTrainedModel) -> dict | None:
    """LoRA settings of a run whose weights were merged before (its end-of-run export), from its config."""
    if not cfg.model.lora.r:
        return None
    from rm.model.lora import backbone_linear_names  # the targets training resolved the same way

    targets = cfg.model.lora.target_modules or backbone_linear_names(hf)
    return {"r": cfg.model.lora.r, "lora_alpha": cfg.model.lora.alpha, "target_modules": sorted(targets)}


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
    if unnamed_outputs(hf):
        raise ExportError(unnamed_outputs(hf))


@dataclass
class Weights:
    """Which weights an export holds: the optimizer step behind them and the eval that describes them."""

    step: int | None
    """Optimizer steps behind these weights (None when unknown)."""
    final_step: int | None
    """Steps of the finished run (None while it has not finished)."""
    eval_result: dict | None = None
    """eval.json of exactly these weights (the run's, for its final weights), or None."""


@dataclass
class ExportOptions:
    """What the caller asks of an export beyond the weights."""

    normalize: bool = False
    """Store the mean and std of the rewards over the run's training pairs in config.json (needs data)."""
    evaluate: bool = False
    """Score the run's held-out pairs with these weights now, and use that eval (needs data)."""
    model_id: str = "."
    """What the card's usage snippet loads: "." (the folder) or the Hub repo id."""
    overwrite: bool = False
    """Replace an earlier export in the folder."""
    reward_only: bool | None = None
    """Keep the reward output alone (num_labels=1: rm/export/outputs.py); None follows `export.reward_only`."""
    with_length_head: bool = False
    """Keep a length head's output too, last and named `length` (rm/export/length_output.py); else the reward alone."""
    step_separator: str = ""
    """A process reward model's (stepwise data): exported as its token classifier, rm/export/steps/token_export.py."""
    members: list | None = None
    """A merge's members (rm/scoring/weight_average.py: name, weight, distance, accuracy), listed on its card."""


def export_model(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    cfg: RunConfig,
    weights: Weights,
    data: RunData | None = None,
    options: ExportOptions | None = None,
) -> Path:
    """Write the export folder for `model` (a transformers model, or a PeftModel to merge) to `out_dir`.

    With `data` (the run's pairs), `options.normalize` stores reward statistics over its training pairs
    in the config, and `options.evaluate` scores its eval pairs now and uses that instead of
    `weights.eval_result`. The folder is written next to `out_dir` and renamed into place, so an
    interrupted export leaves no half-written folder.
    """
    options = options or ExportOptions()
    step, final_step, eval_result = weights.step, weights.final_step, weights.eval_result
    normalize, evaluate, model_id, overwrite = options.normalize, options.evaluate, options.model_id, options.overwrite
    out = Path(out_dir)
    check_out_dir(out, overwrite)
    hf, lora = merged(model)
    lora = lora or lora_facts(cfg, hf)
    hf.eval()
    reward_only = cfg.export.reward_only if options.reward_only is None else options.reward_only
    dropped = keep_reward_only(hf) if reward_only else []  # the same reward, one output
    check_names(hf)
    eval_origin = "run"
    if (normalize or evaluate) and (data is None or options.step_separator):
        raise ExportError(
            "normalising or evaluating at export needs the run's data"
            if data is None
            else "a process reward model is exported as trained: leave out --normalize and --evaluate"
        )
    if evaluate:
        scores = score_encoded(hf, data.eval, tokenizer.pad_token_id, cfg.train.eval_batch_size)
        eval_result = summarize_by_subset(scores, data.subsets) | {"exported_step": step}
        eval_origin = "export"
    norm = None
    if normalize:
        scores = score_encoded(hf, data.train, tokenizer.pad_token_id, cfg.train.eval_batch_size)
        norm = normalization(scores, describe_training_data(cfg, len(data.train)))

    set_reward_config(hf, tokenizer.pad_token_id, norm, attribute_scales(cfg, attribute_names(hf)))
    if cfg.data.eos != "none":  # how each response ends (rm/data/formats/text_rule.py): absent from config.json, none
        setattr(hf.config, EOS_KEY, cfg.data.eos)
    names = attribute_names(hf)  # before a length output joins them
    if options.with_length_head:
        append_length_row(hf, cfg.model.head.length)
    point_config_at_modeling_file(hf)  # auto_map for rm's reward head on a causal LM, if this is one
    if options.step_separator:  # a process reward model: the architecture's own token classifier
        hf = as_token_classification(hf, options.step_separator)
    facts = CardFacts(
        architecture=type(hf).__name__,
        n_parameters=sum(p.numel() for p in hf.parameters()),
        step=step,
        final_step=final_step,
        eval_result=eval_result,
        eval_origin=eval_origin,
        normalization=norm,
        lora=lora,
        chat_template=template_kind(tokenizer, cfg),
        max_length=cfg.collator.max_length,
        model_id=model_id,
        remote_code=remote_code_reason(hf),
        example=None if options.step_separator else held_out_example(hf, tokenizer, data.eval if data else []),
        attributes=names,
        length_output=options.with_length_head,
        dropped=dropped,
        sigma=getattr(hf.config, "attribute_sigma", None),
        davidson_nu=getattr(hf.config, "rm_davidson_nu", None),
        vocab_size=len(tokenizer),
        step_separator=options.step_separator,
        eos_text=response_end("", cfg.data.eos, tokenizer.eos_token or ""),  # "" under none
        members=options.members,
    )

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_folder(out)
    if tmp.exists():
        shutil.rmtree(tmp)
    try:  # a failure (a full disk) takes the partial folder back at once: its space is not held
        with disk_full_explained(tmp):
            write_folder(tmp, hf, tokenizer, cfg, eval_result, facts)
        check_out_dir(out, overwrite)  # again: minutes went by
        aside = out.with_name(f".{out.name}.old")
        if out.exists():  # replaced by renames, so that a kill leaves the old export or the new one
            shutil.rmtree(aside, ignore_errors=True)
            out.rename(aside)
        tmp.rename(out)
        shutil.rmtree(aside, ignore_errors=True)
        if out == RunDir(out.parent).export:  # a run's export/: recorded in its manifest, for train.overwrite
            record_written(out.parent, [out])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def write_folder(
    tmp: Path, hf: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cfg: RunConfig, eval_result, facts
) -> None:
    """The export's files, into `tmp`. Its RUN_CONFIG keeps the run's local paths absolute, goes to the Hub with the
    folder, and is the run's record: `rm eval` finds the training data there (its overlap warning), a push retry
    compares it with the run's config. The card and reports show paths relative (`shown_path`), never this machine's."""
    hf.save_pretrained(tmp)
    write_modeling_file(hf, tmp)
    saved_tokenizer = export_tokenizer(tokenizer, cfg)
    saved_tokenizer.save_pretrained(tmp)
    folder = ExportDir(tmp)
    write_config(cfg, folder.run_config)  # as the run keeps it: no one-time commands
    if eval_result is not None:
        write_eval(folder.eval_json, eval_result)
    write_text(folder.card, (render_step_card if facts.step_separator else render_card)(cfg, facts))
    finish_folder(tmp, saved_tokenizer)
    unsafe = [p.name for p in tmp.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    if unsafe:  # transformers 5 writes safetensors only; this keeps it that way
        raise ExportError(f"export would contain pickled files: {unsafe}")


def export_run(
    path: str | Path,
    out_dir: str | Path,
    *,
    normalize: bool | None = None,
    evaluate: bool = False,
    model_id: str = ".",
    overwrite: bool = False,
    reward_only: bool | None = None,
    with_length_head: bool = False,
) -> Path:
    """Export a run directory's final weights, or one of its checkpoints, to `out_dir`.

    `normalize=None` follows the run's `export.normalize`, `reward_only=None` its `export.reward_only`;
    `with_length_head` keeps a length head's output (rm/export/length_output.py). A run that
    has not finished (no final eval.json: stopped by SIGTERM or Ctrl-C, or still running) is exported from its newest
    checkpoint with a warning naming the step and the total (`Source.require_finished` refuses: --require-finished)."""
    check_out_dir(Path(out_dir), overwrite)  # before minutes of loading, not after
    source = resolve_source(path)
    cfg = source.cfg
    normalize = cfg.export.normalize if normalize is None else normalize
    say = log.info if source.final_step is not None else log.warning  # an unfinished run: not silently
    say("export: %s (%s) -> %s", source.weights, source.describe(), out_dir)
    tokenizer = run_tokenizer(cfg, source.run_dir)
    model = load_model(source, tokenizer)
    if with_length_head and getattr(transformers_model(model), "rm_length_row", None) is None:  # final weights
        transformers_model(model).rm_length_row = run_length_row(source.run_dir)
    data = RunData.load(cfg, source.run_dir, tokenizer) if normalize or evaluate else None
    eval_result = source.run_eval if source.is_final else None
    steps = run_step_separator(source.run_dir, cfg)  # a process reward model's: its token classifier
    options = ExportOptions(normalize, evaluate, model_id, overwrite, reward_only, with_length_head, steps)
    weights = Weights(source.step, source.final_step, eval_result)
    return export_model(model, tokenizer, out_dir, cfg, weights, data, options)
