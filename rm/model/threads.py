"""torch's CPU threads: one default for every command, that does not oversubscribe the cores a run may use.

torch starts one intra-op thread per core it sees, whatever else runs there: the processes of an
`accelerate launch` on one node (each took every core), a CPU quota narrower than the machine, or an
affinity mask. Threads past the cores a process gets wait on each other at every operator: on a busy 2-core
machine `configs/hh-harmless-tiny.yaml` ran 3.70 s/step with the default against 0.98 s/step with one
thread, and `rm eval` 12.7-15.8 s against 6.3 s. The default here is the cores this process may
use (its affinity mask, and a cgroup CPU quota where one is set) shared out among the processes of this run
on the node (`LOCAL_WORLD_SIZE`, set by `accelerate launch` and torchrun). `train.num_threads` and
`--num-threads` override it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

QUOTA_FILES = (
    (Path("/sys/fs/cgroup/cpu.max"), None),  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"
    (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")),  # cgroup v1
)


def cpu_quota() -> int | None:
    """Cores a cgroup CPU quota allows (rounded up), or None where no quota is set or readable."""
    for quota_file, period_file in QUOTA_FILES:
        try:
            fields = quota_file.read_text().split()
            period = float(period_file.read_text()) if period_file else float(fields[1])
        except (OSError, ValueError, IndexError):
            continue
        if fields[0] in ("max", "-1") or period <= 0:
            return None
        return max(1, math.ceil(float(fields[0]) / period))
    return None


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, narrowed by a CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota()
    return min(cores, quota) if quota else cores


def default_threads(environ: dict[str, str] | None = None) -> int:
    """The usable cores divided by the processes of this run on this node (at least one thread)."""
    environ = os.environ if environ is None else environ
    try:
        local = max(1, int(environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, usable_cores() // local)


def set_threads(requested: int = 0) -> int:
    """torch's intra-op threads: `requested`, or 0 for `default_threads()`; returns the number set.

    A default that other work on the machine already crowds is said (`busy_note`, by `rm train`), not changed:
    the thread count moves the last bits of fp32 sums (the tiny config's step-40 loss: 0.61014616 on one
    thread, 0.61014628 on two), so a default that followed the load would make two runs of one config differ.
    """
    n = requested or default_threads()
    torch.set_num_threads(n)
    return n


def busy_note(threads: int, load: float | None = None) -> str:
    """One line when the 1-minute load average says other processes already keep the cores busy, so `threads`
    would wait on each other. Measured on this 2-core machine, configs/hh-harmless-tiny.yaml, 40 steps: quiet,
    two threads 0.49 s/step against one thread's 0.90; beside one busy process, two threads 1.59 s/step
    against one thread's 0.93."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            return ""
    cores = usable_cores()
    if threads < 2 or load < 1 or load + threads <= cores + 0.5:
        return ""
    return (
        f"threads: {threads} on {cores} cores that other processes already keep busy (load average {load:.1f}): "
        "if steps are slow, set train.num_threads=1 (--num-threads 1 for rm eval and rm score)"
    )
