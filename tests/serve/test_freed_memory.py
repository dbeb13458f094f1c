"""A server process gives a freed batch's memory back (rm/serve/launch.py's `return_large_frees`, and
`give_back_freed` after each batch): shown on glibc's own malloc, in a fresh interpreter each way, against glibc's
default, which keeps it."""

import subprocess
import sys

import pytest

PROBE = """
import ctypes, re, sys
from rm.serve.launch import MMAP_THRESHOLD, give_back_freed, return_large_frees
if sys.argv[1] != "default":
    assert return_large_frees()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) // 1024
def touched(mb):
    p = libc.malloc(mb << 20)
    ctypes.memset(p, 1, mb << 20)
    return p
libc.free(touched(16))  # the largest batch so far: glibc's default threshold rises to it (up to 32 MB)
before = rss()
block = touched(8)  # a smaller batch's tensor: from the heap
guard = touched(1)  # still held after it: the freed block is a hole in the heap, not its top
libc.free(block)
if sys.argv[1] == "trimmed":
    give_back_freed()  # what the model thread does after each batch
large = touched(MMAP_THRESHOLD >> 20)  # a block at the threshold: mapped on its own, given back by free()
libc.free(large)
print(rss() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux only")
def test_a_freed_batch_goes_back_to_the_system():
    def kept(how: str) -> int:
        env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
        out = subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True, text=True, env=env, check=True)
        return int(out.stdout.strip())

    # each keeps the 1 MB guard, still held
    assert kept("default") >= 7  # glibc's default keeps the 8 MB block's pages
    assert kept("set") >= 7  # the threshold alone leaves a freed block inside the heap where it is
    assert kept("trimmed") <= 2
