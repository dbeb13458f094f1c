"""The model card (README.md) of an export: Hub metadata, what the weights are, how well they did, how to use them.

The card only states what the export can back up: the eval table comes from an eval.json that
describes these very weights (the run's, for its final weights, or one computed at export time), and
an intermediate checkpoint without one says so instead of borrowing the final numbers. The usage
snippet and its example are rm/export/usage.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from huggingface_hub import ModelCardData

from rm.config import RunConfig, to_dict
from rm.config.exportdir import RUN_CONFIG
from rm.config.rundir import with_paths
from rm.data.data_report import shown_path
from rm.export.card_eval import eval_section
from rm.export.conventions.eos_card import eos_section
from rm.export.length_output import length_outputs_section
from rm.export.merging.merge_card import merged_section
from rm.export.objective_text import batch_unit, grouped, method, objective_rows, run_report
from rm.export.objective_text import tags as objective_tags
from rm.export.outputs import outputs_section
from rm.export.usage import Example, usage_snippet


@dataclass
class CardFacts:
    """Everything the card says that is not in the run config."""

    architecture: str
    """The transformers class, e.g. LlamaForSequenceClassification."""
    n_parameters: int
    step: int | None
    final_step: int | None
    eval_result: dict | None = None
    """eval.json of these weights, or None when there is none."""
    eval_origin: str = "run"
    """"run" (the run's own final eval) or "export" (computed when exporting)."""
    normalization: dict | None = None
    lora: dict | None = None
    """{"r", "lora_alpha", "target_modules"} when LoRA weights were merged in."""
    chat_template: str = "hh"
    """"hh" (the export carries rm's HH template) or "tokenizer" (the run's tokenizer's own template)."""
    max_length: int = 0
    """The trained `collator.max_length`: the tokenizer's model_max_length."""
    model_id: str = "."
    """What the usage snippet loads: "." (the folder itself) or the Hub repo id."""
    remote_code: str = ""
    """Why loading needs trust_remote_code=True (rm/export/modeling.py); '' for transformers' own classes."""
    example: Example | None = None
    """A held-out pair these weights rank right (`held_out_example`); None: the snippet shows an illustration."""
    attributes: list[str] = field(default_factory=list)
    """The export's outputs after the reward (index 1, 2, ...) by name; [] for one output (rm/export/outputs.py)."""
    dropped: list[str] = field(default_factory=list)
    """The attribute outputs a reward-only export (export.reward_only) left out."""
    sigma: dict | None = None
    """config.json's `attribute_sigma` (loss.attribute_loss=gaussian's learned sigma per attribute), or None."""
    davidson_nu: float | None = None
    """config.json's `rm_davidson_nu` (loss.ties=davidson's learned nu), or None."""
    vocab_size: int = 0
    """The tokenizer's true size, len(tokenizer) (a BPE trained to tokenizer.vocab_size may have fewer); 0: unknown."""
    length_output: bool = False
    """The length head's output is kept, last (`rm export --with-length-head`: rm/export/length_output.py)."""
    step_separator: str = ""
    """A process reward model's step separator (its card: rm/export/steps/step_card.py); "" for a reward model."""
    eos_text: str = ""
    """What data.eos puts after each response ("</s>", " </s>"); "" where the model reads a text without an EOS."""
    members: list | None = None
    """A merge's members (rm/scoring/weight_average.py's `MergedMember`s); None for one run's weights."""


def is_hub_id(name: str) -> bool:
    """`org/name` or `name` that is not a local path: what the Hub's metadata may point to."""
    if not name or name.startswith((".", "/", "~")) or Path(name).expanduser().exists():
        return False
    return name.count("/") <= 1 and " " not in name


def hub_id_of(name: str, kind: str) -> str | None:
    """The Hub id behind a name: the name itself, or for a local path inside a Hugging Face cache
    (`.../models--org--name/snapshots/<rev>`) the id that cache folder was downloaded from."""
    if not name or name == "synthetic":
        return None
    if is_hub_id(name):
        return name
    for part in reversed(Path(name).expanduser().parts):
        if part.startswith(f"{kind}s--"):
            return "/".join(part.split("--")[1:])
    return None


def metadata(cfg: RunConfig, facts: CardFacts) -> ModelCardData:
    steps = ["process-reward-model"] if facts.step_separator else objective_tags(cfg)
    tags = ["reward-model", *steps, "rm"] + (["lora"] if facts.lora else [])
    base = hub_id_of(cfg.model.name_or_path, "model")
    dataset = hub_id_of(cfg.data.source, "dataset")
    return ModelCardData(
        library_name="transformers",
        pipeline_tag="token-classification" if facts.step_separator else "text-classification",
        tags=tags,
        license=cfg.export.license or None,
        base_model=base,
        datasets=[dataset] if dataset else None,
    )


def front_matter(cfg: RunConfig, facts: CardFacts) -> str:
    text = metadata(cfg, facts).to_yaml()
    if not cfg.export.license:  # a YAML comment: the Hub shows no license until one is set
        text += "\n# license: not set. Export with export.license=<SPDX id, e.g. apache-2.0> or add it here."
    return text


def weights_line(facts: CardFacts) -> str:
    if facts.members:
        return f"the weights of {len(facts.members)} reward models averaged (see 'Merged from')"
    if facts.step is not None and facts.step == facts.final_step:
        return f"the final weights of the run, after {facts.step} optimizer steps"
    if facts.step is None:
        return "a checkpoint of the run whose step is not recorded"
    of = f" of the run's {facts.final_step}" if facts.final_step else " (the run had not finished when exported)"
    return f"an intermediate checkpoint, after {facts.step} optimizer steps{of}"


def normalization_section(facts: CardFacts) -> str:
    norm = facts.normalization
    if norm is None:
        return (
            "## Reward scale\n\nRaw rewards: a preference objective fixes only differences between rewards, so their "
            "offset and scale carry no meaning. Export with `--normalize` to store training-set statistics.\n"
        )
    return (
        "## Reward normalisation\n\n"
        "`config.json` holds `mean` and `std` (the keys OpenRLHF reads) and `reward_normalization` (the same "
        "two plus where they come from), statistics of the raw reward (`logits[:, 0]`) over "
        f"{norm['data']} (chosen and rejected responses pooled, {norm['n_rewards']} rewards):\n\n"
        f"- `mean`: {norm['mean']:.6g}\n- `std`: {norm['std']:.6g} (population standard deviation)\n"
        f"- `n_rewards`, `data`: how many rewards and which data\n\n"
        "`normalized = (raw - mean) / std` has mean 0 and std 1 on that data. The weights are untouched: "
        "plain transformers and the pipeline return raw rewards; apply the formula yourself, as above.\n"
    )


def shown_config(cfg: RunConfig) -> RunConfig:
    """`cfg` with its local paths as `shown_path` writes them, for the card; the run config saved beside it keeps
    them absolute (rm/export/folder.py: `write_folder`)."""
    return with_paths(cfg, lambda _key, value: shown_path(value))


def training_section(cfg: RunConfig, facts: CardFacts) -> str:
    m, t, d = cfg.model, cfg.train, cfg.data
    if m.name_or_path:
        base = f"`{shown_path(m.name_or_path)}`"
    else:
        r = m.random_init
        base = (
            f"random init ({r.model_type}, hidden_size {r.hidden_size}, num_hidden_layers {r.num_hidden_layers}, "
            f"num_attention_heads {r.num_attention_heads})"
        )
    tok = cfg.tokenizer.name_or_path or m.name_or_path
    size = f"at most {cfg.tokenizer.vocab_size} tokens"  # what was asked, where the true size is not at hand
    size = f"vocabulary of {facts.vocab_size} tokens" if facts.vocab_size else size
    tok = f"`{shown_path(tok)}`" if tok else f"byte-level BPE trained on the training data ({size})"
    unit = batch_unit(grouped(cfg, run_report(cfg)))
    rows = [
        ("model", f"{facts.architecture}, {facts.n_parameters / 1e6:.2f}M parameters, from {base}"),
        ("weights", weights_line(facts)),
        ("tokenizer", tok),
        ("data", f"`{shown_path(d.source)}`" + (f", subsets {', '.join(d.subsets)}" if d.subsets else "")),
        *objective_rows(cfg, facts.davidson_nu, facts.eval_result),
        (
            "optimisation",
            f"AdamW, lr {t.lr:g} ({t.scheduler}, warm-up {t.warmup_ratio:g}), weight decay {t.weight_decay:g}, "
            f"{t.batch_size} {unit} per process x {t.grad_accum} accumulation",
        ),
        ("max length", f"{cfg.collator.max_length} tokens (prompt + response; see 'Tokenization' for longer ones)"),
    ]
    if facts.lora:
        lo = facts.lora
        rows.append(
            (
                "LoRA",
                f"r {lo['r']}, alpha {lo['lora_alpha']}, on {', '.join(sorted(lo['target_modules']))}; "
                "merged into the base weights, the score head trained in full",
            )
        )
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    full = yaml.safe_dump(to_dict(shown_config(cfg)), sort_keys=False).rstrip()
    return (
        f"## Training\n\nTrained with rm ({method(cfg, grouped(cfg, run_report(cfg)))}).\n\n"
        f"| | |\n| --- | --- |\n{table}\n\n"
        f"<details><summary>Full run configuration (also in <code>{RUN_CONFIG}</code>, local paths there "
        "absolute)</summary>\n\n"
        f"```yaml\n{full}\n```\n\n</details>\n"
    )


TRUNCATION_RULE = (
    "Texts longer than `max_length`: rm fits them by one rule in training, `rm eval` and `rm score` alike. A "
    "prompt that is too long loses whole leading turns first (the final question stays), then tokens from its "
    "left; a response too long to fit even alone drops its pair in training and `rm eval`, and keeps its end "
    "(where the reward is read) in `rm score`. `truncation=True` cuts tokens, not turns, so the two differ only "
    "where a prompt does not fit beside its response in `max_length` tokens; for such texts `rm score` gives the "
    "rewards rm's own eval gives."
)
"""What the card says about texts longer than `max_length`: the export's tokenizer can only cut tokens."""


TEXT_OF = {
    "hh": (
        "The tokenizer's chat template renders messages (roles `system`, `user`, `assistant`) as exactly the HH "
        "text rm trained on, and with `add_generation_prompt=True` ends with `\\n\\nAssistant:`."
    ),
    "tokenizer": "The tokenizer carries the chat template the run's tokenizer had, which rendered the training data.",
    "concat": (
        "The training records were `prompt`/`chosen`/`rejected` strings, and rm trained on `prompt + response` "
        "exactly as they are written: no separator, no turn tags. The tokenizer's chat template does the same, "
        "concatenating the messages' contents (`user` the prompt, `assistant` the response), so it writes the "
        "trained text only when the contents carry whatever separator the data had."
    ),
    "mixed": (
        "The training data mixed record formats that write text differently (HH text, `prompt + response` as "
        "written, rendered message lists), so no one chat template writes what the model saw and this tokenizer "
        "has none. Build each text as training did: an HH record's conversation as it is, a `prompt` record's "
        f"`prompt + response` with nothing between, a message list as `{RUN_CONFIG}`'s `data.chat_template` "
        "rendered it."
    ),
}
"""What the card says about the chat template, by `CardFacts.chat_template`."""


def tokenization_section(facts: CardFacts) -> str:
    template = TEXT_OF[facts.chat_template]
    limit = f"`model_max_length` is {facts.max_length}, the length trained on, " if facts.max_length else ""
    return (
        "## Tokenization\n\n"
        f"{template} rm trained on the ids of that text as `tokenizer(text, add_special_tokens=False)` gives them, "
        "and this tokenizer adds no special tokens around a text, so `add_special_tokens=True` (pipelines, the "
        "default) gives the same ids: TRL's reward functions, OpenRLHF, RewardBench and plain transformers all score "
        "the trained inputs. Do not prepend a BOS yourself (a BOS the chat template writes is part of the text). "
        f"{limit}and `truncation_side` is left, so `truncation=True` drops the oldest tokens and keeps the response, "
        "whose last token carries the reward. Pad on the right (the tokenizer's `padding_side`): the model reads "
        "the reward at the last non-pad token.\n\n"
        f"{TRUNCATION_RULE}\n"
    )


def render_card(cfg: RunConfig, facts: CardFacts) -> str:
    """The README.md text: YAML front matter for the Hub, then the sections above."""
    written = {
        "hh": "HH-RLHF's `\\n\\nHuman: ...\\n\\nAssistant: ...` turns",
        "tokenizer": "the tokenizer's chat template",
        "concat": "`prompt + response` as the records write them, with nothing between",
        "mixed": "several record formats, each written its own way",
    }[facts.chat_template]
    names = facts.attributes
    outputs = f"{1 + len(names)} outputs, the scalar reward (index 0) and {len(names)} ratings" if names else ""
    if facts.length_output:
        ratings = f", {len(names)} ratings" if names else ""
        outputs = f"{2 + len(names)} outputs, the scalar reward (index 0){ratings} and a length output (last)"
    intro = (
        f"A reward model: `AutoModelForSequenceClassification` with {outputs or 'one output, the scalar reward'} of a "
        f"text, read at its last token. This folder holds {weights_line(facts)}. It was trained on prompt + response "
        f"text as the training data writes it ({written}; see 'Tokenization'), so score text written the same way."
    )
    return (
        f"---\n{front_matter(cfg, facts)}\n---\n\n# Reward model ({facts.architecture})\n\n{intro}\n\n"
        f"{eval_section(cfg, facts.eval_result, facts.eval_origin)}\n"
        f"## Usage\n\n```python\n{usage_snippet(facts)}\n```\n\n"
        + (
            length_outputs_section(names)
            if facts.length_output
            else outputs_section(names, facts.dropped, facts.sigma, cfg.model.head.reward_from_attributes)
        )
        + (f"Why `trust_remote_code=True`: {facts.remote_code}\n\n" if facts.remote_code else "")
        + merged_section(facts)
        + f"{tokenization_section(facts)}\n{eos_section(cfg)}\n"
        f"{normalization_section(facts)}\n"
        f"{training_section(cfg, facts)}"
    )
