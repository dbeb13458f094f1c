"""report.html as a researcher reads it, on RewardBench-sized results built here: 23 subsets of pairs in
RewardBench's four sections, and 23 subsets of best-of-4 groups (RewardBench 2's six, then 17 outside the score).

Every figure's texts are at least 10 px on the page and none covers another (read from matplotlib's renderer on the
very figures the report draws); every headline number carries its n, interval and chance level; no path of this
machine is in the page; and headless Chromium at 1280 px shows each figure at its own size."""

import itertools
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.text
import numpy as np
import pytest
from test_html_report import chromium_or_skip, start_chromium

from rm.evaluation.eval_report import write_report
from rm.evaluation.eval_result import build_result
from rm.evaluation.report.figure_kit import PAGE_WIDTH_PX
from rm.evaluation.report.page_figures import report_figures
from rm.suites import rewardbench, rewardbench2
from rm.suites.records import SuiteItem
from rm.suites.suite_intervals import suite_uncertainty

SUITES = {"rewardbench": rewardbench, "rewardbench2": rewardbench2}


def suite_items(root: Path, suite: str, seed: int = 0) -> tuple[list[SuiteItem], list[np.ndarray]]:
    """A few records per subset, written to `root`/data/<suite>.jsonl with their ids (the page names them so), and
    rewards that favour the chosen responses of some subsets."""
    rng = np.random.default_rng(seed)
    if suite == "rewardbench":
        names = sorted(s for counts in rewardbench.SECTIONS.values() for s in counts)  # the data's order: by name
    else:
        names = [*rewardbench2.SUBSETS, *(f"extra-{k:02d}" for k in range(17))]
    data = root / "data" / f"{suite}.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    items, rewards, lines = [], [], []
    for k, name in enumerate(names):
        shift = rng.uniform(-0.5, 1.5)
        for j in range(int(rng.integers(6, 14))):
            chosen, size, rid = 1, 2 if suite == "rewardbench" else 4, f"{name}-{j}"
            if name == rewardbench2.TIES:
                chosen, size, rid = (1, 4, f"ref:{j // 2}") if j % 2 else (2, 5, f"tied:{j // 2}")
            texts = tuple(f"answer {m} " * int(rng.integers(1, 150)) for m in range(size))
            lines.append(json.dumps({"id": rid, "subset": name, "chosen": texts[:chosen], "rejected": texts[chosen:]}))
            prompt = f"\n\nHuman: q{k}.{j}\n\nAssistant:"
            items.append(SuiteItem(prompt, texts, chosen, name, f"{data}:{len(lines)}", rid))
            rewards.append(rng.normal(size=size) + np.r_[np.full(chosen, shift), np.zeros(size - chosen)])
    data.write_text("\n".join(lines) + "\n")
    return items, rewards


def suite_result(root: Path, suite: str) -> tuple[dict, list, list[np.ndarray]]:
    """eval.json's dict as `rm eval --suite` makes it (suite block, its uncertainty, absolute paths in `eval`)."""
    items, rewards = suite_items(root, suite)
    examples = [i.example() for i in items]
    result = build_result(examples, rewards, samples=100, seed=0)
    block = SUITES[suite].suite_block(items, rewards) | {"texts_truncated": 0}
    block["uncertainty"] = suite_uncertainty(suite, items, rewards, samples=100, seed=0)
    result["suite"] = block
    result["eval"] = {
        "model": str(root / "runs" / "export"), "data": f"`{root / 'data'}` (split `test`), suite {suite}",
        "pairs_loaded": len(items), "records_skipped": {}, "pairs_dropped_too_long": 0, "prompts_truncated": 0,
        "max_length": 64, "length_unit": "characters", "bootstrap": {"method": "percentile", "samples": 100, "seed": 0},
    }  # fmt: skip
    return result, examples, rewards


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[Path, dict, list, list]]:
    """suite -> (its report folder, result, items, rewards): each report written once (the plots take seconds)."""
    out = {}
    for suite in SUITES:
        root = tmp_path_factory.mktemp(suite)
        result, examples, rewards = suite_result(root, suite)
        write_report(root / "eval", result, examples, rewards, seed=0)
        out[suite] = (root / "eval", result, examples, rewards)
    return out


