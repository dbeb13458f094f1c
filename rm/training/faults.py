"""What a long run meets and must survive or explain: pre-emption (SIGTERM), non-finite losses, out of memory.

- SIGTERM (a cluster pre-empting the job) or a first Ctrl-C only sets a flag; the loop sees it at the next optimizer
  step boundary, saves a checkpoint and returns, so nothing is lost and nothing is left half-written. The run
  then exits 128 + the signal (143, 130: `exit_code`), on every process, so that `train && export` and a job
  scheduler see a run that did not finish. Before training starts, SIGTERM raises `Terminated` as Ctrl-C
  raises KeyboardInterrupt, so that the start takes back what it wrote (rm/training/output_dir.py).
- A step whose loss is non-finite on any process is skipped (no update, the data moves on) and counted;
  `train.max_nonfinite` in a row stop the run with the step and the likely cause. Non-finite weights are never
  checkpointed (`finite_weights`).
- Finite weights whose rewards are not (train.lr=1e30 leaves weights near 5e29, whose rewards overflow) diverged:
  each checkpoint is probed as it is saved (`diverged`: the eval of that step where one ran, else the eval set's
  first micro-batch on every process, a forward small beside writing the checkpoint) and marked in its
  trainer_state.json; such a checkpoint is never resumed by resume=auto, never pruned in favour of the newest good
  one, and refused by `rm export` and `rm serve`. A final eval with non-finite rewards ends the run with exit 1,
  no eval.json and no export (`diverged_error`).
- An out-of-memory error is re-raised naming the settings that lower memory, with their current values.
- A model or tokenizer that cannot be loaded is one line naming the config key (`loading`).
- Processes that planned different batches fail at once, naming the difference, instead of waiting on each
  other forever (`same_plan_everywhere`).
"""

from __future__ import annotations

import logging
import signal
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from torch.utils.data import DataLoader

from rm.collate.planner import PairBatches
from rm.collate.shard import RankBatches
from rm.config import RunConfig
from rm.errors import ModelError, TrainingError
from rm.export.restore import newest_good, rewards_not_finite
from rm.model.pretrained import why_not_loaded
from rm.model.reward import group_outputs

log = logging.getLogger("rm")


class Terminated(KeyboardInterrupt):
    """SIGTERM before training started: handled as a Ctrl-C is (the start takes back what it wrote), exit 143."""

    signum = signal.SIGTERM


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """While loading and building (no checkpoint to save yet), SIGTERM raises `Terminated` in the main thread
    instead of killing the process outright, so that `finally` and `except` blocks still run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_code(result: dict) -> int:
    """A run's exit status: 0 when it ran to its end (or had already), 128 + the signal that stopped it early
    (143 for SIGTERM, 130 for Ctrl-C), as shells and job schedulers read a process stopped by a signal."""
    return 128 + signal.Signals[result["stopped_by"]] if result.get("interrupted") else 0


class Preemption:
    """While active, SIGTERM and a first Ctrl-C (SIGINT) set `requested` instead of killing the process.

    The loop then saves a checkpoint at the end of the optimizer step and stops, printing how to resume
    (a Ctrl-C used to leave a traceback and nothing to resume from). A second Ctrl-C stops at once:
    the handler gives SIGINT back to Python, which raises KeyboardInterrupt. The handler does nothing
    else (no logging: it may interrupt code that holds the logging lock).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.requested = False
        self.signum = 0
        """Which signal asked this process to stop (SIGTERM or SIGINT; 0: none)."""
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, no checkpoint
        self.requested = True
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous = {}


