"""The scenarios of the shared launches: each checks, with the test that reads its files, that N processes do what
one process does. Run by tests/launched/launch.py as

    accelerate launch --config_file configs/accelerate/cpu-ddp.yaml --num_processes N \
        tests/launched/scenarios.py FOLDER INPUTS NAME...

(gloo on the CPU, ACCELERATE_USE_CPU=1; `--cpu --num_processes N` would start a single process). Every process
runs the named scenarios in turn, each in FOLDER/<name>/ (a run's output_dir is its `run/`), with its stdout and
stderr in `stdout-<rank>.txt` and `stderr-<rank>.txt` there, and records `status-<rank>.json` after it:
`{"error": null}`, or the traceback. A scenario that raises ends the job at once, since the other processes may be
waiting for it in a collective; the launcher then starts the scenarios left in a job of their own, so a failure
fails only the tests of its scenario.

One process group serves every scenario: the job starts it, and rm's runs, which end theirs with
`accelerator.end_training()` (rm/evaluation/gather.py's shut_down), leave it up here, since it is destroyed once
at the end of the job; accelerate's per-process singletons (PartialState, AcceleratorState, GradientState) are
cleared between scenarios, so each run sets up its accelerator as a fresh process would.

A new scenario: a function below decorated `@scenario(2, 3)` (the process counts it runs under), and a test that
reads `launched(N).run("<name>")`.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Context:
    """Where a scenario writes (`out`, shared by the processes; `run`: the output_dir of its rm run), this
    process's rank, the number of processes, the folder of every launch of the session, and the launcher's
    inputs (fixtures of the pytest session, as strings)."""

    out: Path
    rank: int
    processes: int
    inputs: dict

    @property
    def run(self) -> Path:
        return self.out / "run"

    @property
    def launches(self) -> Path:
        return self.out.parents[1]


@dataclass(frozen=True)
class Scenario:
    function: Callable[[Context], None]
    processes: tuple[int, ...]


SCENARIOS: dict[str, Scenario] = {}  # in the order they run


def scenario(*processes: int) -> Callable:
    def register(function: Callable[[Context], None]) -> Callable[[Context], None]:
        SCENARIOS[function.__name__] = Scenario(function, processes)
        return function

    return register


def rm_cli(*argv: object) -> None:
    """`python -m rm ARGV` as `accelerate launch -m rm` runs it in each process; a non-zero exit raises."""
    from rm.cli import main

    code = main([str(a) for a in argv])
    if code:
        raise RuntimeError(f"`rm {argv[0]}` exited with {code} (its stderr is below)")


def record(ctx: Context, *args: object) -> None:
    """`rm train QUICKSTART ARGS` with each micro-batch of this process recorded (tests/training/batch_recorder.py)."""
    from batch_recorder import record as recorded
    from test_distributed import QUICKSTART

    recorded([str(QUICKSTART), *map(str, args), f"output_dir={ctx.run}"])


# tests/training/test_distributed.py


@scenario(2)
def same_global_batch(ctx: Context) -> None:
    """2 processes at batch 4: test_two_processes_match_one_at_the_same_global_batch."""
    from test_distributed import COMMON, QUICKSTART

    rm_cli("train", QUICKSTART, *COMMON, "train.batch_size=4", f"output_dir={ctx.run}")


@scenario(2, 3)
def budgets(ctx: Context) -> None:
    """Token budgets, grad_accum 1: test_token_budgets_on_n_processes_match_one_process_accumulating_n (and the
    uninterrupted run of test_two_processes_killed_and_resumed_end_as_the_uninterrupted_run)."""
    from test_distributed import BUDGETS

    record(ctx, *BUDGETS)


# tests/training/test_distributed_packed.py


@scenario(2, 3)
def packed(ctx: Context) -> None:
    from test_distributed import BUDGETS
    from test_distributed_packed import PACKED

    record(ctx, *BUDGETS, *PACKED)


# tests/training/test_group_training.py


@scenario(2, 3)
def groups(ctx: Context) -> None:
    """Groups of mixed K, ties, an attribute and soft pairs under token budgets, on the test module's data."""
    import torch
    from group_data import write_groups, write_soft_pairs
    from test_group_training import HARD, group_run

    data = ctx.out / "mixed.jsonl"
    if ctx.rank == 0:
        write_soft_pairs(write_groups(data, 400, seed=1), 100, seed=2)  # what the module's mixed_file holds
    torch.distributed.barrier()
    record(ctx, *group_run(data, ctx.run, *HARD, "export.enabled=true"))


