"""Where a large run's memory goes: bench_data.py's 2-step run, with RSS after each step of `rm train` (issue 12).

    python scripts/bench_memory.py /tmp/hh-scale                    # RSS and peak after every step
    python scripts/bench_memory.py /tmp/hh-scale --release-texts    # as if run.py released the texts

Each line is the process's RSS and peak RSS (MiB) after a step of `rm.training.run.main` (loading,
tokenizer training, encoding, model, loaders, loop, final eval), and the seconds since the start.
`--release-texts` calls `rm.data.encode.release_texts` after encoding, which `rm/training/run.py` does not
(yet): what dropping the text pairs saves. Nothing here is a test: figures go in the README.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_data  # noqa: E402  (the same run, the same overrides)

CHILD = """
import resource, sys, time
import os
sys.path.insert(0, sys.argv.pop(1))
release = os.environ.get("RM_BENCH_RELEASE_TEXTS") == "1"
import psutil
from rm.config import load_config
import rm.training.run as run
t0, proc = time.perf_counter(), psutil.Process()

def show(step):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss = proc.memory_info().rss / 2**20
    print(f"{step:20s} RSS {rss:6.0f} MiB  peak {peak:6.0f} MiB  {time.perf_counter() - t0:6.1f} s", file=sys.stderr)

def after(name):
    step = getattr(run, name)
    def wrapped(*args, **kwargs):
        out = step(*args, **kwargs)
        if name == "load_and_encode" and release:
            from rm.data.encode import release_texts
            release_texts(out.loaded)
        show(name)
        return out
    setattr(run, name, wrapped)

show("imports")
for name in ("load_data", "trained_tokenizer", "encode_splits", "load_and_encode", "build_reward_model", "prepare",
             "fit", "finish"):
    after(name)
run.main(load_config(None, sys.argv[1:]))
print("FIRST 0 RUN", round(time.perf_counter() - t0, 1))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--rm", type=Path, default=bench_data.REPO, help="the checkout whose rm package to run")
    parser.add_argument("--release-texts", action="store_true", help="release the text pairs after encoding")
    parser.add_argument("overrides", nargs="*", help="extra key=value for rm train")
    args = parser.parse_intermixed_args()
    bench_data.CHILD = CHILD
    os.environ["RM_BENCH_RELEASE_TEXTS"] = str(int(args.release_texts))  # read by the child
    with tempfile.TemporaryDirectory() as tmp:
        _, rss = bench_data.run(args.rm, args.data, Path(tmp) / "run", args.overrides)
    print(f"peak RSS {rss:.2f} GiB (wait4)")


if __name__ == "__main__":
    main()
