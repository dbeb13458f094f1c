"""Eval's step columns: every step's output and label gathered once across processes, beside its group's copy.

rm/evaluation/gather.py keeps each eval group exactly once whatever the processes (a group scored twice, by a
process short of a batch, is kept from one copy). Steps ride along as a table linked to the groups, as responses
are: a row (copy tag of the group, solution slot, step position) beside the step's output and label, so the copy
that is kept brings its own steps and no step is counted twice or lost.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

STEP_LINKED = {"steps": ("step_output", "step_target")}
"""The linked table of steps and the columns beside it (rm/evaluation/gather.py:gather_once)."""


def stepwise(loader: DataLoader) -> bool:
    """Whether the loader's split is stepwise (the same answer on every process: all read one entry)."""
    table = getattr(loader.dataset, "table", None)
    return table is not None and "step_counts" in table.schema.names


def step_rows(batch: dict[str, torch.Tensor], outputs: torch.Tensor, copy: torch.Tensor) -> dict[str, torch.Tensor]:
    """One batch's step rows: (copy tag of its group, its solution's slot, its position) beside output and label."""
    slot = batch["response_slot"][batch["step_response"]].to(copy.device)
    rows = torch.stack([copy[batch["step_group"].to(copy.device)], slot, batch["step_position"].to(copy.device)], 1)
    return {"steps": rows.long(), "step_output": outputs.float(), "step_target": batch["step_target"].float()}


def step_columns(rows: list[dict[str, torch.Tensor]], device: torch.device) -> dict[str, torch.Tensor]:
    """This process's step columns for the gather: its batches' `step_rows` one after another, or empty columns of
    the same widths where it scored no batch."""
    if rows:
        return {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
    return {"steps": torch.empty((0, 3), dtype=torch.long, device=device),
            "step_output": torch.empty(0, device=device), "step_target": torch.empty(0, device=device)}  # fmt: skip


def arranged_steps(kept: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The kept steps by group row, solution slot, then position: `step_group`, `step_slot`, `step_position`,
    `step_output` (logits) and `step_target` (labels), [steps] each, on the CPU."""
    rows = kept["steps"]
    order = torch.argsort(rows[:, 2], stable=True)
    order = order[torch.argsort(rows[order, 1], stable=True)]
    order = order[torch.argsort(rows[order, 0], stable=True)]
    rows = rows[order]
    return {
        "step_group": rows[:, 0],
        "step_slot": rows[:, 1],
        "step_position": rows[:, 2],
        "step_output": kept["step_output"][order],
        "step_target": kept["step_target"][order],
    }
