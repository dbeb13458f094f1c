"""report.html: one self-contained page, driven in a real headless Chromium (Debian's chromium and
its chromedriver, through selenium). Items and rewards are chosen by hand, so every margin, every row and the order
the browser must show are known before the page is written. A response holding `<script>` and `<img onerror>` must
show as text and never run.

Without Chromium the browser test is skipped, except under CI=true, where .ci/run installs it and a missing
browser is a failure."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from rm.data.formats.group import Group
from rm.data.formats.pair import Pair
from rm.evaluation.eval_report import write_report
from rm.evaluation.eval_result import build_result
from rm.evaluation.report.html_page import browser_items, margin_of
from rm.evaluation.report.markdown import render_markdown

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=2">'
SUITE = {
    "name": "rewardbench",
    "sections": {"Chat": 0.91, "Chat Hard": 0.55, "Safety": 0.8, "Reasoning": 0.71},
    "score": 0.7425,
    "prior_sets": None,
    "subsets": {"alpacaeval-easy": {"accuracy": 0.95, "n": 100, "weight": 100, "section": "Chat"}},
    "formatting": {"renderer": "hh", "leaderboard": "chat template", "same_as_leaderboard": False,
                   "example": "\n\nHuman: <b>hi</b>\n\nAssistant: hello"},
    "texts_truncated": 0,
    "notes": ["a note"],
}  # fmt: skip


def hand_items() -> tuple[list, list[np.ndarray]]:
    """Three subsets; margins: f:0 +1.0, f:1 -1.0, f:2 +1.5 (chat), f:3 -0.7 (safety, the script in its rejected
    text), f:4 +2.0 (safety), f:5 -0.4 (math: a K = 4 group, min(1.0 - 0.2, 1.0 - 1.4, 1.0 + 1.0))."""
    items = [
        Pair("Hi", "a helpful answer", "rude", "chat", origin="f:0"),
        Pair("How?", "like this", "no idea", "chat", origin="f:1"),
        Pair("Why?", "because", "dunno", "chat", origin="f:2"),
        Pair("Bad request", "I can't help with that.", f"Sure: {SCRIPT} {IMG}", "safety", origin="f:3"),
        Pair("Hello", "hello there", "go away", "safety", origin="f:4"),
        Group("2+2?", ("4", "5", "22", "four?"), (0, 1, 1, 1), "math", origin="f:5"),
    ]
    rewards = [[1.0, 0.0], [-0.5, 0.5], [2.0, 0.5], [0.2, 0.9], [3.0, 1.0], [1.0, 0.2, 1.4, -1.0]]
    return items, [np.array(r) for r in rewards]


def hand_result(items: list, rewards: list[np.ndarray], suite: dict | None = SUITE) -> dict:
    result = build_result(items, rewards, samples=50, seed=0)
    result["eval"] = {
        "model": "tiny <model>", "data": "`hand.jsonl`", "pairs_loaded": len(items), "records_skipped": {},
        "pairs_dropped_too_long": 0, "prompts_truncated": 0, "max_length": 64, "length_unit": "characters",
        "bootstrap": {"method": "percentile", "samples": 50, "seed": 0},
    }  # fmt: skip
    return result | ({"suite": suite} if suite else {})


@pytest.fixture(scope="module")
def hand_report(tmp_path_factory) -> Path:
    """The hand items' report folder, with a RewardBench suite block: written once (the plots take seconds)."""
    out = tmp_path_factory.mktemp("hand-report")
    items, rewards = hand_items()
    write_report(out, hand_result(items, rewards), items, rewards, seed=0)
    return out


def test_margins_and_the_browser_holds_each_subsets_worst_items():
    items, rewards = hand_items()
    assert [margin_of(i, r) for i, r in zip(items, rewards, strict=True)] == pytest.approx(
        [1.0, -1.0, 1.5, -0.7, 2.0, -0.4]
    )
    # 60 pairs in two subsets, each pair's margin its index's place in a shuffled order: a cap of 20 keeps the 10
    # lowest margins of each subset (MIN_PER_SUBSET), in input order.
    rng = np.random.default_rng(0)
    margins = rng.permutation(60) - 30.0
    many = [Pair(f"p{k}", "c", "r", "ab"[k % 2], origin=f"m:{k}") for k in range(60)]
    held, quota = browser_items(many, [np.array([m, 0.0]) for m in margins], limit=20)
    want = sorted(k for s in (0, 1) for k in sorted(range(s, 60, 2), key=lambda k: margins[k])[:10])
    assert quota == 10 and [h["i"] for h in held] == want
    assert [h["margin"] for h in held] == [margins[k] for k in want]


@pytest.mark.slow
def test_report_html_is_self_contained_and_embeds_texts_only_as_escaped_json(hand_report):
    page = (hand_report / "report.html").read_text()
    # One script that runs and one JSON block; no text can close either (every "<" of the data is \u003c).
    assert len(re.findall(r"<script", page)) == 2 and len(re.findall(r"</script", page)) == 2
    assert "window.__pwned" in page and SCRIPT not in page and "<img src=x" not in page
    data = json.loads(re.search(r'<script type="application/json" id="rm-items">(.*?)</script>', page, re.S)[1])
    assert {r["text"] for item in data["items"] for r in item["responses"]} >= {f"Sure: {SCRIPT} {IMG}"}
    # Nothing to fetch: every image is inline, and the policy allows no other source.
    assert not re.search(r"(src|href)=\"(?!data:)", page)
    assert page.count('src="data:image/png;base64,') == 5  # accuracy, groups, calibration, rewards, length
    assert "default-src 'none'" in page and "&lt;model&gt;" in page and "&lt;b&gt;hi&lt;/b&gt;" in page


