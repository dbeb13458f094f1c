"""Scoring: streamed in windows, in input order, and equal to plain transformers on each whole text."""

import functools
import gzip
import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rm.cli import main as cli_main
from rm.collate.scoring import PaddedLayout, scored
from rm.errors import DataError, ModelError
from rm.evaluation.score_file import score_file
from rm.model.pretrained import load_reward_model

CONVO = "\n\nHuman: What is 2 plus {a}?\n\nAssistant: It is {b}."
RECORDS = [
    {"transcript": CONVO.format(a=1, b=3) + "\n\nHuman: Sure?\n\nAssistant: Yes, quite sure.", "rating": 2},
    {"text": CONVO.format(a=5, b=7)},
    {"prompt": "\n\nHuman: Say hi.\n\nAssistant:", "response": " Hi there!"},
    {"chosen": CONVO.format(a=2, b=4), "rejected": CONVO.format(a=2, b=5), "id": "pair"},
    {"transcript": "no tags at all, just a text"},
] + [{"transcript": CONVO.format(a=i, b=i + 2)} for i in range(7)]


@functools.cache
def plain(export):
    return AutoTokenizer.from_pretrained(export), AutoModelForSequenceClassification.from_pretrained(export).eval()


def plain_reward(export, text: str) -> float:
    """The reference: plain transformers on one unpadded text (its own pooling at the last token)."""
    tok, model = plain(export)
    with torch.no_grad():
        return model(**tok(text, return_tensors="pt")).logits[0, 0].item()


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_scores_match_plain_transformers_in_input_order(exported_tiny, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS)
    model, tok = load_reward_model(str(exported_tiny))
    # window 3 and batch 2: four windows, the last one short, batches re-sorted by length inside each.
    counts = score_file(model, tok, src, tmp_path / "out.jsonl.gz", batch_size=2, window=3, progress=False)
    assert counts == {"records": len(RECORDS), "texts": len(RECORDS) + 1, "records_truncated": 0}

    out = [json.loads(line) for line in gzip.open(tmp_path / "out.jsonl.gz", "rt")]
    assert len(out) == len(RECORDS)
    for rec, got in zip(RECORDS, out, strict=True):
        assert {k: got[k] for k in rec} == rec  # every input field kept, in order
        if "chosen" in rec:
            assert got["chosen_reward"] == pytest.approx(plain_reward(exported_tiny, rec["chosen"]), abs=1e-5)
            assert got["rejected_reward"] == pytest.approx(plain_reward(exported_tiny, rec["rejected"]), abs=1e-5)
        else:
            text = rec.get("transcript") or rec.get("text") or rec["prompt"] + rec["response"]
            assert got["reward"] == pytest.approx(plain_reward(exported_tiny, text), abs=1e-5)


def test_a_file_holding_one_json_array_is_read_too(exported_tiny, tmp_path):
    """Same records as a JSON array in a .jsonl.gz file: the same rewards as from JSON lines."""
    with gzip.open(tmp_path / "arr.jsonl.gz", "wt") as f:
        json.dump(RECORDS[:4], f, indent=1)
    model, tok = load_reward_model(str(exported_tiny))
    score_file(model, tok, tmp_path / "arr.jsonl.gz", tmp_path / "a.jsonl", progress=False)
    score_file(model, tok, write_jsonl(tmp_path / "l.jsonl", RECORDS[:4]), tmp_path / "l_out.jsonl", progress=False)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "l_out.jsonl").read_text()
    (tmp_path / "bad.json").write_text('[{"text": "a"},\n {"text": }]')
    with pytest.raises(DataError, match=r"bad\.json:2: malformed JSON"):
        score_file(model, tok, tmp_path / "bad.json", tmp_path / "b.jsonl", progress=False)


