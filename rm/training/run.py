"""One training run, top to bottom: accelerator, data and tokenizer, model, optimizer, loop, eval and export.

Launch with `python -m rm train CONFIG [key=value ...]` or `accelerate launch -m rm train CONFIG` (launcher
configs in configs/accelerate/). `main` is the run in reading order, one named step each; the loop is `loop.fit`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from torch.utils.data import DataLoader
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rm.collate.loss_labels import for_loss
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches, RankBatches
from rm.config import RunConfig
from rm.config.atomic import disk_full_explained
from rm.config.rundir import RunDir, absolute_paths, record_written
from rm.errors import DataError
from rm.evaluation.gather import evaluate, shut_down
from rm.evaluation.metrics import write_eval
from rm.export.folder import ExportOptions, RunData, Weights, export_model
from rm.export.hub import check_push
from rm.export.restore import rewards_not_finite
from rm.export.steps.token_export import exportable_as_steps
from rm.model.build import build_model, given_model
from rm.model.length.length_report import length_head_result
from rm.model.lora import add_lora, load_4bit, require_qlora
from rm.model.objective import check_consumed, group_weights, loss_parameters
from rm.model.pretrained import fresh_head_load
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel, transformers_model
from rm.model.threads import busy_note, set_threads
from rm.tokens.prepare import Prepared, prepare_data
from rm.tokens.steps.step_columns import stepwise_split
from rm.tokens.tokenizer import training_tokenizer
from rm.training import checkpoint
from rm.training.accelerator import exportable, make_accelerator, start_trackers
from rm.training.checkpoint import TrainState
from rm.training.console import data_line, has_groups, shown, stopped, summary
from rm.training.faults import diverged_error, explain_oom, loading, same_plan_everywhere, sigterm_raises
from rm.training.loop import Hooks, Run, fit, log_eval
from rm.training.optim import make_optimizer, make_scheduler
from rm.training.output_dir import Start, check_output_dir, claim_output_dir, finished_result, push_export, unclaimed
from rm.training.run_lock import run_dir_lock
from rm.training.suite_evals import SuiteEvals, suite_evals

log = logging.getLogger("rm")

COLLATORS = {"shared": SharedCollator, "packed": PackedCollator}
SCHEDULERS = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}


def main(
    cfg: RunConfig,
    on_batch: Callable[[dict, torch.Tensor], None] | None = None,
    on_eval: Callable[[int, dict], None] | None = None,
    *,
    given: PreTrainedModel | None = None,
    write_data: Callable[[Path], None] | None = None,
) -> dict:
    """Train, evaluate and export one run; return the final eval result (as written to eval.json).

    `on_batch(batch, loss)` is called after every micro-batch's backward pass: the benchmarks use it
    to count pairs and tokens without a second copy of the loop. `on_eval(step, result)` is called on
    every process after each periodic eval (`train.eval_steps`); a sweep reports it to its study and
    stops a weak trial by raising from it (rm/sweep/trial.py).
    `given`: a loaded model trained in place of the config's (one process); `write_data(<output_dir>/data)` writes
    the data on the main process inside the claim, so the files are recorded as the run's (train.overwrite's).
    """
    started, given_dir = time.perf_counter(), cfg.output_dir  # the hints show the path as it was typed
    cfg = absolute_paths(cfg)  # as its saved config.yaml says, so that a resumed run reads the same paths
    accelerator = make_accelerator(cfg)
    # One run at a time in output_dir, taken before anything there is looked at (rm/training/run_lock.py);
    # a full disk anywhere is one line naming the path and the space left, the last checkpoint kept.
    with run_dir_lock(cfg.output_dir, accelerator), disk_full_explained(cfg.output_dir):
        with sigterm_raises():  # until fit: no checkpoint to save yet, so SIGTERM stops as a Ctrl-C does
            where = start(cfg, accelerator)
            if where is Start.FINISHED:  # train.resume of a finished run: nothing to resume, nothing touched
                shut_down(accelerator)
                return finished_result(cfg, accelerator.is_main_process)
            resume_from = checkpoint.resume_point(cfg) if cfg.train.resume else None
            cfg = checkpoint.checked_resume(cfg, resume_from, accelerator.num_processes)
            with unclaimed(cfg, where, accelerator.is_main_process) as ours:  # a failure leaves output_dir as it was
                if write_data is not None and accelerator.is_main_process:
                    write_data(RunDir(cfg.output_dir).data)
                data = load_and_encode(cfg, accelerator)  # prepare_data: the main process first, the others after
                suites = suite_evals(cfg, data.tokenizer, accelerator)  # train.eval_suites: read before training
                with explain_oom(cfg, "loading the model"):
                    model, layout, new_model = build_reward_model(cfg, accelerator, data.tokenizer, given)
                if cfg.export.enabled and stepwise_split(data.train):  # its export: a token classifier
                    exportable_as_steps(transformers_model(model.hf).config)
                accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                claim_output_dir(cfg, ours)  # training starts: the folder is this run's
            accelerator.wait_for_everyone()
            run = set_up(cfg, accelerator, data, model, layout, resume_from)
        with explain_oom(cfg, "training", run.state):
            interrupted = fit(run, Hooks(on_batch, on_eval, suites))
        info = train_info(run, resume_from, started)
        result = stopped(run, info, given_dir) if interrupted else finish(run, data, new_model, info, suites, given_dir)
        main_process = accelerator.is_main_process
        del model, run  # the DDP wrapper must go before the process group (see shut_down)
        shut_down(accelerator)
    if cfg.export.push_to_hub and main_process and not interrupted:
        push_export(cfg)
    return result


def start(cfg: RunConfig, accelerator: Accelerator) -> Start:
    """What the run does with its output_dir (checked by every process before any data is loaded), seed."""
    if cfg.export.push_to_hub:
        check_push(cfg.export.push_to_hub)  # a missing token found now, not after hours of training
    where = check_output_dir(cfg)
    accelerator.wait_for_everyone()  # no process writes there before every one has looked
    if cfg.model.lora.qlora:
        require_qlora(cfg.model)
    threads = set_threads(cfg.train.num_threads)  # 0: the cores this process may use, shared by local processes
    set_seed(cfg.train.seed)
    logging.basicConfig(level=logging.INFO if accelerator.is_main_process else logging.WARNING, format="%(message)s")
    if not cfg.train.num_threads and (note := busy_note(threads)):
        log.info(note)
    return where


def load_and_encode(cfg: RunConfig, accelerator: Accelerator) -> Prepared:
    """Pairs loaded, the tokenizer (a named one first: its chat template renders message lists), both splits
    encoded, by the main process first or from the cache (rm/tokens/prepare.py); then what the loss makes of them."""
    named = cfg.tokenizer.name_or_path or cfg.model.name_or_path
    with loading("tokenizer.name_or_path" if cfg.tokenizer.name_or_path else "model.name_or_path", named):
        tokenizer = training_tokenizer(named, cfg.model.trust_remote_code) if named else None
    first, main = accelerator.main_process_first, accelerator.is_main_process  # labels checked before tokenizing:
    data = prepare_data(cfg, tokenizer, first, main, lambda counts: check_consumed(cfg, counts))
    for_loss(cfg, data)  # after the cache: Plackett-Luce's cycles, soft targets (rm/collate/loss_labels.py)
    log.info(data_line(data))  # pairs, or groups and their K
    for line in data.report.describe():
        (log.warning if line.startswith(("skipped", "repaired", "overlap")) else log.info)("data: %s", line)
    if accelerator.is_main_process:
        data.report.write(Path(cfg.output_dir))  # data_report.json and skipped.jsonl
    check_not_empty(cfg, data)
    return data


def check_not_empty(cfg: RunConfig, data: Prepared) -> None:
    """Nothing to train or nothing to evaluate is an error, not a run that "succeeds" with `nan, n=0`."""
    for name, split, encoded in (("training", "train", data.train), ("eval", "eval", data.eval)):
        if not len(encoded):
            raise DataError(
                f"no {name} pairs left after encoding ({sum(data.loaded[split].values())} loaded, all dropped because "
                f"their responses alone exceed collator.max_length={cfg.collator.max_length} tokens): raise "
                "collator.max_length"
            )


def build_reward_model(
    cfg: RunConfig, accelerator: Accelerator, tokenizer: PreTrainedTokenizerBase, given: PreTrainedModel | None = None
) -> tuple[RewardModel, str, Callable[[], RewardModel]]:
    """The reward model (the `given` one, if any) on this process's device, its batch layout, how to build a copy."""

    def new_model(quantized: bool = False) -> RewardModel:
        if given is not None:
            hf = given_model(given, cfg.model, len(tokenizer), tokenizer.pad_token_id, cfg.collator.max_length)
        elif quantized:
            hf = load_4bit(cfg.model, len(tokenizer), tokenizer.pad_token_id, accelerator.local_process_index)
        else:
            max_length = cfg.collator.max_length  # refused above the model's position limit
            with fresh_head_load(cfg.model.name_or_path):  # the head made fresh: what transformers reports is expected
                hf = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, max_length)
        return RewardModel(add_lora(hf, cfg.model.lora) if cfg.model.lora.r else hf, *loss_parameters(cfg))

    with loading("model.name_or_path", cfg.model.name_or_path):
        model = new_model(quantized=cfg.model.lora.qlora)
    n_params = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    name = type(transformers_model(model.hf)).__name__
    log.info("model: %s, %.2fM parameters, %.2fM trained", name, n_params / 1e6, n_train / 1e6)
    layout, why = choose_layout(model.to(accelerator.device), cfg.collator.layout, tokenizer.pad_token_id)
    log.info("layout: %s (%s)", layout, why)
    return model, layout, new_model


