"""Time to the first optimizer step and peak memory of a short run on a large data set (issue 12).

    python scripts/make_scale_data.py /tmp/hh-scale          # 160,000 train + 8,000 test pairs
    python scripts/bench_data.py /tmp/hh-scale                # a 2-step run: prints its figures
    python scripts/bench_data.py /tmp/hh-scale --runs 2       # run 1 cold, run 2 from the tokenized-data cache
    python scripts/bench_data.py /tmp/hh-scale --rm ../main   # the same with another checkout's rm (before/after)

Each run is a fresh process (`rm train` in-process there, with a hook on the first micro-batch): a
random-init model, a BPE trained on the training texts, `collator.max_tokens` batches. "first step"
is the seconds from the start of `main()` to the first micro-batch (loading, tokenizer, tokenizing,
the batch plan); "run" is the whole run with its final eval; peak RSS is the child's, from wait4.
The runs share a tokenized-data cache in a temporary folder, so the first is cold and the next ones read it.
Nothing here is a test: figures go in the README with this command.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
sys.path.insert(0, sys.argv.pop(1))
from rm.config import load_config
from rm.training.run import main
t0 = time.perf_counter()
first = []
main(load_config(None, sys.argv[1:]), on_batch=lambda b, l: first or first.append(time.perf_counter() - t0))
print(f"FIRST {first[0]:.1f} RUN {time.perf_counter() - t0:.1f}")
"""


def run(checkout: Path, data: Path, out: Path, extra: list[str]) -> tuple[str, float]:
    overrides = [f"data.source={data}", f"output_dir={out}", "model.random_init.hidden_size=64"]
    if (checkout / "rm" / "data" / "cache.py").is_file():  # a fresh cache per benchmark: run 1 cold, then cached
        overrides += [f"data.cache_dir={out.parent / 'cache'}"]
    overrides += ["model.random_init.num_hidden_layers=1", "model.random_init.intermediate_size=128"]
    overrides += ["model.random_init.num_attention_heads=4", "model.random_init.max_position_embeddings=512"]
    overrides += ["tokenizer.vocab_size=8000", "collator.max_length=512", "collator.max_tokens=8192"]
    overrides += ["collator.eval_max_tokens=16384", "train.max_steps=2", "train.eval_steps=0", "train.save_steps=0"]
    overrides += ["train.report_to=[]", "export.enabled=false", "train.num_threads=1", "data.on_bad_record=skip"]
    overrides += extra
    cmd = [sys.executable, "-c", CHILD, str(checkout.resolve()), *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out_text = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed ({status}): {out_text[-2000:]}")
    line = next(x for x in out_text.splitlines() if x.startswith("FIRST"))
    return line, usage.ru_maxrss / 1024**2  # KiB -> GiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--runs", type=int, default=1, help="runs one after the other")
    parser.add_argument("--rm", type=Path, default=REPO, help="the checkout whose rm package to run")
    parser.add_argument("overrides", nargs="*", help="extra key=value for rm train")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            line, rss = run(args.rm, args.data, Path(tmp) / f"run{i}", args.overrides)
            print(f"run {i + 1}: {line} (s)  peak RSS {rss:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
