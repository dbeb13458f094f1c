"""Every common pairwise format, from every readable file type, gives the same pairs."""

import copy
import csv
import gzip
import json

import pytest

from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.formats.chat import Message, Renderer
from rm.data.formats.parse import detect_format
from rm.data.load import load_pairs, subset_counts
from rm.errors import DataError
from rm.tokens.encode import encode_pairs

PROMPT_RECORDS = [
    {"prompt": "What is 2+2?", "chosen": " 4", "rejected": " 5", "subset": "math"},
    {"prompt": "Capital of France?", "chosen": " Paris", "rejected": " Rome", "subset": "geo", "margin": 1.5},
]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def user(text):
    return {"role": "user", "content": text}


def bot(text):
    return {"role": "assistant", "content": text}


def triples(pairs):
    return [(p.prompt, p.chosen, p.rejected, p.subset, p.margin) for p in pairs]


def write(path, records):
    """Write records in the file type the suffix names (jsonl, json, json.gz, csv, parquet)."""
    name = path.name
    if name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys = sorted({k for r in records for k in r})
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in records]), path)
    elif name.endswith(".csv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=sorted({k for r in records for k in r}))
            writer.writeheader()
            writer.writerows(records)
    elif name.endswith(".json.gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(records, f, indent=1)
    elif name.endswith(".json"):
        path.write_text(json.dumps(records, indent=1))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".json.gz", ".csv", ".parquet"])
def test_prompt_records_read_the_same_from_every_file_type(tmp_path, suffix):
    path = write(tmp_path / f"prefs{suffix}", PROMPT_RECORDS)
    pairs = load_pairs(str(path), "train", [])
    assert triples(pairs) == [
        ("What is 2+2?", " 4", " 5", "math", None),
        ("Capital of France?", " Paris", " Rome", "geo", 1.5),
    ]


def test_origins_name_the_line_of_a_json_array_and_the_row_of_parquet(tmp_path):
    json_pairs = load_pairs(str(write(tmp_path / "a.json", PROMPT_RECORDS)), "train", [])
    # json.dumps(indent=1): "[" on line 1, the first object on lines 2-7 (4 keys), the second from line 8.
    assert [p.origin.rsplit(":", 1)[1] for p in json_pairs] == ["2", "8"]
    parquet_pairs = load_pairs(str(write(tmp_path / "a.parquet", PROMPT_RECORDS)), "train", [])
    assert [p.origin.rsplit(" ", 1)[1] for p in parquet_pairs] == ["0", "1"]


def test_conversations_split_on_their_shared_messages_and_render_as_hh_without_a_template(tmp_path):
    records = [
        {
            "chosen": [user("hi"), bot("hello"), user("2+2?"), bot("4")],
            "rejected": [user("hi"), bot("hello"), user("2+2?"), bot("5")],
        },
        {
            "prompt": [user("steal?")],
            "chosen": [bot("No."), user("please"), bot("Still no.")],
            "rejected": [bot("Sure.")],
        },
        {"prompt": "Capital?", "chosen": [bot("Paris")], "rejected": [bot("Rome")]},
        {"prompt": "Capital?", "chosen": [user("Capital?"), bot("Paris")], "rejected": [user("Capital?"), bot("Rome")]},
    ]
    (tmp_path / "c").mkdir()
    pairs = load_pairs(str(write(tmp_path / "c" / "chat.jsonl", records)), "train", [])
    assert [(p.prompt, p.chosen, p.rejected) for p in pairs] == [
        ("\n\nHuman: hi\n\nAssistant: hello\n\nHuman: 2+2?\n\nAssistant:", " 4", " 5"),
        ("\n\nHuman: steal?\n\nAssistant:", " No.\n\nHuman: please\n\nAssistant: Still no.", " Sure."),
        ("\n\nHuman: Capital?\n\nAssistant:", " Paris", " Rome"),
        ("\n\nHuman: Capital?\n\nAssistant:", " Paris", " Rome"),
    ]
    assert [p.parts_early for p in pairs] == [False, True, False, False]
    assert subset_counts(pairs) == {"chat": 4}  # named from the file


