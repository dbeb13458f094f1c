"""The grouped-training benchmark (scripts/bench_groups.py): every mode trains on the same token ids (a group's
6 pairs are exactly the binarized file's), only what fits 512 tokens whole is kept, and a tiny run trains the groups
mode at 12 ordered pairs per optimizer step (the full matrix of modes runs in the benchmark itself). No timing is
checked: the numbers are the machine's."""

import gzip
import json
import subprocess
import sys
from itertools import combinations

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import bench_groups  # noqa: E402

N_RECORDS = 15  # make_group_data holds out the last 20%: 12 train prompts, 3 held-out
LONG = {4, 13}  # a response of these records is longer than 512 tokens (13 is held out)


def _hh_records() -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) texts; every word distinct enough that no two responses are equal."""
    out = []
    for i in range(N_RECORDS):
        prompt = f"\n\nHuman: question {i} about apples?\n\nAssistant:"
        if i % 3 == 0:  # a multi-turn prompt
            prompt = f"\n\nHuman: hello {i}\n\nAssistant: hi {i}" + prompt
        chosen = f" a kind answer number {i}"
        rejected = f" a rude reply number {i}" + (f" very{i}" * 700 if i in LONG else "")
        out.append((prompt, chosen, rejected))
    return out


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench_groups")
    data = root / "hh.jsonl.gz"
    with gzip.open(data, "wt", encoding="utf-8") as f:
        for p, c, r in _hh_records():
            f.write(json.dumps({"chosen": p + c, "rejected": p + r}) + "\n")
    return data, root / "work", bench_groups.group_data(data, root / "work", 0, seed=0)


def test_every_mode_gets_the_same_ids_and_only_what_fits_whole(bench):
    """The reference: the saved tokenizer on each text of the written files, and the length arithmetic of
    512 tokens (this tokenizer puts nothing in front of a text)."""
    from transformers import AutoTokenizer

    data, work, got = bench
    tok = AutoTokenizer.from_pretrained(work / "tokenizer")
    assert tok("a")["input_ids"] == tok.encode("a", add_special_tokens=False)

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    source = [json.loads(x) for x in (work / "source" / "groups" / "train.jsonl").read_text().splitlines()]
    written = [json.loads(x) for x in (work / "groups" / "harmless-base" / "train.jsonl").read_text().splitlines()]
    pairs = [json.loads(x) for x in (work / "pairs" / "harmless-base" / "train.jsonl").read_text().splitlines()]
    fits = []
    for record in source:
        prompt = ids(record["prompt"])
        responses = [ids(a["answer"]) for a in sorted(record["answers"], key=lambda a: a["rank"])]
        if len(prompt) + max(map(len, responses)) <= 512:
            fits.append({"prompt": prompt, "responses": responses})
    # a long rejected answer is lent to other groups as an off-topic one: more than one group is left out
    assert 0 < len(fits) < len(source) - 1
    assert sorted(map(json.dumps, got.groups)) == sorted(map(json.dumps, fits))
    assert len(written) == len(got.groups) and len(pairs) == 6 * len(written) == len(got.pairs)
    for i, record in enumerate(written):
        texts = [a["answer"] for a in sorted(record["answers"], key=lambda a: a["rank"])]
        assert got.groups[i] == {"prompt": ids(record["prompt"]), "responses": [ids(t) for t in texts]}
        for j, (a, b) in enumerate(combinations(range(4), 2)):
            pair = pairs[6 * i + j]
            assert pair == {"chosen": record["prompt"] + texts[a], "rejected": record["prompt"] + texts[b]}
            assert got.pairs[6 * i + j] == {"prompt": ids(record["prompt"]), "chosen": ids(texts[a]),
                                            "rejected": ids(texts[b])}  # fmt: skip
    held = [(p, c, r) for k, (p, c, r) in enumerate(_hh_records()) if k >= 12 and k not in LONG]
    assert got.eval == [{"prompt": ids(p), "chosen": ids(c), "rejected": ids(r)} for p, c, r in held]
    for name in ("groups", "pairs"):  # both rm modes evaluate on the original held-out HH pairs
        test = (work / name / "harmless-base" / "test.jsonl").read_text().splitlines()
        assert [json.loads(x) for x in test] == [{"chosen": p + c, "rejected": p + r} for p, c, r in held]


def test_the_verdicts_say_what_the_figures_are():
    """Ceiling 200 / 50 = 4x slots per pair; groups at 30 against pairs at 10 pairs/s is 3x = 75% of it, and
    6x TRL's 5 pairs/s. Accuracies 0.60 and 0.70 on 100 pairs: 2 SE of the gap is 2 * sqrt(2 * 0.0022) = 0.13."""
    row = {"raw_pairs_per_s": 1.0, "overall_pairs_per_s": 1.0, "computed_flops_per_pair": 1.0}
    rows = {
        "trl": row | {"pairs_per_s": 5.0, "accuracy": 0.6, "n_eval": 100},
        bench_groups.PAIRS_MODE: row | {"pairs_per_s": 10.0, "slots_per_pair": 200.0, "accuracy": 0.6, "n_eval": 100},
        bench_groups.GROUPS_MODE: row | {"pairs_per_s": 30.0, "slots_per_pair": 50.0, "accuracy": 0.7, "n_eval": 100},
    }
    for r in rows.values():
        r["se"] = bench_groups.benchlib.accuracy_se(r["accuracy"], r["n_eval"])
    c = bench_groups.ceiling(rows)
    assert c["token_ceiling"] == 4.0 and c["speedup"] == 3.0 and c["fraction"] == 0.75
    text = "\n".join(bench_groups.verdicts(rows))
    assert "75.0% of it (target >= 85%: MISSED)" in text and "groups over trl: 6.00x (target >= 5x: met)" in text
    assert "all within 2 SE" in text
    rows[bench_groups.GROUPS_MODE] |= {"accuracy": 0.8, "se": bench_groups.benchlib.accuracy_se(0.8, 100)}
    assert "held-out accuracy: groups better" in "\n".join(bench_groups.verdicts(rows))


@pytest.mark.slow
def test_a_tiny_run_trains_the_groups_mode_at_12_pairs_a_step(bench):
    """4 groups: 24 ordered pairs, 2 optimizer steps of 12 (2 groups a step). One mode, the one whose step is not
    simply 12 pairs; the pairwise modes (rm's and TRL's, each 12 pairs a step) run in the benchmark itself."""
    data, work, _ = bench
    modes = [bench_groups.GROUPS_MODE]
    cmd = [sys.executable, str(REPO / "scripts" / "bench_groups.py"), "--data", str(data), "--limit", "4"]
    cmd += ["--work", str(work.parent / "run"), "--slice", "1", "--modes", ",".join(modes)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == dict.fromkeys(modes, 2)
    assert summary["n_eval"] == dict.fromkeys(modes, 2)  # the held-out pairs that fit: records 12 and 14
    assert "4 train groups of 4 (24 ordered pairs)" in done.stdout