def set_up(
    cfg: RunConfig, accelerator: Accelerator, data: Prepared, model: RewardModel, layout: str, resume_from: Path | None
) -> Run:
    """This process's loaders, the model and optimizer through `accelerator.prepare`, the schedule; the run's state,
    restored if resuming. Every process plans all the micro-batches alike and keeps its own share (rm/collate/
    shard.py); the loaders are not prepared, since accelerate's sharding assumes batches of a fixed size."""
    c, t = cfg.collator, cfg.train
    pad = data.tokenizer.pad_token_id
    collate = COLLATORS[layout](pad, c.pack_length) if layout in COLLATORS else PaddedCollator(pad)
    rank, world = accelerator.process_index, accelerator.num_processes
    train_plan = PairBatches(
        pairs=data.train,
        layout=layout,
        batch_size=t.batch_size,
        max_tokens=c.max_tokens,
        shuffle=True,
        seed=t.seed if t.data_seed is None else t.data_seed,
        group_pairs=c.group_pairs,
        pack_length=c.pack_length,
        group_by_length=c.group_by_length,
    )
    eval_plan = PairBatches(
        pairs=data.eval,
        layout=layout,
        batch_size=t.eval_batch_size,
        max_tokens=c.eval_max_tokens,
        shuffle=False,  # the same batches at every eval
        group_pairs=c.group_pairs,
        pack_length=c.pack_length,
    )
    train_batches = RankBatches(train_plan, rank, world, t.grad_accum, group_weights(cfg.loss, data.train))
    train_loader = DataLoader(data.train, batch_sampler=train_batches, collate_fn=collate)
    eval_loader = DataLoader(data.eval, batch_sampler=EvalBatches(eval_plan, rank, world), collate_fn=collate)
    optimizer = make_optimizer(model, accelerator, t.lr, t.weight_decay)
    plugin = accelerator.state.deepspeed_plugin if accelerator.distributed_type == DistributedType.DEEPSPEED else None
    if plugin is not None and plugin.is_auto("train_micro_batch_size_per_gpu"):  # a number DeepSpeed only reports
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = t.batch_size
    same_plan_everywhere(accelerator, train_plan, train_batches)
    model, optimizer = accelerator.prepare(model, optimizer)
    steps_per_epoch = len(train_batches) // t.grad_accum  # a whole number: see rm/collate/shard.py
    max_steps = t.max_steps or max(1, math.ceil(t.epochs * steps_per_epoch))
    # Stepped by hand once per optimizer step (not prepared: accelerate would step it per process).
    warmup = round(t.warmup_ratio * max_steps)
    scheduler = make_scheduler(optimizer, SCHEDULERS[t.scheduler], warmup, max_steps)
    if t.report_to:
        start_trackers(accelerator, cfg)  # TensorBoard's files recorded in the manifest as the run's
    state = checkpoint.load(accelerator, resume_from, cfg, scheduler) if resume_from else TrainState()
    state.plan_slots = world * t.grad_accum
    state.max_steps = max_steps
    return Run(
        cfg=cfg,
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train_loader=train_loader,
        train_batches=train_batches,
        eval_loader=eval_loader,
        subsets=data.subsets,
        state=state,
        max_steps=max_steps,
    )


