"""Several processes of DDP (gloo, CPU) against one process on the same plan of micro-batches.

The several-process runs are scenarios of the session's shared launches (tests/launched/scenarios.py: one
`accelerate launch --config_file configs/accelerate/cpu-ddp.yaml` job of 2 processes and one of 3 --num_processes,
each running `rm train` as `-m rm train` does);
`accelerate launch --num_processes 2 --cpu` is not used: accelerate 1.x starts a single process for it unless
mpirun is set up, which would make these tests compare a run with itself at half the batch.

The batches are fixed by PairBatches: one seeded permutation of the pairs, cut into micro-batches of
`train.batch_size`, dealt one to each process a step (rm/collate/shard.py). With 2 processes at batch 4,
optimizer step k sees micro-batches 2k and 2k+1 = pairs [8k, 8k + 8) of the permutation, exactly the
micro-batch k of one process at batch 8. Each process's summed loss is scaled by 2/8 and DDP averages
the two gradients: the gradient of the mean loss over the 8 pairs, so both runs follow the same
trajectory up to float rounding.

The token-budget tests further down run through tests/training/batch_recorder.py, which records each process's
micro-batches, and compare N processes with one process at grad_accum N; the kill-and-resume test starts its own
torchrun, since it kills it.

Tolerance on each logged loss: 1e-5. Rounding differs (packed rows of 4 pairs vs 8 change the matmul
shapes; gloo sums the two half gradients in its own order), about 1e-7 relative per step; measured
max difference over the 12 steps was 6e-8. 1e-5 is well above that, and far below what any mistake
in batch assignment produces: the loss changes by ~1e-2 from step to step, and running the 2-process
command as one process at batch 4 differs by 0.03-0.14.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import REPO, TINY, TINY_MODEL
from rm.config import load_config
from rm.config.rundir import STATE, RunDir
from rm.training.run import main

QUICKSTART = REPO / "configs" / "quickstart.yaml"
COMMON = TINY + ["train.log_steps=1", "train.report_to=[]", "export.enabled=false", "train.num_threads=1"]
COMMON += ["train.save_steps=0", "train.eval_steps=0"]


@pytest.mark.slow
def test_two_processes_match_one_at_the_same_global_batch(launched, tmp_path):
    two = launched(2).run("same_global_batch")  # `rm train` at batch 4 on 2 processes
    assert launched(2).stdout("same_global_batch").count("held-out accuracy after 12 steps") == 1  # main only

    one = tmp_path / "one"
    reference = main(load_config(QUICKSTART, COMMON + ["train.batch_size=8", f"output_dir={one}"]))

    result = json.loads((two / "eval.json").read_text())
    # Each of the 61 eval pairs counted exactly once: 4 batches of 16/16/16/13 dealt to 2 processes.
    assert result["overall"]["n"] == 61
    assert {k: m["n"] for k, m in result["subsets"].items()} == {k: m["n"] for k, m in reference["subsets"].items()}
    assert result["overall"]["mean_margin"] == pytest.approx(reference["overall"]["mean_margin"], abs=1e-5)
    assert result["overall"]["accuracy"] == reference["overall"]["accuracy"]

    def losses(run: Path) -> list[float]:
        return [json.loads(line)["loss"] for line in (run / "train_log.jsonl").read_text().splitlines()]

    got, want = losses(two), losses(one)
    assert len(got) == len(want) == 12
    diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
    print(f"2 processes x batch 4 vs 1 process x batch 8: max loss difference over 12 steps {diff:.2g}")
    assert diff <= 1e-5


# Token budgets on both splits: micro-batches of 1 to ~10 pairs, 2 epochs of 240 pairs.
BUDGETS = [
    "data.synthetic.n_train=240",
    "data.synthetic.n_eval=61",
    *TINY_MODEL,
    "collator.max_tokens=400",
    "collator.eval_max_tokens=300",
    "train.max_steps=0",
    "train.epochs=2",
    "train.save_steps=10",
    "train.eval_steps=0",
    "train.log_steps=1",
    "train.lr=3e-3",
    "train.report_to=[]",
    "train.num_threads=1",
]
RECORDER = Path(__file__).parent / "batch_recorder.py"


def torchrun(processes: int, out: Path, *extra: str, wait: bool = True):
    """`rm train` with BUDGETS under torchrun (gloo, CPU), recording each process's micro-batches: the launch of
    the kill-and-resume test, which the shared launch's `budgets` scenario runs uninterrupted."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    cmd += [str(RECORDER), str(QUICKSTART), *BUDGETS, f"output_dir={out}", *extra]
    env = os.environ | {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    if not wait:
        log = open(f"{out}.log", "w")  # noqa: SIM115
        return subprocess.Popen(cmd, stdout=log, stderr=log, cwd=REPO, env=env, start_new_session=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def budget_runs(launched):
    """{N: run directory} for 2 and 3 processes with grad_accum 1 under token budgets."""
    return {n: launched(n).run("budgets") for n in (2, 3)}


def weights(run: Path) -> dict:
    return load_file(run / "export" / "model.safetensors")


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_token_budgets_on_n_processes_match_one_process_accumulating_n(budget_runs, processes, tmp_path):
    run = budget_runs[processes]
    seen = [json.loads((run / f"batches-{r}.json").read_text()) for r in range(processes)]
    # Every process ran as many micro-batches, none empty; each of the 240 pairs once in each epoch.
    assert len({len(s) for s in seen}) == 1 and all(b["pairs"] for s in seen for b in s)
    per_epoch = len(seen[0]) // 2
    for epoch in (0, 1):
        pairs = [i for s in seen for b in s[epoch * per_epoch : (epoch + 1) * per_epoch] for i in b["pairs"]]
        assert sorted(pairs) == list(range(240))
    # The logged loss of a step is the mean over its pairs on all processes (one micro-batch each).
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, per_epoch * 2 + 1))
    for step, row in enumerate(log):
        batches = [s[step] for s in seen]
        want = sum(b["loss"] * len(b["pairs"]) for b in batches) / sum(len(b["pairs"]) for b in batches)
        assert row["loss"] == pytest.approx(want, rel=1e-5)

    one = tmp_path / "one"
    reference = main(load_config(QUICKSTART, BUDGETS + [f"train.grad_accum={processes}", f"output_dir={one}"]))
    diff = max_diff(weights(run), weights(one))
    print(f"{processes} processes vs 1 process x grad_accum {processes}, {len(log)} steps: max weight diff {diff:.2g}")
    assert len(log) >= 30 and diff <= 1e-5
    # eval.json: each of the 61 eval pairs counted once, the same figures as one process.
    result = json.loads((run / "eval.json").read_text())
    assert result["train"]["processes"] == processes and result["train"]["steps"] == len(log)
    for name in ["overall", *reference["subsets"]]:
        got = result["overall"] if name == "overall" else result["subsets"][name]
        want = reference["overall"] if name == "overall" else reference["subsets"][name]
        assert got["n"] == want["n"] and got["accuracy"] == want["accuracy"]
        assert got["mean_margin"] == pytest.approx(want["mean_margin"], abs=1e-5)
    assert result["overall"]["n"] == 61


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants, from /proc (Linux)."""
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            out += process_tree(int(child))
    return out


@pytest.mark.slow
def test_two_processes_killed_and_resumed_end_as_the_uninterrupted_run(budget_runs, tmp_path):
    out = tmp_path / "killed"
    proc = torchrun(2, out, wait=False)
    deadline = time.monotonic() + 300
    while not (out / "checkpoints" / "step-10" / STATE).exists():
        assert proc.poll() is None, Path(f"{out}.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint step-10"
        time.sleep(0.005)
    for pid in process_tree(proc.pid):  # torchrun and both workers (each in a session of its own)
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "eval.json").exists()  # it really was cut short
    killed_at = RunDir(out).complete_checkpoints()[-1][0]

    torchrun(2, out, "train.resume=auto")

    result = json.loads((out / "eval.json").read_text())
    assert result["train"]["resumed_from"].endswith(f"step-{killed_at}")
    reference = budget_runs[2]
    diff = max_diff(weights(out), weights(reference))
    print(f"2 processes, token budgets, SIGKILL after step {killed_at}: max weight diff vs uninterrupted {diff:.2g}")
    assert diff <= 1e-6
    got = [json.loads(r) for r in (out / "train_log.jsonl").read_text().splitlines()]
    want = [json.loads(r) for r in (reference / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == [r["step"] for r in want]
    assert max(abs(g["loss"] - w["loss"]) for g, w in zip(got, want, strict=True)) <= 1e-6
    # After the resume, the processes ran exactly the micro-batches the uninterrupted run had left.
    done = Counter(i for r in range(2) for b in json.loads((out / f"batches-{r}.json").read_text()) for i in b["pairs"])
    assert sum(done.values()) == 480 - sum(
        len(b["pairs"]) for r in range(2) for b in json.loads((reference / f"batches-{r}.json").read_text())[:killed_at]
    )
