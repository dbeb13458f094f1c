"""scripts/bench_attention.py times ways of computing a shared-layout row's attention; its timings only mean
something if every way computes the same thing. Here each variant is held to a forward of each response on its
own (prompt + response, plain causal attention), on rows that hold several groups and pairs, and the segment
reader to a row written out by hand. No timing is checked: the numbers are the machine's."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import bench_attention  # noqa: E402


def test_segments_by_hand():
    # SharedCollator's worked example: pairs A (prompt 2, chosen 1, rejected 2) and B (1, 2, 1) in one row of 11
    pair_ids = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 1, -1, -1]])
    segment_ids = torch.tensor([[0, 0, 1, 2, 2, 0, 1, 1, 2, -1, -1]])
    assert bench_attention.segments(pair_ids, segment_ids) == [[(0, 2, [(2, 3), (3, 5)]), (5, 6, [(6, 8), (8, 9)])]]


@pytest.mark.parametrize("layout", ["groups", "pairs"])
def test_every_variant_equals_each_response_alone(layout):
    torch.manual_seed(0)
    batch = [
        {"prompt": [1] * 7, "responses": [[1] * 3, [1] * 5, [1] * 1, [1] * 4]},
        {"prompt": [1] * 4, "responses": [[1] * 2, [1] * 6, [1] * 3, [1] * 2]},
    ]
    tensors = bench_attention.layouts(batch)[layout]
    rows, width = tensors["pair_ids"].shape
    q, k, v = (torch.randn(rows, 2, width, 8) for _ in range(3))
    plan = bench_attention.segments(tensors["pair_ids"], tensors["segment_ids"])
    inputs = {"dense": bench_attention.dense_mask(tensors["pair_ids"], tensors["segment_ids"]), "split": plan}
    inputs |= {"math": inputs["dense"], "gathered": bench_attention.gather_plan(plan, width)}
    checked = 0
    for variant, fn in bench_attention.VARIANTS.items():
        out = fn(q, k, v, inputs[variant])
        for r, groups in enumerate(plan):
            for p0, p1, responses in groups:
                for a, b in responses:
                    cols = [*range(p0, p1), *range(a, b)]  # the response's own sequence: prompt, then itself
                    alone = F.scaled_dot_product_attention(q[r, :, cols], k[r, :, cols], v[r, :, cols], is_causal=True)
                    torch.testing.assert_close(out[r, :, cols], alone, atol=1e-5, rtol=0)
                    checked += 1
    assert checked == 4 * (8 if layout == "groups" else 24)


@pytest.mark.slow
def test_a_quick_run_prints_every_variant(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_attention.py"), "--ids", str(tmp_path / "none.json"),
         "--batches", "2", "--turns", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert "seeded lengths" in out.stdout
    for variant in bench_attention.VARIANTS:
        assert f"groups  {variant}" in out.stdout and f"pairs   {variant}" in out.stdout
