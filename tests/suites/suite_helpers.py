"""What the suite tests share: the fixtures in their datasets' published fields, a suite eval of a model, the
rewards it wrote back per record, and rewards read the plain way (one text, one forward, its last token)."""

import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.evaluation.eval_report import EvalOptions
from rm.suites.catalog import get_suite, load_items
from rm.suites.records import SuiteItem
from rm.suites.suite_eval import SuiteData, SuiteRun, evaluate_suite, score_suite

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOURCES = {
    "rewardbench": FIXTURES / "rewardbench.jsonl",
    "rewardbench2": FIXTURES / "rewardbench2_suite.jsonl",
    "rm-bench": FIXTURES / "rm_bench.json",
}


def run_suite(model: Path, suite: str, out: Path, source: Path | None = None, **options) -> dict:
    """`rm eval --suite`'s whole job: eval.json and the report in `out` (the plots take seconds)."""
    data = SuiteData(source=str(source or SOURCES[suite]))
    return evaluate_suite(str(model), suite, data, out, EvalOptions(samples=20, **options))


def score(model: Path, suite: str, source: Path | None = None, **options) -> SuiteRun:
    """The same numbers without writing the report: eval.json's dict and each record's rewards."""
    data = SuiteData(source=str(source or SOURCES[suite]))
    return score_suite(str(model), suite, data, EvalOptions(samples=20, **options))


def written_rewards(out: Path) -> list[np.ndarray]:
    """Per record of rewards.jsonl, its rewards in the record's order (chosen first)."""
    rows = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    return [np.array(r["rewards"] if "rewards" in r else [r["chosen_reward"], r["rejected_reward"]]) for r in rows]


def fixture_items(suite: str, tokenizer=None, source: Path | None = None) -> list:
    """The fixture's items as the suite renders them for `tokenizer` (HH text without a chat template)."""
    return load_items(get_suite(suite), str(source or SOURCES[suite]), "", Renderer(tokenizer), DataReport("error"))


def items_of(*specs: tuple[str, str, int, int]) -> list[SuiteItem]:
    """(subset, id, chosen, rejected) -> items with that many responses, for rewards chosen by hand."""
    return [SuiteItem("p", tuple(f"r{k}" for k in range(c + r)), c, s, f"hand:{n}", i)
            for n, (s, i, c, r) in enumerate(specs)]  # fmt: skip


def plain_rewards(model: Path, texts: list[str]) -> np.ndarray:
    """Each text alone through plain transformers: no padding, the reward at its own last token (read from the
    backbone's last hidden state, so that no pad-token rule is involved)."""
    tok = AutoTokenizer.from_pretrained(model)
    hf = AutoModelForSequenceClassification.from_pretrained(model).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tok(text, return_tensors="pt")["input_ids"]
            hidden = hf.model(input_ids=ids).last_hidden_state[0, -1]
            out.append(hf.score(hidden).item())
    return np.array(out)
