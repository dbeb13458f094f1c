"""`make data`: the real HH-RLHF files some tests, configs/hh-harmless-tiny.yaml and the benchmarks read, fetched
from the Hub and written where they will be found, with no folder beside the clone required.

    python scripts/get_hh_data.py [--out data/hh-rlhf] [--slices harmless-base/test harmless-base/train ...]

Each slice is read with `datasets.load_dataset("Anthropic/hh-rlhf", data_dir=SUBSET, split=SPLIT)` (which fills the
Hugging Face cache on the way) and written as `<out>/<subset>/<split>.jsonl.gz`, the repository's own layout, so
that every reader of hh-rlhf folders reads it as the original. Then it prints the `export RM_HH_DATA=...` line.
Without a network it says so in one line and exits 1; a slice already written is left as it is.

Where the data is looked for (`hh_data_root`, which tests/conftest.py's HH_HARMLESS_TEST goes through): the folder
$RM_HH_DATA names when it is set (even if it holds nothing: a path set by hand that is wrong should show, not be
replaced by another copy); else this clone's data/hh-rlhf when it holds the harmless-base test file (this script's
default); else ../shared/data/hh-rlhf beside the clone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = "RM_HH_DATA"
DEFAULT_OUT = REPO / "data" / "hh-rlhf"
HUB_NAME = "Anthropic/hh-rlhf"
SLICES = ("harmless-base/test",)
"""What the tests need: the harmless-base test file (2,312 pairs, 4 with an empty answer)."""


def hh_data_root(environ: Mapping[str, str] | None = None, repo: Path = REPO) -> Path:
    """The folder of <subset>/<split>.jsonl.gz files: $RM_HH_DATA, else `repo`/data/hh-rlhf where it holds the
    harmless-base test file, else the shared folder beside `repo`."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV):
        return Path(environ[ENV]).expanduser().absolute()
    own = repo / "data" / "hh-rlhf"
    if (own / "harmless-base" / "test.jsonl.gz").is_file():
        return own
    return repo.parent / "shared" / "data" / "hh-rlhf"


SKIP_REASON = re.compile(r"\bHH(-RLHF)? file\b")
"""How the tests that need the file say why they skip ("needs the shared HH file", "... HH-RLHF file not present")."""


def missing_line(reasons: Iterable[str], path: Path) -> str:
    """The test summary's one line on the tests skipped for want of `path` (their skip `reasons`); "" when no test
    skipped for it, or it is there."""
    n = sum(bool(SKIP_REASON.search(reason)) for reason in reasons)
    if not n or path.is_file():
        return ""
    tests = "test" if n == 1 else "tests"
    return (f"{n} {tests} skipped: real HH-RLHF data not found; run `make data` or set {ENV}=FOLDER "
            f"(FOLDER/harmless-base/test.jsonl.gz; looked for {path})")  # fmt: skip


def unreachable() -> str:
    """Why the Hub's host cannot be reached ("" where it can), at once rather than after retries."""
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return "HF_HUB_OFFLINE is set"
    from rm.data.hub_reach import endpoint, probe  # rm's own probe: one TCP connection, 5 s at most

    url = endpoint().split("://", 1)[-1].split("/", 1)[0]
    host, _, given = url.partition(":")
    return probe(host, int(given) if given else 443 if endpoint().startswith("https") else 80)


def write_slice(records: Iterable[Mapping], path: Path) -> int:
    """`records` as JSON lines in a gzip file at `path`, written whole or not at all; how many were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    n = 0
    with gzip.open(part, "wt", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps({"chosen": record["chosen"], "rejected": record["rejected"]}, ensure_ascii=False))
            f.write("\n")
            n += 1
    part.replace(path)
    return n


def hub_slice(subset: str, split: str) -> Iterable[Mapping]:
    import datasets  # imported here: slow, and not needed to find the data

    return datasets.load_dataset(HUB_NAME, data_dir=subset, split=split)


Loader = Callable[[str, str], Iterable[Mapping]]
"""(subset, split) -> the slice's records."""


def fetch(slices: Iterable[str], out: Path, load: Loader | None = None) -> Iterator[str]:
    """Each `subset/split` slice written under `out` (one already there is kept), a line on each as it is done;
    `load(subset, split)` gives a slice's records (default: the Hub's)."""
    load = load or hub_slice
    out.mkdir(parents=True, exist_ok=True)
    if out.is_relative_to(REPO) and out != REPO:  # inside the clone (data/hh-rlhf): a folder git ignores whole,
        top = REPO / out.relative_to(REPO).parts[0]  # as a venv ignores itself, so no download is ever committed
        if not (top / ".gitignore").exists():
            (top / ".gitignore").write_text("*\n")
    for name in slices:
        subset, _, split = name.partition("/")
        path = out / subset / f"{split}.jsonl.gz"
        yield f"{path}: already there" if path.is_file() else f"{path}: {write_slice(load(subset, split), path)} pairs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of <subset>/<split>.jsonl.gz files")
    parser.add_argument("--slices", nargs="+", default=list(SLICES), help="subset/split names, e.g. helpful-base/test")
    args = parser.parse_args(argv)
    bad = [s for s in args.slices if s.count("/") != 1]
    if bad:
        parser.error(f"--slices: {bad[0]!r} is not SUBSET/SPLIT (e.g. harmless-base/test)")
    why = unreachable()
    if why:
        print(f"error: the Hub cannot be reached ({why}); `make data` needs the network, or set {ENV}=FOLDER to a "
              "copy of <subset>/<split>.jsonl.gz files", file=sys.stderr)  # fmt: skip
        return 1
    out = args.out.expanduser().absolute()
    try:
        for line in fetch(args.slices, out):
            print(line, flush=True)
    except Exception as e:  # noqa: BLE001 - the Hub or `datasets` failing midway: one line, not a traceback
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"error: {HUB_NAME}: {type(e).__name__}: {first}", file=sys.stderr)
        return 1
    print(f"export {ENV}={out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # rm's probe, run from a clone without installing it
    raise SystemExit(main())
