"""rm's side of the end-of-sequence checks (scripts/clients/eos_checks.py): pairs, and rm's ids, rewards and accuracy.

make_exports.py trains `eos` (`data.eos: eos`, TRL's form: the EOS token after every response) and `space-eos`
(`data.eos: space_eos`, OpenRLHF's: " " then EOS) as it trains `random`, which is the export without the
convention (`data.eos: none`). Here, for each of the three:

- `pairs.jsonl`: the first N_PAIRS real HH pairs (harmless-base test) whose texts fit the run's max_length with room
  for the EOS; `trl_pairs.jsonl`: the same pairs as rm renders them (`prompt`, `chosen`, `rejected`: rm's text rule,
  rm.evaluation.record_texts), the plain-text input TRL's RewardTrainer and OpenRLHF's RewardDataset take;
  `ppo.jsonl`: each text with the EOS token string after it, the text OpenRLHF's PPO sequence decodes to.
- `rm score` of pairs.jsonl and ppo.jsonl, with the token ids rm scored (read at rm score's own scoring call,
  rm.evaluation.score_file.score_outputs, in record order: chosen, rejected, chosen, ...), and `rm eval`'s accuracy
  on pairs.jsonl. All in WORK/eos-checks/KIND/ref.json.

    python scripts/clients/eos_exports.py WORK_DIR      # after make_exports.py; make_exports.py also calls it
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "scripts"))

from get_hh_data import hh_data_root  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import rm.evaluation.score_file as score_file  # noqa: E402
from rm.cli import main as rm_main  # noqa: E402
from rm.data.data_report import DataReport  # noqa: E402
from rm.data.formats.chat import Renderer  # noqa: E402
from rm.evaluation.record_texts import texts_of  # noqa: E402

HH = hh_data_root() / "harmless-base" / "test.jsonl.gz"
EOS_KINDS = {"random": "none", "eos": "eos", "space-eos": "space_eos"}
"""Export kind -> its data.eos (`random` is trained without the convention)."""
EOS_RUNS = {"eos": ["data.eos=eos"], "space-eos": ["data.eos=space_eos"]}
"""make_exports.py's extra runs: its RUN settings plus these."""
N_PAIRS = 150
ROOM = 2
"""Tokens kept free for what the conventions add (a space, the EOS)."""


def pairs(tokenizer, max_length: int) -> list[tuple[dict, list]]:
    """The first N_PAIRS HH records (and rm's texts of them) whose prompt + response fit `max_length - ROOM`."""
    renderer, report = Renderer(tokenizer), DataReport("skip", repair_always=True)
    out = []
    with gzip.open(HH, "rt") as f:
        for n, line in enumerate(f, 1):
            record = json.loads(line)
            record = {"chosen": record["chosen"], "rejected": record["rejected"]}
            try:
                texts = texts_of(record, f"{HH}:{n}", "", renderer, report)
            except ValueError:  # identical or unsplittable: rm eval would skip it too
                continue
            if record["chosen"] == record["rejected"] or len({t.prompt for t in texts}) != 1:
                continue
            ids = tokenizer([t.prompt + t.response for t in texts], add_special_tokens=False)["input_ids"]
            if max(map(len, ids)) <= max_length - ROOM:
                out.append((record, texts))
            if len(out) == N_PAIRS:
                return out
    raise SystemExit(f"only {len(out)} usable HH pairs in {HH}")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def scored(export: Path, data: Path, out: Path) -> tuple[list[float], list[list[int]]]:
    """`rm score` of `data` (in this process), its rewards and the ids it scored, text by text."""
    seen: list[list[int]] = []
    original = score_file.score_outputs

    def spy(model, groups, *args, **kwargs):
        seen.extend([int(i) for i in g.prompt_ids] + [int(i) for i in r] for g in groups for r in g.response_ids)
        return original(model, groups, *args, **kwargs)

    score_file.score_outputs = spy
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            code = rm_main(["score", "--model", str(export), "--input", str(data), "--out", str(out), "--overwrite"])
    finally:
        score_file.score_outputs = original
    if code:
        raise SystemExit(f"rm score --model {export} --input {data} exited {code}")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [r[f"{side}_reward"] for r in rows for side in ("chosen", "rejected")], seen


def accuracy(export: Path, data: Path, out: Path) -> float:
    """`rm eval`'s accuracy on `data` (a tie counts one half)."""
    with contextlib.redirect_stdout(io.StringIO()):
        code = rm_main(["eval", "--model", str(export), "--data", str(data), "--out", str(out)])
    if code:
        raise SystemExit(f"rm eval --model {export} --data {data} exited {code}")
    return json.loads((out / "eval.json").read_text())["overall"]["accuracy"]


def main(work: Path, max_length: int = 256) -> None:
    """`max_length`: make_exports.py's collator.max_length."""
    folder = work / "eos-checks"  # not "eos": that is the run trained with data.eos=eos
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(work / "random" / "export")
    found = pairs(tokenizer, max_length)
    data = write_jsonl(folder / "pairs.jsonl", [r for r, _ in found])
    rendered = [{"prompt": t[0].prompt, "chosen": t[0].response, "rejected": t[1].response} for _, t in found]
    write_jsonl(folder / "trl_pairs.jsonl", rendered)
    eos = tokenizer.eos_token
    ppo = write_jsonl(folder / "ppo.jsonl", [{k: r[k] + eos for k in ("chosen", "rejected")} for r, _ in found])
    for kind, setting in EOS_KINDS.items():
        export, out = work / kind / "export", folder / kind
        out.mkdir(exist_ok=True)
        if AutoTokenizer.from_pretrained(export).get_vocab() != tokenizer.get_vocab():
            raise SystemExit(f"{export}: another tokenizer than {work / 'random' / 'export'}'s (the pairs fit that)")
        rewards, ids = scored(export, data, out / "rm_score.jsonl")
        ppo_rewards, ppo_ids = scored(export, ppo, out / "rm_score_ppo.jsonl")
        ref = {"eos": setting, "eos_token": eos, "rewards": rewards, "ids": ids, "ppo_rewards": ppo_rewards,
               "ppo_ids": ppo_ids, "accuracy": accuracy(export, data, out / "eval")}  # fmt: skip
        (out / "ref.json").write_text(json.dumps(ref))
    print(f"EOS references in {folder}: {', '.join(EOS_KINDS)}; {len(found)} HH pairs")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
