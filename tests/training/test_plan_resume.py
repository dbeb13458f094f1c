"""The data position of a checkpoint is a place in a plan dealt for processes x grad_accum micro-batches a
step (rm/collate/shard.py): a run stopped mid-epoch cannot continue under another product."""

import pytest

from conftest import QUICKSTART, TINY_MODEL
from rm.config import load_config
from rm.errors import ConfigError
from rm.training.run import main

# 96 pairs / 8 = 12 micro-batches an epoch: the checkpoint of step 3 is inside the first epoch.
RUN = ["data.synthetic.n_train=96", "data.synthetic.n_eval=24", *TINY_MODEL, "train.batch_size=8"]
RUN += ["train.max_steps=3", "train.save_steps=3", "train.report_to=[]", "train.num_threads=1", "export.enabled=false"]


@pytest.mark.slow
def test_resuming_mid_epoch_under_another_plan_is_refused_and_the_same_plan_resumes(tmp_path):
    run = RUN + [f"output_dir={tmp_path}"]
    main(load_config(QUICKSTART, run))
    (tmp_path / "eval.json").unlink()  # as if killed after its checkpoint: a finished run has nothing to resume
    with pytest.raises(ConfigError, match=r"step-3 stopped inside an epoch planned for .* = 1, this run has 1 x 2 = 2"):
        main(load_config(QUICKSTART, run + ["train.resume=auto", "train.grad_accum=2", "train.max_steps=6"]))
    result = main(load_config(QUICKSTART, run + ["train.resume=auto", "train.max_steps=6"]))
    assert result["train"]["steps"] == 6 and result["train"]["resumed_from"].endswith("step-3")
