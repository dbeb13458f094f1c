"""Run under torchrun by test_distributed.py: `rm train CONFIG [key=value ...]` as `python -m rm train` runs it,
plus a record of every micro-batch this process ran (its pair indices and mean loss) in
`<output_dir>/batches-<rank>.json`, so the test can count each pair's uses."""

import json
import os
import sys
from pathlib import Path

from rm.config import load_config
from rm.training.run import main


def record(argv: list[str]) -> None:
    cfg = load_config(argv[0], argv[1:])
    seen: list[dict] = []
    main(cfg, on_batch=lambda batch, loss: seen.append({"pairs": batch["pair_index"].tolist(), "loss": loss.item()}))
    Path(cfg.output_dir, f"batches-{os.environ.get('RANK', '0')}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    record(sys.argv[1:])
