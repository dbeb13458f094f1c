"""Same record, same reward, everywhere: one record of each format family through every entry point that takes it.

Three tiny models are trained once for the module, one per rendering rule a run can save with its export
(rm/export/compat.py `template_kind`): HH text (the synthetic data, a BPE trained on the fly), a tokenizer's own chat
template (message-list records, a named BPE that carries serving.TEMPLATE) and the concatenating template (the
`prompt` format). Each family's record (the fixtures use each dataset's published field names) is then scored by
`rm score` and `rm eval` (their CLI main functions, in this process), training's eval (the pairs as a run loads
them, `encode_kept`, its batch plan and collator, `gather_rewards`), the suites whose shape it has, `/score` and
`/score_groups` (the app through a TestClient), `rm.load(...).score` and plain transformers on the exported template
(`apply_chat_template` writes the text training built; the model reads it prompt and response apart, as rm
tokenizes them). All must agree to 1e-5.

Rewards are compared per file as a sorted set of values: `rm eval` may order a group's responses by rank, a rows
file becomes one group, and a pairwise loss may see a group as its pairs; any text built differently moves its
reward by far more than 1e-5 on these models, so the set is as strict as a matching by text.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from accelerate import Accelerator
from serving import TEMPLATE, client, scorer_for
from torch.utils.data import DataLoader

import rm
from conftest import TINY_MODEL, plain_outputs
from rm.cli import main as cli_main
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches
from rm.data.formats.group import Group
from rm.data.load import load_pairs
from rm.errors import DataError
from rm.evaluation.eval_report import EvalOptions
from rm.evaluation.gather import gather_rewards
from rm.model.pretrained import load_reward_model
from rm.suites.suite_eval import SuiteData, score_suite
from rm.tokens.encode import encode_kept
from rm.tokens.tokenizer import CONCAT_CHAT_TEMPLATE, HH_CHAT_TEMPLATE

pytestmark = pytest.mark.slow  # every test here runs models end to end (seconds each)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def lines(name: str, n: int = 1) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()[:n]]


QUESTION = "What is 2 + 3?"
HH_PROMPT = f"\n\nHuman: {QUESTION}\n\nAssistant:"
FAMILIES = {
    "pairwise": lines("rewardbench.jsonl"),  # prompt / chosen / rejected strings
    "trl": [
        {
            "prompt": [{"role": "user", "content": QUESTION}],
            "chosen": [{"role": "assistant", "content": "2 plus 3 is 5."}],
            "rejected": [{"role": "assistant", "content": "It is 6, I think."}],
        }
    ],
    "hh": [{"chosen": HH_PROMPT + " 2 plus 3 is 5.", "rejected": HH_PROMPT + " It is 6, I think."}],
    "argilla": lines("argilla_ja.jsonl"),
    "ultrafeedback": lines("ultrafeedback.jsonl"),
    "nectar": lines("nectar.jsonl", 2),  # the second prompt holds two HH turns and an answer already
    "helpsteer2_rows": lines("helpsteer2_rows.jsonl", 2),  # two rows of one prompt
    "responses": lines("responses.jsonl", 2),  # a string prompt and a message-list prompt
    "responses_hh_prompt": [
        {"prompt": HH_PROMPT, "responses": [{"text": " 5.", "score": 2}, {"text": " Six.", "score": 0}]}
    ],
    "rewardbench2": lines("rewardbench2_suite.jsonl"),
}


def groups_body(family: str, records: list[dict]) -> list[dict] | None:
    """The family's records as `/score_groups` groups, where the shape is a prompt and its responses."""
    if family in ("responses", "responses_hh_prompt"):
        return [{"prompt": r["prompt"], "responses": [x.get("text", x.get("messages")) for x in r["responses"]]}
                for r in records]  # fmt: skip
    if family == "helpsteer2_rows":
        return [{"prompt": records[0]["prompt"], "responses": [r["response"] for r in records]}]
    if family == "nectar":
        return [{"prompt": r["prompt"], "responses": [a["answer"] for a in r["answers"]]} for r in records]
    if family == "ultrafeedback":
        return [{"prompt": r["instruction"], "responses": [c["response"] for c in r["completions"]]} for r in records]
    if family == "rewardbench2":
        return [{"prompt": r["prompt"], "responses": r["chosen"] + r["rejected"]} for r in records]
    if family == "trl":
        return [{"prompt": r["prompt"], "responses": [r["chosen"], r["rejected"]]} for r in records]
    return None


