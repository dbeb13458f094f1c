"""The export's chat template and card say how training wrote each record's text, for every format.

A record of each format is loaded as training loads it; the same conversation, written as messages the way a
client holds it, goes through the saved export tokenizer's chat template and must give training's ids. Before,
every export carried the HH template: a `prompt` record, trained on `prompt + response` with nothing between,
was scored on HH text it never saw (3.0985 against 3.2016 on the demo model), and so was HH data trained with a
tokenizer that has its own template.
"""

import copy
import json

import pytest
from transformers import AutoTokenizer

from rm.config import load_config
from rm.data.load import load_pairs
from rm.export.card import CardFacts, render_card
from rm.export.compat import export_tokenizer, finish_folder

QA_TEMPLATE = (
    "{%- for m in messages -%}{{ '\\n\\n' ~ ('Q' if m['role'] == 'user' else 'A') ~ ': ' ~ m['content'] }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{ '\\n\\nA:' }}{%- endif -%}"
)
ASK, GOOD, BAD = "What is 2 plus 3?", "It is 5.", "It is 7."
USER = {"role": "user", "content": ASK}
CONVERSATION = {
    "chosen": [USER, {"role": "assistant", "content": GOOD}],
    "rejected": [USER, {"role": "assistant", "content": BAD}],
}
HH = "\n\nHuman: {q}\n\nAssistant: {a}"
# (format, the tokenizer has a chat template of its own, the record, the conversation as a client writes it)
CASES = {
    "hh": ("hh", False, {"chosen": HH.format(q=ASK, a=GOOD), "rejected": HH.format(q=ASK, a=BAD)}, GOOD),
    "hh, own template": ("hh", True, {"chosen": HH.format(q=ASK, a=GOOD), "rejected": HH.format(q=ASK, a=BAD)}, GOOD),
    "prompt": ("prompt", False, {"prompt": ASK, "chosen": " " + GOOD, "rejected": " " + BAD}, " " + GOOD),
    "conversation": (
        "conversation",
        False,
        CONVERSATION,
        GOOD,
    ),
    "conversation, own template": (
        "conversation",
        True,
        CONVERSATION,
        GOOD,
    ),
    "argilla": (
        "argilla",
        False,
        {"chosen": f"user: {ASK}\nassistant: {GOOD}\n", "rejected": f"user: {ASK}\nassistant: {BAD}\n",
         "metadata": '{"source": "harmless-base"}'},
        GOOD,
    ),
}  # fmt: skip


def saved_export_tokenizer(tok, cfg, folder):
    """The tokenizer as an export writes it and a client loads it."""
    saved = export_tokenizer(tok, cfg)
    saved.save_pretrained(folder)
    (folder / "config.json").write_text("{}")  # finish_folder fixes config.json too
    finish_folder(folder, saved)
    return AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("case", CASES)
def test_every_formats_record_through_the_exports_template_gives_trainings_ids(tokenizer, tmp_path, case):
    fmt, own, record, answer = CASES[case]
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = QA_TEMPLATE if own else None
    (tmp_path / "train.jsonl").write_text(json.dumps(record) + "\n")
    cfg = load_config(None, [f"data.format={fmt}", f"output_dir={tmp_path / 'run'}"])
    (pair,) = load_pairs(str(tmp_path / "train.jsonl"), "train", [], cfg.data, tokenizer=tok)
    trained = tok(pair.prompt + pair.chosen, add_special_tokens=False)["input_ids"]

    client = saved_export_tokenizer(tok, cfg, tmp_path / "export")
    text = client.apply_chat_template([USER, {"role": "assistant", "content": answer}], tokenize=False)
    assert client(text)["input_ids"] == trained, (text, pair.prompt + pair.chosen)


def test_mixed_formats_get_no_template_and_a_card_that_says_how_to_build_the_text(tokenizer, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "data_report.json").write_text(json.dumps({"formats": {"hh": 3, "prompt": 2}}))
    cfg = load_config(None, [f"output_dir={run}"])  # data.format=auto: the report says what was read
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = QA_TEMPLATE
    client = saved_export_tokenizer(tok, cfg, tmp_path / "export")
    assert not client.chat_template and not (tmp_path / "export" / "chat_template.jinja").exists()
    card = render_card(cfg, CardFacts("LlamaForSequenceClassification", 10**6, 1, 1, chat_template="mixed"))
    assert "no one chat template writes what the model saw" in card and "apply_chat_template" not in card


def test_the_card_of_a_prompt_format_run_says_the_text_is_concatenated(tmp_path):
    cfg = load_config(None, ["data.format=prompt"])
    card = render_card(cfg, CardFacts("LlamaForSequenceClassification", 10**6, 1, 1, chat_template="concat"))
    assert "`prompt + response` as the records write them, with nothing between" in card
    assert "HH-RLHF" not in card and "\\n\\nHuman:" not in card
