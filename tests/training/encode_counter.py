"""`rm train CONFIG [key=value ...]` with a file `<output_dir>/encoded-<rank>` written each time this process
tokenizes the splits itself: the `tokenize_once` scenario of the shared 2-process launch (tests/launched/), which
test_cache_run.py reads."""

import os
import sys
from pathlib import Path

from rm.config import load_config
from rm.tokens import prepare
from rm.training.run import main


def count(argv: list[str]) -> None:
    cfg = load_config(argv[0], argv[1:])
    encode = prepare.encode_splits

    def counted(*args, **kwargs):
        Path(cfg.output_dir, f"encoded-{os.environ.get('RANK', '0')}").touch()
        return encode(*args, **kwargs)

    prepare.encode_splits = counted
    try:
        main(cfg)
    finally:  # the launch runs other scenarios in this process after this one
        prepare.encode_splits = encode


if __name__ == "__main__":
    count(sys.argv[1:])
