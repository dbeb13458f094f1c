"""Held-out evaluation across processes: accuracy overall and per subset, with counts and mean reward gap, and
the group metrics (top-1, best-of-K, Kendall tau, ties) beside them.

Every response's reward is gathered across processes with its group's index in its split, and repeats
dropped, so every group counts exactly once whatever the batch sizes and the number of processes. `shut_down`
ends the process group cleanly after training or a multi-process `rm eval`.

`gather_once` is rm's one gather of scored values (a padded gather of each column, then one copy of each index
kept): `gather_rewards` here (training's eval, `rm eval`) and rm/suites/score_items.py's `score_all` (the
suites, training's suite evals) call it, both after dealing their plan with rm/collate/shard.py's `deal_rounds`.
"""

from __future__ import annotations

import sys

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from rm.data.heap import trim_heap
from rm.data.labels import registered
from rm.evaluation.attribute_metrics import gathered_block
from rm.evaluation.soft_calibration import gathered_calibration
from rm.evaluation.steps.step_gather import STEP_LINKED, arranged_steps, step_columns, step_rows, stepwise
from rm.evaluation.steps.step_report import step_block
from rm.evaluation.summary import label_blocks, response_tokens, summarize_groups
from rm.model.pretrained import model_attributes
from rm.model.reward import group_outputs, step_split

TRIM_EVERY = 4
"""On the CPU, eval batches of ever different shapes leave glibc's heap fragmented and growing: an 8,000-pair
eval in 16,384-token batches took RSS from 913 to 1,141 MiB. Trimming every 4 batches kept the
eval's peak 91 MiB lower for 6% more eval time on that 1-layer model (every batch: 105 MiB, 31%)."""


COPY = 1 << 40
"""A scored group's copy tag is process_index * COPY + its position in that process's stream: unique across
processes, and ordered as the gathered streams are (process by process), so the copy kept is the first."""

LINKED = {"responses": ("reward", "attribute_outputs", "attribute_scores"), "pairs": ("pair_target",)}
"""`gather_rewards`' tables of rows of a group (column 0: the group's copy tag), and the columns beside each."""


def copy_tags(accelerator: Accelerator, seen: int, n: int, device: torch.device) -> torch.Tensor:
    """The tags of the next `n` units this process scores, after `seen` (see `COPY`)."""
    return accelerator.process_index * COPY + seen + torch.arange(n, device=device)


def gather_once(
    accelerator: Accelerator, local: dict[str, torch.Tensor], linked: dict[str, tuple[str, ...]]
) -> dict[str, torch.Tensor]:
    """Every process's scored units on every process's CPU, each index exactly once: one gather, at the end.

    `local["groups"]` [units, c] (long): a row per scored unit, its index first (what it scored: a group's split
    index, a sequence), its copy tag (`copy_tags`) last. Each table named in `linked` [rows, c'] (long) holds rows
    of units, column 0 the copy tag of the unit they belong to; the columns `linked` names beside it (rewards,
    say) hold one row per row of it. Every column is padded with -1 across processes and gathered once, process
    by process; `keep_once` then keeps, for each index, the copy of the lowest tag (a process short of a batch
    scores one again: `deal_rounds`) with its own rows.
    """
    if accelerator.num_processes > 1:
        local = {k: accelerator.gather(accelerator.pad_across_processes(v, pad_index=-1)) for k, v in local.items()}
    return keep_once({k: v.cpu() for k, v in local.items()}, linked)


def keep_once(parts: dict[str, torch.Tensor], linked: dict[str, tuple[str, ...]]) -> dict[str, torch.Tensor]:
    """`gather_once`'s result from gathered columns (rows of index or copy -1 are padding): the units kept, in
    index order; each linked table's rows of them, column 0 now the unit's row in `groups`, in gathered order,
    and the columns beside it alike (those absent from `parts` stay absent)."""
    groups = parts["groups"][parts["groups"][:, 0] >= 0]
    groups = groups[torch.argsort(groups[:, -1], stable=True)]
    groups = groups[torch.argsort(groups[:, 0], stable=True)]  # by index, each index's copies in tag order
    first = torch.ones(len(groups), dtype=torch.bool)
    first[1:] = groups[1:, 0] != groups[:-1, 0]
    groups = groups[first]
    # Kept copies' tags, sorted, with an end mark above every tag so that a lookup past the last stays in range.
    tags, row_of_tag = torch.sort(groups[:, -1])
    tags = torch.cat([tags, torch.full((1,), torch.iinfo(torch.long).max)])
    row_of_tag = torch.cat([row_of_tag, torch.zeros(1, dtype=torch.long)])
    out = {"groups": groups}
    for table, beside in linked.items():
        copy = parts[table][:, 0].contiguous()
        at = torch.searchsorted(tags, copy)
        kept = tags[at] == copy
        out[table] = torch.cat([row_of_tag[at][kept][:, None], parts[table][kept, 1:]], 1)
        out |= {k: parts[k][kept] for k in beside if k in parts}
    return out


