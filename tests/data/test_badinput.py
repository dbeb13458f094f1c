"""Every listed bad input, in both modes: `error` stops with file, line and field; `skip` goes on and counts.

Each case writes a small file whose line 2 (or whole file, for encoding problems) is bad, then checks
the error message, and in skip mode what was kept and the count by reason.
"""

import gzip
import json
import random

import pytest

from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.data.formats.pair import ParseContext
from rm.data.formats.parse import parse_record
from rm.data.load import load_pairs
from rm.errors import DataError, RecordError

HH = {"chosen": "\n\nHuman: hi\n\nAssistant: hello", "rejected": "\n\nHuman: hi\n\nAssistant: go away"}
PROMPT = {"prompt": "Q?", "chosen": " yes", "rejected": " no"}
CHAT = {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]}
CHAT["rejected"] = [CHAT["chosen"][0], {"role": "assistant", "content": "b"}]


def argilla(source="harmless-base", **fields):
    record = {
        "chosen": "user: こんにちは\nassistant: こんにちは！\n",
        "rejected": "user: こんにちは\nassistant: 何？\n",
        "metadata": json.dumps({"source": source}),
        "chosen_rating": [],
        "rejected_rating": [],
        "modify_chosen": [],
        "modify_rejected": [],
        "external_id": None,
    }
    return record | fields


def lines(*records, sep="\n"):
    return sep.join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records) + sep


# (id, file text, error regex after "prefs.jsonl:", skip reason, pairs kept in skip mode)
SKIPPED = [
    ("malformed-json", lines(HH, '{"chosen": "x"'), r"2: malformed JSON", "malformed_json", 1),
    ("missing-field", lines(HH, {"chosen": HH["chosen"]}), r"2: field 'rejected' is missing", "missing_field", 1),
    ("non-string", lines(HH, {"chosen": 3, "rejected": "x"}), r"2: field 'chosen' must be a string", "not_a_string", 1),
    ("empty", lines(PROMPT, PROMPT | {"chosen": " "}), r"2: field 'chosen' has an empty response", "empty_response", 1),
    (
        "identical",
        lines(HH, HH | {"rejected": HH["chosen"]}),
        r"2: .*'chosen' and 'rejected'.*identical",
        "identical",
        1,
    ),
    ("hh-no-tags", lines(HH, {"chosen": "Human: a", "rejected": "b"}), r"2: .*does not start with", "bad_turns", 1),
    ("not-an-object", lines(HH, "[1, 2]"), r"2: expected a JSON object, got list", "not_an_object", 1),
    ("not-utf8", None, r"2: not valid UTF-8", "not_utf8", 1),
    # The same rules on the generic formats...
    ("prompt-number", lines(PROMPT, PROMPT | {"prompt": 5}), r"2: field 'prompt' must be a string", "not_a_string", 1),
    (
        "prompt-non-string",
        lines(PROMPT, PROMPT | {"prompt": ["Q"]}),
        r"2: field 'prompt\[0\]' must be an object",
        "bad_message",
        1,
    ),
    ("prompt-identical", lines(PROMPT, PROMPT | {"rejected": " yes"}), r"2: .*identical", "identical", 1),
    (
        "chat-no-content",
        lines(CHAT, CHAT | {"chosen": [{"role": "user"}]}),
        r"2: field 'chosen\[0\]\.content' must be a string",
        "not_a_string",
        1,
    ),
    (
        "chat-bad-role",
        lines(CHAT, CHAT | {"chosen": [{"role": "bot", "content": "x"}]}),
        r"2: field 'chosen\[0\]\.role' is 'bot'",
        "bad_message",
        1,
    ),
    (
        "chat-empty",
        lines(CHAT, CHAT | {"rejected": [CHAT["chosen"][0], {"role": "assistant", "content": ""}]}),
        r"2: field 'rejected' has an empty response",
        "empty_response",
        1,
    ),
    ("chat-identical", lines(CHAT, CHAT | {"rejected": CHAT["chosen"]}), r"2: .*identical", "identical", 1),
    # ...and on the Japanese Argilla export.
    (
        "unknown-source",
        lines(argilla(), argilla("helpful-offline")),
        r"2: field 'metadata\.source' is 'helpful-offline'",
        "unknown_source",
        1,
    ),
    (
        "metadata-not-json",
        lines(argilla(), argilla(metadata="{source: x")),
        r"2: field 'metadata' is not valid JSON",
        "bad_metadata",
        1,
    ),
    (
        "metadata-missing",
        lines(argilla(), argilla(metadata=None)),
        r"2: field 'metadata' is missing",
        "missing_field",
        1,
    ),
    (
        "rating-out-of-range",
        lines(argilla(), argilla(chosen_rating=[{"value": 7, "status": "submitted"}])),
        r"2: field 'chosen_rating' has rating 7",
        "bad_rating",
        1,
    ),
    (
        "argilla-empty",
        lines(argilla(), argilla(rejected="user: こんにちは\nassistant: \n")),
        r"2: field 'rejected' has an empty response",
        "empty_response",
        1,
    ),
    ("argilla-identical", lines(argilla(), argilla(rejected=argilla()["chosen"])), r"2: .*identical", "identical", 1),
    (
        "argilla-no-turns",
        lines(argilla(), argilla(chosen="こんにちは")),
        r"2: field 'chosen' does not start with 'user: '",
        "bad_turns",
        1,
    ),
    (
        "argilla-non-string",
        lines(argilla(), argilla(rejected=None)),
        r"2: field 'rejected' is missing",
        "missing_field",
        1,
    ),
]


