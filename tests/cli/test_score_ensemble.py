"""`rm score --model A B C` writes each reward field as the chosen combination of each member's `rm score` (1e-5), the
mean, numpy's std, mean - k std and each member's reward beside it; a stepwise record, members that read texts
differently, and `rm serve` given no model or one member are refused in one line."""

import json

import numpy as np
import pytest
from scoring.ensemble_members import export

from rm.cli import build_parser, parse
from rm.cli import main as cli
from rm.cli.serve import ServeFlags, overrides_apart
from rm.config.flags import settle

TOL = 1e-5
RECORDS = [
    {"text": "\n\nHuman: How do I bake bread?\n\nAssistant: Mix flour, water and yeast, then bake it."},
    {"prompt": "\n\nHuman: Name a colour.\n\nAssistant:", "chosen": " Blue.", "rejected": " Seven."},
    {"prompt": "\n\nHuman: Hi!\n\nAssistant:", "responses": [{"text": " Hello."}, {"text": " Go."}, {"text": " Hi"}]},
]
FIELDS = {0: ["reward"], 1: ["chosen_reward", "rejected_reward"], 2: ["rewards"]}


@pytest.fixture(scope="module")
def members(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("score_ensemble")
    return [str(export(tokenizer, root / f"m{i}", seed=i + 1)) for i in range(3)]


def scored(tmp_path, *args: str) -> list[dict]:
    src, out = tmp_path / "in.jsonl", tmp_path / f"out-{len(list(tmp_path.iterdir()))}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    assert cli(["score", "--input", str(src), "--out", str(out), *args]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_each_reward_field_is_the_members_combined(members, tmp_path, capsys):
    each = [scored(tmp_path, "--model", m) for m in members]
    got = scored(tmp_path, "--model", *members, "--ensemble-reward", "conservative", "uncertainty_k=0.5")
    assert "with an ensemble of 3 (reward: conservative)" in capsys.readouterr().out
    for i, fields in FIELDS.items():
        for key in fields:
            ref = np.array([e[i][key] for e in each], dtype=np.float64)  # [M] or [M, K]
            record = got[i]
            mean, std = ref.mean(axis=0), np.std(ref, axis=0, ddof=0)
            np.testing.assert_allclose(record[f"{key}_mean"], mean, atol=TOL, rtol=0)
            np.testing.assert_allclose(record[f"{key}_std"], std, atol=TOL, rtol=0)
            np.testing.assert_allclose(record[f"{key}_conservative"], mean - 0.5 * std, atol=TOL, rtol=0)
            np.testing.assert_allclose(record[key], mean - 0.5 * std, atol=TOL, rtol=0)  # the chosen one
            np.testing.assert_allclose(np.moveaxis(np.array(record[f"{key}_members"]), -1, 0), ref, atol=TOL, rtol=0)
    assert {k: v for k, v in got[1].items() if k in RECORDS[1]} == RECORDS[1]  # the record kept as it was read


def test_the_default_is_the_mean(members, tmp_path):
    each = [scored(tmp_path, "--model", m)[0]["reward"] for m in members]
    got = scored(tmp_path, "--model", *members)[0]
    assert abs(got["reward"] - np.mean(each)) < TOL and got["reward"] == got["reward_mean"]


def error_line(err: str) -> str:
    """The command's one `error:` line, which ends its stderr (after transformers' loading bar, drawn with \\r)."""
    assert err.endswith("\n") and err.count("error:") == 1, err
    return err.rstrip("\n").split("\n")[-1].split("\r")[-1]


def test_what_an_ensemble_cannot_score_is_refused_in_one_line(members, tokenizer, tmp_path, capsys):
    steps = tmp_path / "steps.jsonl"
    steps.write_text(json.dumps({"prompt": "1 + 1?", "solutions": [["1 + 1 = 2"]]}) + "\n")
    assert cli(["score", "--model", *members[:2], "--input", str(steps), "--out", str(tmp_path / "o.jsonl")]) == 2
    err = error_line(capsys.readouterr().err)
    assert err.startswith(f"error: {steps}:1: a stepwise record asks for step scores, which an ensemble does not")

    short = str(export(tokenizer, tmp_path / "short", seed=4, max_length=32))
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(RECORDS[0]) + "\n")
    assert cli(["score", "--model", members[0], short, "--input", str(src), "--out", str(tmp_path / "x.jsonl")]) == 2
    err = error_line(capsys.readouterr().err)
    assert err == (f"error: ensemble: {members[0]} and {short} differ in their max_length (64 against 32); give them "
                   "one --max-length")  # fmt: skip
    assert cli(["serve", "--ensemble", members[0], short, "--port", "0"]) == 2  # refused before it listens
    assert capsys.readouterr().err.endswith("give them one --max-length\n")


def test_serve_takes_its_members_in_either_form(capsys):
    def flags(*argv: str):
        return settle(overrides_apart(parse(build_parser(), ["serve", *argv])), ServeFlags)

    cfg = flags("--ensemble", "a", "b", "c", "port=0", "--uncertainty-k", "2")
    assert (cfg.members, cfg.port, cfg.uncertainty_k, cfg.model) == (("a", "b", "c"), 0, 2.0, "")
    assert flags("a", "--ensemble", "b", "c").members == ("a", "b", "c")
    assert flags("port=0", "--ensemble", "b", "c").members == ("b", "c")  # an override where MODEL would be
    assert flags("a").members == () and flags("a").name == "a"
    assert flags("--ensemble", "a", "b").name == "ensemble of 2 (a, b)"
    assert cli(["serve"]) == 2
    assert capsys.readouterr().err == (
        "error: give the MODEL to serve, or the members of an ensemble as --ensemble A B C\n"
    )
    assert cli(["serve", "--ensemble", "a"]) == 2
    assert capsys.readouterr().err == "error: --ensemble needs two or more models, got 1: serve one as MODEL\n"
    assert cli(["serve", "a", "--ensemble", "b", "--uncertainty-k", "-1"]) == 2
    assert "--uncertainty-k must be a finite number >= 0, got -1.0" in capsys.readouterr().err


def test_score_takes_several_models_and_overrides_after_them():
    args = parse(build_parser(), ["score", "--model", "a", "b", "--input", "x.jsonl"])
    assert args.model == ["a", "b"]
    assert parse(build_parser(), ["score", "--model", "a", "--input", "x.jsonl"]).model == "a"  # one: as before
