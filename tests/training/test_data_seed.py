"""`train.data_seed` orders the training data alone: runs that differ only in it start from the same weights and
see their pairs in other orders; runs that differ only in `train.seed` start from other weights and see the same
order (what members of a merge or an ensemble, fine-tuned from one initialization, need)."""

import pytest
from safetensors.torch import load_file

from conftest import QUICKSTART, TINY
from rm.config import load_config
from rm.training.run import main


def first_batches(tmp_path, name: str, *overrides: str) -> tuple[list[list[int]], dict]:
    """The first two micro-batches' pair indices and the exported weights of a run at learning rate 0 (its init)."""
    seen: list[list[int]] = []
    run = [*TINY, "train.max_steps=2", "train.lr=0", "train.eval_steps=0", f"output_dir={tmp_path / name}"]
    main(load_config(QUICKSTART, [*run, *overrides]), on_batch=lambda batch, loss: seen.append(
        batch["pair_index"].tolist()))  # fmt: skip
    return seen, load_file(tmp_path / name / "export" / "model.safetensors")


@pytest.mark.slow
def test_the_data_order_has_a_seed_of_its_own(tmp_path):
    order_a, init_a = first_batches(tmp_path, "a", "train.seed=7", "train.data_seed=1")
    order_b, init_b = first_batches(tmp_path, "b", "train.seed=7", "train.data_seed=2")
    order_c, init_c = first_batches(tmp_path, "c", "train.seed=8", "train.data_seed=1")
    assert order_a != order_b and order_a == order_c
    assert all((init_a[k] == init_b[k]).all() for k in init_a)
    assert any((init_a[k] != init_c[k]).any() for k in init_a)
    default, _ = first_batches(tmp_path, "d", "train.seed=1")  # no data_seed: the order follows train.seed
    assert default == order_a
