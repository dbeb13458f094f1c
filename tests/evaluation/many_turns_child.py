"""Run by test_many_turns_everywhere.py in a child process under a memory limit: a prompt of 100,000 turns through
every command that fits prompts (training with its suite evals, `rm eval`, `rm eval --suite`, `rm score`,
`rm redteam`, `rm serve`), and a chat conversation of 1,201 messages through `rm score` and `rm serve`.

    python tests/evaluation/many_turns_child.py FOLDER LIMIT_BYTES
"""

import json
import resource
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TURN = "\n\nHuman: a?\n\nAssistant: b."
LONG = TURN * 100_000 + "\n\nHuman: and then?\n\nAssistant:"
MESSAGES = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(1_201)]
TINY = [
    "data.synthetic.n_train=48",
    "model.random_init.hidden_size=32",
    "model.random_init.intermediate_size=64",
    "model.random_init.num_hidden_layers=1",
    "tokenizer.vocab_size=300",
    "tokenizer.train_pairs=40",
    "train.batch_size=8",
    "train.eval_batch_size=16",
    "train.max_steps=2",
    "train.eval_steps=2",
    "train.report_to=[]",
    "train.num_threads=1",
    "data.eval_split=",
    "data.eval_fraction=0.3",
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def main(root: Path) -> None:
    from starlette.testclient import TestClient

    from rm.cli import main as rm
    from rm.serve.app import build_app
    from rm.serve.scorer import load_scorer
    from rm.serve.serve_config import ServeConfig

    question = [f"\n\nHuman: q {i}?\n\nAssistant:" for i in range(60)]
    ordinary = [{"chosen": f"{q} yes {i}", "rejected": f"{q} no"} for i, q in enumerate(question)]
    long_pair = {"chosen": LONG + " yes", "rejected": LONG + " no"}
    data = write_jsonl(root / "pairs.jsonl", [*ordinary[:30], long_pair, *ordinary[30:], long_pair])
    bench = json.loads((REPO / "tests" / "fixtures" / "rm_bench.json").read_text())
    suite = root / "rm_bench.json"
    suite.write_text(json.dumps([{**bench[0], "prompt": LONG}, *bench[1:]]))
    suites = f"[{{suite: rm-bench, data: {suite}}}]"
    run = root / "run"
    assert rm(["train", str(REPO / "configs" / "quickstart.yaml"), *TINY, f"data.source={data}",
               f"train.eval_suites={suites}", f"output_dir={run}"]) == 0  # fmt: skip
    export = str(run / "export")
    assert (
        rm(["eval", "--model", export, "--data", str(data), "--out", str(root / "eval"), "--bootstrap-samples", "10"])
        == 0
    )
    assert (
        rm(
            [
                "eval",
                "--model",
                export,
                "--suite",
                "rm-bench",
                "--data",
                str(suite),
                "--out",
                str(root / "suite"),
                "--bootstrap-samples",
                "10",
            ]
        )
        == 0
    )
    chat = {k: [*MESSAGES, {"role": "assistant", "content": v}] for k, v in (("chosen", "yes"), ("rejected", "no"))}
    to_score = write_jsonl(root / "score.jsonl", [long_pair, chat, {"text": LONG + " fine"}])
    assert rm(["score", "--model", export, "--input", str(to_score), "--out", str(root / "scored.jsonl")]) == 0
    red = (REPO / "tests" / "fixtures" / "red_team_attempts.jsonl").read_text().splitlines()
    attempt = {**json.loads(red[0]), "transcript": LONG + " sure."}
    attempts = write_jsonl(root / "red.jsonl", [*map(json.loads, red), attempt])
    assert rm(["redteam", "--model", export, "--input", str(attempts), "--out", str(root / "redteam")]) == 0
    scorer = load_scorer(export, device="cpu", dtype="float32", trust_remote_code=False, max_length=0,
                         normalize=False, num_threads=1)  # fmt: skip
    cfg = ServeConfig(model=export, max_body_bytes=64 << 20)
    with TestClient(build_app(scorer, cfg, None), base_url="http://localhost") as c:
        for body in ({"texts": [LONG + " yes", LONG + " no"]}, {"messages": [chat["chosen"]]}):
            got = c.post("/score", json=body)
            assert got.status_code == 200, got.text
    shutil.rmtree(run)  # the checkpoints: the parent only reads that this finished
    print("all entry points finished")


if __name__ == "__main__":
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    main(Path(sys.argv[1]))
