"""One home for reward forwards: every way rm computes a reward from a model (padded and shared rows, a cached
prompt, an encoder's pooling) lives in rm/model/ (rm/model/reward.py lists them), so that training, eval, scoring
and serving cannot drift apart. A module elsewhere that runs a backbone, reads hidden states or logits, or applies
the score head itself is a second forward; one that builds `PooledLogits` itself is a second copy of the choice
`reward_module` makes."""

import ast
from pathlib import Path

RM = Path(__file__).resolve().parents[2] / "rm"

FORWARD_ATTRIBUTES = {"base_model", "last_hidden_state", "logits"}
"""A backbone (`hf.base_model`), its hidden states, or a transformers head's output: what a forward reads."""
FORWARD_CALLS = {"score_head", "PooledLogits"}
"""The score head itself, and the encoders' forward, which `reward_module` alone chooses."""
ALLOWED = {
    ("export/outputs.py", "score_head"): "the export names the head's outputs (out_features) and writes its rows: "
    "the attribute mix into row 0, row 0 alone for --reward-only; it never computes a reward",
}


def forward_uses(source: str) -> list[tuple[int, str]]:
    """(line, name) of each read of a FORWARD_ATTRIBUTES attribute and each call of a FORWARD_CALLS name."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in FORWARD_ATTRIBUTES:
            hits.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in FORWARD_CALLS:
                hits.append((node.lineno, name))
    return sorted(hits)


def test_forward_uses_are_found():
    source = "h = hf.base_model(ids).last_hidden_state\nr = score_head(hf)(h)\nm = pretrained.PooledLogits(hf)\n"
    assert forward_uses(source) == [(1, "base_model"), (1, "last_hidden_state"), (2, "score_head"), (3, "PooledLogits")]
    assert forward_uses('"""model(**batch).logits[:, 0]"""\nscore = model.score\nx = head(h)\n') == []


def test_only_rm_model_runs_a_backbone_or_the_score_head():
    hits = [
        f"rm/{rel}:{line}: {name}"
        for path in sorted(RM.rglob("*.py"))
        if (rel := path.relative_to(RM)).parts[0] != "model"
        for line, name in forward_uses(path.read_text())
        if (str(rel), name) not in ALLOWED
    ]
    assert hits == [], "a reward forward outside rm/model/: use RewardModel, reward_module or PrefixScoring"


def test_each_allowance_is_still_used():
    """An allowance whose module no longer does what it names is dropped, not kept as a blind spot."""
    for (rel, name), why in ALLOWED.items():
        assert name in {n for _, n in forward_uses((RM / rel).read_text())}, (rel, name, why)