def skip_nonfinite(
    n_bad: int, step: int, state, cfg: RunConfig, lr: float, model: torch.nn.Module, what: str = "loss"
) -> bool:
    """Count optimizer step `step` as skipped when `n_bad` micro-batches (over all processes) had a
    non-finite loss (or, `what="gradient"`, the step's clipped gradient norm was non-finite); raise once
    `train.max_nonfinite` steps in a row were. `state` holds the counts."""
    if n_bad == 0:
        state.nonfinite_streak = 0
        return False
    state.nonfinite_skipped += 1
    state.nonfinite_streak += 1
    where = f"in {n_bad} micro-batch(es)" if what == "loss" else "norm with a finite loss"
    log.warning(
        "step %d: non-finite %s %s; optimizer step skipped (%d in a row, %d in this run)",
        step,
        what,
        where,
        state.nonfinite_streak,
        state.nonfinite_skipped,
    )
    if state.nonfinite_streak >= cfg.train.max_nonfinite:
        first = step - state.nonfinite_streak + 1
        raise TrainingError(
            f"stopping at step {step}: the {what} was non-finite at {state.nonfinite_streak} optimizer steps in a row "
            f"(steps {first}-{step}, train.max_nonfinite={cfg.train.max_nonfinite}). "
            f"Likely cause: {likely_cause(cfg, first, lr, model)}"
        )
    return True


def finite_weights(accelerator: Accelerator, model: torch.nn.Module) -> bool:
    """Whether every process's weights (its shards, under FSDP or DeepSpeed) are finite: one reduction, so that a
    diverged model is never checkpointed (else pruning could leave a run only non-finite checkpoints, the last good
    one gone)."""
    shards = [local_shard(p.detach()) for p in model.parameters()]
    flags = [torch.isfinite(t).all() for t in shards if t.numel()]
    bad = (~torch.stack(flags)).sum() if flags else torch.zeros(())
    return accelerator.reduce(bad.to(accelerator.device, torch.float32), "sum").item() == 0


@torch.no_grad()
def probe(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator) -> str:
    """Why the model's outputs on every process's first eval micro-batch (the same pairs at every save) show that
    it diverged, or '' where all are finite; the same answer on every process."""
    # iter(DataLoader) draws a worker seed from the global RNG: drawn on a fork, the RNG a resumed run restores
    # from this checkpoint is the one the uninterrupted run goes on with.
    with torch.random.fork_rng(devices=[]):
        batch = next(iter(loader))
    was_training = model.training
    model.eval()
    try:
        out = group_outputs(model, send_to_device(batch, accelerator.device))  # [responses] or [responses, 1 + A]
    finally:
        model.train(was_training)
    counts = torch.stack([(~torch.isfinite(out)).sum(), torch.tensor(out.numel(), device=out.device)]).float()
    bad, n = (int(c) for c in accelerator.reduce(counts, "sum").tolist())
    return f"{bad} of {n} outputs on a fixed probe batch (the first eval batch) are not finite" if bad else ""


def diverged(run, periodic: dict | None) -> str:
    """Why the weights of `run` (a rm.training.loop.Run) diverged at this step, or '': the eval of this step where
    one ran, else the probe batch."""
    if periodic is not None and rewards_not_finite(periodic):
        return "its mean rewards on the eval set are not finite"
    return probe(run.model, run.eval_loader, run.accelerator)