def drawn_texts(fig) -> list:
    """The texts a draw of `fig` puts on the canvas (not the ticks matplotlib keeps out of view)."""
    seen, draw = [], matplotlib.text.Text.draw

    def recording(self, renderer):
        if self.get_visible() and self.get_text().strip():
            seen.append(self)
        return draw(self, renderer)

    matplotlib.text.Text.draw = recording
    try:
        fig.canvas.draw()
    finally:
        matplotlib.text.Text.draw = draw
    return seen


def test_figures_have_readable_texts_that_never_overlap(pages):
    _, result, examples, rewards = pages["rewardbench2"]  # groups: all five figures
    figures = report_figures(result, examples, rewards, seed=0)
    assert set(figures) == {"accuracy.png", "calibration.png", "reward_hist.png", "length_bias.png", "groups.png"}
    for name, fig in figures.items():
        texts, renderer = drawn_texts(fig), fig.canvas.get_renderer()
        shown = min(1.0, PAGE_WIDTH_PX / (fig.get_figwidth() * fig.dpi))  # the page shrinks a wider figure
        sizes = {t.get_text(): t.get_fontsize() * fig.dpi / 72 * shown for t in texts}
        assert len(texts) > 10 and min(sizes.values()) >= 10, (name, min(sizes.items(), key=lambda kv: kv[1]))
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
        overlaps = [
            (a, b)
            for (a, p), (b, q) in itertools.combinations(boxes, 2)
            if min(p.x1, q.x1) - max(p.x0, q.x0) > 0.5 and min(p.y1, q.y1) - max(p.y0, q.y0) > 0.5
        ]
        assert overlaps == [], name
    rows = [t.get_text() for t in figures["accuracy.png"].axes[0].get_yticklabels()]  # top to bottom
    first = [r.split(" (")[0] for r in rows[:8]]
    assert first == [*rewardbench2.SUBSETS, "outside the score", "extra-00"]  # the suite's order, then the rest