def write_case(tmp_path, text):
    path = tmp_path / "prefs.jsonl"
    if text is None:  # line 2 is Latin-1, not UTF-8
        path.write_bytes(lines(HH).encode() + b'{"chosen": "caf\xe9"}\n')
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


@pytest.mark.parametrize("case", SKIPPED, ids=[c[0] for c in SKIPPED])
def test_error_mode_names_file_line_and_field(tmp_path, case):
    _, text, message, _, _ = case
    with pytest.raises(DataError, match=r"prefs\.jsonl:" + message):
        load_pairs(str(write_case(tmp_path, text)), "train", [])


@pytest.mark.parametrize("case", SKIPPED, ids=[c[0] for c in SKIPPED])
def test_skip_mode_keeps_the_rest_and_counts_the_reason(tmp_path, case):
    _, text, _, reason, kept = case
    report = DataReport("skip")
    pairs = load_pairs(str(write_case(tmp_path, text)), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert len(pairs) == kept
    assert report.skipped_counts() == {reason: 1}
    (bad,) = report.skipped
    assert bad.origin.endswith("prefs.jsonl:2") and bad.reason == reason


# Lossless problems: error mode stops; skip mode repairs, keeps every record and counts the repair.
REPAIRED = [
    ("bom", "\ufeff" + lines(HH, PROMPT), r"1: the file starts with a UTF-8 byte-order mark", {"bom": 1}),
    ("crlf-lines", lines(HH, PROMPT, sep="\r\n"), r"1: the line ends in CRLF", {"crlf": 2}),
    (
        "crlf-in-hh-text",
        lines(PROMPT, {k: v.replace("\n", "\r\n") for k, v in HH.items()}),
        r"2: field 'chosen' has CRLF",
        {"crlf": 2},
    ),
    (
        "crlf-in-argilla-text",
        lines(PROMPT, argilla(chosen="user: こんにちは\r\nassistant: やあ\r\n")),
        r"2: field 'chosen' has CRLF",
        {"crlf": 1},
    ),
]


@pytest.mark.parametrize("case", REPAIRED, ids=[c[0] for c in REPAIRED])
def test_bom_and_crlf_stop_or_are_repaired_and_counted(tmp_path, case):
    _, text, message, counts = case
    path = write_case(tmp_path, text)
    with pytest.raises(DataError, match=r"prefs\.jsonl:" + message):
        load_pairs(str(path), "train", [])
    report = DataReport("skip")
    pairs = load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert report.repaired_counts() == counts and report.skipped == []
    assert len(pairs) == 2 and not any("\r" in p.prompt + p.chosen + p.rejected for p in pairs)
    assert {p.prompt for p in pairs} >= {"Q?"}


def test_a_truncated_gzip_keeps_what_was_readable_and_reports_where_it_stopped(tmp_path):
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "zeta"]
    records = []
    for i in range(400):
        answer = " ".join(rng.choice(words) for _ in range(30))
        records.append({"prompt": f"Q{i}?", "chosen": " " + answer, "rejected": f" no {i}"})
    data = gzip.compress(lines(*records).encode())
    path = tmp_path / "s" / "train.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"train\.jsonl\.gz:\d+: cannot read the file from here on \(EOFError"):
        load_pairs(str(path), "train", [])
    report = DataReport("skip")
    pairs = load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert 0 < len(pairs) < 400
    assert [p.prompt for p in pairs] == [f"Q{i}?" for i in range(len(pairs))]  # every readable line, in order
    assert report.skipped_counts() == {"corrupt_file": 1}
    assert report.skipped[0].origin == f"{path}:{len(pairs) + 1}"


def test_bad_csv_and_parquet_files_are_reported_too(tmp_path):
    csv_path = tmp_path / "p.csv"
    csv_path.write_text('prompt,chosen,rejected\nQ?,yes,no\nQ2?,yes,no,extra\n"Q3?",,no\n')
    with pytest.raises(DataError, match=r"p\.csv:3: more values than the 3 columns"):
        load_pairs(str(csv_path), "train", [])
    report = DataReport("skip")
    assert len(load_pairs(str(csv_path), "train", [], DataConfig(on_bad_record="skip"), report=report)) == 1
    assert report.skipped_counts() == {"empty_response": 1, "malformed_csv": 1}
    assert [b.origin.rsplit(":", 1)[1] for b in report.skipped] == ["3", "4"]
    parquet = tmp_path / "p.parquet"
    parquet.write_bytes(b"PAR1 this is not a parquet file PAR1")
    with pytest.raises(DataError, match=r"p\.parquet: cannot read the file"):
        load_pairs(str(parquet), "train", [])


def test_a_source_with_nothing_usable_is_an_error_even_in_skip_mode(tmp_path):
    path = write_case(tmp_path, lines('{"chosen": ', HH | {"rejected": HH["chosen"]}))
    with pytest.raises(DataError, match=r"no usable train pairs \(skipped: \{'identical': 1, 'malformed_json': 1\}\)"):
        load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"))


def test_malformed_json_names_the_column_where_decoding_stopped(tmp_path):
    """JSON lines and a JSON array alike: line and column of the fault (here the missing comma at 16)."""
    bad = '{"chosen": "x" "rejected": "y"}'
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(lines(HH, bad, '{"chosen": "a\tb"}'))
    array = tmp_path / "b.json"
    array.write_text("[\n" + json.dumps(HH) + ",\n" + bad + "\n]\n")
    with pytest.raises(DataError, match=r"a\.jsonl:2: malformed JSON at column 16 \(Expecting ',' delimiter\) "):
        load_pairs(str(jsonl), "train", [])
    with pytest.raises(DataError, match=r"b\.json:3: malformed JSON at column 16 \(Expecting ',' delimiter\);"):
        load_pairs(str(array), "train", [])
    report = DataReport("skip")
    load_pairs(str(jsonl), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert report.skipped[1].message == "malformed JSON at column 14 (Invalid control character)"  # not "at at"


# Finite JSON that is infinite as float32: a margin of 1e39 once skipped 7 of 40 steps naming no record.
GROUP = {"prompt": "Q?", "responses": [{"text": " a", "score": 1}, {"text": " b", "score": 2}]}
OUT_OF_RANGE = [
    ("margin", lines(PROMPT, PROMPT | {"margin": 1e39}), r"2: field 'margin' is 1e\+39, beyond ±1e\+30: a pair's"),
    ("margin-text", lines(PROMPT, PROMPT | {"margin": "-1e39"}), r"2: field 'margin' is -1e\+39"),
    ("pair-score", lines(PROMPT, PROMPT | {"chosen_score": 1e39, "rejected_score": 0}), r"2: field 'chosen_score'"),
    (
        "group-score",  # each finite as float32, their difference (the margin) not: half the margin bound each
        lines(GROUP, GROUP | {"responses": [{"text": " a", "score": 3e38}, {"text": " b", "score": -3e38}]}),
        r"2: field 'responses\[0\]\.score' is 3e\+38, beyond ±5e\+29: two scores' difference is a margin",
    ),
]


@pytest.mark.parametrize("case", OUT_OF_RANGE, ids=[c[0] for c in OUT_OF_RANGE])
def test_a_number_beyond_float32_is_a_bad_record_naming_file_line_and_field(tmp_path, case):
    _, text, message = case
    path = write_case(tmp_path, text)
    with pytest.raises(DataError, match=r"prefs\.jsonl:" + message):
        load_pairs(str(path), "train", [])
    report = DataReport("skip")
    kept = load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert len(kept) == 1 and report.skipped_counts() == {"out_of_range": 1}
    assert report.skipped[0].origin.endswith("prefs.jsonl:2")


def test_a_row_score_beyond_float32_is_a_bad_row():
    ctx = ParseContext(DataReport(), Renderer())
    with pytest.raises(RecordError, match="field 'helpfulness' is 1e\\+39") as bad:
        parse_record("rows", {"prompt": "Q", "response": "a", "helpfulness": 1e39}, "f:1", ctx)
    assert bad.value.reason == "out_of_range" and bad.value.field == "helpfulness"
