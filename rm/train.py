"""One training run, top to bottom: accelerator, data and tokenizer, model, optimizer, loop, export.

Launch with `python -m rm train CONFIG [key=value ...]` or `accelerate launch -m rm train CONFIG`
(launcher configs in configs/accelerate/). Metrics stay on the device and are reduced across processes
once per `train.log_steps` optimizer steps; the loop's one host sync per optimizer step is the check
for a non-finite loss or a SIGTERM on any process (rm/faults.py). Checkpoints and resuming: rm/checkpoint.py.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import get_scheduler

from rm import checkpoint
from rm.batching import PairBatches
from rm.checkpoint import TrainState
from rm.collator import EncodedPair, PaddedCollator, encode_pairs
from rm.config import RunConfig, save_config, to_dict
from rm.data import load_data, subset_counts
from rm.evaluate import evaluate, format_table
from rm.export import RunData, export_model
from rm.faults import Preemption, explain_oom, skip_nonfinite
from rm.launch import exportable, make_accelerator, shut_down
from rm.layout import SharedCollator, choose_layout
from rm.lora import add_lora, load_4bit, require_qlora
from rm.loss import bradley_terry_loss
from rm.model import RewardModel, build_model, pair_rewards, transformers_model
from rm.tokenizer import load_tokenizer, train_bpe

log = logging.getLogger("rm")

SCHEDULERS = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}


def make_tokenizer(cfg: RunConfig, train_texts: list[str], out: Path, accelerator: Accelerator):
    """Load the named tokenizer, or train a BPE on the training texts (once, on the main process)."""
    name = cfg.tokenizer.name_or_path or cfg.model.name_or_path
    if name:
        return load_tokenizer(name, cfg.model.trust_remote_code)
    with accelerator.main_process_first():
        if accelerator.is_main_process:
            train_bpe(train_texts, cfg.tokenizer.vocab_size).save_pretrained(out / "tokenizer")
        return load_tokenizer(str(out / "tokenizer"))


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only: decaying norms' gains and biases pulls them to zero for no benefit."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


def encode(cfg: RunConfig, data, tokenizer, subsets: list[str]) -> tuple[list[EncodedPair], list[EncodedPair]]:
    """Both splits tokenized; what truncation cost is logged and noted in the data report."""
    train_set, train_report = encode_pairs(data.train, tokenizer, cfg.collator.max_length, subsets)
    eval_set, eval_report = encode_pairs(data.eval, tokenizer, cfg.collator.max_length, subsets)
    for split, rep in (("train", train_report), ("eval", eval_report)):
        data.report.notes.setdefault("encoding", {"max_length": cfg.collator.max_length})[split] = {
            "kept": rep.kept,
            "prompt_truncated": rep.prompt_truncated,
            "prompt_cut_inside_turn": rep.prompt_cut_inside_turn,
            "dropped_too_long": len(rep.too_long),
            "dropped_too_long_origins": rep.too_long,
        }
        if rep.prompt_truncated or rep.too_long:
            log.warning(
                "%s: %d prompts lost leading turns to fit max_length=%d (%d cut inside their last turn); "
                "%d pairs dropped (responses alone too long), first: %s",
                split,
                rep.prompt_truncated,
                cfg.collator.max_length,
                rep.prompt_cut_inside_turn,
                len(rep.too_long),
                rep.too_long[:3],
            )
    return train_set, eval_set


def main(
    cfg: RunConfig,
    on_batch: Callable[[dict, torch.Tensor], None] | None = None,
    on_eval: Callable[[int, dict], None] | None = None,
) -> dict:
    """Train, evaluate and export one run; return the final eval result (as written to eval.json).

    `on_batch(batch, loss)` is called after every micro-batch's backward pass: the benchmarks use it
    to count pairs and tokens without a second copy of this loop. `on_eval(step, result)` is called on
    every process after each periodic eval (`train.eval_steps`); sweeps report it to Optuna and prune
    a weak trial by raising from it (rm/sweep_trial.py).
    """
    # -- accelerator, seed, run directory --------------------------------------------------------
    out = Path(cfg.output_dir)
    accelerator = make_accelerator(cfg)
    resume_from = checkpoint.resume_point(cfg)  # a wrong train.resume fails now, not after loading data
    if cfg.model.lora.qlora:
        require_qlora(cfg.model)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    set_seed(cfg.train.seed)
    is_main = accelerator.is_main_process
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out / "config.yaml")
    logging.basicConfig(level=logging.INFO if is_main else logging.WARNING, format="%(message)s")
    started = time.perf_counter()

    # -- data and tokenizer ------------------------------------------------------------------------
    # A named tokenizer comes first: its chat template (if any) renders message-list data.
    named = cfg.tokenizer.name_or_path or cfg.model.name_or_path
    chat_tokenizer = load_tokenizer(named, cfg.model.trust_remote_code) if named else None
    with accelerator.main_process_first():  # the main process writes generated data first
        data = load_data(cfg.data, out, chat_tokenizer)
    train_pairs, eval_pairs = data.train, data.eval
    subsets = sorted(set(subset_counts(train_pairs)) | set(subset_counts(eval_pairs)))
    log.info("data: %d train pairs %s, %d eval pairs", len(train_pairs), subset_counts(train_pairs), len(eval_pairs))
    texts = [t for p in train_pairs for t in (p.prompt, p.chosen, p.rejected)]
    tokenizer = chat_tokenizer or make_tokenizer(cfg, texts, out, accelerator)
    train_set, eval_set = encode(cfg, data, tokenizer, subsets)
    for line in data.report.describe():
        (log.warning if line.startswith(("skipped", "repaired")) else log.info)("data: %s", line)
    if is_main:
        data.report.write(out)  # data_report.json and skipped.jsonl
    if not train_set:
        raise SystemExit(f"no training pairs left after encoding (max_length={cfg.collator.max_length})")

    # -- model and batch layout --------------------------------------------------------------------
    def new_model(quantized: bool = False) -> RewardModel:
        if quantized:
            hf = load_4bit(cfg.model, len(tokenizer), tokenizer.pad_token_id, accelerator.local_process_index)
        else:
            hf = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
        return RewardModel(add_lora(hf, cfg.model.lora) if cfg.model.lora.r else hf)

    with explain_oom(cfg, "loading the model"):
        model = new_model(quantized=cfg.model.lora.qlora)
        hf = transformers_model(model.hf)
        n_params = sum(p.numel() for p in model.parameters())
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        log.info("model: %s, %.2fM parameters, %.2fM trained", type(hf).__name__, n_params / 1e6, n_train / 1e6)
        layout, why = choose_layout(model.to(accelerator.device), cfg.collator.layout, tokenizer.pad_token_id)
    log.info("layout: %s (%s)", layout, why)
    c = cfg.collator
    pad = tokenizer.pad_token_id
    collate = SharedCollator(pad, c.pack_length) if layout == "shared" else PaddedCollator(pad)
    train_batches = PairBatches(
        train_set, layout, cfg.train.batch_size, c.max_tokens, True, cfg.train.seed, c.group_pairs, c.pack_length
    )
    eval_batches = PairBatches(
        eval_set, layout, cfg.train.eval_batch_size, c.eval_max_tokens, False, 0, c.group_pairs, c.pack_length
    )
    train_loader = DataLoader(train_set, batch_sampler=train_batches, collate_fn=collate)
    eval_loader = DataLoader(eval_set, batch_sampler=eval_batches, collate_fn=collate)

    # -- optimizer and schedule ------------------------------------------------------------------
    optimizer = torch.optim.AdamW(param_groups(model, cfg.train.weight_decay), lr=cfg.train.lr)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    steps_per_epoch = math.ceil(len(train_loader) / cfg.train.grad_accum)
    max_steps = cfg.train.max_steps or max(1, math.ceil(cfg.train.epochs * steps_per_epoch))
    # Stepped by hand once per optimizer step (not prepared: accelerate would step it per process).
    scheduler = get_scheduler(
        SCHEDULERS[cfg.train.scheduler],
        optimizer,
        num_warmup_steps=round(cfg.train.warmup_ratio * max_steps),
        num_training_steps=max_steps,
    )
    if cfg.train.report_to:
        accelerator.init_trackers("rm", config=_flat(to_dict(cfg)))
    state = checkpoint.load(accelerator, resume_from, cfg, scheduler) if resume_from else TrainState()

    # -- loop ------------------------------------------------------------------------------------
    with explain_oom(cfg, "training", state):
        loaders = (train_loader, train_batches, eval_loader)
        interrupted = fit(
            cfg, accelerator, model, optimizer, scheduler, loaders, subsets, state, max_steps, on_batch, on_eval
        )
    seconds = round(time.perf_counter() - started, 1)
    train_info = {
        "steps": state.step,
        "epochs": round(state.epoch + state.batches_in_epoch / len(train_loader), 3),
        "seconds": seconds,
        "nonfinite_skipped": state.nonfinite_skipped,
        "resumed_from": str(resume_from) if resume_from else None,
        "processes": accelerator.num_processes,
    }
    if is_main:
        (out / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in state.history))
    if interrupted:  # SIGTERM: checkpoint saved; a final eval and export could outlast the grace period
        if is_main:
            print(f"\nstopped by SIGTERM after step {state.step} ({seconds} s); checkpoint saved.")
            print(f"continue with: python -m rm train {out}/config.yaml train.resume=auto (or accelerate launch …)")
        del model, optimizer, scheduler
        shut_down(accelerator)
        return {"interrupted": True, "train": train_info}

    # -- final eval, save, export ----------------------------------------------------------------
    with explain_oom(cfg, "evaluation"):
        result = evaluate(model, eval_loader, accelerator, subsets)
    _log_eval(accelerator, result, state.step)
    result["train"] = train_info
    accelerator.wait_for_everyone()
    trained = exportable(accelerator, model, new_model) if cfg.export.enabled else None  # every process
    if is_main:
        (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
        if cfg.export.enabled and cfg.model.lora.qlora:
            log.warning("export skipped: merging LoRA into 4-bit weights loses precision; QLoRA keeps checkpoints")
        elif cfg.export.enabled:
            export_model(
                trained,  # a PeftModel under LoRA: merged into the base weights
                tokenizer,
                out / "export",
                cfg,
                step=state.step,
                final_step=state.step,
                eval_result=result,
                data=RunData(subsets, train_set, eval_set),
                normalize=cfg.export.normalize,
                overwrite=True,
            )
        print(f"\nheld-out accuracy after {state.step} steps ({seconds} s):")
        print(format_table(result))
        print(f"run directory: {out}")
    del model, optimizer, scheduler
    shut_down(accelerator)
    return result


def fit(
    cfg: RunConfig,
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    loaders: tuple[DataLoader, PairBatches, DataLoader],
    subsets: list[str],
    state: TrainState,
    max_steps: int,
    on_batch: Callable[[dict, torch.Tensor], None] | None = None,
    on_eval: Callable[[int, dict], None] | None = None,
) -> bool:
    """Optimizer steps from `state` up to `max_steps`, logging, evaluating and checkpointing on the way.

    `loaders` are the prepared train loader, its PairBatches and the prepared eval loader. Returns True
    when a SIGTERM stopped it (after saving a checkpoint). `state` is updated in place.
    """
    train_loader, train_batches, eval_loader = loaders
    device = accelerator.device
    # [loss, train accuracy, finite micro-batches] summed since the last log line, on the device.
    sums = torch.zeros(3, device=device)
    if accelerator.is_main_process:  # a resumed run's sums were saved already reduced over processes
        sums += torch.tensor(state.pending, device=device)
    bad = torch.zeros((), device=device)  # micro-batches of this optimizer step with a non-finite loss
    stop = 0.0
    # Redraw at most every 10 s when stderr is a log file rather than a terminal.
    interval = 0.1 if sys.stderr.isatty() else 10.0
    bar = tqdm(
        total=max_steps,
        initial=state.step,
        desc="train",
        disable=not accelerator.is_main_process,
        dynamic_ncols=True,
        mininterval=interval,
    )
    model.train()
    with Preemption() as preemption:
        while state.step < max_steps:
            train_loader.set_epoch(state.epoch)  # the prepared loader passes the epoch on to PairBatches...
            train_batches.set_epoch(state.epoch)  # ...except under DDP, where a sharding sampler wraps it
            # A resumed run skips the micro-batches its checkpoint had consumed (same plan: same seed and epoch).
            skip = state.batches_in_epoch
            loader = accelerator.skip_first_batches(train_loader, skip) if skip else train_loader
            for batch in loader:
                with accelerator.accumulate(model):
                    chosen, rejected = pair_rewards(model, batch)
                    margin = batch["margin"] if cfg.loss.use_margin else None
                    loss = bradley_terry_loss(chosen, rejected, margin, cfg.loss.center_rewards_coef)
                    accelerator.backward(loss)
                    ok = torch.isfinite(loss.detach())
                    bad += ~ok
                    accuracy = (chosen > rejected).float().mean().detach()
                    sums += ok * torch.stack([loss.detach().nan_to_num(), accuracy, torch.ones_like(accuracy)])
                    if accelerator.sync_gradients:
                        # The one host sync per optimizer step: a non-finite loss or a SIGTERM on any process?
                        flags = accelerator.reduce(torch.stack([bad, bad.new_tensor(preemption.requested)]), "sum")
                        n_bad, stop = flags.tolist()
                        lr = scheduler.get_last_lr()[0]
                        if not skip_nonfinite(int(n_bad), state.step + 1, state, cfg, lr, model):
                            if cfg.train.max_grad_norm > 0:
                                accelerator.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
                            optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                        bad.zero_()
                if on_batch is not None:
                    on_batch(batch, loss)
                state.batches_in_epoch += 1
                if not accelerator.sync_gradients:
                    continue
                state.step += 1
                scheduler.step()
                bar.update(1)
                if state.step % cfg.train.log_steps == 0 or state.step == max_steps:
                    total = accelerator.reduce(sums, "sum")
                    row = {"step": state.step, "loss": (total[0] / total[2]).item()}
                    row |= {"train_accuracy": (total[1] / total[2]).item(), "lr": scheduler.get_last_lr()[0]}
                    state.history.append(row)
                    accelerator.log({f"train/{k}": v for k, v in row.items() if k != "step"}, step=state.step)
                    bar.set_postfix(loss=f"{row['loss']:.4f}", acc=f"{row['train_accuracy']:.3f}")
                    sums.zero_()
                evaluating = cfg.train.eval_steps and state.step % cfg.train.eval_steps == 0
                if evaluating and state.step < max_steps and not stop:
                    with explain_oom(cfg, "evaluation"):
                        periodic = evaluate(model, eval_loader, accelerator, subsets)
                    _log_eval(accelerator, periodic, state.step)
                    if on_eval is not None:
                        on_eval(state.step, periodic)
                if stop or (cfg.train.save_steps and state.step % cfg.train.save_steps == 0):
                    state.pending = accelerator.reduce(sums, "sum").tolist()
                    state.scheduler = scheduler.state_dict()
                    checkpoint.save(accelerator, cfg, state, model)
                if stop:
                    bar.close()
                    log.warning("SIGTERM: stopped after step %d with a checkpoint", state.step)
                    return True
                if state.step >= max_steps:
                    break
            else:  # the epoch's batches are all consumed
                state.epoch += 1
                state.batches_in_epoch = 0
    bar.close()
    return False


def _log_eval(accelerator: Accelerator, result: dict, step: int) -> None:
    metrics = {"eval/accuracy": result["overall"]["accuracy"], "eval/ece": result["overall"]["ece"]}
    metrics |= {f"eval/ece/{name}": m["ece"] for name, m in result["subsets"].items()}
    metrics |= {f"eval/accuracy/{name}": m["accuracy"] for name, m in result["subsets"].items()}
    accelerator.log(metrics, step=step)
    if accelerator.is_main_process:
        log.info(
            "step %d eval accuracy %.4f (ECE %.4f) %s",
            step,
            metrics["eval/accuracy"],
            metrics["eval/ece"],
            {k: round(m["accuracy"], 4) for k, m in result["subsets"].items()},
        )


def _flat(d: dict, prefix: str = "") -> dict:
    """Trackers want flat scalars: {"train": {"lr": 1}} -> {"train.lr": 1}; lists become strings."""
    flat = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat |= _flat(v, f"{prefix}{k}.")
        else:
            flat[prefix + k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return flat
