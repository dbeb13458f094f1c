"""The run configuration's schema: nested, typed dataclasses, each field with a one-line docstring.

These dataclasses are the single source of truth for what a run may be told; `rm/config/loader.py` merges YAML
and dotted overrides into them key by key, so a typo or a wrong type fails at start-up with the key's dotted
name (`train.lr`). Derived values (total steps, vocab size) are computed where used, never written back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rm.config.checks import CHOICES, choice_problems, run_problems
from rm.config.head_config import HeadConfig
from rm.config.loss_config import LossConfig
from rm.config.suite_config import SuiteConfig
from rm.errors import ConfigError


@dataclass
class RandomInitConfig:
    """Shape of a backbone built from scratch (used when ``model.name_or_path`` is empty)."""

    model_type: str = "llama"
    """Any `transformers` causal-LM model type (llama, qwen3, mistral, gemma4_text, granite, mamba…; see README)."""
    hidden_size: int = 128
    """Width of the residual stream."""
    num_hidden_layers: int = 2
    """Number of transformer blocks."""
    num_attention_heads: int = 4
    """Attention heads per block."""
    intermediate_size: int = 256
    """Width of the MLP."""
    max_position_embeddings: int = 1024
    """Longest sequence the position embeddings cover."""
    config: dict[str, bool | int | float | str | list[bool | int | float | str] | None] = field(default_factory=dict)
    """Extra keys for the architecture's transformers config, over the fields above (e.g. {sliding_window: 16})."""


@dataclass
class LoraConfig:
    """LoRA adapters through `peft`: the backbone frozen, low-rank updates learned, the score head trained in full."""

    r: int = 0
    """Rank of the LoRA updates; 0 turns LoRA off (every weight is trained)."""
    alpha: int = 16
    """LoRA scaling numerator: updates are scaled by alpha / r."""
    dropout: float = 0.0
    """Dropout on the LoRA branch's input."""
    target_modules: list[str] = field(default_factory=list)
    """Module names to adapt (q_proj, v_proj… / query_key_value for GPT-NeoX); empty: every linear layer of the
    backbone. The score head is never a target: it is trained and saved in full (peft's modules_to_save)."""
    qlora: bool = False
    """QLoRA: the frozen backbone in 4-bit NF4 via bitsandbytes (a CUDA GPU, bitsandbytes, a `model.name_or_path`)."""


@dataclass
class ModelConfig:
    """The backbone and its precision."""

    name_or_path: str = ""
    """Hub name or local path of a pretrained model; empty builds a random model from `random_init`."""
    random_init: RandomInitConfig = field(default_factory=RandomInitConfig)
    """Architecture of the random model (ignored when `name_or_path` is set)."""
    dtype: str = "float32"
    """Weights' dtype when loading: float32, bfloat16 or float16 (autocast comes from accelerate)."""
    attn_implementation: str = "sdpa"
    """Attention kernel passed to transformers: sdpa, eager, flex_attention…"""
    trust_remote_code: bool = False
    """Run code shipped inside a Hub repository. Off by default: only turn on for repos you trust."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (slower)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA / QLoRA adapters (off while `lora.r` is 0)."""
    head: HeadConfig = field(default_factory=HeadConfig)
    """The score head's outputs: the reward, and a regression per named attribute (rm/config/head_config.py)."""


@dataclass
class TokenizerConfig:
    """Where the tokenizer comes from."""

    name_or_path: str = ""
    """Hub name or path; empty means `model.name_or_path`, or a BPE trained on the training data for a random model."""
    vocab_size: int = 2048
    """Vocabulary size of a tokenizer trained on the fly."""
    train_pairs: int = 20000
    """Training pairs (a seeded sample) a tokenizer trained on the fly learns from; 0: all (160k HH pairs: 43 s)."""


@dataclass
class SyntheticConfig:
    """The project's own generated preference data (see `rm/data/synthetic.py`)."""

    n_train: int = 4000
    """Training pairs, spread evenly over the subsets."""
    n_eval: int = 800
    """Held-out pairs, spread evenly over the subsets."""
    seed: int = 1234
    """Generator seed: the same seed writes byte-identical files."""


@dataclass
class ArgillaConfig:
    """Opt-in uses of the annotations of an Argilla export (hironow/test-hh-rlhf-12k-ja; rm/data/formats/argilla.py).

    Each is off by default, so the export trains exactly as its `chosen`/`rejected` columns say; what
    each option changed is counted in the run directory's `data_report.json`.
    """

    margin_from_ratings: bool = False
    """Set a pair's margin to mean chosen rating - mean rejected rating where both were rated (see loss.use_margin)."""
    drop_rating_disagreements: bool = False
    """Drop pairs whose annotators rated rejected at least as high as chosen (means, where both sides were rated)."""
    pairs_from_edits: bool = False
    """Add a pair per modify_chosen/modify_rejected edit: the edited last answer beats the original rejected one."""


