"""Time to the first optimizer step, tokenizing throughput and peak memory of a short run on a large data set.

    python scripts/make_scale_data.py /tmp/hh-scale          # 160,000 train + 8,000 test pairs
    python scripts/bench_data.py /tmp/hh-scale                # a 2-step run: prints its figures
    python scripts/bench_data.py /tmp/hh-scale --runs 2       # run 1 cold, run 2 from the tokenized-data cache
    python scripts/bench_data.py /tmp/hh-scale --rm ../main   # the same with another checkout's rm (before/after)
    python scripts/bench_data.py /tmp/hh-real --tokenizer /tmp/bpe8k   # a saved tokenizer, loaded by path

Each run is a fresh process (`rm train` in-process there, with a hook on the first micro-batch): a
random-init model, a BPE trained on the training texts (or, with `--tokenizer`, the saved tokenizer folder
as `tokenizer.name_or_path`), `collator.max_tokens` batches. "first step" is the seconds from the start of
`main()` to the first micro-batch (loading, tokenizer, tokenizing, the batch plan); "run" is the whole run
with its final eval; "tokenizing" is the pairs of both splits over the seconds from the train split's
progress bar appearing to the eval split's reaching 100% (timed here as rm's own output arrives, so
nothing in rm is patched); peak RSS is the child's, from wait4. The runs share a tokenized-data cache in a
temporary folder, so the first is cold and the next ones read it. The child inherits this environment:
`TOKENIZERS_PARALLELISM=false python scripts/bench_data.py ...` runs as `rm train` does (its CLI sets it).
Nothing here is a test: figures go in the README with this command.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
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

BAR = re.compile(r"tokenizing (\w+):\s+(\d+)%\|.*?\| (\d+)/(\d+) ")
"""rm's progress bar over one split's pairs (rm/tokens/encode.py), as tqdm draws it."""


def overrides(checkout: Path, data: Path, out: Path, tokenizer: Path | None) -> list[str]:
    """The benchmark's run: a one-layer random-init model, 2 steps, no eval or saving on the way."""
    args = [f"data.source={data}", f"output_dir={out}", "model.random_init.hidden_size=64"]
    if any((checkout / "rm" / p / "cache.py").is_file() for p in ("tokens", "data")):  # run 1 cold, then cached
        args += [f"data.cache_dir={out.parent / 'cache'}"]
    args += ["model.random_init.num_hidden_layers=1", "model.random_init.intermediate_size=128"]
    args += ["model.random_init.num_attention_heads=4", "model.random_init.max_position_embeddings=512"]
    args += [f"tokenizer.name_or_path={tokenizer.resolve()}"] if tokenizer else ["tokenizer.vocab_size=8000"]
    args += ["collator.max_length=512", "collator.max_tokens=8192"]
    args += ["collator.eval_max_tokens=16384", "train.max_steps=2", "train.eval_steps=0", "train.save_steps=0"]
    args += ["train.report_to=[]", "export.enabled=false", "train.num_threads=1", "data.on_bad_record=skip"]
    return args


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, all its threads (Linux's /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def timed_lines(stream, pid: int) -> list[tuple[float, float, str]]:
    """Every line and progress-bar redraw of `stream` (split at \\n and \\r), with the wall-clock time and the
    process's CPU seconds when it began to arrive; passed on to this process's stderr as it comes, so the run's
    log shows as before."""
    lines, buf, since = [], b"", None
    while chunk := os.read(stream.fileno(), 1 << 16):
        now = (time.perf_counter(), cpu_seconds(pid))
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        buf += chunk
        since = since or now
        *done, buf = re.split(rb"[\r\n]", buf)
        for piece in done:
            lines.append((*since, piece.decode(errors="replace")))
            since = now  # the next piece began in this chunk at the latest
        since = since if buf else None
    if buf:
        lines.append((*(since or (time.perf_counter(), 0.0)), buf.decode(errors="replace")))
    return lines


def tokenizing(lines: list[tuple[float, float, str]]) -> tuple[float, float] | None:
    """Pairs per second over both splits' progress bars (first appearance to the last reaching 100%), and the
    CPU cores the process kept busy meanwhile; None when nothing was tokenized (a cached run)."""
    start = end = None
    total = 0
    for t, cpu, text in lines:
        m = BAR.search(text)
        if m is None:
            continue
        start = start or (t, cpu)
        if m.group(2) == "100":
            end, total = (t, cpu), total + int(m.group(4))
    if start is None or end is None or end[0] <= start[0]:
        return None
    wall = end[0] - start[0]
    return total / wall, (end[1] - start[1]) / wall


def launch(
    checkout: Path, data: Path, out: Path, extra: list[str], tokenizer: Path | None = None, child: str = CHILD
) -> tuple[list[tuple[float, float, str]], float]:
    """One run of `child` (given the checkout and the run's overrides): its output (`timed_lines`) and its peak
    RSS in GiB; a failed run stops the benchmark with the end of its output."""
    cmd = [sys.executable, "-c", child, str(checkout.resolve()), *overrides(checkout, data, out, tokenizer), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = timed_lines(proc.stdout, proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        tail = "\n".join(text for *_, text in lines[-40:])
        raise SystemExit(f"run failed ({status}): {tail}")
    return lines, usage.ru_maxrss / 1024**2  # KiB -> GiB


def run(checkout: Path, data: Path, out: Path, extra: list[str], tokenizer: Path | None = None) -> tuple[str, float]:
    """One run: its "FIRST .. RUN .." line with the tokenizing rate added, and its peak RSS in GiB."""
    lines, rss = launch(checkout, data, out, extra, tokenizer)
    line = next(text for *_, text in lines if text.startswith("FIRST"))
    rate = tokenizing(lines)
    line += f"  tokenizing {rate[0]:,.0f} pairs/s ({rate[1]:.2f} cores busy)" if rate else "  tokenizing - (cached)"
    return line, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--runs", type=int, default=1, help="runs one after the other")
    parser.add_argument("--rm", type=Path, default=REPO, help="the checkout whose rm package to run")
    parser.add_argument("--tokenizer", type=Path, help="a saved tokenizer folder (tokenizer.name_or_path)")
    parser.add_argument("overrides", nargs="*", help="extra key=value for rm train")
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            line, rss = run(args.rm, args.data, Path(tmp) / f"run{i}", args.overrides, args.tokenizer)
            print(f"run {i + 1}: {line} (s)  peak RSS {rss:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
