"""The examples each `--help` ends with: the commands a newcomer runs first (tests/cli/test_cli.py parses
every one, so they stay valid)."""

from __future__ import annotations

EXAMPLES: dict[str, list[str]] = {
    "": [
        "python -m rm train configs/quickstart.yaml train.overwrite=true   # the demo (again): about a minute",
        "python -m rm data inspect ../shared/data/hh-rlhf/harmless-base/test.jsonl.gz --on-bad-record skip",
        "python -m rm eval --model runs/quickstart/export --data runs/quickstart/data --out runs/qs-eval",
        "python -m rm train --help                                  # each command's options and examples",
    ],
    "train": [
        "python -m rm train configs/quickstart.yaml train.overwrite=true   # replace an earlier run there",
        "python -m rm train configs/quickstart.yaml train.lr=1e-4 train.max_steps=200 output_dir=runs/lr",
        "python -m rm train runs/lr/config.yaml train.resume=auto   # continue after Ctrl-C or a pre-emption",
        "accelerate launch --config_file configs/accelerate/cpu-ddp.yaml -m rm train configs/quickstart.yaml "
        "output_dir=runs/qs-ddp",
    ],
    "sweep": [
        "python -m rm sweep configs/sweeps/quickstart-lr.yaml --dry-run",
        "python -m rm sweep configs/sweeps/quickstart-lr.yaml --dry-run n_trials=2 sampler=random",
        "python -m rm sweep configs/sweeps/quickstart-lr.yaml --report-only",
    ],
    "data": [
        "python -m rm data inspect ../shared/data/hh-rlhf/harmless-base/test.jsonl.gz --on-bad-record skip",
        "python -m rm data inspect tests/fixtures/argilla_ja.jsonl --set argilla.pairs_from_edits=true --json",
        "python -m rm data inspect pairs.csv --columns prompt=question,chosen=good,rejected=bad",
    ],
    "export": [
        "python -m rm export runs/quickstart --out /tmp/rm-export",
        "python -m rm export runs/quickstart/checkpoints/step-100 --out /tmp/rm-100 --eval",
        "python -m rm export runs/quickstart --out /tmp/rm-hub --push-to-hub me/my-rm --private",
    ],
    "merge": [
        "python -m rm merge runs/m1 runs/m2 runs/m3 --out /tmp/rm-merged",
        "python -m rm merge runs/m1/export runs/m2/export --weights 0.7 0.3 --out /tmp/rm-merged --overwrite",
    ],
    "eval": [
        "python -m rm eval --model runs/quickstart/export --data runs/quickstart/data --out runs/qs-eval",
        "python -m rm eval --model runs/hh-harmless-tiny/export --on-bad-record skip "
        "--data ../shared/data/hh-rlhf/harmless-base/test.jsonl.gz --holdout 0.15 --out runs/hh-eval",
        "python -m rm eval --model me/my-rm --data pairs.jsonl --columns chosen=good,rejected=bad --subsets a b",
    ],
    "score": [
        "python -m rm score --model runs/quickstart/export --input runs/quickstart/data/harmless/test.jsonl.gz",
        "python -m rm score --model runs/quickstart/export --input texts.csv --field text --on-bad-record skip",
    ],
    "serve": [
        "python -m rm serve runs/quickstart/export                    # http://127.0.0.1:8000, this machine only",
        "RM_API_KEY=secret python -m rm serve runs/quickstart/export --host 0.0.0.0 --workers 2 --device cuda",
        "python -m rm serve runs/quickstart/export --normalize --on-too-long error --max-wait-ms 10",
    ],
    "redteam": [
        "python -m rm redteam --model runs/hh-harmless-tiny/export --input red_team_attempts.jsonl.gz",
        "python -m rm redteam --scores runs/redteam/scored.jsonl",
    ],
}


def epilog(command: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES.get(command, []))
