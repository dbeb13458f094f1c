"""The suites rm knows, where their published data lives, how their items are loaded, and how their texts are
formatted against how the leaderboard formats them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from transformers import PreTrainedTokenizerBase

from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.errors import ConfigError, DataError
from rm.suites import rewardbench, rewardbench2, rm_bench
from rm.suites.records import Parser, SuiteItem, parse_items, read_records
from rm.suites.steps.bench_records import NAME as BENCH
from rm.suites.subset_names import near_miss
from rm.tokens.tokenizer import special_prefix


@dataclass(frozen=True)
class Suite:
    name: str
    hub: str
    """The published dataset, read when no other source is given."""
    split: str
    """Its split that the leaderboard scores."""
    parse: Parser
    block: Callable[..., dict]
    """(items, rewards) -> eval.json's `suite` numbers."""
    notes: Callable[[list[SuiteItem]], list[str]]
    """items -> how the data differs from the leaderboard's (the block's notes that rewards do not change): a
    leaderboard subset missing, a subset scored apart. Known when the items are loaded, so said then."""
    check: Callable[[list[SuiteItem], DataReport], list[SuiteItem]] | None = None
    """(items, report) -> the items less those that conflict with others (RewardBench 2's repeated Ties ids)."""


SUITES = {
    "rewardbench": Suite(
        "rewardbench", "allenai/reward-bench", "filtered", rewardbench.parse, rewardbench.suite_block, rewardbench.notes
    ),
    "rewardbench2": Suite(
        "rewardbench2",
        "allenai/reward-bench-2",
        "test",
        rewardbench2.parse,
        rewardbench2.suite_block,
        rewardbench2.notes,
        check=rewardbench2.check,
    ),
    "rm-bench": Suite("rm-bench", "THU-KEG/RM-Bench", "train", rm_bench.parse, rm_bench.suite_block, rm_bench.notes),
}
PRIOR_SETS_HUB = "allenai/preference-test-sets"
"""RewardBench's prior preference sets: one split per subset, each prompt a list of messages."""

WITH_TEMPLATE = (
    "RewardBench's sequence-classifier path (prepare_dialogue_from_tokenizer, RewardBenchPipeline): the text "
    "tokenizer.apply_chat_template([user prompt, assistant response], tokenize=False), tokenized with the "
    "tokenizer's special tokens and a doubled BOS removed. rm renders the same text (prompt + response) and puts "
    "the tokenizer's BOS in front once"
)
WITHOUT_TEMPLATE = (
    "For a tokenizer without a chat template RewardBench formats with the fastchat conversation template named "
    "on its command line (e.g. tulu) and sets the pipeline tokenizer's add_eos_token = True. Under the transformers "
    "it pins (4.51.0) only classes with that setting (LlamaTokenizerFast, GemmaTokenizerFast, ...) then append an "
    "EOS; a plain PreTrainedTokenizerFast, rm's own tokenizers' class, ignores it and appends none. rm renders HH "
    "text (\\n\\nHuman: ...\\n\\nAssistant: ...), as it trains, and ends each response as the model's data.eos "
    "(config.json rm_eos) says, so these numbers are rm's formatting, not a leaderboard run's"
)


STEP_SUITES = (BENCH,)
"""Suites of step scores (rm/suites/steps/): ProcessBench, whose items are solutions cut into steps."""
SUITE_NAMES = (*SUITES, *STEP_SUITES)
"""Every suite `rm eval --suite` and `train.eval_suites` take (rm/config/suite_config.py spells them out again,
below this layer; a test keeps the two and the command line's list equal)."""


def get_suite(name: str) -> Suite:
    """A suite of pairs and groups by name (ProcessBench is read by rm/suites/steps/ instead)."""
    if name in STEP_SUITES:
        raise ConfigError(f"{name} scores steps, not pairs: rm.suites.suite_eval.evaluate_suite runs it")
    if name not in SUITES:
        raise ConfigError(f"unknown suite {name!r}: rm knows {', '.join(SUITE_NAMES)}")
    return SUITES[name]


def load_items(
    suite: Suite, source: str, split: str, renderer: Renderer, report: DataReport, subsets: list[str] | None = None
) -> list[SuiteItem]:
    """The suite's items from `source` (default: its Hub dataset) and `split` (default: the leaderboard's), those
    of `subsets` only when given."""
    source = source or suite.hub
    items = parse_items(read_records(source, split or suite.split, report), suite.parse, renderer, report)
    if suite.check:
        items = suite.check(items, report)
    if subsets:
        present = sorted({i.subset for i in items})
        missing = [f"{s!r}" + (f" (did you mean {m!r}?)" if (m := near_miss(s, present)) else "")
                   for s in sorted(set(subsets) - set(present))]  # fmt: skip
        if missing:
            raise DataError(f"{source}: no records of subset(s) {', '.join(missing)}")
        items = [i for i in items if i.subset in subsets]
    if not items:
        raise DataError(f"{source}: no {suite.name} records to score (skipped: {report.skipped_counts() or 'none'})")
    return items


def load_prior_sets(source: str, renderer: Renderer, report: DataReport) -> list[SuiteItem]:
    """RewardBench's prior sets that make its "Prior Sets" figure, each split's records of that subset."""
    items = []
    for name in rewardbench.PRIOR_SETS:
        found = parse_items(read_records(source or PRIOR_SETS_HUB, name, report), rewardbench.parse_prior, renderer,
                            report)  # fmt: skip
        items += [replace(i, subset=name) for i in found]
    return items


def formatting(renderer: Renderer, tokenizer: PreTrainedTokenizerBase, items: list[SuiteItem]) -> dict:
    """eval.json's `suite.formatting`: which renderer made the texts, how the leaderboard makes them, an example."""
    templated = renderer.tokenizer is not None
    bos = tokenizer.decode(special_prefix(tokenizer))
    return {
        "renderer": renderer.name,
        "leaderboard": WITH_TEMPLATE if templated else WITHOUT_TEMPLATE,
        "same_as_leaderboard": templated,
        "example": (bos + items[0].prompt + items[0].responses[0])[:2000] if items else "",
    }
