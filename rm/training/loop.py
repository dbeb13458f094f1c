"""The training loop: optimizer steps from where the run stands to `max_steps`, logging, evaluating and saving.

Every process runs its share of one plan (rm/collate/shard.py): the same number of micro-batches, one
per accumulation step of each optimizer step. A micro-batch's loss is its pairs' summed loss over the
pairs of the whole step on all processes, so the update is the mean over the step's pairs whatever the
number of processes and accumulation steps. Metrics are sums over pairs, kept on the device and reduced
across processes once per `train.log_steps` optimizer steps; the loop's host syncs per optimizer step
are the check for a non-finite loss or a SIGTERM or Ctrl-C on any process, and (when clipping) for a
non-finite gradient norm (rm/training/faults.py).
Checkpoints and resuming: rm/training/checkpoint.py.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from rm.collate.shard import RankBatches
from rm.config import RunConfig
from rm.config.atomic import no_space, write_text
from rm.config.rundir import RunDir
from rm.data.heap import hold_freed_memory
from rm.evaluation.gather import evaluate
from rm.model.objective import training_loss
from rm.model.reward import group_outputs
from rm.training import checkpoint
from rm.training.checkpoint import TrainState
from rm.training.faults import Preemption, diverged, explain_oom, skip_nonfinite

log = logging.getLogger("rm")

GROUP_METRICS = ("top1_accuracy", "best_of_k_accuracy", "kendall_tau")
"""Group metrics of an eval (rm/evaluation/ranking_metrics.py) sent to the trackers beside accuracy and ECE."""


@dataclass
class Hooks:
    """Callbacks into the loop, for tools built on top of a run (benchmarks, sweeps)."""

    on_batch: Callable[[dict, torch.Tensor], None] | None = None
    """Called after every micro-batch's backward pass with the batch and its mean loss over its weight (pairs, or
    groups)."""
    on_eval: Callable[[int, dict], None] | None = None
    """Called on every process after each periodic eval (and its suites': `suites`) with (step, result); may raise."""
    suites: Callable[[torch.nn.Module, int], Any] | None = None
    """train.eval_suites (rm/training/suite_evals.py): called with (model, step) at each eval and at the last step."""


@dataclass
class Run:
    """Everything the loop works on, as `rm.training.run` set it up (model and optimizer prepared; the loaders
    hold this process's share of the plans and are not handed to accelerate, which would re-shard them)."""

    cfg: RunConfig
    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_loader: DataLoader
    train_batches: RankBatches
    eval_loader: DataLoader
    subsets: list[str]
    state: TrainState
    max_steps: int
    stopped_by: str = ""
    """The signal that stopped the run early (SIGTERM, SIGINT), set by `fit`; empty when it ran to the end."""


class Meter:
    """Summed over finite micro-batches since the last log line, on the device: loss, ordered pairs ranked right,
    ordered pairs, and the loss's weight (groups or pairs, rm/model/objective.py); and the micro-batches of the
    current optimizer step whose loss was not finite."""

    def __init__(self, device: torch.device, pending: list[float] | None):
        self.sums = torch.zeros(4, device=device)
        if pending is not None:  # a resumed run's sums were saved already reduced over processes
            self.sums += torch.tensor((pending + pending[2:3])[:4], device=device)  # a run saved before weights: pairs
        self.bad = torch.zeros((), device=device)

    def add(self, loss_sum: torch.Tensor, weight: torch.Tensor, better: torch.Tensor, worse: torch.Tensor) -> None:
        ok = torch.isfinite(loss_sum.detach())
        self.bad += ~ok
        right = (better > worse).sum().detach().to(self.sums.dtype)
        counts = [right, torch.full_like(right, len(better)), weight.detach().to(self.sums.dtype)]
        self.sums += ok * torch.stack([loss_sum.detach().nan_to_num(), *counts])


def fit(run: Run, hooks: Hooks | None = None) -> bool:
    """Optimizer steps from `run.state` up to `run.max_steps`; True when SIGTERM or Ctrl-C stopped it (checkpoint
    saved, `run.stopped_by` names the signal).

    `run.state` is updated in place.
    """
    hooks = hooks or Hooks()
    accelerator, state = run.accelerator, run.state
    meter = Meter(accelerator.device, state.pending if accelerator.is_main_process else None)
    bar = progress_bar(run)
    own = accelerator.unwrap_model(run.model)  # the loss's own: Davidson's nu, gaussian sigmas, the length head
    tie_nu, log_scale, length = own.tie_nu, own.attribute_log_scale, getattr(own, "length_head", None)
    start_log(run)
    run.model.train()
    if accelerator.device.type == "cpu":  # steps re-use the pages the last one freed (rm/data/heap.py)
        hold_freed_memory()
    # Log lines (evals, checkpoints, warnings) go through tqdm.write: printed above the bar, not onto its line.
    with Preemption() as preemption, logging_redirect_tqdm():
        while state.step < run.max_steps:
            for batch, scale in epoch_batches(run):
                # accelerate's step count syncs every grad_accum-th micro-batch: each process's epoch is a
                # multiple of grad_accum micro-batches, and a resumed run starts at a step boundary.
                with accelerator.accumulate(run.model):
                    out = group_outputs(run.model, batch, length is not None)  # [responses] or [responses, 1 + A]
                    loss, weight = training_loss(run.cfg.loss, out, batch, tie_nu, log_scale, length)  # (+ length)
                    r = out if out.dim() == 1 else out[:, 0]
                    accelerator.backward(loss * scale)
                    meter.add(loss, weight, r[batch["better"]], r[batch["worse"]])
                    stop = optimizer_step(run, meter, preemption) if accelerator.sync_gradients else ""
                if hooks.on_batch is not None:
                    hooks.on_batch(batch, loss.detach() / weight.clamp(min=1))
                state.batches_in_epoch += 1
                if not accelerator.sync_gradients:
                    continue
                state.step += 1
                run.scheduler.step()
                bar.update(1)
                after_step(run, meter, bar, hooks, stop)
                if stop:
                    bar.close()
                    run.stopped_by = stop
                    log.warning("%s: stopped after step %d with a checkpoint", run.stopped_by, state.step)
                    return True
                if state.step >= run.max_steps:
                    break
            else:  # the epoch's batches are all consumed
                state.epoch += 1
                state.batches_in_epoch = 0
    bar.close()
    return False


def progress_bar(run: Run) -> tqdm:
    # Redraw at most every 10 s when stderr is a log file rather than a terminal.
    interval = 0.1 if sys.stderr.isatty() else 10.0
    return tqdm(
        total=run.max_steps,
        initial=run.state.step,
        desc="train",
        disable=not run.accelerator.is_main_process,
        dynamic_ncols=True,
        mininterval=interval,
    )


def epoch_batches(run: Run) -> Iterator[tuple[dict, float]]:
    """This process's micro-batches of the current epoch, on its device, from where a resumed run stood
    (same seed and epoch, same plan), each with the factor for its summed loss.

    The factor is (processes x grad_accum) / (pairs in the whole optimizer step): accelerate divides the
    loss by grad_accum and DDP (FSDP, DeepSpeed alike) averages gradients over processes, so what is left
    is the gradient of the mean loss over the step's pairs.
    """
    start, accum = run.state.batches_in_epoch, run.cfg.train.grad_accum
    run.train_batches.set_epoch(run.state.epoch, start)
    step_pairs = run.train_batches.step_pairs()
    slots, device = run.accelerator.num_processes * accum, run.accelerator.device
    # iter(DataLoader) draws a worker seed from the global RNG: a resumed run makes its iterator where the
    # uninterrupted one did not, so that draw would shift every dropout mask after it (8.2e-3 apart
    # with dropout 0.3). Drawn on a fork, it leaves the RNG as the checkpoint restored it.
    with torch.random.fork_rng(devices=[]):
        batches = iter(run.train_loader)
    for i, batch in enumerate(batches, start=start):
        yield send_to_device(batch, device), slots / step_pairs[i // accum]


def optimizer_step(run: Run, meter: Meter, preemption: Preemption) -> str:
    """At the last micro-batch of a step: skip the update if any process saw a non-finite loss, else clip
    and step; returns the signal that asked any process to stop ("SIGTERM" over "SIGINT"; "" for none), the
    same on every process, so that each exits with the same status."""
    accelerator, cfg = run.accelerator, run.cfg
    accelerator.unwrap_model(run.model).update_length_stats(accelerator.reduce)  # the length head's, if any
    asked = [meter.bad.new_tensor(preemption.signum == s) for s in (signal.SIGTERM, signal.SIGINT)]
    flags = accelerator.reduce(torch.stack([meter.bad, *asked]), "sum")
    n_bad, term, interrupt = flags.tolist()
    lr = run.scheduler.get_last_lr()[0]
    if not skip_nonfinite(int(n_bad), run.state.step + 1, run.state, cfg, lr, run.model):
        if cfg.train.max_grad_norm <= 0 or finite_grad_norm(run, lr):
            run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    meter.bad.zero_()
    return "SIGTERM" if term else "SIGINT" if interrupt else ""


def finite_grad_norm(run: Run, lr: float) -> bool:
    """Clip the gradients; False (the step is skipped and counted) when their global norm is not finite though
    the loss was: an overflow in the backward pass. Clipping already computes the norm (the same on every
    process), so checking it costs one host sync and no extra reduction."""
    norm = run.accelerator.clip_grad_norm_(run.model.parameters(), run.cfg.train.max_grad_norm)
    bad = norm is not None and not torch.isfinite(norm).item()
    return not skip_nonfinite(int(bad), run.state.step + 1, run.state, run.cfg, lr, run.model, what="gradient")


def after_step(run: Run, meter: Meter, bar: tqdm, hooks: Hooks, stop: str) -> None:
    """What follows an optimizer step when its turn comes: the log line, a periodic eval, a checkpoint."""
    cfg, state, accelerator = run.cfg, run.state, run.accelerator
    if state.step % cfg.train.log_steps == 0 or state.step == run.max_steps:
        total = accelerator.reduce(meter.sums, "sum")
        # A whole interval of skipped steps has no loss: null (valid JSON), never NaN, and the skips counted.
        row = {"step": state.step, "loss": finite((total[0] / total[3]).item())}
        row |= {"train_accuracy": finite((total[1] / total[2]).item()), "lr": run.scheduler.get_last_lr()[0]}
        if state.nonfinite_skipped:
            row["nonfinite_skipped"] = state.nonfinite_skipped
        state.history.append(row)
        append_log(run, row)
        accelerator.log({f"train/{k}": v for k, v in row.items() if k != "step" and v is not None}, step=state.step)
        bar.set_postfix(loss=_shown(row["loss"], 4), acc=_shown(row["train_accuracy"], 3))
        meter.sums.zero_()
    evaluating, periodic = cfg.train.eval_steps and state.step % cfg.train.eval_steps == 0, None
    if evaluating and state.step < run.max_steps and not stop:
        with explain_oom(cfg, "evaluation"):
            periodic = evaluate(run.model, run.eval_loader, accelerator, run.subsets)
        log_eval(accelerator, periodic, state.step)
    if hooks.suites is not None and (evaluating or state.step == run.max_steps) and not stop:
        hooks.suites(run.model, state.step)
        if periodic is not None and getattr(hooks.suites, "last", None):  # a sweep may judge by a suite's score
            periodic["suites"] = dict(hooks.suites.last)
    if periodic is not None and hooks.on_eval is not None:
        hooks.on_eval(state.step, periodic)
    if stop or (cfg.train.save_steps and state.step % cfg.train.save_steps == 0):
        state.pending = accelerator.reduce(meter.sums, "sum").tolist()
        state.scheduler = run.scheduler.state_dict()
        state.diverged = diverged(run, periodic)  # finite weights whose rewards are not: marked, never exported
        checkpoint.save(accelerator, cfg, state, run.model)


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _shown(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def log_line(row: dict) -> str:
    """One train_log.jsonl row; a non-finite number (a row of a run saved before nulls) as null."""
    return json.dumps({k: finite(v) if isinstance(v, float) else v for k, v in row.items()}, allow_nan=False) + "\n"


def start_log(run: Run) -> None:
    """train_log.jsonl as the run stands (a resumed run's rows so far): rows are appended as they are logged,
    so a run stopped any way at all keeps its log up to the last log step."""
    if run.accelerator.is_main_process:
        write_text(RunDir(run.cfg.output_dir).train_log, "".join(log_line(r) for r in run.state.history))


def append_log(run: Run, row: dict) -> None:
    """Append a row; a write that fails (a full disk) leaves the log as it was, without half a row."""
    if not run.accelerator.is_main_process:
        return
    path = RunDir(run.cfg.output_dir).train_log
    with open(path, "ab", buffering=0) as f:
        before = f.seek(0, os.SEEK_END)
        try:
            f.write(log_line(row).encode())
        except OSError as e:
            os.truncate(path, before)
            raise no_space(path, e) if e.errno == errno.ENOSPC else e from None


def log_eval(accelerator: Accelerator, result: dict, step: int) -> None:
    """An eval result to the trackers and, on the main process, one log line."""
    metrics = {"eval/accuracy": result["overall"]["accuracy"], "eval/ece": result["overall"]["ece"]}
    metrics |= {f"eval/ece/{name}": m["ece"] for name, m in result["subsets"].items()}
    metrics |= {f"eval/accuracy/{name}": m["accuracy"] for name, m in result["subsets"].items()}
    for key in GROUP_METRICS:  # where the eval set has groups that define them (None: undefined, not logged)
        metrics |= {f"eval/{key}/{name}": m[key] for name, m in result["subsets"].items() if m.get(key) is not None}
        if result["overall"].get(key) is not None:
            metrics[f"eval/{key}"] = result["overall"][key]
    accelerator.log(metrics, step=step)
    if accelerator.is_main_process:
        log.info(
            "step %d eval accuracy %.4f (ECE %.4f) %s",
            step,
            metrics["eval/accuracy"],
            metrics["eval/ece"],
            {k: round(m["accuracy"], 4) for k, m in result["subsets"].items()},
        )
