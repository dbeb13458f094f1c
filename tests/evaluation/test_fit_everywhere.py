"""One long conversation, one reward: `rm score`, `rm eval` and training's eval fit it into max_length alike.

The rule lives in rm/tokens/truncation.py: a prompt too long loses whole leading turns first, then tokens
from its left, until the pair's longer response fits beside it. Before, `rm score` cut prompt tokens from the
left and gave a long multi-turn record another reward than `rm eval` and training's eval did.

The conversation below (written for this test) has a 4-turn prompt of more than MAX_LENGTH tokens and two
responses of different lengths that both fit: only its last turn or two fit beside the longer response, and
fitted beside each response apart the prompt would keep different turns, so the pair must be fitted as one.
It comes twice: as HH text, cut at its "\\n\\nHuman:" tags, and as message lists, rendered by the export's
chat template and cut at the turns the renderer marks.
"""

import json
import shutil

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from rm.cli import main as cli_main
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches
from rm.data.load import load_pairs
from rm.evaluation.gather import gather_rewards
from rm.model.pretrained import load_reward_model
from rm.tokens.encode import encode_kept
from rm.tokens.truncation import later_turns

MAX_LENGTH = 40
TURNS = [
    ("I have a question about my garden.", "Sure, go ahead."),
    ("My favorite color is green.", "Good to know!"),
    ("Thanks.", "You are welcome."),
]
QUESTION = "What is 2 plus 5?"
CHOSEN = " Yes, I can add them. The answer is 7."
REJECTED = " It is 6."
PROMPT = "".join(f"\n\nHuman: {h}\n\nAssistant: {a}" for h, a in TURNS) + f"\n\nHuman: {QUESTION}\n\nAssistant:"
MESSAGES = [m for h, a in TURNS for m in ({"role": "user", "content": h}, {"role": "assistant", "content": a})]
MESSAGES.append({"role": "user", "content": QUESTION})
RECORDS = [
    {"chosen": PROMPT + CHOSEN, "rejected": PROMPT + REJECTED},
    {
        "chosen": [*MESSAGES, {"role": "assistant", "content": CHOSEN.strip()}],
        "rejected": [*MESSAGES, {"role": "assistant", "content": REJECTED.strip()}],
    },
]


# A chat template without HH tags: a long prompt can be cut at a turn only where the renderer says turns start.
QA_TEMPLATE = (
    "{%- for m in messages -%}{{ '\\n\\n' ~ ('Q' if m['role'] == 'user' else 'A') ~ ': ' ~ m['content'] }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{ '\\n\\nA:' }}{%- endif -%}"
)


@pytest.fixture(scope="module")
def data(exported_tiny, tmp_path_factory):
    path = tmp_path_factory.mktemp("fit") / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


