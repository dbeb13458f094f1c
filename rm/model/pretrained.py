"""Loading any reward model for scoring and eval: rm's exports, and other sequence-classification models.

rm's exports of architectures transformers has no reward class for (granite, mamba…) carry a
modeling file for plain transformers; rm loads them with its own identical class instead, so
`rm score` and `rm eval` never need `--trust-remote-code` for them.

Decoders are wrapped in `RewardModel`, which reads the reward at the last attended token exactly as
training does; models whose classifier is not one linear layer (RoBERTa…) pool the sequence themselves
(`PooledLogits`); both in rm/model/reward.py, whose `reward_module` chooses.

A model with several outputs is read one way: output 0 is the reward, outputs 1.. are attributes
named by `id2label` (`attribute_names`). rm's exports with `model.head.attributes` are written so
(`id2label[0] == "reward"`); any other multi-output classifier is read the same way, and a log line says so.

rm's process-reward exports (rm/export/steps/token_export.py) are `…ForTokenClassification` folders with two labels
and `rm_step_separator` in config.json; they are read back in the one-output form (`step_reward_model`), so every
scoring path reads a step's probability as sigmoid(reward at its last token), as it reads a trained PRM's. Any
other token classifier is refused: its labels (NER tags, …) are no reward.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rm.config.exportdir import ExportDir
from rm.config.loader import relative_note
from rm.config.rundir import RunDir
from rm.data.hub_reach import hub_advice, hub_offline, unreachable
from rm.errors import ModelError
from rm.model.architecture import own_class, reward_class
from rm.model.build import DTYPES
from rm.model.reward import reward_module, score_head, transformers_model
from rm.model.threads import set_threads
from rm.tokens.tokenizer import load_tokenizer

log = logging.getLogger("rm")

FRESH_HEAD = {"MISSING": ("score", "classifier"), "UNEXPECTED": ("lm_head", "embed_out")}
"""What loading a causal LM's checkpoint into a sequence-classification class always reports, rm expecting it: the
reward head missing (made fresh, then trained) and the LM's output layer unused (GPT-NeoX names it embed_out)."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP_KEY = "rm_step_separator"
"""config.json key of rm's process-reward exports (rm/export/steps/token_export.py: SEPARATOR_KEY)."""


def attribute_names(config: PretrainedConfig) -> list[str]:
    """The names of outputs 1.. of a sequence-classification config (`id2label[1:]`, in order); [] for one
    output. An output without a label is `attribute_<i>`."""
    labels = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    return [labels.get(i, f"attribute_{i}") for i in range(1, config.num_labels)]


def model_attributes(model: nn.Module) -> list[str]:
    """`attribute_names` of a loaded or training reward model (`RewardModel`, `PooledLogits`, under DDP or LoRA)."""
    inner = getattr(model, "module", model)  # DistributedDataParallel's wrapped module
    hf = getattr(inner, "hf", None)
    return attribute_names(transformers_model(hf).config) if hf is not None else []


def check_outputs(name: str, config: PretrainedConfig) -> None:
    """A multi-output model is read as output 0 the reward and outputs 1.. its attributes: rm's exports name
    output 0 "reward"; any other one is read the same way, said in a log line (a 2-label sentiment classifier's
    output 0 is no reward, and nothing in its config can tell)."""
    if config.num_labels < 1:
        raise ModelError(f"{name}: has num_labels={config.num_labels}; a reward model has at least one output")
    first = (getattr(config, "id2label", None) or {}).get(0, "reward")
    if config.num_labels > 1 and first != "reward":
        log.warning(
            "%s has %d outputs and output 0 is %r, not 'reward': rm reads output 0 as the reward and outputs 1.. "
            "as attributes %s", name, config.num_labels, first, attribute_names(config),
        )  # fmt: skip