@dataclass
class DataConfig:
    """What to train and evaluate on."""

    source: str = "synthetic"
    """`synthetic`, a local file (.jsonl[.gz], .json, .parquet, .csv), an hh-rlhf-style directory, or a Hub name."""
    format: str = "auto"
    """auto (from each record's fields), hh, prompt, conversation, argilla, ultrafeedback, nectar, rewardbench2,
    responses, rows (one row per response), steps (stepwise solutions: stepwise, Math-Shepherd or PRM800K, detected
    in auto mode too), or red-team (refused)."""
    columns: dict[str, str] = field(default_factory=dict)
    """Source column for each of rm's fields (prompt, chosen, rejected, subset, margin), e.g. {chosen: response_j}."""
    on_bad_record: str = "error"
    """error: stop before training at the first bad record, naming file, line and field; skip: drop and count it."""
    chat_template: str = "auto"
    """Message lists rendered with: auto (the tokenizer's chat template if it has one, else hh), tokenizer, or hh."""
    subsets: list[str] = field(default_factory=list)
    """Subsets to keep: hh-rlhf folders (local or Hub `data_dir`) or record subsets; empty keeps every one found."""
    mixture: dict[str, float] = field(default_factory=dict)
    """Weight per subset of the training pairs: 0.5 keeps a seeded half, 2 repeats each twice; unlisted keep 1."""
    argilla: ArgillaConfig = field(default_factory=ArgillaConfig)
    """Options for Argilla exports (margin from ratings, dropping disagreements, pairs from edits)."""
    train_split: str = "train"
    """Split (file stem) to train on."""
    eval_split: str = "test"
    """Split to evaluate on; empty holds out `eval_fraction` of the training split instead."""
    eval_fraction: float = 0.1
    """Fraction of the training split held out when `eval_split` is empty."""
    split_seed: int = 0
    """Seed of the held-out split, independent of the training seed."""
    max_train_pairs: int = 0
    """Use at most this many training pairs (0: all)."""
    max_eval_pairs: int = 0
    """Use at most this many eval pairs (0: all)."""
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    """Settings of the generated data (used when `source` is `synthetic`)."""
    cache: bool = True
    """Keep the tokenized splits in `cache_dir`, so a run with the same data, tokenizer and options skips tokenizing."""
    cache_dir: str = ""
    """Tokenized-data cache; empty: $HF_DATASETS_CACHE/rm-tokenized, else ~/.cache/huggingface/datasets/rm-tokenized."""
    score_field: str = ""
    """The score ordering a K-response group; empty: the format's (UltraFeedback overall_score, rows helpfulness)."""
    group_by_prompt: str | bool = "auto"
    """auto: rows of one prompt become a group, pairs stay pairs; true: pairs of one prompt merge too; false: none."""
    split_version: int = 3
    """Hold-out rule: 3 keeps a prompt on one side in every subset; 2 per subset, 1 by record (earlier runs' rules)."""
    text_version: int = 2
    """Record -> text rule: 2 reads a string prompt holding HH turns as those turns; 1 wrapped it again (older runs)."""
    eos: str = "none"
    """How a response ends: none (as written), eos (+ the tokenizer's EOS, as TRL's RewardTrainer on plain text) or
    space_eos (+ " " + EOS, as OpenRLHF's reward dataset); a text ending with EOS keeps one. Exports record it."""
    step_separator: str = "\n\n"
    """Stepwise data: the text after the problem and after every step; a step is scored at its last token
    (rm/tokens/steps/step_tokens.py). Exports record it; read a model with the separator it was trained with."""
    num_proc: int = 0
    """Processes tokenizing the splits (0 or 1: this one; the fast tokenizer already uses every core for its part)."""