def distinct(values) -> np.ndarray:
    """Sorted, with values within 1e-7 of the previous one dropped (a response a pairwise view repeats)."""
    out: list[float] = []
    for v in sorted(float(x) for x in values):
        if not out or v - out[-1] > 1e-7:
            out.append(v)
    return np.array(out)


# --- the three models ---------------------------------------------------------------------------------------------

STEPS = [*TINY_MODEL, "train.batch_size=8", "train.eval_batch_size=16", "train.max_steps=2", "train.lr=3e-3",
         "train.report_to=[]", "train.num_threads=1", "train.eval_steps=0"]  # fmt: skip
WORDS = ["red", "blue", "green", "cat", "dog", "sun", "moon", "tree", "fish", "rain", "snow", "star"]


def made_up(i: int) -> tuple[str, str, str]:
    return f"Name thing {WORDS[i % 12]} {i}.", f"A {WORDS[(i + 1) % 12]} thing.", f"No {WORDS[(i + 5) % 12]}."


def chat_records(n: int) -> list[dict]:
    return [
        {"prompt": [{"role": "user", "content": p}], "chosen": [{"role": "assistant", "content": c}],
         "rejected": [{"role": "assistant", "content": r}]}
        for p, c, r in map(made_up, range(n))
    ]  # fmt: skip


def prompt_records(n: int) -> list[dict]:
    return [{"prompt": p + " ", "chosen": c, "rejected": r} for p, c, r in map(made_up, range(n))]


RULES = ["hh", "tokenizer", "concat"]


@pytest.fixture(scope="module", params=RULES)
def export(request, tokenizer, tmp_path_factory) -> Path:
    """A run of two steps trained and exported with one rendering rule; its export folder."""
    root = tmp_path_factory.mktemp(f"rule-{request.param}")
    overrides = [f"output_dir={root / 'run'}", *STEPS]
    if request.param == "hh":
        overrides += ["data.synthetic.n_train=48", "data.synthetic.n_eval=16"]
        result = rm.train(None, overrides=overrides)
    else:
        named = root / "tokenizer"
        tokenizer.chat_template = TEMPLATE if request.param == "tokenizer" else None
        try:
            tokenizer.save_pretrained(named)
        finally:
            tokenizer.chat_template = None
        records = chat_records if request.param == "tokenizer" else prompt_records
        overrides.append(f"tokenizer.name_or_path={named}")
        result = rm.train(None, train_data=records(48), eval_data=records(16), overrides=overrides)
    folder = result.export
    saved = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
    rule = {"hh": HH_CHAT_TEMPLATE, "tokenizer": TEMPLATE, "concat": CONCAT_CHAT_TEMPLATE}[request.param]
    assert saved == rule  # the rule this fixture stands for is the one the export saved
    return folder


# --- the entry points ---------------------------------------------------------------------------------------------


def write(tmp_path: Path, name: str, records: list[dict]) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def of_fields(rows: list[dict]) -> list[float]:
    keys = ("reward", "chosen_reward", "rejected_reward")
    return [v for r in rows for v in ([r[k] for k in keys if k in r] + list(r.get("rewards", [])))]


def rm_score(export: Path, data: Path, tmp_path: Path, *more: str) -> list[float]:
    out = tmp_path / (data.stem + ".scored.jsonl")
    args = ["score", "--model", str(export), "--input", str(data), "--out", str(out), "--overwrite", *more]
    assert cli_main(args) == 0
    return of_fields([json.loads(line) for line in out.read_text().splitlines()])


def rm_eval(export: Path, data: Path, tmp_path: Path, *more: str) -> list[float]:
    out = tmp_path / (data.stem + ".eval")
    args = ["eval", "--model", str(export), "--data", str(data), "--out", str(out), "--bootstrap-samples", "10"]
    assert cli_main([*args, *more]) == 0
    return of_fields([json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()])


def training_eval(export: Path, data: Path, max_length: int = 0) -> list[float]:
    """Training's eval path: the items as a run loads them, `encode_kept`, the eval plan, sampler and collator,
    `gather_rewards` (what rm/training/run.py builds for its eval loader)."""
    model, tok = load_reward_model(str(export))
    items = load_pairs(str(data), data.stem, [], tokenizer=tok)
    names = sorted({p.subset for p in items})
    encoded, _, _ = encode_kept(items, tok, max_length or tok.model_max_length, names)
    plan = PairBatches(encoded, "padded", 16, 0, False, 0)
    loader = DataLoader(encoded, batch_sampler=EvalBatches(plan, 0, 1), collate_fn=PaddedCollator(tok.pad_token_id))
    return gather_rewards(model, loader, Accelerator(cpu=True))["reward"].tolist()


