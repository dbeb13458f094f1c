"""The length controls in every report: on data where the longer answer always wins (and its reverse, where the
shorter one does), always picking the longer (longest) answer reads exactly 1.0 and the other pick 0.0, in eval.json,
report.md, report.html and `rm eval`'s console line, whatever the model's rewards; |Pearson| of reward with length
agrees with numpy's; best-of-K by length follows rm's best-of-K rule."""

import html
import json
import re

import numpy as np
import pytest

from rm.cli import main as cli_main
from rm.data.formats.group import Group
from rm.data.formats.pair import Pair
from rm.evaluation.eval_result import build_result
from rm.evaluation.metrics import length_bias
from rm.evaluation.ranking_metrics import length_columns
from rm.evaluation.report.markdown import format_table, render_markdown


def texts(k: int, i: int) -> tuple[str, ...]:
    """K responses, the best-ranked first, each strictly longer than the next (whole words added)."""
    return tuple(f"answer {i}" + " and more" * (k - j) for j in range(k))


def longer_wins(reverse: bool = False, seed: int = 0) -> tuple[list, list[np.ndarray]]:
    """Pairs and K = 4 groups whose better response is always the longer one (`reverse`: always the shorter), with
    random rewards: the controls must not depend on them."""
    rng = np.random.default_rng(seed)
    items = []
    for i in range(10):
        long, short = texts(2, i)
        items.append(Pair(f"q{i}", *((short, long) if reverse else (long, short)), "pairs", origin=f"p:{i}"))
    for i in range(6):
        order = texts(4, i)
        items.append(Group(f"g{i}", order[::-1] if reverse else order, (0, 1, 2, 3), "groups", origin=f"g:{i}"))
    return items, [rng.standard_normal(len(getattr(p, "responses", "ab"))) for p in items]


def with_eval(result: dict) -> dict:
    result["eval"] = {
        "model": "m", "data": "`d`", "pairs_loaded": 16, "records_skipped": {}, "pairs_dropped_too_long": 0,
        "prompts_truncated": 0, "max_length": 64, "length_unit": "characters of the response",
        "bootstrap": {"method": "percentile", "samples": 30, "seed": 0},
    }  # fmt: skip
    return result


def md_row(report: str, header: str, row: str) -> dict[str, str]:
    """The cells of `row` in the report.md table whose header holds `header`, by column name."""
    lines = report.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("|") and header in line)
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    for line in lines[start + 2 :]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == row:
            return dict(zip(head, cells, strict=True))
    raise AssertionError(f"no row {row} under {header}")


@pytest.mark.parametrize("reverse", [False, True])
def test_the_length_only_picks_read_one_and_zero_in_eval_json_report_md_and_the_console(reverse):
    items, rewards = longer_wins(reverse)
    result = with_eval(build_result(items, rewards, samples=30, seed=0))
    win, lose = (0.0, 1.0) if reverse else (1.0, 0.0)
    for m in (result["overall"], *result["subsets"].values()):
        assert m["longer_chosen_rate"] == win and m["length_rule_accuracy"] == 1.0
        assert m["longest_best_of_k"] == win and m["shortest_best_of_k"] == lose
    assert result["overall"]["length_rule"] == ("shorter wins" if reverse else "longer wins")

    row = md_row(render_markdown(result), "longest pick 95% CI", "overall")
    assert row["longer wins"] == f"{win:.3f}" and row["longest pick"] == f"{win:.3f}"
    assert row["shortest pick"] == f"{lose:.3f}" and row["groups"] == "16"
    assert row["abs. Pearson r"] == f"{result['overall']['reward_length_abs_pearson']:.3f}"

    line = format_table(result).splitlines()[-1]
    rule = "shorter wins" if reverse else "longer wins"
    assert line.startswith(f"length (chars): longer wins {win:.3f} of pairs ({rule} 1.000); model prefers longer ")
    assert line.endswith(f"against longest pick {win:.3f}, shortest pick {lose:.3f}")