@dataclass
class CollatorConfig:
    """How pairs become tensors."""

    max_length: int = 512
    """Longest prompt+response in tokens; longer prompts lose whole turns from the left."""
    layout: str = "auto"
    """`shared` (prompt once, pairs packed, no padding), `packed` (no padding, each sequence with its own copy of
    the prompt), `padded` (two padded rows a pair), or `auto`: shared where the model reproduces separate
    forwards with it, else padded (logged with the reason)."""
    max_tokens: int = 0
    """Token budget of a training micro-batch, padding included; 0 uses `train.batch_size` pairs instead."""
    eval_max_tokens: int = 0
    """Token budget of an eval micro-batch; 0 uses `train.eval_batch_size` pairs instead."""
    group_pairs: int = 512
    """With a token budget (or group_by_length), pairs are sorted within windows of this many shuffled pairs by
    the width they need: the whole pair in the shared layout, prompt + the longer response in padded and packed."""
    group_by_length: bool = False
    """With a fixed pair count (max_tokens 0): micro-batches of pairs of similar length (less padding)."""
    pack_length: int = 0
    """Row width of the shared layout; 0 makes rows as wide as the longest pair of the micro-batch."""


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping."""

    lr: float = 1e-4
    """Peak learning rate of AdamW."""
    weight_decay: float = 0.0
    """AdamW weight decay (not applied to biases and norms)."""
    epochs: float = 1.0
    """Passes over the training set (fractions allowed); ignored when `max_steps` > 0."""
    max_steps: int = 0
    """Optimizer steps to run (0: derive from `epochs`)."""
    batch_size: int = 8
    """Pairs per micro-batch on each process."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    eval_batch_size: int = 32
    """Pairs per eval batch on each process."""
    scheduler: str = "cosine"
    """Learning-rate schedule after warm-up: cosine, linear or constant."""
    warmup_ratio: float = 0.05
    """Fraction of optimizer steps spent warming up linearly from zero."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0: no clipping)."""
    eval_steps: int = 0
    """Evaluate every this many optimizer steps (0: only at the end)."""
    save_steps: int = 0
    """Save a checkpoint (model, optimizer, RNG, data position) every this many optimizer steps (0: never mid-run)."""
    save_total_limit: int = 3
    """Keep only the newest this many checkpoints (0: keep all)."""
    resume: str = ""
    """Resume from: `auto`, the newest complete checkpoint in `output_dir` (if any); a path; empty: start afresh."""
    overwrite: bool = False
    """Start afresh in an output_dir holding an earlier run, deleting that run's files first (else that is refused)."""
    max_nonfinite: int = 5
    """A non-finite loss skips its optimizer step (counted in eval.json); this many in a row stop the run."""
    log_steps: int = 10
    """Log loss and learning rate every this many optimizer steps."""
    seed: int = 42
    """Seed of model init and dropout, and of shuffling unless `data_seed` is set."""
    data_seed: int | None = None
    """Seed of the training data's order alone (null: `seed`'s): members of a merge or an ensemble fine-tuned from one
    initialization with different orders keep one `seed` and differ here."""
    mixed_precision: str = ""
    """no, bf16, fp16, or auto (bf16 where the GPU has it, else no); empty keeps what `accelerate launch` chose."""
    report_to: list[str] | str = field(default_factory=lambda: ["tensorboard"])
    """Accelerate trackers to log to (tensorboard, wandb…; one name alone, report_to=wandb, works too); [] for none."""
    num_threads: int = 0
    """torch CPU threads (0: the cores this process may use divided by the run's processes on the node)."""
    eval_suites: list[SuiteConfig] = field(default_factory=list)
    """Leaderboard suites scored at each eval, their section scores logged (`[{suite: rewardbench, data: …}]`)."""


@dataclass
class ExportConfig:
    """The final `AutoModelForSequenceClassification` export."""

    enabled: bool = True
    """Write `<output_dir>/export` at the end of the run."""
    normalize: bool = False
    """Store the mean and std of the rewards over the training pairs in the export's config.json."""
    license: str = ""
    """License id for the model card's metadata (e.g. apache-2.0); empty leaves it unset and the card asks for it."""
    push_to_hub: str = ""
    """Hub repo id (me/my-rm) to upload the export to at the end of the run (token: HF_TOKEN or `hf auth login`)."""
    private: bool = False
    """Create that Hub repo private."""
    revision: str = ""
    """Hub branch to push to (created if missing); empty: main."""
    reward_only: bool = False
    """Export the reward output alone (num_labels=1) for tools that read one output; attribute outputs are dropped."""


@dataclass
class RunConfig:
    """One training run. Every key below can be set in YAML or as `dotted.key=value` on the command line."""

    output_dir: str = "runs/default"
    """Run directory: config.yaml, eval.json, checkpoints, logs and the export land here."""
    model: ModelConfig = field(default_factory=ModelConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    collator: CollatorConfig = field(default_factory=CollatorConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    export: ExportConfig = field(default_factory=ExportConfig)


def validate(cfg: RunConfig) -> None:
    """Every problem of `cfg` at once (rm/config/checks.py), each naming its dotted key."""
    problems = choice_problems(cfg, CHOICES) + run_problems(cfg)
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