def suite_rewards(export: Path, suite: str, data: Path) -> list[float]:
    run = score_suite(str(export), suite, SuiteData(source=str(data)), EvalOptions(samples=10))
    return np.concatenate(run.rewards).tolist()


def served(export: Path, family: str, records: list[dict], max_length: int = 0) -> dict[str, list[float]]:
    """`/score_groups` where the family is a prompt and responses; `/score` texts for HH conversations and
    `/score` messages for message-list conversations."""
    got: dict[str, list[float]] = {}
    groups = groups_body(family, records)
    with client(scorer_for(str(export), max_length)) as c:
        if groups is not None:
            answer = c.post("/score_groups", json={"groups": groups})
            assert answer.status_code == 200, answer.text
            got["/score_groups"] = [v for g in answer.json()["rewards"] for v in g]
        if family == "hh":
            answer = c.post("/score", json={"texts": [t for r in records for t in (r["chosen"], r["rejected"])]})
            assert answer.status_code == 200, answer.text
            got["/score texts"] = answer.json()["rewards"]
        if family == "trl":
            conversations = [r["prompt"] + r[k] for r in records for k in ("chosen", "rejected")]
            answer = c.post("/score", json={"messages": conversations})
            assert answer.status_code == 200, answer.text
            got["/score messages"] = answer.json()["rewards"]
    return got


def plain(export: Path, data: Path) -> list[float]:
    """Plain transformers on the texts training builds; where those come from messages, the exported template
    writes the same text (`apply_chat_template`), so a user of the export feeds the model what training did."""
    _, tok = load_reward_model(str(export))
    items = load_pairs(str(data), data.stem, [], tokenizer=tok)
    texts = [(g.prompt, r) for g in items for r in (g.responses if isinstance(g, Group) else (g.chosen, g.rejected))]
    return [plain_outputs(export, tok, p, r)[0] for p, r in texts]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_one_record_one_reward_through_every_entry_point(export, family, tmp_path):
    records = FAMILIES[family]
    data = write(tmp_path, family, records)
    expected = distinct(plain(export, data))
    got = {
        "rm score": rm_score(export, data, tmp_path),
        "rm eval": rm_eval(export, data, tmp_path),
        "training's eval": training_eval(export, data),
        "rm.load().score": of_fields(rm.load(export).score(records)),
        **served(export, family, records),
    }
    if family == "rewardbench2":  # its suite reads the same record; RewardBench's pairs: the test below
        got["suite rewardbench2"] = suite_rewards(export, "rewardbench2", data)
    wrong = {name: v.tolist() for name, v in ((n, distinct(r)) for n, r in got.items())
             if v.shape != expected.shape or not np.allclose(v, expected, atol=1e-5, rtol=0)}  # fmt: skip
    assert not wrong, f"plain transformers: {expected.tolist()}; these differ: {wrong}"


def test_the_exported_template_writes_the_text_training_built(export, tmp_path):
    """For message lists, plain transformers needs only the export: its chat template writes the text rm trained on
    (HH text, the tokenizer's own template, or the concatenation)."""
    _, tok = load_reward_model(str(export))
    record = FAMILIES["trl"][0]
    data = write(tmp_path, "trl", [record])
    pair = load_pairs(str(data), "trl", [], tokenizer=tok)[0]
    text = tok.apply_chat_template(record["prompt"] + record["chosen"], tokenize=False)
    assert text == pair.prompt + pair.chosen


def test_the_rewardbench_suite_reads_a_pairwise_record_as_training_does(export, request, tmp_path):
    """RewardBench's `prompt`/`chosen`/`rejected` strings: training's `prompt` format (and so `rm score` and `rm eval`)
    joins prompt + chosen as written, as TRL's and OpenRLHF's standard format trains; the rewardbench suite renders
    the prompt as a user turn of the model's template, as RewardBench's own scripts do. Only the concatenating
    export makes those one text."""
    if request.node.callspec.params["export"] != "concat":
        request.applymarker(pytest.mark.xfail(strict=True, reason="the suite follows RewardBench's rendering"))
    data = write(tmp_path, "rewardbench", FAMILIES["pairwise"])
    expected = distinct(rm_score(export, data, tmp_path))
    assert np.allclose(distinct(suite_rewards(export, "rewardbench", data)), expected, atol=1e-5, rtol=0)