# tests/evaluation/test_eval_groups.py


@scenario(2, 3)
def eval_groups(ctx: Context) -> None:
    from test_eval_groups import worker

    worker(str(ctx.out / "gathered.json"))


# tests/evaluation/test_eval_multiprocess.py


@scenario(2)
def eval_train(ctx: Context) -> None:
    """A 2-process run with evals at steps 2 and 4, whose export eval_rewards scores."""
    from conftest import QUICKSTART, TINY

    rm_cli("train", QUICKSTART, *TINY, "train.max_steps=4", "train.eval_steps=2", "train.save_steps=0",
           f"output_dir={ctx.run}")  # fmt: skip


@scenario(2, 3)
def eval_rewards(ctx: Context) -> None:
    """`rm eval` (batches of 8) on eval_train's export; the 3-process launch reads the 2-process one's, which
    tests/launched/launch.py runs first."""
    trained = ctx.launches / "2" / "eval_train" / "run"
    rm_cli("eval", "--model", trained / "export", "--data", trained / "data", "--out", ctx.run, "--batch-size", "8")


# tests/evaluation/test_ensemble_processes.py


@scenario(2, 3)
def eval_ensemble(ctx: Context) -> None:
    """`rm eval --model A B C` (batches of 8 over 61 pairs) on three members the first process writes."""
    import torch
    from test_ensemble_processes import ensemble_argv, write_inputs

    if ctx.rank == 0:
        write_inputs(ctx.out, ctx.inputs["exported_tiny"])
    torch.distributed.barrier()
    rm_cli(*ensemble_argv(ctx.out, ctx.run))


# tests/suites/test_suite_processes.py


@scenario(2)
def suite(ctx: Context) -> None:
    from suite_helpers import SOURCES

    rm_cli("eval", "--model", ctx.inputs["exported_tiny"], "--suite", "rewardbench2", "--data",
           SOURCES["rewardbench2"], "--out", ctx.run, "--batch-size", "3", "--bootstrap-samples", "10")  # fmt: skip


# tests/suites/test_processbench_processes.py


@scenario(2, 3)
def processbench(ctx: Context) -> None:
    from test_processbench_processes import BENCH

    rm_cli("eval", "--model", ctx.inputs["exported_tiny"], "--suite", "processbench", "--data", str(BENCH),
           "--out", ctx.run, "--batch-size", "2", "--max-length", "512")  # fmt: skip


# tests/model/test_wrapped_distributed.py


@scenario(2)
def wrapped(ctx: Context) -> None:
    from test_wrapped_distributed import COMMON, QUICKSTART

    rm_cli("train", QUICKSTART, *COMMON, "train.batch_size=4", f"output_dir={ctx.run}")


# tests/training/test_cache_run.py


@scenario(2)
def tokenize_once(ctx: Context) -> None:
    """`rm train` on the shared HH file with a fresh cache, each process noting when it tokenizes the splits itself
    (tests/training/encode_counter.py)."""
    from encode_counter import count
    from test_cache_run import HH_HARMLESS_TEST, QUICKSTART, RUN

    if HH_HARMLESS_TEST.is_file():  # else the test is skipped
        count([str(QUICKSTART), *RUN, f"output_dir={ctx.run}", f"data.cache_dir={ctx.out / 'cache'}"])


# tests/training/test_toy_label.py


