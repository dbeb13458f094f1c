import math

import pytest
import torch

from rm.model.group_loss import bradley_terry_loss


def test_loss_matches_hand_computation():
    """Two pairs with reward gaps 1 and -2:
    -log sigmoid(1)  = log(1 + e^-1) = 0.3132617
    -log sigmoid(-2) = log(1 + e^2)  = 2.1269280
    mean = 1.2200949
    """
    chosen, rejected = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 1.0])
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(1.2200949, abs=1e-6)
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(
        (math.log1p(math.exp(-1)) + math.log1p(math.exp(2))) / 2, abs=1e-6
    )


def test_margin_is_subtracted_inside_the_sigmoid():
    """Gap 1 with margin 0.5 leaves 0.5: log(1 + e^-0.5) = 0.4740770; gap -2, margin 1: log(1 + e^3) = 3.0485874."""
    chosen, rejected = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 1.0])
    margin = torch.tensor([0.5, 1.0])
    assert bradley_terry_loss(chosen, rejected, margin).item() == pytest.approx((0.4740770 + 3.0485874) / 2, abs=1e-6)


def test_centering_adds_the_mean_squared_sum():
    """Sums are 3 and 0: mean of squares 4.5; with coefficient 0.1 that adds 0.45."""
    chosen, rejected = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 1.0])
    base = bradley_terry_loss(chosen, rejected).item()
    assert bradley_terry_loss(chosen, rejected, center_rewards_coef=0.1).item() == pytest.approx(base + 0.45, abs=1e-6)


def test_loss_is_stable_for_large_gaps_and_has_the_right_gradient():
    chosen = torch.tensor([100.0, -100.0], requires_grad=True)
    rejected = torch.zeros(2)
    loss = bradley_terry_loss(chosen, rejected)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(50.0, abs=1e-4)
    loss.backward()
    # d/dx of -log sigmoid(x) is -sigmoid(-x); halved by the mean.
    assert chosen.grad.tolist() == pytest.approx([-0.5 * torch.sigmoid(torch.tensor(-100.0)).item(), -0.5])


def test_sum_reduction_adds_the_per_pair_terms():
    """The same two pairs summed: 0.3132617 + 2.1269280 = 2.4401897; centring adds 0.1 * (9 + 0) = 0.9."""
    chosen, rejected = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 1.0])
    assert bradley_terry_loss(chosen, rejected, reduction="sum").item() == pytest.approx(2.4401897, abs=1e-6)
    summed = bradley_terry_loss(chosen, rejected, center_rewards_coef=0.1, reduction="sum").item()
    assert summed == pytest.approx(2.4401897 + 0.9, abs=1e-6)