class Cells(HTMLParser):
    """Each headline cell's attributes and text, and the subset rows of the accuracy table in page order."""

    def __init__(self):
        super().__init__()
        self.headline, self.rows, self.table, self.cell = [], [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.table = a.get("id")
        if tag == "tr" and self.table == "accuracy" and "data-row" in a:
            self.rows.append(a["data-row"])
        if tag == "td" and "headline" in (a.get("class") or ""):
            self.cell = a | {"table": self.table, "text": ""}
            self.headline.append(self.cell)

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data

    def handle_endtag(self, tag):
        if tag == "td":
            self.cell = None


def test_every_headline_number_has_its_n_interval_and_chance(pages):
    for suite, (out, result, _, _) in pages.items():
        page = Cells()
        page.feed((out / "report.html").read_text())
        by_table = {}
        for cell in page.headline:
            by_table[cell["table"]] = by_table.get(cell["table"], 0) + 1
            assert re.fullmatch(r"\d+", cell["data-n"]) and int(cell["data-n"]) > 0, cell
            assert re.fullmatch(r"\[-?\d\.\d{3}, -?\d\.\d{3}\]", cell["data-ci95"]), cell
            assert 0 < float(cell["data-chance"]) < 1 and re.fullmatch(r"-?\d\.\d+", cell["text"]), cell
        subsets = len(result["subsets"])
        want = {"suite-sections": len(result["suite"]["sections"]) + 1, "suite-subsets": subsets,
                "accuracy": subsets + 1}  # fmt: skip
        if suite == "rewardbench2":
            want["groups"] = 2 * (subsets + 1)  # top-1 and best-of-K
            want["length-controls"] = 3 * (subsets + 1)  # best-of-K beside the longest and the shortest picks
        assert by_table == want
        chance = {c["data-chance"] for c in page.headline if c["table"] == "groups"}
        assert suite != "rewardbench2" or "0.250" in chance  # best-of-4 and top-1 of one best in four
        if suite == "rewardbench":  # the data lists its subsets by name; the page groups them by section
            assert page.rows == [s for counts in rewardbench.SECTIONS.values() for s in counts] + ["overall"]


def test_no_path_of_this_machine_is_in_the_page(pages, tmp_path_factory):
    for out, *_ in pages.values():
        page = (out / "report.html").read_text()
        assert str(tmp_path_factory.getbasetemp()) not in page and str(Path.home()) + "/" not in page
        data = json.loads(re.search(r'id="rm-items">(.*?)</script>', page, re.S)[1])
        assert all(item["id"] and item["origin"] == item["id"] for item in data["items"])  # the records' own ids
        assert {item["where"].split(":")[0] for item in data["items"]} == {f"{out.parent.name[:-1]}.jsonl"}


@pytest.mark.slow
def test_the_page_at_1280_px_in_headless_chromium(pages, tmp_path):
    chromium_or_skip()
    from selenium.webdriver.common.by import By

    out = pages["rewardbench2"][0]
    driver = start_chromium(tmp_path / "profile")
    try:
        driver.set_window_size(1280, 1600)
        driver.get((out / "report.html").as_uri())
        sizes = driver.execute_script("return [...document.images].map(i => [i.clientWidth, i.naturalWidth])")
        assert len(sizes) == 5 and all(shown == natural > 400 for shown, natural in sizes)  # never shrunk
        cards = driver.find_elements(By.CSS_SELECTOR, "article.item")
        rewards = [float(h.text.split("reward ")[1].split(" ")[0]) for h in cards[0].find_elements(By.TAG_NAME, "h4")]
        assert len(rewards) >= 4 and rewards == sorted(rewards, reverse=True)
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1280, min(height, 12000))
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot))
        png = shot.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 100_000
        assert int.from_bytes(png[16:20], "big") == 1280
    finally:
        driver.quit()


def test_suite_intervals_recompute_the_suites_own_figures(tmp_path):
    """The bootstrap's figures are the suite's rule, vectorised: with no resample, exactly `suite_block`'s
    numbers (rewards in halves, so that ties, shared tops and RewardBench 2's Ties rule all come up)."""
    from rm.suites.suite_intervals import FIGURES, _by_subset, _values, resampled_means

    rng = np.random.default_rng(3)
    for suite, module in SUITES.items():
        items, rewards = suite_items(tmp_path / suite, suite)
        rewards = [np.round(2 * r) / 2 for r in rewards]
        subsets = _by_subset(items, rewards)
        means = {n: resampled_means(_values(suite, *v)[0], 0, rng) for n, v in subsets.items()}
        figures = FIGURES[suite](means, {n: len(v[0]) for n, v in subsets.items()})
        block = module.suite_block(items, rewards)
        assert {k: v[0] for k, v in figures["sections"].items()} == pytest.approx(block["sections"], abs=1e-12)
        assert figures["score"][0] == pytest.approx(block["score"], abs=1e-12)
        u = suite_uncertainty(suite, items, rewards, samples=200, seed=0)
        lo, hi = u["ci95"]["score"]
        outside = sum(len(v[0]) for n, v in subsets.items() if n.startswith("extra-"))
        assert lo <= block["score"] <= hi and u["n"]["score"] == len(items) - outside
        ties = u["chance"]["sections"].get("Ties", 0.25)  # random rewards on the Ties rule: no closed form
        assert u["chance"]["score"] == pytest.approx(0.5 if suite == "rewardbench" else (5 * 0.25 + ties) / 6)