@scenario(2, 3)
def toy_label(ctx: Context) -> None:
    """The toy label's run: each process registers it (a user's launch script would), and forgets it after."""
    import response_length
    import torch
    import toy_label as toy

    from conftest import QUICKSTART, SHORT
    from rm.api import register_label, register_metric
    from rm.data.labels import unregister
    from rm.evaluation.summary import unregister_metric

    if ctx.rank == 0:
        toy.write_toy(ctx.out / "toy", 24, 8)  # what the one-process test trains on
    torch.distributed.barrier()
    register_label(response_length.RESPONSE_TOKENS)
    register_metric(response_length.LENGTH_CORRELATION)
    toy.install()
    try:
        rm_cli("train", QUICKSTART, *SHORT, f"data.source={ctx.out / 'toy'}", "data.eval_split=test",
               f"output_dir={ctx.run}")  # fmt: skip
    finally:
        toy.uninstall()
        unregister_metric(response_length.LENGTH_CORRELATION.name)
        unregister(response_length.RESPONSE_TOKENS.name)


# tests/training/test_length_distributed.py


@scenario(2, 3)
def length_head(ctx: Context) -> None:
    """A length head under token budgets (length-grouped micro-batches), grad_accum 1: the run that
    test_a_length_head_on_n_processes_matches_one_process_accumulating_n compares with one process."""
    from test_length_distributed import LENGTH_RUN, QUICKSTART

    rm_cli("train", QUICKSTART, *LENGTH_RUN, f"output_dir={ctx.run}")


# tests/training/test_step_distributed.py


@scenario(2, 3)
def steps(ctx: Context) -> None:
    """A process reward model under token budgets, grad_accum 1: the run that
    test_steps_on_n_processes_match_one_process_accumulating_n compares with one process."""
    from test_step_distributed import QUICKSTART, step_run

    rm_cli("train", QUICKSTART, *step_run(ctx.out / f"rank-{ctx.rank}"), f"output_dir={ctx.run}")


@contextlib.contextmanager
def captured(folder: Path, rank: int) -> Iterator[None]:
    """This process's stdout and stderr, at the file descriptors (logging handlers, tqdm, C code), into `folder`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(folder / f"stdout-{rank}.txt", "w") as out, open(folder / f"stderr-{rank}.txt", "w") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def fresh_accelerate() -> None:
    """Clear accelerate's per-process state, as a new process starts (the process group stays up)."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def import_test_modules() -> None:
    """The test modules' folders on sys.path, and conftest imported with the session's tokenized-data cache kept:
    conftest gives a pytest session a fresh HF_DATASETS_CACHE, but these processes share their launcher's."""
    sys.path[:0] = [str(TESTS / d) for d in ("", "training", "evaluation", "suites", "model")]
    cache = os.environ.get("HF_DATASETS_CACHE")
    import conftest  # noqa: F401

    if cache is not None and os.environ["HF_DATASETS_CACHE"] != cache:
        shutil.rmtree(os.environ["HF_DATASETS_CACHE"], ignore_errors=True)
        os.environ["HF_DATASETS_CACHE"] = cache


def main(folder: Path, inputs: dict, names: list[str]) -> None:
    import torch
    from accelerate.state import PartialState

    import_test_modules()
    gc.collect()
    gc.freeze()  # the imports' objects: every run's accelerate `free_memory` collects, and no longer walks them
    rank, processes = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.distributed.init_process_group("gloo")
    destroy = PartialState.destroy_process_group
    PartialState.destroy_process_group = lambda self, group=None: None  # the job's group outlives each run
    for name in names:
        out = folder / name
        out.mkdir(parents=True, exist_ok=True)
        (out / f"started-{rank}").touch()
        error = None
        with captured(out, rank):
            try:
                SCENARIOS[name].function(Context(out, rank, processes, inputs))
            except BaseException:
                error = traceback.format_exc()
        fresh_accelerate()
        if error is not None:
            stderr = (out / f"stderr-{rank}.txt").read_text()[-3000:]
            error += f"\n--- stderr of process {rank} (last 3000 characters) ---\n{stderr}"
        (out / f"status-{rank}.json").write_text(json.dumps({"error": error}))
        if error is not None:
            os._exit(1)  # the others may wait for this process in a collective: the launcher ends them
        torch.distributed.barrier()
    PartialState.destroy_process_group = destroy
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:])
