"""Export: a standard `AutoModelForSequenceClassification` folder that plain transformers loads.

The folder holds the model (num_labels=1, the architecture's own head name, safetensors only),
the tokenizer, `pad_token_id` in the config, and the run's config.yaml and eval.json beside them.
Plain transformers reads the score at the last non-pad token; rm's tokenizers keep pad distinct
from every real token so both agree (see `rm/tokenizer.py`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase


def export_model(
    hf: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    run_dir: str | Path | None = None,
    eval_result: dict | None = None,
) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf.config.num_labels = 1
    hf.config.id2label, hf.config.label2id = {0: "reward"}, {"reward": 0}
    hf.config.pad_token_id = tokenizer.pad_token_id
    hf.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    if run_dir is not None and (Path(run_dir) / "config.yaml").is_file():
        shutil.copyfile(Path(run_dir) / "config.yaml", out / "rm_config.yaml")
    if eval_result is not None:
        (out / "eval.json").write_text(json.dumps(eval_result, indent=2) + "\n")
    return out
