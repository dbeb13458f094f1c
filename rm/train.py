"""One training run, top to bottom: accelerator, data and tokenizer, model, optimizer, loop, export.

Launch with `python -m rm train CONFIG [key=value ...]` or `accelerate launch -m rm train CONFIG`.
Metrics stay on the device and are reduced across processes once per `train.log_steps`
optimizer steps, so logging costs no host sync per micro-batch.
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

from rm.batching import PairBatches
from rm.collator import PaddedCollator, encode_pairs
from rm.config import RunConfig, save_config, to_dict
from rm.data import load_data, subset_counts
from rm.evaluate import evaluate, format_table
from rm.export import RunData, export_model
from rm.layout import SharedCollator, choose_layout
from rm.loss import bradley_terry_loss
from rm.model import RewardModel, build_model, pair_rewards
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
    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.train.grad_accum,
        mixed_precision=cfg.train.mixed_precision or None,
        log_with=cfg.train.report_to or None,
        project_dir=str(out),
    )
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
    train_set, train_report = encode_pairs(train_pairs, tokenizer, cfg.collator.max_length, subsets)
    eval_set, eval_report = encode_pairs(eval_pairs, tokenizer, cfg.collator.max_length, subsets)
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
    for line in data.report.describe():
        (log.warning if line.startswith(("skipped", "repaired")) else log.info)("data: %s", line)
    if is_main:
        data.report.write(out)  # data_report.json and skipped.jsonl
    if not train_set:
        raise SystemExit(f"no training pairs left after encoding (max_length={cfg.collator.max_length})")

    # -- model and batch layout --------------------------------------------------------------------
    hf = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model = RewardModel(hf)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model: %s, %.2fM parameters", type(hf).__name__, n_params / 1e6)
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

    # -- loop ------------------------------------------------------------------------------------
    step, micro, epoch = 0, 0, 0
    loss_sum = torch.zeros((), device=accelerator.device)  # summed over micro-batches since last log
    acc_sum = torch.zeros((), device=accelerator.device)
    history: list[dict] = []
    # Redraw at most every 10 s when stderr is a log file rather than a terminal.
    interval = 0.1 if sys.stderr.isatty() else 10.0
    bar = tqdm(total=max_steps, desc="train", disable=not is_main, dynamic_ncols=True, mininterval=interval)
    model.train()
    while step < max_steps:
        train_batches.set_epoch(epoch)
        for batch in train_loader:
            with accelerator.accumulate(model):
                chosen, rejected = pair_rewards(model, batch)
                margin = batch["margin"] if cfg.loss.use_margin else None
                loss = bradley_terry_loss(chosen, rejected, margin, cfg.loss.center_rewards_coef)
                accelerator.backward(loss)
                if accelerator.sync_gradients and cfg.train.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if on_batch is not None:
                on_batch(batch, loss)
            loss_sum += loss.detach()
            acc_sum += (chosen > rejected).float().mean().detach()
            micro += 1
            if not accelerator.sync_gradients:
                continue
            step += 1
            scheduler.step()
            bar.update(1)
            if step % cfg.train.log_steps == 0 or step == max_steps:
                stats = accelerator.reduce(torch.stack([loss_sum, acc_sum]), reduction="mean") / micro
                row = {"step": step, "loss": stats[0].item(), "train_accuracy": stats[1].item()}
                row["lr"] = scheduler.get_last_lr()[0]
                history.append(row)
                accelerator.log({f"train/{k}": v for k, v in row.items() if k != "step"}, step=step)
                bar.set_postfix(loss=f"{row['loss']:.4f}", acc=f"{row['train_accuracy']:.3f}")
                loss_sum.zero_(), acc_sum.zero_()
                micro = 0
            if cfg.train.eval_steps and step % cfg.train.eval_steps == 0 and step < max_steps:
                periodic = evaluate(model, eval_loader, accelerator, subsets)
                _log_eval(accelerator, periodic, step)
                if on_eval is not None:
                    on_eval(step, periodic)
            if cfg.train.save_steps and step % cfg.train.save_steps == 0:
                accelerator.save_state(str(out / "checkpoints" / f"step-{step}"))
            if step >= max_steps:
                break
        epoch += 1
    bar.close()

    # -- final eval, save, export ----------------------------------------------------------------
    result = evaluate(model, eval_loader, accelerator, subsets)
    _log_eval(accelerator, result, step)
    result["train"] = {"steps": step, "epochs": round(epoch, 3), "seconds": round(time.perf_counter() - started, 1)}
    result["train"]["processes"] = accelerator.num_processes
    accelerator.wait_for_everyone()
    if is_main:
        (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
        if cfg.export.enabled:
            export_model(
                accelerator.unwrap_model(model).hf,
                tokenizer,
                out / "export",
                cfg,
                step=step,
                final_step=step,
                eval_result=result,
                data=RunData(subsets, train_set, eval_set),
                normalize=cfg.export.normalize,
                overwrite=True,
            )
        print(f"\nheld-out accuracy after {step} steps ({result['train']['seconds']} s):")
        print(format_table(result))
        print(f"run directory: {out}")
    accelerator.end_training()
    return result


def _log_eval(accelerator: Accelerator, result: dict, step: int) -> None:
    metrics = {"eval/accuracy": result["overall"]["accuracy"], "eval/ece": result["overall"]["ece"]}
    metrics |= {f"eval/accuracy/{name}": m["accuracy"] for name, m in result["subsets"].items()}
    metrics |= {f"eval/ece/{name}": m["ece"] for name, m in result["subsets"].items()}
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