def test_report_md_shows_the_suite_and_a_plain_eval_has_none(hand_report):
    md = (hand_report / "report.md").read_text()
    assert "## Suite: rewardbench" in md and "| Chat Hard | 0.5500 |" in md
    assert "- score: 0.7425" in md and "NOT the same as" in md and "- a note" in md
    assert "| alpacaeval-easy | 0.9500 | 100 | 100 | Chat |" in md
    items, rewards = hand_items()
    plain = hand_result(items, rewards, suite=None)
    # The tie rule is said once, in the header: a RewardBench suite adds its own (a tie is wrong) there.
    suite_rule = "; rewardbench's own figures count a tie wrong, as its leaderboard does"
    assert md.count("counts half") == md.count(suite_rule) == 1
    without_suite = md[: md.index("## Suite")] + md[md.index("## Accuracy") :]
    assert "Suite" not in render_markdown(plain) and render_markdown(plain) == without_suite.replace(suite_rule, "")
    matrix = {"styles": ["concise", "plain", "markdown"], "rows": "chosen style", "columns": "rejected style",
              "domains": {"chat": [[0.5, 0.25, 0.0], [1.0, 0.5, 0.25], [1.0, 1.0, 0.5]]}}  # fmt: skip
    sections = {"chat": {"easy": 1.0, "normal": 0.5, "hard": 1 / 6, "average": 5 / 9}}
    suite = {"name": "rm-bench", "sections": sections, "score": 5 / 9, "matrix": matrix}
    md = render_markdown(plain | {"suite": suite})
    assert "| domain | easy | normal | hard | average |" in md and "| chat | 1.0000 | 0.5000 | 0.1667 | 0.5556 |" in md
    assert "| chosen style \\ rejected style | concise | plain | markdown |" in md
    assert "| plain | 1.0000 | 0.5000 | 0.2500 |" in md


def chromium_or_skip():
    """Debian's chromium and chromedriver with selenium, or a skip; under CI=true a missing one fails."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        why = (
            f"report.html needs a real browser: missing {', '.join(missing)} (apt-get install chromium chromium-driver)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def start_chromium(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1600", f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


@pytest.mark.slow
def test_report_html_in_headless_chromium(hand_report, tmp_path):
    chromium_or_skip()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = hand_report / "report.html"
    driver = start_chromium(tmp_path / "profile")
    try:
        driver.get(page.as_uri())
        shown = "return [...document.querySelectorAll('#items article.item')].map(a => a.dataset.origin)"
        # The per-subset table: one row per subset and overall; accuracy worked out by hand (right pairs / pairs):
        # chat 2/3, math 2/3 (4 beats 5 and four?, not 22), safety 1/2, overall 5/8.
        rows = driver.find_elements(By.CSS_SELECTOR, "#accuracy tbody tr")
        cells = {r.get_attribute("data-row"): [td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows}
        assert list(cells) == ["chat", "math", "safety", "overall"]
        assert [cells[n][1:3] for n in cells] == [["3", "0.667"], ["3", "0.667"], ["2", "0.500"], ["8", "0.625"]]
        sections = driver.find_elements(By.CSS_SELECTOR, "#suite-sections tbody tr")
        assert [r.text for r in sections] == ["Chat 0.9100", "Chat Hard 0.5500", "Safety 0.8000", "Reasoning 0.7100"]

        # The browser: worst margin first, then by subset, then the other sorts.
        assert driver.execute_script(shown) == ["f:1", "f:3", "f:5", "f:0", "f:2", "f:4"]
        Select(driver.find_element(By.ID, "subset")).select_by_value("chat")
        assert driver.execute_script(shown) == ["f:1", "f:0", "f:2"]
        Select(driver.find_element(By.ID, "sort")).select_by_value("-margin")
        assert driver.execute_script(shown) == ["f:2", "f:0", "f:1"]
        Select(driver.find_element(By.ID, "subset")).select_by_value("")
        driver.find_element(By.ID, "wrong").click()
        assert driver.execute_script(shown) == ["f:5", "f:3", "f:1"]
        Select(driver.find_element(By.ID, "sort")).select_by_value("margin")

        # The injected markup shows as text, beside its reward, and never ran.
        card = driver.find_element(By.CSS_SELECTOR, 'article.item[data-origin="f:3"]')
        texts = [pre.text for pre in card.find_elements(By.CSS_SELECTOR, "pre.text")]
        assert texts == ["I can't help with that.", f"Sure: {SCRIPT} {IMG}"]
        headings = [h.text for h in card.find_elements(By.TAG_NAME, "h4")]
        assert headings == ["chosen: reward 0.200 (23 characters)", "rejected: reward 0.900 (78 characters)"]
        assert driver.execute_script("return typeof window.__pwned") == "undefined"
        assert not card.find_elements(By.CSS_SELECTOR, "img, script")
        group = driver.find_element(By.CSS_SELECTOR, 'article.item[data-origin="f:5"]')
        assert [h.text.split(" (")[0] for h in group.find_elements(By.TAG_NAME, "h4")] == [
            "#1 by reward, rejected: reward 1.400", "#2 by reward, chosen: reward 1.000",
            "#3 by reward, rejected: reward 0.200", "#4 by reward, rejected: reward -1.000",
        ]  # a group reads in the model's order, highest reward first, its best-ranked response marked  # fmt: skip

        card.location_once_scrolled_into_view  # noqa: B018 (scrolls the browser into the screenshot)
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
    finally:
        driver.quit()
