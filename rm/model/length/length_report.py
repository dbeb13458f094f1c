"""What a run with a length head reports and keeps at its end: the correlations reached on the held-out set
(eval.json's `length_head`, the card's), and the length row beside the run for `rm export --with-length-head`.

The reward of eval.json's other figures is the quality output alone (the forward without `length`); these two
correlations are Pearson's over every held-out response once, with the response's token count as the model saw it.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from safetensors.torch import save_file
from torch.utils.data import DataLoader

from rm.config.rundir import record_written
from rm.model.length.length_head import split_length
from rm.model.length.length_loss import response_tokens
from rm.model.reward import group_outputs

log = logging.getLogger("rm")

LENGTH_HEAD_FILE = "length_head.safetensors"
"""In the run directory: the trained length row (`weight`, [1, hidden]), which the end-of-run export leaves out."""


@torch.no_grad()
def held_out_correlations(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator) -> dict:
    """{"quality_pearson", "length_pearson", "responses"} over the loader's responses on every process (a
    collective); None for a correlation that is not defined (a series that does not vary)."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(9, dtype=torch.float64, device=accelerator.device)
    real = getattr(loader.batch_sampler, "real", None)  # rm/collate/shard.py's EvalBatches: a filler after these
    for k, batch in enumerate(loader, 1):
        batch = send_to_device(batch, accelerator.device)
        quality, length = split_length(group_outputs(model, batch, length=True))
        if real is not None and k > real:  # run for equal forwards on every process, counted in its own batch
            continue
        reward = quality if quality.dim() == 1 else quality[:, 0]
        x = torch.stack([reward, length, response_tokens(batch)]).double()  # [3, responses]
        sums += torch.cat([x.new_tensor([x.shape[1]]), x.sum(1), (x * x).sum(1), (x[:2] * x[2]).sum(1)])
    model.train(was_training)
    total = accelerator.reduce(sums, "sum").cpu().tolist()
    n = total[0]
    mean = [s / max(n, 1) for s in total[1:4]]
    var = [total[4 + i] / max(n, 1) - mean[i] ** 2 for i in range(3)]

    def pearson(i: int) -> float | None:
        denominator = math.sqrt(max(var[i], 0.0) * max(var[2], 0.0))
        if n < 2 or denominator <= 1e-12 * max(1.0, abs(mean[i] * mean[2])):
            return None
        return (total[7 + i] / n - mean[i] * mean[2]) / denominator

    return {"quality_pearson": pearson(0), "length_pearson": pearson(1), "responses": int(n)}


def length_head_result(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator, run_dir: Path) -> dict:
    """At the end of a run with a length head, on every process: {"length_head": the held-out correlations}, and
    the length row written to `run_dir` by the main process (recorded in the run's manifest); {} without a head."""
    head = getattr(accelerator.unwrap_model(model), "length_head", None)
    if head is None:
        return {}
    result = held_out_correlations(model, loader, accelerator)
    weight = head.linear.weight.detach()
    weight = weight.full_tensor() if hasattr(weight, "full_tensor") else weight  # an FSDP2 shard: gathered
    if accelerator.is_main_process:
        if weight.numel():
            path = Path(run_dir) / LENGTH_HEAD_FILE
            save_file({"weight": weight.cpu().contiguous()}, str(path))
            record_written(run_dir, [path])
        else:  # DeepSpeed ZeRO-3 holds a placeholder here: the checkpoints keep the row
            log.warning("length head: its weights are partitioned; export a checkpoint with --with-length-head")
    return {"length_head": result}