def test_too_long_texts_lose_leading_turns_and_a_too_long_response_keeps_its_end(exported_tiny, tmp_path):
    """rm's one rule (rm/tokens/truncation.py), as training fits a pair: six copies of a 19-token turn in 20 tokens lose
    their five leading turns. In a pair whose rejected response alone is longer than 20 tokens (a pair training
    would drop), that response keeps its newest 20 tokens, where the reward is read, and the chosen one, fitted
    on its own, keeps its whole prompt. Records that lost anything are flagged."""
    turn = CONVO.format(a=1, b=3)
    prompt, long_response = "\n\nHuman: Sure?\n\nAssistant:", " It is" + " very" * 40 + " sure."
    records = [
        {"text": turn * 6},
        {"text": "\n\nHuman: hi\n\nAssistant: hello"},
        {"prompt": prompt, "chosen": " Yes.", "rejected": long_response},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    model, tok = load_reward_model(str(exported_tiny))
    counts = score_file(model, tok, src, tmp_path / "out.jsonl", max_length=20, progress=False)
    assert counts["records_truncated"] == 2
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r.get("truncated") for r in out] == [True, None, True]
    assert out[0]["reward"] == pytest.approx(plain_reward(exported_tiny, turn), abs=1e-5)  # the last turn alone
    assert out[2]["chosen_reward"] == pytest.approx(plain_reward(exported_tiny, prompt + " Yes."), abs=1e-5)
    ids = tok(long_response)["input_ids"][-20:]  # the reference: the newest 20 tokens, scored by plain transformers
    _, hf = plain(exported_tiny)
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor([ids])).logits[0, 0].item()
    assert out[2]["rejected_reward"] == pytest.approx(expected, abs=1e-5)