@pytest.fixture()
def chat_tokenizer(tokenizer):
    """The session BPE with a chat template that writes BOS, and a post-processor that adds BOS too."""
    from tokenizers import processors

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"bos_token": "<s>"})
    tok.add_tokens(["<|user|>", "<|assistant|>", "<|end|>"], special_tokens=True)
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)]
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def test_the_tokenizers_chat_template_renders_conversations_and_marks_user_turns(chat_tokenizer, tmp_path):
    record = {
        "chosen": [user("hi"), bot("hello"), user("2+2?"), bot("4")],
        "rejected": [user("hi"), bot("hello"), user("2+2?"), bot("5")],
    }
    path = write(tmp_path / "chat.jsonl", [record])
    (pair,) = load_pairs(str(path), "train", [], tokenizer=chat_tokenizer)
    # The template's own BOS is dropped: the collator adds the tokenizer's prefix (one BOS) itself.
    assert pair.prompt == "<|user|>hi<|end|><|assistant|>hello<|end|><|user|>2+2?<|end|><|assistant|>"
    assert (pair.chosen, pair.rejected) == ("4<|end|>", "5<|end|>")
    assert pair.turn_starts == (len("<|user|>hi<|end|><|assistant|>hello<|end|>"),)
    (encoded,), report = encode_pairs([pair], chat_tokenizer, 512, [pair.subset])
    assert (
        encoded.prompt_ids.tolist().count(chat_tokenizer.bos_token_id) == 1
        and encoded.prompt_ids[0] == chat_tokenizer.bos_token_id
    )
    # Too long for the whole prompt: it is cut at the second user turn, not inside a message.
    second_turn = chat_tokenizer("<|user|>2+2?<|end|><|assistant|>", add_special_tokens=False)["input_ids"]
    room = 1 + len(second_turn) + max(len(encoded.chosen_ids), len(encoded.rejected_ids))
    (cut,), report = encode_pairs([pair], chat_tokenizer, room, [pair.subset])
    assert cut.prompt_ids.tolist() == [chat_tokenizer.bos_token_id] + second_turn
    assert (report.prompt_truncated, report.prompt_cut_inside_turn) == (1, 0)


def test_chat_template_hh_forces_hh_text_and_tokenizer_requires_a_template(chat_tokenizer, tokenizer):
    msgs = [Message("user", "hi"), Message("assistant", "a")], [Message("user", "hi"), Message("assistant", "b")]
    assert Renderer(chat_tokenizer, "hh").pair(*msgs).prompt == "\n\nHuman: hi\n\nAssistant:"
    with pytest.raises(DataError, match="no chat template"):
        Renderer(tokenizer, "tokenizer")


def test_column_mapping_reads_anything_else(tmp_path):
    records = [{"question": "Q1", "good": "yes", "bad": "no", "topic": "t"}]
    path = write(tmp_path / "other.csv", records)
    cfg = DataConfig(columns={"prompt": "question", "chosen": "good", "rejected": "bad", "subset": "topic"})
    assert triples(load_pairs(str(path), "train", [], cfg)) == [("Q1", "yes", "no", "t", None)]
    with pytest.raises(DataError, match=r"other\.csv:2: field 'answer' \(data\.columns\.chosen\) is missing"):
        load_pairs(str(path), "train", [], DataConfig(columns={"chosen": "answer"}))


def test_formats_are_told_from_their_fields():
    assert detect_format({"chosen": "\n\nHuman: a", "rejected": "x"}) == "hh"
    assert detect_format({"prompt": "a", "chosen": "b", "rejected": "c"}) == "prompt"
    assert detect_format({"chosen": [user("a")], "rejected": [user("b")]}) == "conversation"
    assert detect_format({"chosen": "user: a\nassistant: b\n", "rejected": "x", "metadata": "{}"}) == "argilla"
    assert detect_format({"transcript": "\n\nHuman: a", "rating": 1.0}) == "red-team"
    assert detect_format({"text": "a"}) is None


def test_unknown_fields_stop_or_are_counted(tmp_path):
    path = write(tmp_path / "odd.jsonl", [{"text": "a"}] + PROMPT_RECORDS)
    with pytest.raises(DataError, match=r"odd\.jsonl:1: cannot tell the record format from its fields \(text\)"):
        load_pairs(str(path), "train", [])
    report = DataReport("skip")
    assert len(load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report)) == 2
    assert report.skipped_counts() == {"unknown_format": 1}


