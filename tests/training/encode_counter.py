"""Run under torchrun by test_cache_run.py: `rm train CONFIG [key=value ...]`, with a file
`<output_dir>/encoded-<rank>` written each time this process tokenizes the splits itself."""

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
    main(cfg)


if __name__ == "__main__":
    count(sys.argv[1:])