def test_padded_layout_tensors_and_a_swapped_layout_is_used(exported_tiny, tmp_path):
    batch = PaddedLayout(0).collate([scored([5, 6], [[8]]), scored([7], [[9, 10, 11]])])
    assert batch["input_ids"].tolist() == [[5, 6, 8, 0], [7, 9, 10, 11]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]

    class Shifted(PaddedLayout):
        """A stand-in for another layout: score_file must take its rewards, not its own."""

        def rewards(self, model, batch):
            return super().rewards(model, batch) + 100.0

    model, tok = load_reward_model(str(exported_tiny))
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS[:3])
    score_file(model, tok, src, tmp_path / "a.jsonl", progress=False)
    score_file(model, tok, src, tmp_path / "b.jsonl", layout=Shifted(tok.pad_token_id), progress=False)
    a = [json.loads(line)["reward"] for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    b = [json.loads(line)["reward"] for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert b == pytest.approx([x + 100.0 for x in a])


def test_records_are_written_before_later_ones_are_read_and_a_stopped_job_leaves_no_file(
    exported_tiny, tmp_path, monkeypatch
):
    """Streaming: with a window of 2, the four records before a broken line 5 are already scored when line 5
    is read (nothing reads the whole file first). The job then stops, and neither the output nor its
    `.partial` is left behind (a 0-byte or half-written `.partial` used to stay)."""
    import rm.evaluation.score_file as module

    lines = [json.dumps(r) for r in RECORDS[:4]] + ['{"text": ', json.dumps(RECORDS[5])]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    events = []

    def reader(path, report):
        for i, item in enumerate(real_read(path, report)):
            events.append(f"read {i + 1}")
            yield item
        events.append("read to the end")

    def scorer(model, groups, *args):
        events.append(f"scored {sum(len(g.response_ids) for g in groups)}")
        return real_score(model, groups, *args)

    real_read, real_score = module.read_file, module.score_outputs
    monkeypatch.setattr(module, "read_file", reader)
    monkeypatch.setattr(module, "score_outputs", scorer)
    model, tok = load_reward_model(str(exported_tiny))
    with pytest.raises(DataError, match=r"in\.jsonl:5: malformed JSON"):
        score_file(model, tok, tmp_path / "in.jsonl", tmp_path / "out.jsonl", window=2, progress=False)
    assert events == ["read 1", "read 2", "scored 2", "read 3", "read 4", "scored 3"]  # record 4 is a pair
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out.jsonl.partial").exists()


def test_the_output_is_never_the_input_nor_an_existing_file_unless_asked(exported_tiny, tmp_path, capsys):
    """`--out` equal to `--input` silently replaced the input with its scores; an existing output was overwritten
    without a word."""
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS[1:3])
    before = src.read_text()
    args = ["score", "--model", str(exported_tiny), "--input", str(src), "--out"]
    assert cli_main([*args, str(tmp_path / "." / "in.jsonl")]) == 2
    assert "is the input file" in capsys.readouterr().err and src.read_text() == before
    (tmp_path / "out.jsonl").write_text("mine\n")
    assert cli_main([*args, str(tmp_path / "out.jsonl")]) == 2
    assert "out.jsonl exists; pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "out.jsonl").read_text() == "mine\n"
    assert cli_main([*args, str(tmp_path / "out.jsonl"), "--overwrite", "--num-threads", "1"]) == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2 and torch.get_num_threads() == 1


def test_a_prompt_with_an_empty_response_is_refused_as_training_refuses_it(exported_tiny, tmp_path):
    model, tok = load_reward_model(str(exported_tiny))
    prompt = "\n\nHuman: Say hi.\n\nAssistant:"
    bad = [
        {"prompt": prompt, "response": " "},
        {"prompt": prompt, "chosen": " Hi.", "rejected": ""},
        {"text": prompt},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", [RECORDS[1], *bad])
    counts = score_file(model, tok, src, tmp_path / "out.jsonl", progress=False, on_bad_record="skip")
    assert counts["skipped"] == {"empty_response": 3} and counts["records"] == 1


def test_the_progress_bar_counts_skipped_records_too(exported_tiny, tmp_path, monkeypatch):
    """A record the reader leaves out (bad JSON) is a record done: the bar stopped at 2/3 before."""
    import rm.evaluation.score_file as module

    bars = []

    class Bar:
        def __init__(self, total, **kw):
            self.total, self.n = total, 0
            bars.append(self)

        def update(self, n):
            self.n += n

        def close(self):
            pass

    monkeypatch.setattr(module, "tqdm", Bar)
    (tmp_path / "in.jsonl").write_text(json.dumps(RECORDS[1]) + '\n{"text": \n' + json.dumps(RECORDS[2]) + "\n")
    model, tok = load_reward_model(str(exported_tiny))
    score_file(model, tok, tmp_path / "in.jsonl", tmp_path / "out.jsonl", on_bad_record="skip", window=1)
    assert (bars[0].n, bars[0].total) == (3, 3)


def test_bad_records_name_file_line_and_field(exported_tiny, tmp_path):
    model, tok = load_reward_model(str(exported_tiny))
    cases = [
        ('{"text": "ok"}\n{"text": 3}\n', r"in\.jsonl:2: field 'text' must be a string"),
        ('{"text": "ok"}\n\n{"foo": "x"}\n', r"in\.jsonl:3: no text to score"),
        ('{"text": "ok"}\n{"text": \n', r"in\.jsonl:2: malformed JSON"),
    ]
    for text, pattern in cases:
        (tmp_path / "in.jsonl").write_text(text)
        with pytest.raises(DataError, match=pattern):
            score_file(model, tok, tmp_path / "in.jsonl", tmp_path / "out.jsonl", progress=False)


def test_a_missing_model_is_refused(tmp_path):
    """(A classifier with two labels loads, output 0 as the reward: tests/evaluation/test_attribute_outputs.py.)"""
    with pytest.raises(ModelError, match="cannot load"):
        load_reward_model(str(tmp_path / "missing"))


def test_score_cli(exported_tiny, tmp_path, capsys):
    src = write_jsonl(tmp_path / "attempts.jsonl", RECORDS[:4])
    args = ["score", "--model", str(exported_tiny), "--input"]
    assert cli_main(args + [str(src)]) == 0
    assert "scored 5 texts in 4 records" in capsys.readouterr().out
    assert len((tmp_path / "attempts.scored.jsonl").read_text().splitlines()) == 4
    assert cli_main(args + [str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: cannot read" in capsys.readouterr().err
    new = tmp_path / "new" / "folder" / "scores.jsonl"  # --out into a folder not made yet: made, as rm eval's --out
    assert cli_main(args + [str(src), "--out", str(new)]) == 0 and len(new.read_text().splitlines()) == 4


def test_skip_mode_scores_the_rest_and_counts_what_it_left_out(exported_tiny, tmp_path, capsys):
    lines = [json.dumps(RECORDS[1]), '{"text": ', json.dumps({"text": 3}), json.dumps(RECORDS[2])]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    args = ["score", "--model", str(exported_tiny), "--input", str(tmp_path / "in.jsonl")]
    assert cli_main(args) == 2  # error mode: stops at line 2, naming it, and leaves no file under the output name
    assert "in.jsonl:2: malformed JSON" in capsys.readouterr().err
    assert not (tmp_path / "in.scored.jsonl").exists()
    assert cli_main([*args, "--on-bad-record", "skip"]) == 0
    out = capsys.readouterr().out
    assert "scored 2 texts in 2 records" in out and "skipped 2 bad records" in out
    assert "'malformed_json': 1" in out and "'not_a_string': 1" in out and "in.jsonl:2" in out
    scored = [json.loads(line) for line in (tmp_path / "in.scored.jsonl").read_text().splitlines()]
    assert [r["text"] if "text" in r else r["response"] for r in scored] == [RECORDS[1]["text"], " Hi there!"]
    assert not (tmp_path / "in.scored.jsonl.partial").exists()


def test_conversation_records_csv_and_non_utf8_input(exported_tiny, tmp_path, capsys):
    """Message-list pairs (as train and eval read them) score as their HH rendering (this tokenizer has no
    chat template); a CSV is read as a table; a line that is not UTF-8 is named by its line number."""
    model, tok = load_reward_model(str(exported_tiny))
    chosen = [{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant", "content": "It is 4."}]
    rejected = [chosen[0], {"role": "assistant", "content": "It is 5."}]
    src = write_jsonl(tmp_path / "conv.jsonl", [{"chosen": chosen, "rejected": rejected}])
    score_file(model, tok, src, tmp_path / "conv_out.jsonl", progress=False)
    got = json.loads((tmp_path / "conv_out.jsonl").read_text())
    hh = CONVO.format(a=2, b=4).replace("It is 4.", "It is {}.")
    assert got["chosen_reward"] == pytest.approx(plain_reward(exported_tiny, hh.format(4)), abs=1e-5)
    assert got["rejected_reward"] == pytest.approx(plain_reward(exported_tiny, hh.format(5)), abs=1e-5)

    (tmp_path / "t.csv").write_text('prompt,response\n"\n\nHuman: Say hi.\n\nAssistant:"," Hi there!"\n')
    assert cli_main(["score", "--model", str(exported_tiny), "--input", str(tmp_path / "t.csv")]) == 0
    row = json.loads((tmp_path / "t.scored.jsonl").read_text())
    assert row["reward"] == pytest.approx(plain_reward(exported_tiny, RECORDS[2]["prompt"] + " Hi there!"), abs=1e-5)

    (tmp_path / "latin.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    assert cli_main(["score", "--model", str(exported_tiny), "--input", str(tmp_path / "latin.jsonl")]) == 2
    assert "latin.jsonl:2: not valid UTF-8" in capsys.readouterr().err


def test_an_empty_text_without_bos_is_refused_not_given_a_neighbours_reward(exported_tiny, tmp_path):
    model, tok = load_reward_model(str(exported_tiny))
    assert tok("", add_special_tokens=True)["input_ids"] == []  # this tokenizer adds no BOS
    src = write_jsonl(tmp_path / "in.jsonl", [RECORDS[1], {"text": ""}, RECORDS[2]])
    with pytest.raises(DataError, match=r"in\.jsonl:2: the text to score is empty"):
        score_file(model, tok, src, tmp_path / "out.jsonl", progress=False)
    counts = score_file(model, tok, src, tmp_path / "out.jsonl", progress=False, on_bad_record="skip")
    assert counts["skipped"] == {"empty_text": 1} and counts["records"] == 2


# K-response records: one reward per response, in the record's order, the prompt computed once.
SAY_HI = "\n\nHuman: Say hi.\n\nAssistant:"
GROUPS = [
    {"prompt": "Say hi.", "responses": [{"text": "Hi there!"}, {"text": "Hello."}, {"text": "Hi there!"}]},
    {
        "instruction": "What is 2 plus 2?",
        "completions": [
            {"response": "It is 4.", "overall_score": 8},
            {"response": "It is 5.", "overall_score": "N/A"},
            {"response": "Four.", "overall_score": 8},
        ],
    },
    {
        "prompt": "\n\nHuman: Name a colour.\n\nAssistant:",
        "answers": [
            {"answer": a, "rank": r, "model": m}
            for a, r, m in (("Red.", 2, "a"), ("Blue.", 1, "b"), ("Green.", 3, "c"))
        ],
    },
    {"prompt": "Pick a number.", "chosen": ["Seven."], "rejected": ["Three.", "Nine."], "subset": "math"},
]
GROUP_TEXTS = [  # each response's whole conversation, rendered by hand as HH text (this tokenizer has no template)
    [SAY_HI + " Hi there!", SAY_HI + " Hello.", SAY_HI + " Hi there!"],
    [f"\n\nHuman: What is 2 plus 2?\n\nAssistant: {a}" for a in ("It is 4.", "It is 5.", "Four.")],
    [f"\n\nHuman: Name a colour.\n\nAssistant: {a}" for a in ("Red.", "Blue.", "Green.")],
    [f"\n\nHuman: Pick a number.\n\nAssistant: {a}" for a in ("Seven.", "Three.", "Nine.")],
]


def test_group_records_get_one_reward_per_response_equal_to_each_text_alone_in_both_layouts(exported_tiny, tmp_path):
    """Every K-response format (generic responses with no score and a repeated response, UltraFeedback with an
    unrated completion, Nectar, RewardBench 2) scores all K responses in the record's order, each equal to plain
    transformers on that one conversation, packed with the prompt shared and padded with it repeated. Pairs
    and texts in the same file keep their fields and rewards."""
    from rm.collate.scoring import PackedScoring
    from rm.evaluation.score_file import default_layout

    records = [RECORDS[3], *GROUPS, RECORDS[1]]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    model, tok = load_reward_model(str(exported_tiny))
    assert isinstance(default_layout(model, tok.pad_token_id), PackedScoring)
    expected = [[plain_reward(exported_tiny, t) for t in texts] for texts in GROUP_TEXTS]
    outputs = []
    for name, layout in (("packed", None), ("padded", PaddedLayout(tok.pad_token_id))):
        counts = score_file(model, tok, src, tmp_path / f"{name}.jsonl", layout=layout, batch_size=4, progress=False)
        assert counts == {"records": 6, "texts": 2 + 12 + 1, "records_truncated": 0}
        out = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        for rec, got, want in zip(GROUPS, out[1:5], expected, strict=True):
            assert {k: got[k] for k in rec} == rec and "reward" not in got
            assert got["rewards"] == pytest.approx(want, abs=1e-5)
        assert out[0]["chosen_reward"] == pytest.approx(plain_reward(exported_tiny, RECORDS[3]["chosen"]), abs=1e-5)
        assert out[5]["reward"] == pytest.approx(plain_reward(exported_tiny, RECORDS[1]["text"]), abs=1e-5)
        assert out[1]["rewards"][0] == out[1]["rewards"][2]  # the repeated response, read once
        outputs.append(out)
    assert [sorted(r) for r in outputs[0]] == [sorted(r) for r in outputs[1]]


def test_a_group_is_one_segment_in_one_batch_and_long_groups_fit_by_the_one_rule(exported_tiny, tmp_path):
    """The packed batch holds the group's prompt once (the prompt segment's tokens are its tokens); batches
    are never cut inside a group's run of responses that fits one (pairs' and texts' batches stay as they
    were). A group whose prompt is too long loses its leading turns as a pair's does (rm/tokens/truncation.py):
    each reward equals the last turn and that response scored alone, and the record says it was truncated."""
    from rm.collate.scoring import PackedScoring, batches, scored

    seen = []

    class Spy(PackedScoring):
        def collate(self, groups):
            batch = super().collate(groups)
            seen.append((groups, batch))
            return batch

    turn, last = CONVO.format(a=1, b=3), "\n\nHuman: Sure?\n\nAssistant:"
    answers = [" Yes.", " No, not at all.", " Maybe."]
    nectar = {"prompt": turn * 3 + last, "answers": [{"answer": a, "rank": k + 1} for k, a in enumerate(answers)]}
    model, tok = load_reward_model(str(exported_tiny))
    n = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    max_length = n(last) + max(n(a) for a in answers)  # room for the last turn only
    assert n(turn + last) + max(n(a) for a in answers) > max_length
    short = {"prompt": "Hi", "responses": [{"text": t, "score": k} for k, t in enumerate(("Yo.", "Hey.", "Oi."))]}
    src = write_jsonl(tmp_path / "in.jsonl", [nectar, short])
    counts = score_file(
        model, tok, src, tmp_path / "out.jsonl", layout=Spy(tok.pad_token_id), max_length=max_length, progress=False
    )
    assert counts["records_truncated"] == 1
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert out[0]["truncated"] is True and "truncated" not in out[1]
    assert out[0]["rewards"] == pytest.approx([plain_reward(exported_tiny, last + a) for a in answers], abs=1e-5)

    [(groups, batch)] = seen  # both groups in one batch, each prompt once
    prompts = {tuple(g.prompt_ids) for g in groups}
    assert sum(len(g.response_ids) for g in groups) == 6 and len(groups) == len(prompts) == 2
    assert int((batch["segment_ids"] == 0).sum()) == sum(len(p) for p in prompts)

    # The batch rule itself: groups of prompts A A | B B B | C at 4 a batch, texts of one prompt merged into one
    # group; a group longer than a batch fills batches in turn, each batch's rows are the responses' flat indices.
    texts = [scored([p], [[9]]) for p in (1, 1, 2, 2, 2, 3)]
    assert [b.rows for b in batches(texts, 4)] == [[0, 1], [2, 3, 4, 5]]
    assert [b.rows for b in batches(texts, 2)] == [[0, 1], [2, 3], [4, 5]]
    assert [[len(g.response_ids) for g in b.groups] for b in batches(texts, 2)] == [[2], [2], [1, 1]]
    assert [b.rows for b in batches([scored([1], [[9]] * 5)], 2)] == [[0, 1], [2, 3], [4]]


def test_bad_group_records_name_file_line_and_field(exported_tiny, tmp_path):
    model, tok = load_reward_model(str(exported_tiny))
    cases = [
        ({"prompt": "x", "responses": [{"text": "a"}, {"text": 3}]}, r"in\.jsonl:2: field 'responses\[1\]\.text'"),
        ({"prompt": "x", "answers": [{"answer": "a", "rank": 1}]}, r"in\.jsonl:2: .*'prompt' must end on"),
        ({"instruction": "x", "completions": [{"response": "a"}, {"response": " "}]}, r"in\.jsonl:2: .*empty"),
    ]
    for record, pattern in cases:
        write_jsonl(tmp_path / "in.jsonl", [RECORDS[1], record])
        with pytest.raises(DataError, match=pattern):
            score_file(model, tok, tmp_path / "in.jsonl", tmp_path / "out.jsonl", progress=False)


@pytest.fixture
def stopped_run(tokenizer, tmp_path):
    """A run stopped at step 16 of 400 without an export: config (max_length 64), tokenizer, one checkpoint."""
    from conftest import stopped_run

    return stopped_run(tokenizer, tmp_path / "run", seed=3)


def test_a_run_directory_or_checkpoint_is_scored_as_its_export_is(stopped_run, tmp_path, caplog, capsys):
    """`rm score` loads what `rm serve` loads (rm/scoring/inference.py): a run without an export is its newest
    checkpoint rebuilt as `rm export` rebuilds it, with one warning that the run has not finished."""
    import logging

    src = write_jsonl(tmp_path / "in.jsonl", RECORDS[:4])
    step = stopped_run / "checkpoints" / "step-16"

    def rewards(model: str, name: str) -> list[float]:
        out = tmp_path / f"{name}.jsonl"
        assert cli_main(["score", "--model", model, "--input", str(src), "--out", str(out)]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        return [r.get("reward", r.get("chosen_reward")) for r in rows] + [r.get("rejected_reward", 0.0) for r in rows]

    with caplog.at_level(logging.WARNING, logger="rm"):
        from_run = rewards(str(stopped_run), "run")
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [f"scoring {step} (step 16 of 400: the run has not finished)"]
    assert rewards(str(step), "checkpoint") == from_run
    assert cli_main(["export", str(stopped_run), "--out", str(stopped_run / "export")]) == 0
    from_export = rewards(str(stopped_run / "export"), "export")
    assert from_run == pytest.approx(from_export, abs=1e-6)
    assert rewards(str(stopped_run), "run-with-export") == from_export  # the run directory now loads its export/


def test_a_diverged_checkpoint_is_refused_in_one_line_by_score_and_redteam(stopped_run, tmp_path, capsys):
    from rm.config.rundir import STATE
    from rm.training.checkpoint_folder import seal

    step = stopped_run / "checkpoints" / "step-16"
    (step / STATE).write_text(json.dumps({"step": 16, "max_steps": 400, "diverged": "48 of 48 outputs are not finite"}))
    (step / "complete.json").unlink()
    seal(step, 16)
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS[:2])
    why = f"{step}: the run diverged at step 16: 48 of 48 outputs are not finite"
    assert cli_main(["score", "--model", str(stopped_run), "--input", str(src)]) == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "in.scored.jsonl").exists()
    redteam = ["redteam", "--model", str(stopped_run), "--input", str(src), "--out", str(tmp_path / "rt")]
    assert cli_main(redteam) == 2
    assert why in capsys.readouterr().err