@torch.no_grad()
def gather_rewards(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator) -> dict[str, torch.Tensor]:
    """Every eval group's rewards exactly once, in split order, on every process: `arranged`'s columns.

    Batches differ in size (token budgets), and a process short of a batch in the last round scores
    a group again so that every process runs the same number (rm/collate/shard.py's EvalBatches, or
    accelerate's prepared loaders); so each process keeps its groups with their split index and a tag of the
    copy it scored (`batch_rows`), the lists are gathered once at the end (`gather_once`), and for each index one
    copy is kept, its responses and comparisons with it. An EvalBatches filler (after its `real` batches) is run
    but not kept: with 3 processes its lone pair could otherwise come first and be kept instead of the copy from
    the pair's own batch, a reward computed from other tensors than one process computes it from. The model's
    train/eval mode is restored.
    """
    was_training = model.training
    model.eval()
    attributes = len(model_attributes(accelerator.unwrap_model(model)))  # the same on every process
    labels = gathered_labels(loader)  # the same on every process: every one reads the same entry
    rows, steps_rows = [], []
    seen = 0
    real = getattr(loader.batch_sampler, "real", None)  # None (a list of batches, a prepared loader): all kept
    for k, batch in enumerate(progress(loader, accelerator), 1):
        if k % TRIM_EVERY == 0 and accelerator.device.type == "cpu":
            trim_heap()
        batch = send_to_device(batch, accelerator.device)  # a no-op for accelerate's prepared loaders
        out, steps = step_split(group_outputs(model, batch).detach(), batch)  # [responses] (or [.., 1 + A]), steps
        if real is not None and k > real:  # a filler, run for equal forwards: its group is kept from its own batch
            continue
        copy = copy_tags(accelerator, seen, len(batch["pair_index"]), out.device)
        rows.append(batch_rows(batch, out, copy, attributes > 0) | label_rows(batch, copy, labels))
        steps_rows += [step_rows(batch, steps, copy)] if steps is not None else []
        seen += len(batch["pair_index"])
    model.train(was_training)
    local = local_columns(rows, attributes, accelerator.device, labels)
    linked = {**LINKED, "responses": LINKED["responses"] + tuple(n for n, lv in labels.items() if lv == "response")}
    if "group" in labels.values():
        linked["group_rows"] = tuple(n for n, level in labels.items() if level == "group")
    if stepwise(loader):  # every step once, beside the copy of its group that is kept (steps/step_gather.py)
        local, linked = local | step_columns(steps_rows, accelerator.device), linked | STEP_LINKED
    kept = gather_once(accelerator, local, linked)
    return arranged(kept, labels) | (arranged_steps(kept) if "steps" in kept else {})


def gathered_labels(loader: DataLoader) -> dict[str, str]:
    """The registered labels to gather (rm/data/labels.py): those the loader's split has a column of, by level."""
    found = getattr(loader.dataset, "labels", {})
    return {name: level for name, level in found.items() if registered()[name].gather}


def label_rows(batch: dict[str, torch.Tensor], copy: torch.Tensor, labels: dict[str, str]) -> dict[str, torch.Tensor]:
    """The batch's label values beside the rows they belong to: a group's beside `group_rows` (its copy tag), a
    response's beside `responses`."""
    rows = {name: batch[name].float() for name in labels}
    return rows | ({"group_rows": copy[:, None]} if "group" in labels.values() else {})


