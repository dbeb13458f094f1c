"""AUC for binary (0/1) attributes in eval.json's `attributes` block, against a count of pairs by hand."""

import math

import numpy as np
import pytest

from rm.evaluation.attribute_metrics import attribute_block, attribute_lines, auc, fit_numbers
from rm.evaluation.report.html_page import html_table
from rm.evaluation.report.markdown import attribute_table, md_table

NAN = float("nan")


def test_auc_counts_pairs_ranked_right_with_ties_as_half():
    """Positives score [0.35, 0.8, 0.4], negatives [0.1, 0.4]: of the 6 (positive, negative) pairs, (0.35, 0.4)
    is ranked wrong, (0.4, 0.4) is a tie (1/2), the other 4 are right: AUC = 4.5 / 6 = 0.75."""
    pred = np.array([0.1, 0.4, 0.35, 0.8, 0.4])
    label = np.array([0.0, 0.0, 1.0, 1.0, 1.0])
    assert auc(pred, label) == pytest.approx(0.75)
    assert auc(-pred, label) == pytest.approx(0.25)
    assert math.isnan(auc(pred, np.ones(5)))  # one class only: undefined


def test_block_has_auc_for_0_1_attributes_only_and_skips_missing_scores():
    """Attribute `ok` (0/1, one missing) has scored pairs: positives [0.9, 0.2] against negatives [0.5, 0.1]:
    3 of 4 right, AUC 0.75. Attribute `level` (0-4) has none."""
    pred = np.array([[0.9, 1.0], [0.5, 2.0], [0.2, 3.0], [0.1, 0.5], [7.0, 1.0]])
    true = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 4.0], [0.0, 1.0], [NAN, 3.0]])
    block = attribute_block(pred, true, np.array([0, 0, 1, 1, 1]), ["ok", "level"], ["s", "t"])
    assert block["ok"]["overall"]["auc"] == pytest.approx(0.75) and block["ok"]["overall"]["n"] == 4
    assert block["ok"]["subsets"]["s"]["auc"] == pytest.approx(1.0)  # 0.9 over 0.5
    assert block["ok"]["subsets"]["t"]["auc"] == pytest.approx(1.0)  # 0.2 over 0.1
    assert "auc" not in block["level"]["overall"] and "auc" not in fit_numbers(pred[:, 1], true[:, 1])
    lines = attribute_lines({"attributes": block})
    assert lines[1].endswith("AUC") and lines[3].split()[-1] == "0.7500"
    # report.md's and report.html's table: an AUC column, blank for the 0-4 attribute.
    head, _, rows = attribute_table({"attributes": block})
    assert head == ["attribute", "subset", "RMSE", "Pearson", "Spearman", "AUC", "n", "missing"]
    cells = {(r[0], r[1]): dict(zip(head, r, strict=True)) for r in rows}
    assert cells["ok", "overall"]["AUC"] == "0.750" and cells["ok", "s"]["AUC"] == "1.000"
    assert cells["level", "overall"]["AUC"] == "" and cells["level", "overall"]["n"] == "5"
    assert "| ok | overall | " in "\n".join(md_table(attribute_table({"attributes": block})))
    assert "<th>AUC</th>" in html_table(attribute_table({"attributes": block}), "attributes", overall=False)


def test_console_table_unchanged_without_binary_attributes():
    block = attribute_block(np.array([[1.0], [2.0]]), np.array([[2.0], [3.0]]), np.array([0, 0]), ["a"], ["s"])
    assert attribute_lines({"attributes": block})[1].endswith("Spearman")
    assert attribute_table({"attributes": block})[0] == ["attribute", "subset", "RMSE", "Pearson", "Spearman", "n",
                                                         "missing"]  # fmt: skip