def test_a_source_no_format_fits_points_to_data_columns_not_to_skipping(tmp_path):
    """Skipping would skip every record of these: the error names data.columns instead, which then works."""
    csv_file = write(tmp_path / "other.csv", [{"question": "2+2?", "good": "4", "bad": "5"}])
    with pytest.raises(DataError) as e:
        load_pairs(str(csv_file), "train", [])
    assert "data.columns={prompt: COLUMN, chosen: COLUMN, rejected: COLUMN}" in str(e.value)
    assert "on_bad_record" not in str(e.value)

    chat = write(tmp_path / "chat.jsonl", [{"messages": [user("2+2?")], "chosen": "4", "rejected": "5"}])
    with pytest.raises(DataError) as e:
        load_pairs(str(chat), "train", [])
    assert "data.columns={prompt: messages}" in str(e.value) and "on_bad_record" not in str(e.value)
    pairs = load_pairs(str(chat), "train", [], DataConfig(columns={"prompt": "messages"}))
    assert [(p.prompt, p.chosen, p.rejected) for p in pairs] == [("\n\nHuman: 2+2?\n\nAssistant:", " 4", " 5")]

    # An `instruction` field alone makes a record look like UltraFeedback, whose `completions` it lacks
    alpaca = write(tmp_path / "alpaca.jsonl", [{"instruction": "2+2?", "good": "4", "bad": "5"}])
    with pytest.raises(DataError) as e:
        load_pairs(str(alpaca), "train", [])
    assert "data.columns={prompt: COLUMN" in str(e.value) and "on_bad_record" not in str(e.value)
    mapped = DataConfig(columns={"prompt": "instruction", "chosen": "good", "rejected": "bad"})
    assert [(p.chosen, p.rejected) for p in load_pairs(str(alpaca), "train", [], mapped)] == [("4", "5")]


def test_hub_datasets_other_than_hh_load_once_and_filter_by_record_subset(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(name, data_dir=None, split=None):
        calls.append((name, data_dir, split))
        return PROMPT_RECORDS

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    pairs = load_pairs("someone/prefs", "train", ["geo"])
    assert calls == [("someone/prefs", None, "train")]
    assert triples(pairs) == [("Capital of France?", " Paris", " Rome", "geo", 1.5)]
    assert pairs[0].origin == "someone/prefs[train] row 1"
    with pytest.raises(DataError, match=r"no train pairs of subset\(s\) art \(found: geo, math\)"):
        load_pairs("someone/prefs", "train", ["art"])


def test_hub_load_failures_are_one_clear_message(monkeypatch):
    import datasets

    def missing(name, data_dir=None, split=None):
        raise ValueError("Unknown split \"test\". Should be one of ['train'].")

    monkeypatch.setattr(datasets, "load_dataset", missing)
    with pytest.raises(DataError, match=r"hironow/test-hh-rlhf-12k-ja: cannot load split 'test'.*Unknown split"):
        load_pairs("hironow/test-hh-rlhf-12k-ja", "test", [])


class DefaultSystem:
    """A template that writes its own system message before the first user turn when none is given, as Qwen2.5's
    ("You are Qwen, …") and Llama 3's ("Cutting Knowledge Date: …") do."""

    bos_token = None

    def __init__(self, start: str, end: str):
        self.start, self.end = start, end
        self.chat_template = "default-system"

    def apply_chat_template(self, rows, tokenize=False, add_generation_prompt=False):
        rows = rows if rows[0]["role"] == "system" else [{"role": "system", "content": "You are helpful."}, *rows]
        text = "".join(f"{self.start.format(role=m['role'])}{m['content']}{self.end}" for m in rows)
        return text + (self.start.format(role="assistant") if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


@pytest.mark.parametrize(
    "start, end",
    [("<|im_start|>{role}\n", "<|im_end|>\n"), ("<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>")],
    ids=["qwen2.5", "llama3"],
)
def test_a_prompt_holding_template_turns_is_refused_behind_a_default_system_message(start, end):
    """The template's user opening is looked for without the system message it writes by default: a string prompt
    that holds the template's turns is refused naming the field, not wrapped a second time."""
    from rm.data.formats.text_rule import prompt_messages
    from rm.errors import RecordError

    renderer = Renderer(DefaultSystem(start, end))
    assert renderer.user_opening() == start.format(role="user").strip()
    turns = f"{start.format(role='user')}Hi{end}"
    with pytest.raises(RecordError, match="field 'prompt' already holds the chat template's turns"):
        prompt_messages(turns, renderer)
    assert prompt_messages("Hi", renderer)[0][0].content == "Hi"