TURNS = [
    ("I have a question about my garden.", "Sure, go ahead."),
    ("My favorite color is green.", "Good to know!"),
    ("Thanks.", "You are welcome."),
]
LONG_QUESTION = "What is 2 plus 5?"
CHOSEN, REJECTED = "Yes, I can add them. The answer is 7.", "It is 6."
LONG_HH = "".join(f"\n\nHuman: {h}\n\nAssistant: {a}" for h, a in TURNS) + f"\n\nHuman: {LONG_QUESTION}\n\nAssistant:"
LONG_MESSAGES = [{"role": r, "content": c} for h, a in TURNS for r, c in (("user", h), ("assistant", a))]
LONG_MESSAGES.append({"role": "user", "content": LONG_QUESTION})
LONG = {
    "hh": [{"chosen": f"{LONG_HH} {CHOSEN}", "rejected": f"{LONG_HH} {REJECTED}"}],
    "trl": [{"prompt": LONG_MESSAGES, "chosen": [{"role": "assistant", "content": CHOSEN}],
             "rejected": [{"role": "assistant", "content": REJECTED}]}],
    "responses_hh_prompt": [{"prompt": LONG_HH, "responses": [{"text": f" {CHOSEN}", "score": 1},
                                                             {"text": f" {REJECTED}", "score": 0}]}],
}  # fmt: skip


@pytest.mark.parametrize("family", list(LONG))
def test_a_long_multi_turn_prompt_cut_to_fit_gets_one_reward(export, family, tmp_path):
    """A prompt of four turns that must lose its leading turns to fit beside the longer answer. Only rm's entry
    points are compared: plain transformers would need rm's fitting (which turns to drop) to be given the same ids,
    and tests/evaluation/test_fit_everywhere.py checks that rule against a hand-cut text."""
    records = LONG[family]
    data = write(tmp_path, family, records)
    _, tok = load_reward_model(str(export))
    items = load_pairs(str(data), family, [], tokenizer=tok)
    whole = [g.prompt + r for g in items for r in (g.responses if isinstance(g, Group) else (g.chosen, g.rejected))]
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in whole]
    max_length = min(lengths) - 6  # every text too long whole; the last turn and the longer answer still fit
    assert max_length > 2 * len(tok(f" {LONG_QUESTION} {CHOSEN}", add_special_tokens=False)["input_ids"])
    cut = ("--max-length", str(max_length))
    got = {"rm score": rm_score(export, data, tmp_path, *cut)}
    assert all(json.loads(line)["truncated"] for line in (tmp_path / f"{family}.scored.jsonl").read_text().splitlines())
    got["rm eval"] = rm_eval(export, data, tmp_path, *cut)
    got["training's eval"] = training_eval(export, data, max_length)
    got["rm.load().score"] = of_fields(rm.load(export, max_length=max_length).score(records))
    got |= {k: v for k, v in served(export, family, records, max_length).items() if k == "/score_groups"}
    expected = distinct(got["rm score"])
    wrong = {name: v.tolist() for name, v in ((n, distinct(r)) for n, r in got.items())
             if v.shape != expected.shape or not np.allclose(v, expected, atol=1e-5, rtol=0)}  # fmt: skip
    assert not wrong, f"rm score: {expected.tolist()}; these differ: {wrong}"


def test_a_prompt_holding_the_templates_own_turns_is_refused_everywhere_naming_the_field(export, request, tmp_path):
    """With a chat template, "<|user|> Hi" as a string prompt cannot be read back into messages in general: training,
    `rm.load(...).score` and `/score_groups` refuse it in one line naming the field, instead of wrapping it again."""
    if request.node.callspec.params["export"] != "tokenizer":
        pytest.skip("only a tokenizer's own template has turns of its own")
    record = {"prompt": "<|user|> Hi\n", "responses": [{"text": "Hello", "score": 1}, {"text": "Bye", "score": 0}]}
    data = write(tmp_path, "turns", [record])
    _, tok = load_reward_model(str(export))
    with pytest.raises(DataError, match="turns.jsonl:1: field 'prompt' already holds the chat template's turns"):
        load_pairs(str(data), "turns", [], tokenizer=tok)
    with pytest.raises(DataError, match="field 'prompt' already holds the chat template's turns"):
        rm.load(export).score(record)
    with client(scorer_for(str(export))) as c:
        answer = c.post("/score_groups", json={"groups": [{"prompt": record["prompt"], "responses": ["Hello", "Bye"]}]})
    assert answer.status_code == 422 and "already holds the chat template's turns" in answer.text, answer.text
