"""The C heap: handing its free pages back to the OS, or keeping them for the next training step.

Both are glibc's (`malloc_trim`, `mallopt`); with another C library they do nothing.

A CPU training step allocates and frees the same activation sizes again and again. By default glibc
returns the free top of its heap to the OS once it passes a threshold that starts at 128 KiB, so the next
step faults the same pages back in: in one epoch of `scripts/bench_train.py`'s rm-shared run (small model,
1,860 pairs) that was 2.0 million minor page faults and 3.6 s of system time. With `hold_freed_memory` it
was 0.48 million and 1.1 s, and the epoch 3% shorter (interleaved runs: 52.7 / 53.9 s against 51.1 /
52.4 s). What is held is what the last step freed, so peak memory does not change; `trim_heap` still
hands it back where rm chooses to (after encoding, during long evals).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
HELD_TOP = 1 << 30
"""Free memory the heap's top may hold before glibc returns it (instead of 128 KiB and up)."""
MMAP_FROM = 32 << 20
"""Blocks from this size get their own mapping: the largest threshold glibc's own tuning would reach.
(Setting one threshold fixes the other, so both are set.)"""


@functools.cache  # loaded once: eval trims every few batches
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def trim_heap() -> None:
    """Hand the C heap's free pages back to the OS (glibc's `malloc_trim`; elsewhere nothing happens)."""
    trim = getattr(_libc(), "malloc_trim", None)  # musl has none: keep the pages
    if trim is not None:
        trim(0)


def hold_freed_memory() -> bool:
    """Keep freed memory in the process between training steps; False where nothing was changed.

    Left alone when the user set glibc's own variables (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_).
    """
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None or any(k in os.environ for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_FROM)) and bool(mallopt(M_TRIM_THRESHOLD, HELD_TOP))