def load_reward_model(
    name_or_path: str,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    device: str = "cpu",
    num_threads: int = 0,
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    """(model, tokenizer) for any `AutoModelForSequenceClassification`, and for rm's process-reward exports in the
    one-output form (`step_reward_model`), in eval mode. A model with several outputs returns [rows, 1 + A],
    output 0 the reward (`check_outputs`; names: `attribute_names`).

    Decoders are wrapped in `RewardModel`, which reads the reward at the last attended token exactly as
    training does; other architectures use their own pooling through `PooledLogits`. `device="auto"`
    picks the GPU when there is one. torch gets `num_threads` CPU threads (0: `rm.model.threads`' default).
    """
    set_threads(num_threads)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        steps = is_step_export(name_or_path, config)
        if not steps:
            check_outputs(name_or_path, config)
        tokenizer = load_tokenizer(name_or_path, trust_remote_code)
        own = None if steps else own_class(config, trust_remote_code)  # rm's head on a causal LM: no remote code
        if steps:
            hf = step_reward_model(name_or_path, config, DTYPES[dtype])
        elif own is not None:
            hf = own.from_pretrained(name_or_path, config=config, dtype=DTYPES[dtype])
        else:
            hf = AutoModelForSequenceClassification.from_pretrained(
                name_or_path, config=config, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
            )
    except (OSError, ValueError) as e:
        if isinstance(e, ModelError):
            raise
        why = why_not_loaded(name_or_path, e)
        raise ModelError(f"{name_or_path}: cannot load a sequence-classification model ({why})") from None
    return reward_module(hf).eval().to(device), tokenizer


def is_step_export(name: str, config: PretrainedConfig) -> bool:
    """Whether `config` is an rm process-reward export's (a token classifier with 2 labels and the separator
    key); any other token classifier is refused in one line (ModelError)."""
    token = [a for a in getattr(config, "architectures", None) or [] if a.endswith("ForTokenClassification")]
    if not token:
        return False
    if isinstance(getattr(config, STEP_KEY, None), str) and config.num_labels == 2:
        return True
    raise ModelError(
        f"{name}: {token[0]} is a token classifier, not a reward model; rm reads sequence-classification reward "
        f"models and its own process-reward exports (2 labels and {STEP_KEY} in config.json)"
    )


def step_reward_model(name: str, config: PretrainedConfig, dtype: torch.dtype) -> PreTrainedModel:
    """An rm process-reward export (`…ForTokenClassification`, 2 labels) in the one-output form the scoring room
    reads: the architecture's reward class (`reward_class`) on the token classifier's very backbone, its score
    row = row 1 - row 0 and its bias = bias 1 - bias 0. softmax([a, b])[1] = sigmoid(b - a), so sigmoid of the
    reward at a position is exactly the export's softmax[..., 1] there. The config keeps `rm_step_separator`."""
    tok = AutoModelForTokenClassification.from_pretrained(name, config=config, dtype=dtype)
    try:
        two = score_head(tok)  # the [2, H] head (`score`, or `classifier` in GPT-2 and GPT-NeoX)
    except TypeError:
        raise ModelError(f"{name}: {type(tok).__name__} has no linear head to read a step's score from") from None
    reward_config = copy.deepcopy(config)
    reward_config.num_labels, reward_config.problem_type = 1, None
    reward_config.id2label, reward_config.label2id = {0: "reward"}, {"reward": 0}
    cls = reward_class(reward_config)
    reward_config.architectures = [cls.__name__]
    with torch.device("meta"):  # no weights allocated: the backbone is the token classifier's, the head below
        hf = cls(reward_config)
    prefix, backbone = hf.base_model_prefix, tok.get_submodule(tok.base_model_prefix)
    if type(hf.get_submodule(prefix)) is not type(backbone):
        raise ModelError(f"{name}: {cls.__name__} cannot hold the backbone of {type(tok).__name__}")
    setattr(hf, prefix, backbone)
    head_name = next((n for n in ("score", "classifier") if isinstance(getattr(hf, n, None), nn.Linear)), "score")
    bias = None if two.bias is None else two.bias[1] - two.bias[0]
    head = nn.Linear(two.in_features, 1, bias=bias is not None, dtype=two.weight.dtype)
    with torch.no_grad():
        head.weight.copy_(two.weight[1:2] - two.weight[0:1])  # [1, H]
        if bias is not None:
            head.bias.copy_(bias[None])
    setattr(hf, head_name, head)
    left = [n for n, t in [*hf.named_parameters(), *hf.named_buffers()] if t.is_meta]
    if left:
        raise ModelError(f"{name}: {left[:3]} of {cls.__name__} were not carried over from {type(tok).__name__}")
    return hf.eval()


def why_not_loaded(name: str, error: BaseException) -> str:
    """Why transformers could not load `name`, in a user's words: a path that does not exist (not "Repo id
    must use alphanumeric chars"), an rm run directory given where a model is expected, or the Hub offline."""
    path = Path(name).expanduser()
    run = RunDir(path)
    if path.is_dir() and run.config.is_file() and not ExportDir(path).holds_model:
        if ExportDir(run.export).holds_model:
            return f"{path} is an rm run directory, not a model: use its export, {run.export}"
        return f"{path} is an rm run directory, not a model: export it first (python -m rm export {path} --out DIR)"
    if (name.startswith(("/", ".", "~")) or name.count("/") > 1) and not path.exists():
        return f"the path {path} does not exist{relative_note(path)}"
    if unreachable():  # the Hub refused at once (rm/data/hub_reach.py): say what to do, not "couldn't connect"
        return hub_advice(name, "model")
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if hub_offline():
        first += " (HF_HUB_OFFLINE is set: a Hub model must already be in the local cache)"
    return first


def default_max_length(model_path: str, model: nn.Module) -> int:
    """The training run's `collator.max_length` when the folder carries rm's config, else the model's limit."""
    saved = ExportDir(model_path).max_length()
    if saved is not None:
        return saved
    return min(getattr(model.hf.config, "max_position_embeddings", None) or 1024, 2048)


class LoadReport(logging.Filter):
    """Holds back transformers' LOAD REPORT table (a warning of the `transformers.modeling_utils` logger), keeping
    its rows as (key, status); a report whose table it cannot read is let through as transformers wrote it."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "LOAD REPORT" not in text:
            return True
        rows = [[c.strip() for c in _ANSI.sub("", line).split(" | ")] for line in text.splitlines()]
        rows = [(r[0], r[1]) for r in rows if len(r) > 1 and r[1].isupper()]  # not the header's "Status"
        self.rows += rows
        return not rows

    def unexpected(self) -> dict[str, list[str]]:
        """The reported keys rm does not expect, by status (MISSING, UNEXPECTED, MISMATCH…)."""
        out: dict[str, list[str]] = {}
        for key, status in self.rows:
            if key.split(".", 1)[0] not in FRESH_HEAD.get(status, ()):
                out.setdefault(status, []).append(key)
        return out


@contextmanager
def fresh_head_load(name: str) -> Iterator[LoadReport]:
    """Load `name` into a reward class with a fresh head without transformers' load report, which lists the head
    as missing and the LM head as unused on every run; any other key it lists is one warning line of rm's own
    (a backbone weight left random, or one of the checkpoint's unused, is worth knowing)."""
    report = LoadReport()
    logger = logging.getLogger("transformers.modeling_utils")
    logger.addFilter(report)
    try:
        yield report
    finally:
        logger.removeFilter(report)
    said = {"MISSING": "not in the checkpoint, initialized at random", "UNEXPECTED": "in the checkpoint, not used"}
    for status, keys in report.unexpected().items():
        log.warning("%s: weights %s: %s", name, said.get(status, f"reported {status}"), ", ".join(keys))