def progress(loader: DataLoader, accelerator: Accelerator) -> tqdm:
    """The loader's batches behind a bar on the main process: an 8,000-pair eval runs minutes on a CPU (redrawn
    every 10 s into a log file)."""
    interval = 0.1 if sys.stderr.isatty() else 10.0
    quiet = not accelerator.is_main_process
    return tqdm(loader, "eval", leave=False, unit="batches", disable=quiet, mininterval=interval)


def batch_rows(
    batch: dict[str, torch.Tensor], out: torch.Tensor, copy: torch.Tensor, attributes: bool
) -> dict[str, torch.Tensor]:
    """One scored batch's rows of `local_columns`, its groups tagged `copy` ([groups], `copy_tags`); `out` the
    head's outputs, [responses] or, for a model with A `attributes` outputs, [responses, 1 + A].

    groups (index, subset, prompt, copy); responses (copy, slot, rank) beside `reward` (and the attribute
    columns); pairs (copy, a, b, tie), strict ones then ties, beside `pair_target`: each one's soft label, NaN
    where it is hard (a tie, or a batch without `pair_target`).
    """
    rewards = out if out.dim() == 1 else out[:, 0]
    slot = batch["response_slot"].long()
    columns = (batch["pair_index"], batch["subset_ids"], batch["prompt_id"], copy)
    rows = {
        "groups": torch.stack([c.long() for c in columns], 1),
        "responses": torch.stack([copy[batch["response_group"]], slot, batch["response_rank"].long()], 1),
        "reward": rewards,
    }
    pairs = []
    for group, a, b, tie in (("pair_group", "better", "worse", 0), ("tie_group", "tie_a", "tie_b", 1)):
        c = copy[batch[group]]
        pairs.append(torch.stack([c, slot[batch[a]], slot[batch[b]], torch.full_like(c, tie)], 1))
    nan = torch.full((len(batch["tie_group"]),), torch.nan, device=rewards.device)
    target = batch.get("pair_target", torch.full((len(batch["pair_group"]),), torch.nan))
    rows |= {"pairs": torch.cat(pairs), "pair_target": torch.cat([target.to(rewards.device).float(), nan])}
    if attributes:
        scores = batch.get("attributes")  # absent where the data has no scores of the model's attributes
        scores = torch.full_like(out[:, 1:], torch.nan) if scores is None else scores.to(out)
        rows |= {"attribute_outputs": out[:, 1:].float(), "attribute_scores": scores.float()}
    return rows


def local_columns(
    rows: list[dict[str, torch.Tensor]], attributes: int, device: torch.device, labels: dict[str, str] | None = None
) -> dict[str, torch.Tensor]:
    """This process's columns for `gather_once`: its batches' rows (`batch_rows`) one after another, on `device`.

    Every process gathers the same columns, those of a process that scored no batch (empty) or saw no soft label
    too: groups [units, 4], responses [rows, 3] and pairs [rows, 4] (long); reward [rows], pair_target [pairs];
    and for a model of A attribute outputs attribute_outputs and attribute_scores [rows, A].
    """
    names = ["groups", "responses", "reward", "pairs", "pair_target"]
    names += ["attribute_outputs", "attribute_scores"] if attributes else []
    names += [*labels, *(["group_rows"] if "group" in labels.values() else [])] if labels else []
    width = {"groups": 4, "responses": 3, "pairs": 4, "attribute_outputs": attributes, "attribute_scores": attributes}
    width["group_rows"] = 1
    if rows:
        local = {k: torch.cat([r[k] for r in rows]).to(device) for k in names}
    else:  # no batch on this process: empty columns of the same widths
        local = {k: torch.empty((0, width[k]) if k in width else 0, device=device) for k in names}
    return {k: v.long() if k in ("groups", "responses", "pairs", "group_rows") else v for k, v in local.items()}