def train_info(run: Run, resume_from: Path | None, started: float) -> dict:
    """The "train" entry of eval.json: how far the run got and how long it took."""
    state = run.state
    return {
        "steps": state.step,
        "epochs": round(state.epoch + state.batches_in_epoch / len(run.train_loader), 3),
        "seconds": round(time.perf_counter() - started, 1),
        "nonfinite_skipped": state.nonfinite_skipped,
        "resumed_from": str(resume_from) if resume_from else None,
        "processes": run.accelerator.num_processes,
    }


def finish(
    run: Run, data: Prepared, new_model: Callable[[], RewardModel], info: dict, suites: SuiteEvals | None, given: str
) -> dict:
    """The final eval on every process (the suites' last scores beside it); eval.json, the export and the summary
    from the main process."""
    cfg, accelerator, out = run.cfg, run.accelerator, RunDir(run.cfg.output_dir)
    with explain_oom(cfg, "evaluation"):
        result = evaluate(run.model, run.eval_loader, accelerator, run.subsets)
    log_eval(accelerator, result, run.state.step)
    if rewards_not_finite(result):  # every process gathered the same result: all stop alike, before exporting
        raise diverged_error(run)
    result |= {"suites": dict(suites.last)} if suites is not None and suites.last else {}
    result |= length_head_result(run.model, run.eval_loader, accelerator, out.root)  # model.head.length's, if any
    result["train"] = info
    accelerator.wait_for_everyone()
    trained = exportable(accelerator, run.model, new_model) if cfg.export.enabled else None  # every process
    if accelerator.is_main_process:
        write_eval(out.eval_json, result)  # an undefined metric (NaN) as null
        record_written(out.root, [out.eval_json])  # its size and CRC-32, which train.overwrite checks
        if cfg.export.enabled and cfg.model.lora.qlora:
            log.warning("export skipped: merging LoRA into 4-bit weights loses precision; QLoRA keeps checkpoints")
        elif cfg.export.enabled:  # a PeftModel under LoRA: merged into the base weights
            weights = Weights(run.state.step, run.state.step, result)
            run_data = RunData(data.subsets, data.train, data.eval)
            steps = cfg.data.step_separator if stepwise_split(data.train) else ""  # a process reward model
            options = ExportOptions(normalize=cfg.export.normalize, overwrite=True, step_separator=steps)
            export_model(trained, data.tokenizer, out.export, cfg, weights, run_data, options)
        root = shown(out.root, given)
        print(summary(result, run.state.step, info["seconds"], root, has_groups(data, "eval")))
    return result