@pytest.fixture(scope="module")
def qa_export(exported_tiny, tmp_path_factory):
    """The tiny export with QA_TEMPLATE as its chat template (the weights and ids unchanged)."""
    out = tmp_path_factory.mktemp("qa") / "export"
    shutil.copytree(exported_tiny, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": QA_TEMPLATE}))
    (out / "chat_template.jinja").write_text(QA_TEMPLATE)
    return out


def test_the_prompt_loses_whole_turns_beside_the_longer_response(exported_tiny):
    """The case this file is about: neither the whole prompt nor only tokens, but whole leading turns go, and
    how many depends on the longer response (fitting each response apart would keep different prompts)."""
    _, tok = load_reward_model(str(exported_tiny))

    def n(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    room = [MAX_LENGTH - n(r) for r in (CHOSEN, REJECTED)]
    shorter = [n(p) for p in later_turns(PROMPT)]  # 3 turns, 2 turns, the question alone
    assert n(PROMPT) > MAX_LENGTH and 0 < min(room)
    assert shorter[-1] <= min(room) < shorter[0]  # a later turn fits beside the longer response; not all of them
    fits = [next(k for k, length in enumerate(shorter) if length <= r) for r in room]
    assert fits[0] != fits[1]  # beside the shorter response more of the prompt would fit


def score_rewards(export, data, tmp_path) -> np.ndarray:
    """`rm score`, through its CLI: [record, (chosen, rejected)]."""
    out = tmp_path / "scored.jsonl"
    args = ["--model", str(export), "--input", str(data), "--out", str(out), "--max-length", str(MAX_LENGTH)]
    assert cli_main(["score", *args]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["truncated"] for r in rows)
    return np.array([[r["chosen_reward"], r["rejected_reward"]] for r in rows])


def eval_rewards(export, data, tmp_path, n: int = len(RECORDS)) -> np.ndarray:
    """`rm eval`, through its CLI (rewards.jsonl, in input order)."""
    out = tmp_path / "eval"
    args = ["--model", str(export), "--data", str(data), "--out", str(out), "--max-length", str(MAX_LENGTH)]
    assert cli_main(["eval", *args, "--bootstrap-samples", "10"]) == 0
    saved = json.loads((out / "eval.json").read_text())["eval"]
    assert saved["pairs_dropped_too_long"] == 0 and saved["pairs_loaded"] == n
    rows = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    return np.array([[r["chosen_reward"], r["rejected_reward"]] for r in rows])


def training_eval_rewards(export, data, layout: str, n: int = len(RECORDS)) -> np.ndarray:
    """Training's eval path: the pairs as training loads them, `encode_kept`, the plan, sampler and collator of
    `layout`, and `gather_rewards` (what rm/training/run.py puts together for its eval loader)."""
    model, tok = load_reward_model(str(export))
    pairs = load_pairs(str(data), "test", [], tokenizer=tok)
    names = sorted({p.subset for p in pairs})
    encoded, report, positions = encode_kept(pairs, tok, MAX_LENGTH, names)
    assert positions.tolist() == list(range(n)) and report.prompt_truncated == n  # every prompt lost turns
    assert report.prompt_cut_inside_turn == 0  # whole turns, at the turns the text has
    pad = tok.pad_token_id
    collate = {"shared": SharedCollator(pad), "packed": PackedCollator(pad), "padded": PaddedCollator(pad)}[layout]
    plan = PairBatches(encoded, layout, 16, 0, False, 0)
    loader = DataLoader(encoded, batch_sampler=EvalBatches(plan, 0, 1), collate_fn=collate)
    gathered = gather_rewards(model, loader, Accelerator(cpu=True))
    return torch.stack([gathered["chosen"], gathered["rejected"]], 1).double().numpy()


@pytest.mark.slow
def test_score_eval_and_training_eval_give_one_reward(exported_tiny, data, tmp_path):
    scored = score_rewards(exported_tiny, data, tmp_path)
    evaluated = eval_rewards(exported_tiny, data, tmp_path)
    assert evaluated == pytest.approx(scored, abs=1e-5)
    for layout in ("padded", "shared", "packed"):
        assert training_eval_rewards(exported_tiny, data, layout) == pytest.approx(scored, abs=1e-5), layout
    # And the rule is the one stated: the prompt cut to its last turns, scored whole by plain transformers.
    model, tok = load_reward_model(str(exported_tiny))
    room = MAX_LENGTH - max(len(tok(r, add_special_tokens=False)["input_ids"]) for r in (CHOSEN, REJECTED))
    kept = next(p for p in later_turns(PROMPT) if len(tok(p, add_special_tokens=False)["input_ids"]) <= room)
    with torch.no_grad():
        for k, response in enumerate((CHOSEN, REJECTED)):
            ids = torch.tensor([tok(kept + response)["input_ids"]])
            assert model(input_ids=ids, attention_mask=torch.ones_like(ids)).item() == pytest.approx(
                scored[0, k], abs=1e-5
            )


@pytest.mark.slow
def test_a_chat_templates_prompt_is_cut_at_its_own_turns(qa_export, tmp_path):
    """The message-list record rendered by a template without HH tags: `rm score` must cut its prompt at the
    turns the renderer marks (`RenderedPair.turn_starts`), as training does, not at tags it cannot find."""
    data = tmp_path / "messages.jsonl"
    data.write_text(json.dumps(RECORDS[1]) + "\n")
    scored = score_rewards(qa_export, data, tmp_path)
    assert eval_rewards(qa_export, data, tmp_path, n=1) == pytest.approx(scored, abs=1e-5)
    assert training_eval_rewards(qa_export, data, "shared", n=1) == pytest.approx(scored, abs=1e-5)
