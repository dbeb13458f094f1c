"""Where a run runs: the accelerator for this process, its precision, and the full weights at the end.

The run config says what a run does; the launcher (`accelerate launch --config_file
configs/accelerate/*.yaml`) says where: how many processes, DDP, FSDP or DeepSpeed ZeRO-3.
"""

from __future__ import annotations

import logging
import os
import shutil
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, parse_flag_from_env

from rm.collate.planner import PairBatches
from rm.collate.shard import RankBatches
from rm.config import RunConfig, save_config
from rm.config.checks import trackers
from rm.config.rundir import checkpoints
from rm.errors import ConfigError, ModelError, TrainingError
from rm.model.pretrained import why_not_loaded

RUN_FILES = ("config.yaml", "eval.json", "train_log.jsonl", "export", "checkpoints")
"""What says an output_dir already holds a run (any one of them)."""
WRITTEN = (*RUN_FILES, "rm", "data", "tokenizer", "data_report.json", "skipped.jsonl", ".export.partial")
"""Everything a run writes into its output_dir (`rm` holds the TensorBoard events): what train.overwrite deletes."""


def mixed_precision(requested: str) -> str | None:
    """`auto`: bf16 where the GPU has it, else full precision; empty: what `accelerate launch` chose."""
    if requested == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return requested or None


def make_accelerator(cfg: RunConfig) -> Accelerator:
    """The accelerator for this process, checked to span every launched process.

    Several processes launched on a machine without an accelerator (torchrun, `accelerate launch
    --multi_gpu`, configs/accelerate/cpu-ddp.yaml) run DDP over gloo on the CPU: accelerate does that
    only when told `cpu`, and otherwise each process would silently train a model of its own. FSDP
    launcher configs shard over gloo there too (`shard_on_cpu`); DeepSpeed configs are refused.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    on_cpu = world > 1 and not torch.accelerator.is_available()
    if on_cpu and parse_flag_from_env("ACCELERATE_USE_DEEPSPEED"):  # accelerate would quietly run DDP instead
        raise TrainingError("DeepSpeed runs on GPUs only here; on the CPU shard with configs/accelerate/cpu-fsdp.yaml")
    # accelerate logs each checkpoint's files at INFO ("[RANK 0] Model weights saved in ..."), six lines a save.
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    if world == 1 and not torch.distributed.is_initialized():
        # accelerate keeps its state per Python process: a second run in the same process (an in-process
        # sweep trial, a notebook) with another mixed_precision would be refused. One process: start afresh.
        AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(
        cpu=on_cpu,
        gradient_accumulation_steps=cfg.train.grad_accum,
        mixed_precision=mixed_precision(cfg.train.mixed_precision),
        log_with=check_trackers(cfg) or None,
        project_dir=cfg.output_dir,
    )
    if accelerator.num_processes != world:
        raise TrainingError(f"launched as {world} processes, but accelerate set up {accelerator.num_processes}")
    if on_cpu and parse_flag_from_env("ACCELERATE_USE_FSDP"):
        shard_on_cpu(accelerator)
    return accelerator


def shard_on_cpu(accelerator: Accelerator) -> None:
    """FSDP over gloo on the CPU (configs/accelerate/cpu-fsdp.yaml), which accelerate does not set up itself.

    accelerate turns FSDP on only for GPU-like devices: on the CPU it would run plain DDP under an
    FSDP launcher config without a word. torch's `fully_shard` does work over gloo, so the FSDP plugin
    (read from the launcher's FSDP_* variables) is put in place by hand before anything is prepared.
    """
    plugin = FullyShardedDataParallelPlugin()
    if plugin.fsdp_version != 2:
        raise TrainingError("FSDP on the CPU needs fsdp_version: 2 in the launcher config")
    if accelerator.mixed_precision != "no":
        plugin.set_mixed_precision(accelerator.mixed_precision)  # as accelerate does on GPUs
    PartialState().distributed_type = DistributedType.FSDP  # every AcceleratorState() copies it from here
    accelerator.state.distributed_type = DistributedType.FSDP
    accelerator.state.fsdp_plugin = plugin


def check_trackers(cfg: RunConfig) -> list[str]:
    """train.report_to as a list, each tracker installed: accelerate only warns and logs nowhere otherwise."""
    from accelerate.tracking import get_available_trackers

    wanted = trackers(cfg)
    available = {str(t) for t in get_available_trackers()} | {"all"}
    missing = [name for name in wanted if name not in available]
    if missing:
        raise ConfigError(
            f"train.report_to: {', '.join(missing)} is not installed (pip install {' '.join(missing)}), "
            f"so the run would log nowhere: install it, or set train.report_to=[tensorboard] or []"
        )
    return wanted


def exportable(accelerator: Accelerator, model: torch.nn.Module, rebuild: Callable[[], torch.nn.Module]):
    """The trained `.hf` model (a PeftModel under LoRA) on the main process, None on the others.

    Under FSDP or DeepSpeed ZeRO-3 each process holds a shard: the full state dict is gathered (a
    collective, so every process calls this) and loaded into a fresh copy that `rebuild` makes on the CPU.
    """
    if accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return accelerator.unwrap_model(model).hf if accelerator.is_main_process else None
    state = accelerator.get_state_dict(model)  # ZeRO-3 needs zero3_save_16bit_model: true (see its YAML)
    if not accelerator.is_main_process:
        return None
    fresh = rebuild()
    fresh.load_state_dict(state)
    return fresh.hf


def check_output_dir(cfg: RunConfig) -> bool:
    """Refuse an output_dir that would silently mix two runs; return True when `train.overwrite` asks to clear it.

    A finished run's eval.json, export, config.yaml and TensorBoard events would otherwise be overwritten
    or mixed with the new run's. Continuing (train.resume) is fine, and so is train.resume=auto in a
    folder whose earlier run stopped before its first checkpoint and never finished.
    """
    out, t = Path(cfg.output_dir), cfg.train
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir={out}: is a file, not a directory: choose another output_dir")
    earlier = [name for name in RUN_FILES if (out / name).exists()]
    if not earlier or (t.resume == "auto" and checkpoints(out)) or t.resume not in ("", "auto"):
        return False
    if t.overwrite:
        return True
    if not t.resume and checkpoints(out):
        return False  # rm.training.checkpoint.resume_point refuses, naming the newest checkpoint
    if t.resume == "auto" and not (out / "eval.json").exists():
        return False
    finished = "a finished run" if (out / "eval.json").exists() else "an earlier run"
    raise ConfigError(
        f"output_dir={out} already holds {finished} ({', '.join(earlier)}): use another output_dir, "
        "continue it with train.resume=auto, or replace it with train.overwrite=true"
    )


def claim_output_dir(cfg: RunConfig, clear: bool) -> None:
    """Create output_dir (clearing an earlier run's files first when `clear`) and save the resolved config."""
    out = Path(cfg.output_dir)
    try:
        if clear:
            for name in WRITTEN:
                path = out / name
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out / "config.yaml")
    except OSError as e:
        raise ConfigError(
            f"output_dir={out}: cannot write there ({e.strerror or e}): choose another output_dir"
        ) from None


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


def flat(d: dict, prefix: str = "") -> dict:
    """Trackers want flat scalars: {"train": {"lr": 1}} -> {"train.lr": 1}; lists become strings."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= flat(v, f"{prefix}{k}.")
        else:
            out[prefix + k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out
