"""`rm serve --ensemble`: every route's `rewards` are the chosen combination of each member's `rm score` reward (the
mean by default, 1e-5), with the mean, numpy's std over the members, mean - k std and each member's reward beside
them; three identical members have std 0; /score_steps is refused in one line; /info says what is served."""

import json

import numpy as np
import pytest
from scoring.ensemble_members import attribute_export, export, lora_run
from serving import client

from rm.cli import main as cli
from rm.data.load import load_pairs
from rm.errors import ConfigError
from rm.serve.scorer import load_ensemble_scorer

TOL = 1e-5


@pytest.fixture(scope="module")
def exports(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble_exports")
    return [str(export(tokenizer, root / f"m{i}", seed=i + 1)) for i in range(3)]


@pytest.fixture(scope="module")
def pairs(synthetic_root):
    return load_pairs(str(synthetic_root), "train", [])[:6]


def served(members, **settings):
    defaults = {"device": "cpu", "dtype": "float32", "trust_remote_code": False, "max_length": 0,
                "normalize": False, "num_threads": 1}  # fmt: skip
    return load_ensemble_scorer(tuple(members), **(defaults | settings))


def rm_score(model: str, records: list[dict], folder) -> list[dict]:
    """The records as `python -m rm score --model MODEL` writes them."""
    src, out = folder / "in.jsonl", folder / f"out-{abs(hash(model))}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli(["score", "--model", model, "--input", str(src), "--out", str(out), "--overwrite"]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def members_rewards(members, records, key, folder) -> np.ndarray:
    """[M, ...]: each member's `rm score` field `key` of every record."""
    return np.array([[r[key] for r in rm_score(m, records, folder)] for m in members], dtype=np.float64)


def as_records(groups: list[dict]) -> list[dict]:
    """/score_groups' groups as `rm score` reads K responses to a prompt: {"prompt", "responses": [{"text"}]}."""
    return [{"prompt": g["prompt"], "responses": [{"text": r} for r in g["responses"]]} for g in groups]


def test_every_route_gives_the_mean_of_each_member_s_rm_score(exports, pairs, tmp_path):
    texts = [p.prompt + p.chosen for p in pairs]
    each = members_rewards(exports, [{"text": t} for t in texts], "reward", tmp_path)  # [M, texts]
    groups = [{"prompt": p.prompt, "responses": [p.chosen, p.rejected, " Fine."]} for p in pairs[:3]]
    each_group = members_rewards(exports, as_records(groups), "rewards", tmp_path)  # [M, groups, 3]
    with client(served(exports)) as c:
        flat = c.post("/score", json={"texts": texts}).json()
        grouped = c.post("/score_groups", json={"groups": groups}).json()
        openrlhf = c.post("/get_reward", json={"query": texts, "prompts": texts, "labels": [None] * 6}).json()
        info = c.get("/info").json()
    for body, ref in ((flat, each), (openrlhf, each), (grouped, each_group)):
        np.testing.assert_allclose(body["rewards"], ref.mean(axis=0), atol=TOL, rtol=0)
        np.testing.assert_allclose(body["mean"], ref.mean(axis=0), atol=TOL, rtol=0)
        np.testing.assert_allclose(body["std"], np.std(ref, axis=0, ddof=0), atol=TOL, rtol=0)
        np.testing.assert_allclose(body["conservative"], ref.mean(axis=0) - np.std(ref, axis=0), atol=TOL, rtol=0)
        np.testing.assert_allclose(np.moveaxis(np.array(body["member_rewards"]), -1, 0), ref, atol=TOL, rtol=0)
    assert openrlhf["scores"] == openrlhf["rewards"]  # what OpenRLHF reads, and its logged metrics beside them
    assert openrlhf["extra_logs"] == {f"reward_{k}": openrlhf[k] for k in ("mean", "std", "conservative")}
    assert info["ensemble"] == {
        "members": exports, "reward": "mean", "uncertainty_k": 1.0, "over": "the members' raw rewards",
        "normalize": None, "base_copies": 3,
    }  # fmt: skip
    assert "/score_steps" not in info["routes"] and info["model"] == ", ".join(exports)


def test_the_conservative_reward_and_its_k(exports, pairs, tmp_path):
    texts = [p.prompt + p.rejected for p in pairs]
    each = members_rewards(exports, [{"text": t} for t in texts], "reward", tmp_path)
    with client(served(exports, k=2.5, reward="conservative")) as c:
        body = c.post("/score", json={"texts": texts}).json()
        assert c.get("/info").json()["ensemble"]["uncertainty_k"] == 2.5
    expected = each.mean(axis=0) - 2.5 * np.std(each, axis=0)
    np.testing.assert_allclose(body["rewards"], expected, atol=TOL, rtol=0)
    assert body["rewards"] == body["conservative"]
    with client(served(exports, reward="min")) as c:
        lowest = c.post("/score", json={"texts": texts}).json()["rewards"]
    np.testing.assert_allclose(lowest, each.min(axis=0), atol=TOL, rtol=0)


def test_three_identical_members_disagree_nowhere(exports, pairs):
    texts = [p.prompt + p.chosen for p in pairs]
    with client(served([exports[0]] * 3)) as c:
        body = c.post("/score", json={"texts": texts}).json()
        assert c.get("/info").json()["ensemble"]["base_copies"] == 1  # one source, loaded once
    assert body["std"] == [0.0] * len(texts)
    assert body["conservative"] == body["mean"]


def test_normalize_applies_each_member_s_own_statistics(exports, pairs, tmp_path):
    import shutil

    norms = [{"mean": 0.5, "std": 2.0}, {"mean": -1.0, "std": 0.25}]
    normed = []
    for name, norm in zip(exports[:2], norms, strict=True):
        folder = tmp_path / f"normed-{len(normed)}"
        shutil.copytree(name, folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {"reward_normalization": norm}))
        normed.append(str(folder))
    texts = [p.prompt + p.chosen for p in pairs]
    raw = members_rewards(normed, [{"text": t} for t in texts], "reward", tmp_path)
    scaled = (raw - np.array([[0.5], [-1.0]])) / np.array([[2.0], [0.25]])
    with client(served(normed, normalize=True)) as c:
        body = c.post("/score", json={"texts": texts}).json()
        info = c.get("/info").json()["ensemble"]
    np.testing.assert_allclose(body["rewards"], scaled.mean(axis=0), atol=TOL, rtol=0)
    np.testing.assert_allclose(body["std"], scaled.std(axis=0), atol=TOL, rtol=0)
    assert info["normalize"] == norms and info["over"].startswith("the members' normalised rewards")
    with pytest.raises(ConfigError, match="records no reward mean and std"):
        served([normed[0], exports[2]], normalize=True)


