"""Where a large run's memory goes: bench_data.py's 2-step run, with RSS after each step of `rm train` (issue 12).

    python scripts/bench_memory.py /tmp/hh-scale                    # RSS and peak after every step

Each line is the process's RSS and peak RSS (MiB) after a step of `rm.training.run.main` (loading,
tokenizer training, encoding, releasing the text pairs, model, loaders, loop, final eval), and the seconds
since the start. The run starts from an empty tokenized-data cache (a fresh folder), so every step runs.
Nothing here is a test: figures go in the README.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_data  # noqa: E402  (the same run, the same overrides)

CHILD = """
import resource, sys, time
sys.path.insert(0, sys.argv.pop(1))
import psutil
from rm.config import load_config
import rm.tokens.prepare as prep
import rm.training.run as run
t0, proc = time.perf_counter(), psutil.Process()

def show(step):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss = proc.memory_info().rss / 2**20
    print(f"{step:20s} RSS {rss:6.0f} MiB  peak {peak:6.0f} MiB  {time.perf_counter() - t0:6.1f} s", file=sys.stderr)

def after(module, name):
    step = getattr(module, name)
    def wrapped(*args, **kwargs):
        out = step(*args, **kwargs)
        show(name)
        return out
    setattr(module, name, wrapped)

show("imports")
for name in ("load_data", "cached_bpe", "run_bpe", "encode_splits", "release_texts"):
    after(prep, name)
for name in ("prepare_data", "build_reward_model", "prepare", "fit", "finish"):
    after(run, name)
run.main(load_config(None, sys.argv[1:]))
print("FIRST 0 RUN", round(time.perf_counter() - t0, 1))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--rm", type=Path, default=bench_data.REPO, help="the checkout whose rm package to run")
    parser.add_argument("overrides", nargs="*", help="extra key=value for rm train")
    args = parser.parse_intermixed_args()
    bench_data.CHILD = CHILD
    with tempfile.TemporaryDirectory() as tmp:
        _, rss = bench_data.run(args.rm, args.data, Path(tmp) / "run", args.overrides)
    print(f"peak RSS {rss:.2f} GiB (wait4)")


if __name__ == "__main__":
    main()
