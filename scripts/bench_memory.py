"""Where a large run's memory goes: bench_data.py's 2-step run, with RSS at every line `rm train` logs.

    python scripts/bench_memory.py /tmp/hh-scale                    # RSS and peak through the run
    python scripts/bench_memory.py /tmp/hh-real --tokenizer /tmp/bpe8k

Each line is the seconds since the start, the process's RSS and peak RSS (MiB) when rm logged a line, and the
line: rm's own log marks the steps (the pairs loaded, the tokenizer, each split's truncation, the cache entry
written, model, layout, batch plan, eval), with "imports" before `main()` and "first micro-batch" from its
`on_batch` hook. Nothing in rm is patched, so renaming a function cannot quietly stop a step being measured;
a step that logs nothing shows up only in the next line's figures. The run starts from an empty
tokenized-data cache (a fresh folder), so every step runs. Nothing here is a test: figures go in the README.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_data  # noqa: E402  (the same run, the same overrides)

CHILD = """
import logging, resource, sys, time
sys.path.insert(0, sys.argv.pop(1))
import psutil
t0, proc = time.perf_counter(), psutil.Process()

def show(step):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss = proc.memory_info().rss / 2**20
    print(f"MEM {time.perf_counter() - t0:6.1f} s  RSS {rss:6.0f} MiB  peak {peak:6.0f} MiB  {step}", flush=True)

class Memory(logging.Handler):
    def emit(self, record):
        show(record.getMessage().splitlines()[0][:100])

from rm.config import load_config
from rm.training.run import main
show("imports")
logging.getLogger("rm").addHandler(Memory())
first = []
main(load_config(None, sys.argv[1:]), on_batch=lambda b, l: first or (first.append(1), show("first micro-batch")))
show("done")
print("FIRST 0 RUN", round(time.perf_counter() - t0, 1))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--rm", type=Path, default=bench_data.REPO, help="the checkout whose rm package to run")
    parser.add_argument("--tokenizer", type=Path, help="a saved tokenizer folder (tokenizer.name_or_path)")
    parser.add_argument("overrides", nargs="*", help="extra key=value for rm train")
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory() as tmp:
        lines, rss = bench_data.launch(args.rm, args.data, Path(tmp) / "run", args.overrides, args.tokenizer, CHILD)
    steps = [text[text.index("MEM ") + 4 :] for *_, text in lines if "MEM " in text]  # after a progress bar, too
    if not any("first micro-batch" in s for s in steps):
        raise SystemExit("the run logged no first micro-batch: nothing measured")
    print("\n".join(steps))
    print(f"peak RSS {rss:.2f} GiB (wait4)")


if __name__ == "__main__":
    main()