def diverged_error(run) -> TrainingError:
    """The end of a run whose final eval scored non-finite rewards: nothing of it is exported or called finished."""
    state, cfg = run.state, run.cfg
    good = newest_good(cfg.output_dir)
    kept = f"the newest good checkpoint is {good}" if good else "no checkpoint of it holds good weights"
    first = state.step - state.nonfinite_streak + 1 if state.nonfinite_streak else state.step
    lr = next((r["lr"] for r in state.history if r["step"] >= first), run.scheduler.get_last_lr()[0])
    return TrainingError(
        f"the run diverged: its rewards on the eval set are not finite after step {state.step} "
        f"({state.nonfinite_skipped} optimizer steps skipped for a non-finite loss); no eval.json and no export "
        f"written, {kept}. Likely cause: {likely_cause(cfg, first, lr, run.model)}"
    )


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """This process's part of a parameter: an FSDP2 DTensor's local shard (a check on the DTensor itself would be a
    collective of its own, per parameter, inside the reduction below), or the tensor."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def likely_cause(cfg: RunConfig, first_bad_step: int, lr: float, model: torch.nn.Module) -> str:
    t = cfg.train
    fp16 = t.mixed_precision == "fp16" or cfg.model.dtype == "float16"
    broken = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    weights = f"; {len(broken)} parameter tensors are non-finite themselves (e.g. {broken[0]})" if broken else ""
    if fp16:
        return (
            "float16 overflow (train.mixed_precision=fp16 or model.dtype=float16): use bf16 "
            f"(train.mixed_precision=bf16) or float32{weights}"
        )
    if first_bad_step == 1:
        return (
            "the loss was non-finite before any update, so it is the data or the model, not the learning rate: "
            f"check the pairs (python -m rm data inspect) and model.dtype={cfg.model.dtype}{weights}"
        )
    return (
        f"divergence: the learning rate is too high for this model (train.lr={t.lr:g}, {lr:.3g} at step "
        f"{first_bad_step}): lower train.lr, raise train.warmup_ratio (now {t.warmup_ratio:g}) or keep "
        f"train.max_grad_norm > 0 (now {t.max_grad_norm:g}){weights}"
    )


def oom_advice(cfg: RunConfig, phase: str, step: int | None = None) -> str:
    """What to lower, with current values, for an out-of-memory error in `phase` (model, training, evaluation)."""
    c, t, m = cfg.collator, cfg.train, cfg.model
    where = f"out of memory while {phase}" + (f" (optimizer step {step})" if step is not None else "")
    if phase == "evaluation":
        knobs = [
            f"train.eval_batch_size (now {t.eval_batch_size})",
            f"collator.eval_max_tokens (now {c.eval_max_tokens or 'off'})",
            f"collator.max_length (now {c.max_length})",
        ]
    else:
        knobs = [
            f"train.batch_size (now {t.batch_size}; raise train.grad_accum, now {t.grad_accum}, to keep the "
            "global batch)",
            f"collator.max_tokens (now {c.max_tokens or 'off: fixed-size batches'})",
            f"collator.max_length (now {c.max_length})",
        ]
        if not m.gradient_checkpointing:
            knobs.append("or turn on model.gradient_checkpointing=true")
    if phase == "loading the model" or not m.lora.r:
        knobs.append(f"or train LoRA adapters (model.lora.r=16{', model.lora.qlora=true' if m.name_or_path else ''})")
    if m.dtype == "float32":
        knobs.append("or load in bf16 (model.dtype=bfloat16)")
    knobs.append("or shard the model over GPUs (configs/accelerate/fsdp.yaml, deepspeed-zero3.yaml)")
    return f"{where}: lower " + ", ".join(knobs)


@contextmanager
def explain_oom(cfg: RunConfig, phase: str, state=None) -> Iterator[None]:
    """Turn an out-of-memory error into a TrainingError naming the settings to lower."""
    try:
        yield
    except torch.OutOfMemoryError as e:
        step = state.step + 1 if state is not None else None
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TrainingError(f"{oom_advice(cfg, phase, step)}\n({first_line})") from e


@contextmanager
def loading(key: str, name: str) -> Iterator[None]:
    """A model or tokenizer that transformers cannot find becomes one line naming the config key, not 80
    lines of traceback. transformers raises OSError for every kind: missing folder, bad repo id, offline."""
    try:
        yield
    except OSError as e:
        raise ModelError(f"{key}={name}: cannot load it: {why_not_loaded(name, e)}") from None


def same_plan_everywhere(accelerator: Accelerator, plan: PairBatches, mine: RankBatches) -> None:
    """Fail, naming the difference, where processes planned different batches (different data or lengths):
    they would otherwise wait on each other forever at the first step one of them does not take."""
    if accelerator.num_processes == 1:
        return
    ours = [len(mine), zlib.crc32(repr(plan.batches()).encode()), len(plan.pairs)]
    every = accelerator.gather(torch.tensor(ours, device=accelerator.device)).view(-1, 3).tolist()
    if any(row != every[0] for row in every):
        raise TrainingError(
            "processes planned different batches (micro-batches each, plan checksum, pairs): "
            + ", ".join(f"process {r}: {row}" for r, row in enumerate(every))
        )