def test_score_steps_is_refused_in_one_line(exports):
    with client(served(exports[:2])) as c:
        reply = c.post("/score_steps", json={"prompt": "1 + 1?", "solutions": [["2"]]})
    assert reply.status_code == 400
    assert reply.json() == {
        "error": "this server serves an ensemble, which gives rewards, not step scores: serve one process reward "
        "model for /score_steps"
    }


def test_lora_members_on_one_base_serve_each_member_s_rm_score(tokenizer, pairs, tmp_path):
    runs = [str(lora_run(tokenizer, tmp_path / f"run{i}", seed=i + 1)) for i in range(3)]
    texts = [p.prompt + p.chosen for p in pairs]
    each = members_rewards(runs, [{"text": t} for t in texts], "reward", tmp_path)
    groups = [{"prompt": p.prompt, "responses": [p.chosen, p.rejected]} for p in pairs[:3]]
    each_group = members_rewards(runs, as_records(groups), "rewards", tmp_path)
    with client(served(runs), batch_threads=3) as c:  # each batch's parts in 3 threads, each with its adapters
        body = c.post("/score", json={"texts": texts}).json()
        grouped = c.post("/score_groups", json={"groups": groups}).json()  # on the prompts' cache, every member
        info = c.get("/info").json()
        assert c.app.state.batcher.threads == 3
    np.testing.assert_allclose(np.moveaxis(np.array(body["member_rewards"]), -1, 0), each, atol=TOL, rtol=0)
    np.testing.assert_allclose(np.moveaxis(np.array(grouped["member_rewards"]), -1, 0), each_group, atol=TOL, rtol=0)
    np.testing.assert_allclose(body["rewards"], each.mean(axis=0), atol=TOL, rtol=0)
    assert info["ensemble"]["base_copies"] == 1 and info["group_layout"] == "prefix-cache"


def test_attribute_outputs_are_the_members_mean(tokenizer, pairs, tmp_path):
    members = [str(attribute_export(tokenizer, tmp_path / f"a{i}", seed=i + 3)) for i in range(2)]
    texts = [p.prompt + p.chosen for p in pairs[:3]]
    scored = [rm_score(m, [{"text": t} for t in texts], tmp_path) for m in members]
    with client(served(members)) as c:
        body = c.post("/score", json={"texts": texts}).json()
        assert c.get("/info").json()["attributes"] == ["helpfulness", "verbosity"]
    for name in ("helpfulness", "verbosity"):
        each = np.array([[r["attributes"][name] for r in member] for member in scored])
        np.testing.assert_allclose([a[name] for a in body["attributes"]], each.mean(axis=0), atol=TOL, rtol=0)
    each = np.array([[r["reward"] for r in member] for member in scored])
    np.testing.assert_allclose(body["rewards"], each.mean(axis=0), atol=TOL, rtol=0)