def test_abs_pearson_of_reward_with_length_matches_numpy():
    rng = np.random.default_rng(3)
    lc, lr = rng.integers(5, 400, 50).astype(float), rng.integers(5, 400, 50).astype(float)
    chosen, rejected = 0.01 * lc + rng.standard_normal(50), -0.02 * lr + rng.standard_normal(50)
    got = length_bias(chosen, rejected, lc, lr)
    r = np.corrcoef(np.r_[lc, lr], np.r_[chosen, rejected])[0, 1]
    assert got["reward_length_pearson"] == pytest.approx(r, abs=1e-12)
    assert got["reward_length_abs_pearson"] == pytest.approx(abs(r), abs=1e-12)
    exact = length_bias(-3 * lc + 1, -3 * lr + 1, lc, lr)  # a reward that is a linear function of length
    assert exact["reward_length_pearson"] == pytest.approx(-1.0) and exact["reward_length_abs_pearson"] == 1.0


def test_best_of_k_by_length_follows_rms_best_of_k_rule():
    """A length tie between a best-ranked response and another is no pick (as a reward tie is no win); several
    best-ranked responses must all be longer than every other; a group without an order is left out."""
    lengths = [np.array(x, dtype=float) for x in ([5, 5, 3], [6, 5, 3], [2, 9, 4], [3, 3])]
    ranks = [np.array(x) for x in ([0, 1, 2], [0, 0, 1], [0, 1, 1], [0, 0])]
    picks = length_columns(lengths, ranks)
    assert picks["longest_best_of_k"][:3].tolist() == [0.0, 1.0, 0.0]
    assert picks["shortest_best_of_k"][:3].tolist() == [0.0, 0.0, 1.0]
    assert np.isnan(picks["longest_best_of_k"][3]) and np.isnan(picks["shortest_best_of_k"][3])


def write_groups_file(path, reverse: bool = False):
    """`longer_wins`' items in the generic `responses` layout, a score per response (higher is better)."""
    with open(path, "w") as f:
        for item in longer_wins(reverse)[0]:
            k = len(getattr(item, "responses", "ab"))
            responses = getattr(item, "responses", None) or (item.chosen, item.rejected)
            scored = [{"text": t, "score": float(k - j)} for j, t in enumerate(responses)]
            f.write(json.dumps({"prompt": item.prompt, "responses": scored, "subset": item.subset}) + "\n")
    return path


def html_row(page: str, table: str, row: str) -> dict[str, tuple[str, str]]:
    """(attributes, text) of each cell of `row` in report.html's table `table`, by column name."""
    body = re.search(rf'<table id="{table}".*?</table>', page, re.S).group(0)
    head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", body.split("</thead>")[0])]
    cells = re.search(rf'<tr data-row="{row}"[^>]*>(.*?)</tr>', body, re.S).group(1)
    found = [(a, html.unescape(t)) for a, t in re.findall(r"<td([^>]*)>(.*?)</td>", cells)]
    return dict(zip(head, found, strict=True))


def test_rm_eval_shows_the_controls_in_every_report_and_its_console_line(exported_tiny, tmp_path, capsys):
    data = write_groups_file(tmp_path / "longer.jsonl")
    out = tmp_path / "report"
    assert cli_main(["eval", "--model", str(exported_tiny), "--data", str(data), "--out", str(out),
                     "--bootstrap-samples", "30"]) == 0  # fmt: skip
    said = capsys.readouterr().out
    saved = json.loads((out / "eval.json").read_text())
    o = saved["overall"]
    assert (o["longer_chosen_rate"], o["longest_best_of_k"], o["shortest_best_of_k"]) == (1.0, 1.0, 0.0)
    assert o["groups"] == 16 and o["longest_best_of_k_ci95"] == [1.0, 1.0]
    line = next(x for x in said.splitlines() if x.startswith("length (chars): "))
    assert "longer wins 1.000 of pairs (longer wins 1.000)" in line
    assert f"|pearson(reward, chars)| {o['reward_length_abs_pearson']:.3f}" in line
    assert line.endswith(f"best-of-K {o['best_of_k_accuracy']:.3f} against longest pick 1.000, shortest pick 0.000")

    row = md_row((out / "report.md").read_text(), "longest pick 95% CI", "overall")
    assert (row["longer wins"], row["longest pick"], row["shortest pick"]) == ("1.000", "1.000", "0.000")
    page = html_row((out / "report.html").read_text(), "length-controls", "overall")
    attributes, text = page["longest pick"]
    assert text == "1.000" and 'data-n="16"' in attributes and 'data-ci95="[1.000, 1.000]"' in attributes
    assert page["shortest pick"][1] == "0.000" and page["longer wins"][1] == "1.000"
    assert page["abs. Pearson r"][1] == f"{o['reward_length_abs_pearson']:.3f}"
