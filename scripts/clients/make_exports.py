"""Fresh exports and `rm score`'s rewards for scripts/check_clients.sh (runs in rm's own venv).

Three short runs on rm's generated data, each exported at its end: `random` (random-init Llama, BPE
trained here), `lora` (LoRA, merged at export) and `bos` (a local "pretrained" Llama whose tokenizer
adds <s> in front of every text and whose rope theta is 500,000, which transformers 4.x misreads when
config.json keeps it only inside `rope_parameters`). Then cases from the real HH file (multi-turn
conversations whose text the chat template reproduces exactly, short enough for every run's
max_length) and `rm score`'s rewards for them, per export: the reference every client must reproduce.

A fourth run, `attributes`, trains `model.head.attributes: [helpfulness, verbosity]` beside the reward on
rm's generated data (seed 2) with scores written into its pairs (`chosen_attributes`/`rejected_attributes`, functions of
each answer's text: see `scores_of`); its export has 1 + 2 outputs, and `reward-only` is `rm export RUN
--reward-only` of the same run (one output, the reward). `rm score` of the attributes export is the reference
for both: its `*_reward` for output 0 (and for the reward-only export), its `*_attributes` for outputs 1 and 2.

Two more runs, `eos` and `space-eos`, are `random`'s with `data.eos: eos` and `data.eos: space_eos`: the
end-of-sequence checks (scripts/clients/eos_exports.py writes their references, on real HH pairs).

    python scripts/clients/make_exports.py WORK_DIR
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "scripts"))

import torch  # noqa: E402
from get_hh_data import hh_data_root  # noqa: E402
from tokenizers import processors  # noqa: E402
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

from rm.config import load_config  # noqa: E402
from rm.data import synthetic  # noqa: E402
from rm.data.formats.hh import parse_turns  # noqa: E402
from rm.data.load import load_pairs  # noqa: E402
from rm.tokens.tokenizer import train_bpe  # noqa: E402
from rm.training.run import main as train  # noqa: E402

ATTRIBUTES = ("helpfulness", "verbosity")
REFUSAL_WORDS = frozenset({"sorry", "no", "not", "won't", "can't"})
HH = hh_data_root() / "harmless-base" / "test.jsonl.gz"  # $RM_HH_DATA, make data, or ../shared
MAX_LENGTH = 256
N_CASES = 16
RUN = [
    "data.synthetic.n_train=600",
    "data.synthetic.n_eval=60",
    "model.random_init.hidden_size=64",
    "model.random_init.intermediate_size=128",
    "model.random_init.num_hidden_layers=2",
    "model.random_init.num_attention_heads=4",
    f"model.random_init.max_position_embeddings={MAX_LENGTH}",
    "tokenizer.vocab_size=2000",
    f"collator.max_length={MAX_LENGTH}",
    "train.batch_size=16",
    "train.max_steps=30",
    "train.eval_steps=0",
    "train.log_steps=10",
    "train.report_to=[]",
    "export.normalize=true",
]


def save_bos_llama(folder: Path, tok, hidden_size: int, layers: int, max_positions: int, rope_theta: float) -> None:
    """A random Llama saved as a causal LM with `tok`, which from now on adds <s> in front of every text (as
    Llama 2/3 tokenizers do). Also used by tests/export/test_compat.py."""
    tok.add_special_tokens({"bos_token": "<s>"})
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.bos_token_id)]
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_positions,
        rope_theta=rope_theta,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)


def pretrained_with_bos(folder: Path, data_root: Path) -> Path:
    pairs = load_pairs(str(data_root), "train", [])
    tok = train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], vocab_size=2000)
    save_bos_llama(folder, tok, hidden_size=64, layers=2, max_positions=MAX_LENGTH, rope_theta=500000.0)
    return folder


def scores_of(text: str) -> dict[str, float]:
    """The attribute scores of an HH transcript's last answer, both on a 0-4 scale and known functions of the text:
    verbosity grows with its word count; helpfulness drops by 2 for each refusal word (a refusal helps less, even
    where it is the chosen answer)."""
    words = text[text.rfind("\n\nAssistant:") + len("\n\nAssistant:") :].lower().replace(",", " ").split()
    refusals = sum(w.strip(".!?") in REFUSAL_WORDS for w in words)
    return {"helpfulness": float(max(0, 4 - 2 * refusals)), "verbosity": float(min(4, len(words) // 2))}


def with_attribute_scores(root: Path, seed: int) -> Path:
    """rm's generated data (the size of the other runs') under `root`, every pair given both answers' scores."""
    synthetic.write_dataset(root, n_train=600, n_eval=60, seed=seed)
    for path in sorted(root.glob("*/*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            records = [json.loads(line) for line in f]
        for r in records:
            r["chosen_attributes"], r["rejected_attributes"] = scores_of(r["chosen"]), scores_of(r["rejected"])
        with gzip.open(path, "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    return root


def messages_of(text: str) -> list[dict] | None:
    """HH text as messages, or None unless the HH chat template gives the text back exactly."""
    try:
        turns = parse_turns(text)
    except ValueError:
        return None
    if not turns or turns[-1].role != "Assistant" or not all(t.text.startswith(" ") for t in turns):
        return None
    roles = {"Human": "user", "Assistant": "assistant"}
    return [{"role": roles[t.role], "content": t.text[1:]} for t in turns]


def cases(exports: list[Path]) -> list[dict]:
    tokenizers = [AutoTokenizer.from_pretrained(e) for e in exports]
    out = []
    with gzip.open(HH, "rt") as f:
        for line in f:
            record = json.loads(line)
            chosen, rejected = messages_of(record["chosen"]), messages_of(record["rejected"])
            if not chosen or not rejected or chosen[:-1] != rejected[:-1] or chosen == rejected:
                continue
            texts = (record["chosen"], record["rejected"])
            if any(len(t(x)["input_ids"]) > MAX_LENGTH for t in tokenizers for x in texts):
                continue
            if any(
                t.apply_chat_template(m, tokenize=False) != x
                for t in tokenizers
                for m, x in zip((chosen, rejected), texts, strict=True)
            ):
                continue
            out.append(
                {
                    "chosen": texts[0],
                    "rejected": texts[1],
                    "prompt_messages": chosen[:-1],
                    "chosen_message": chosen[-1],
                    "rejected_message": rejected[-1],
                }
            )
            if len(out) == N_CASES:
                return out
    return out


def main(work: Path) -> None:
    import eos_exports  # beside this file; here, so tests/export/test_compat.py's import of this module stays light

    work.mkdir(parents=True, exist_ok=True)
    data = synthetic.write_dataset(work / "synthetic-for-bos-tokenizer", n_train=600, n_eval=10, seed=1)
    base = pretrained_with_bos(work / "pretrained-bos", data)
    scored = with_attribute_scores(work / "synthetic-with-attributes", seed=2)
    quickstart = REPO / "configs" / "quickstart.yaml"
    runs = {
        "random": [],
        "lora": ["model.lora.r=8", "train.lr=1e-2"],
        "bos": [f"model.name_or_path={base}"],
        "attributes": [f"data.source={scored}", f"model.head.attributes=[{','.join(ATTRIBUTES)}]"],
    }
    for name, extra in (runs | eos_exports.EOS_RUNS).items():
        if not (work / name / "export" / "config.json").is_file():
            train(load_config(quickstart, RUN + extra + [f"output_dir={work / name}"]))
    env = os.environ | {"PYTHONPATH": str(REPO)}
    reward_only = work / "reward-only" / "export"
    if not (reward_only / "config.json").is_file():
        cmd = [sys.executable, "-m", "rm", "export", str(work / "attributes"), "--out", str(reward_only)]
        subprocess.run([*cmd, "--reward-only", "--overwrite"], check=True, cwd=REPO, env=env)
    exports = [work / name / "export" for name in runs]
    found = cases(exports)
    if len(found) < N_CASES:
        raise SystemExit(f"only {len(found)} usable HH cases in {HH}")
    with open(work / "cases.jsonl", "w") as f:
        f.writelines(json.dumps(c) + "\n" for c in found)
    for name in runs:
        out = work / name / "rm_score.jsonl"
        cmd = [sys.executable, "-m", "rm", "score", "--model", str(work / name / "export")]
        args = ["--input", str(work / "cases.jsonl"), "--out", str(out), "--overwrite"]  # a rerun on a kept WORK_DIR
        subprocess.run([*cmd, *args], check=True, cwd=REPO, env=env)
    eos_exports.main(work, MAX_LENGTH)
    print(f"exports and rm score references in {work}: {', '.join(runs)}, reward-only; {len(found)} cases")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
