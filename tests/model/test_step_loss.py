"""The step loss: binary cross-entropy of each step's label against sigmoid(output at its last token), equal to a
hand computation, soft labels kept soft (a label of 0.7 trains the probability to 0.7), `loss.steps: last` on the
last step of each solution only, and each group weighing its steps (or solutions) in its optimizer step."""

import math

import pytest
import torch

from conftest import tiny_model
from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config.loss_config import LossConfig
from rm.model.objective import group_weights, training_loss
from rm.model.reward import RewardModel, group_outputs, step_split
from rm.model.steps.step_loss import step_terms
from rm.tokens.store import EncodedGroup, EncodedSplit


def bce(logit: float, y: float) -> float:
    p = 1 / (1 + math.exp(-logit))
    return -(y * math.log(p) + (1 - y) * math.log(1 - p))


def step_group(responses, ends, labels, rank=None):
    rank = rank if rank is not None else [0] * len(responses)
    return EncodedGroup([3, 4, 5], responses, rank, 0, step_ends=ends, step_labels=labels)


GROUPS = [
    step_group([[10, 11, 12, 13], [14, 15]], [[1, 3], [1]], [[1.0, 0.7], [0.0]], [0, 1]),
    step_group([[16, 17, 18]], [[0, 1, 2]], [[1.0, 0.25, 0.0]]),
]


def test_the_step_loss_is_binary_cross_entropy_of_each_label_summed():
    outputs = torch.tensor([0.3, -1.2, 2.0, 0.0, 0.5, -0.4])
    batch = {"step_target": torch.tensor([1.0, 0.7, 0.0, 1.0, 0.25, math.nan]),
             "step_last": torch.tensor([False, True, True, False, False, True])}  # fmt: skip
    loss, n = step_terms(LossConfig(), outputs, batch)
    want = sum(bce(o, y) for o, y in zip(outputs.tolist()[:5], batch["step_target"].tolist()[:5], strict=True))
    assert n.item() == 5 and loss.item() == pytest.approx(want, rel=1e-6)  # NaN: no label, no term
    loss, n = step_terms(LossConfig(steps="last"), outputs, batch)
    assert n.item() == 2 and loss.item() == pytest.approx(bce(-1.2, 0.7) + bce(2.0, 0.0), rel=1e-6)


def test_a_soft_label_is_a_target_not_a_class():
    """The gradient vanishes where the probability equals the label: 0.7 is trained to 0.7, not cast to 0 or 1."""
    logit = torch.tensor([math.log(0.7 / 0.3)], requires_grad=True)
    loss, _ = step_terms(LossConfig(), logit, {"step_target": torch.tensor([0.7]), "step_last": torch.tensor([True])})
    loss.backward()
    assert abs(logit.grad.item()) < 1e-6


def test_a_model_trained_on_soft_labels_predicts_them(tokenizer):
    torch.manual_seed(0)
    model = RewardModel(tiny_model(tokenizer)).train()
    groups = [step_group([[10 + i, 11, 12 + i]], [[0, 2]], [[0.7, 0.2]]) for i in range(4)]
    batch = SharedCollator(tokenizer.pad_token_id)(groups)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(150):
        loss, weight = training_loss(LossConfig(), group_outputs(model, batch), batch)
        optimizer.zero_grad()
        (loss / weight).backward()
        optimizer.step()
    with torch.no_grad():
        probs = torch.sigmoid(step_split(group_outputs(model.eval(), batch), batch)[1]).view(-1, 2)
    assert probs[:, 0].tolist() == pytest.approx([0.7] * 4, abs=0.02)
    assert probs[:, 1].tolist() == pytest.approx([0.2] * 4, abs=0.02)


@pytest.mark.parametrize("collator", [PaddedCollator, SharedCollator])
def test_step_outputs_are_read_at_each_steps_last_token(tokenizer, collator):
    torch.manual_seed(0)
    model = RewardModel(tiny_model(tokenizer)).eval()
    batch = collator(tokenizer.pad_token_id)(GROUPS)
    with torch.no_grad():
        rewards, steps = step_split(group_outputs(model, batch), batch)
        alone = []
        for g in GROUPS:
            for ids, ends in zip(g.response_ids, g.step_ends, strict=True):
                for e in ends:
                    row = torch.tensor([[*g.prompt_ids, *ids[: e + 1]]])
                    alone.append(model(input_ids=row, attention_mask=torch.ones_like(row)).item())
    order = [0, 1, 3, 4, 5, 2]  # steps listed response by response in reward order: slot 0 of each group, then slot 1
    assert steps.tolist() == pytest.approx([alone[k] for k in order], abs=1e-5)
    assert len(rewards) == 3 and batch["step_target"].tolist() == pytest.approx([1.0, 0.7, 1.0, 0.25, 0.0, 0.0])


def test_each_group_weighs_its_steps_or_its_solutions():
    split = EncodedSplit.from_groups(GROUPS)
    assert group_weights(LossConfig(), split).tolist() == [3, 3]
    assert group_weights(LossConfig(steps="last"), split).tolist() == [2, 1]


def test_the_outcome_ranking_can_be_added_to_the_step_loss(tokenizer):
    torch.manual_seed(0)
    model = RewardModel(tiny_model(tokenizer)).eval()
    batch = SharedCollator(tokenizer.pad_token_id)(GROUPS)
    with torch.no_grad():
        out = group_outputs(model, batch)
        plain, n = training_loss(LossConfig(), out, batch)
        mixed, m = training_loss(LossConfig(step_preference_coef=0.5), out, batch)
        rewards = step_split(out, batch)[0]
    pair = -torch.nn.functional.logsigmoid(rewards[batch["better"]] - rewards[batch["worse"]]).sum()
    assert n == m == 6 and len(batch["better"]) == 1
    assert mixed.item() == pytest.approx(plain.item() + 0.5 * pair.item(), rel=1e-6)


@pytest.mark.parametrize(
    "override", ["model.head.attributes=[helpfulness]", "model.head.length=true", "loss.strength=soft"]
)
def test_what_stepwise_data_cannot_train_is_refused_in_one_line(override):
    from conftest import QUICKSTART
    from rm.config import load_config
    from rm.errors import ConfigError
    from rm.model.objective import check_consumed

    cfg = load_config(QUICKSTART, [override])
    counts = {"steps": {"items": 3, "of": 3}, "attributes": {"items": 3, "names": {"helpfulness": 3}},
              "strength": {"items": 3, "of": 3, "max_abs": 1.0}}  # fmt: skip
    with pytest.raises(ConfigError, match="the data is stepwise"):
        check_consumed(cfg, counts)
    check_consumed(cfg, {k: v for k, v in counts.items() if k != "steps"})  # preference data: trained as asked