def arranged(kept: dict[str, torch.Tensor], labels: dict[str, str] | None = None) -> dict[str, torch.Tensor]:
    """`gather_rewards`'s columns from the copies `keep_once` kept: responses by group, then slot; comparisons by
    group, in the batch's order, with their two rewards. On the CPU:

        index, subset, prompt      [groups]       split index (0..n-1 when nothing is missing), subset id, prompt id
        reward, group, slot, rank  [responses]    by group, then slot k: its reward, group (row of `index`), k, rank
        pair_group, a, b, tie      [comparisons]  by group, in the batch's order: a beats b, or ties it (tie)
        chosen, rejected           [strict pairs] the rewards of a and b of each comparison that is not a tie

    and for a model with A attribute outputs, beside `reward`:

        attribute_outputs          [responses, A] outputs 1..A of the head
        attribute_scores           [responses, A] the responses' scores (the batch's `attributes`), NaN = missing

    and where a batch carried soft labels (`pair_target`, loss.strength=soft), beside `chosen` and `rejected`:

        target                     [strict pairs] each pair's soft label p, NaN where its label is hard

    and each gathered registered label under its name: [groups] (a group's value) or [responses] (one per response).
    """
    groups, responses, reward = kept["groups"], kept["responses"], kept["reward"]
    order = torch.argsort(responses[:, 1], stable=True)
    order = order[torch.argsort(responses[order, 0], stable=True)]  # by group, then slot
    responses, reward = responses[order], reward[order]
    attributes = {k: kept[k][order] for k in ("attribute_outputs", "attribute_scores") if k in kept}
    pairs = kept["pairs"]
    by_group = torch.argsort(pairs[:, 0], stable=True)
    pairs = pairs[by_group]
    # Where each group's responses start: a comparison's rewards are at start + slot.
    start = torch.cumsum(torch.bincount(responses[:, 0], minlength=len(groups)), 0)
    start = torch.cat([torch.zeros(1, dtype=torch.long), start[:-1]])
    tie = pairs[:, 3].bool()
    better, worse = reward[start[pairs[:, 0]] + pairs[:, 1]], reward[start[pairs[:, 0]] + pairs[:, 2]]
    target = kept["pair_target"][by_group][~tie] if "pair_target" in kept else torch.empty(0)
    soft = {"target": target} if target.isfinite().any() else {}  # only where a pair has a soft label
    for name, level in (labels or {}).items():
        if level == "response":
            soft[name] = kept[name][order]
        else:
            soft[name] = torch.full((len(groups),), torch.nan)
            soft[name][kept["group_rows"][:, 0]] = kept[name]
    return {
        "index": groups[:, 0],
        "subset": groups[:, 1],
        "prompt": groups[:, 2],
        "reward": reward,
        "group": responses[:, 0],
        "slot": responses[:, 1],
        "rank": responses[:, 2],
        "pair_group": pairs[:, 0],
        "a": pairs[:, 1],
        "b": pairs[:, 2],
        "tie": tie,
        "chosen": better[~tie],
        "rejected": worse[~tie],
        **attributes,
        **soft,
    }


def evaluate(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator, subsets: list[str]) -> dict:
    """Return {"overall": {...}, "subsets": {name: {...}}} for the whole eval set: the pairwise numbers over its
    strictly ordered pairs and the group metrics (rm/evaluation/ranking_metrics.py) beside them; for a model with
    attribute outputs also {"attributes": {name: ...}} (rm/evaluation/attribute_metrics.py), and where pairs carry
    soft labels {"soft_calibration": ...} (rm/evaluation/soft_calibration.py)."""
    gathered = gather_rewards(model, loader, accelerator)
    result = summarize_groups(gathered, subsets, lengths=response_tokens(loader.dataset, gathered))
    if "attribute_outputs" in gathered:
        result["attributes"] = gathered_block(gathered, model_attributes(accelerator.unwrap_model(model)), subsets)
    if (calibration := gathered_calibration(gathered)) is not None:
        result["soft_calibration"] = calibration
    return (
        result | label_blocks(gathered, subsets) | (step_block(gathered, subsets) if "step_output" in gathered else {})
    )


def shut_down(accelerator: Accelerator) -> None:
    """End trackers and the process group, after the caller has dropped its references to the model.

    The DDP wrapper's reducer must die while the process group is still registered: if the reducer held
    the group's last reference, the group would be destroyed with the GIL held, and gloo's worker thread,
    still freeing a finished collective, waits for that GIL: a deadlock at exit, seen about one run in
    fifteen on 2 CPU processes (pytorch/pytorch#56297). Destroyed from the registry, it releases the GIL first.
    """
    accelerator.wait_for_everyone()
    accelerator.free_memory()  # drops accelerate's own references, then gc.collect()
    accelerator.end_training()
