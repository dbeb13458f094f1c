"""The length output's layer and the running statistics its correlation term standardises by (see __init__)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

MOMENTS = ("quality", "length", "tokens", "quality^2", "length^2", "tokens^2", "quality*tokens", "length*tokens")
"""The running moments kept, in order, of the three series' differences within ordered pairs (better - worse):
E[d] of the three, their E[d^2], and the two cross moments with the token count's difference."""
MIN_VARIANCE = 1e-8
"""A floor on running variances: a series that does not vary (every pair's two answers of one length) gives 0."""
QUALITY_SCALE = 1.0
"""Added in quadrature to the quality difference's deviation, in reward units (a Bradley-Terry logit): the
quality term is the correlation of sqrt(var + QUALITY_SCALE^2), so its gradient, 1 / that deviation per unit of
standardised length, stays bounded as the quality output's spread within pairs shrinks (a marker-only reward
differs by one margin in every pair: its deviation goes to 0, and an unfloored term's gradient would blow up)."""


class LengthHead(nn.Module):
    """A bias-free linear layer on the reward's last-token state (the score head's input), the running moments of
    the ordered pairs' differences in (quality, length output, token count) over past optimizer steps, and this
    step's weighted sums so far.

    `moments` and `updates` are buffers, so checkpoints keep them and a resumed run continues exactly; the sums
    are a plain attribute, never broadcast by DDP (each process adds its own micro-batches until the step ends)."""

    def __init__(self, score_weight: torch.Tensor, momentum: float, std: float = 0.02):
        super().__init__()
        hidden = score_weight.shape[-1]
        self.linear = nn.Linear(hidden, 1, bias=False, device=score_weight.device, dtype=score_weight.dtype)
        nn.init.normal_(self.linear.weight, std=std)  # as transformers initialises a score head
        self.register_buffer("moments", torch.zeros(len(MOMENTS), dtype=torch.float64, device=score_weight.device))
        self.register_buffer("updates", torch.zeros((), dtype=torch.long, device=score_weight.device))
        self.momentum = momentum
        self.sums: torch.Tensor | None = None
        """[1 + len(MOMENTS)] float64: the summed pair weight, then the weighted sums of MOMENTS, this step."""
        self.orthogonality: torch.Tensor | None = None
        """cos(w_quality, w_length)^2 of the last forward that read the length output (in its graph)."""

    def forward(self, picked: torch.Tensor, score_weight: torch.Tensor, mix: tuple[float, ...] | None) -> torch.Tensor:
        """Length outputs [n] (fp32) of the picked states [n, H]. Computed here, inside the model's forward, so
        that sharded weights (FSDP) are whole: the cosine between the quality row (row 0 of the score head, or the
        mix of its attribute rows where the reward is one) and the length row, kept for the loss."""
        quality = score_weight[0]
        if mix is not None and score_weight.shape[0] == 1 + len(mix):
            quality = torch.tensor(mix, dtype=score_weight.dtype, device=score_weight.device) @ score_weight[1:]
        length = self.linear.weight[0]
        self.orthogonality = F.cosine_similarity(quality.float(), length.float(), dim=0).square()
        return self.linear(picked).float().squeeze(-1)

    def accumulate(self, u: torch.Tensor, quality: torch.Tensor, length: torch.Tensor, tokens: torch.Tensor) -> None:
        """Add one micro-batch's ordered pairs (weights `u`, detached differences) to this step's sums."""
        x = torch.stack([quality.detach(), length.detach(), tokens]).double()  # [3, pairs]
        u = u.detach().double()
        row = torch.cat([u.sum()[None], x @ u, (x * x) @ u, (x[:2] * x[2]) @ u])
        self.sums = row if self.sums is None else self.sums + row

    def statistics(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(means [3], deviations [3], correlations [2]: quality and length output with tokens, shares [3]: each
        variance over its deviation squared, ready: 1.0 once the moments hold a step's statistics, else 0.0),
        float64 and detached, from the running moments; the quality deviation has QUALITY_SCALE in it."""
        m = self.moments.detach().double()
        mean = m[:3]
        var = (m[3:6] - mean**2).clamp(min=MIN_VARIANCE)
        floor = torch.tensor([QUALITY_SCALE**2, 0.0, 0.0], dtype=var.dtype, device=var.device)
        std = (var + floor).sqrt()
        cov = m[6:8] - mean[:2] * mean[2]
        rho = (cov / (std[:2] * std[2])).clamp(-1.0, 1.0)
        return mean, std, rho, var / std**2, (self.updates > 0).double()

    def update(self, reduce: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """At an optimizer step, on every process: sum this step's sums over processes (`reduce`) and move the
        running moments towards the step's (all of the way at the first step). A step with no weight or a
        non-finite sum leaves them as they were; the same on every process, since every process reduces alike."""
        sums = self.sums if self.sums is not None else self.moments.new_zeros(1 + len(MOMENTS))
        total = reduce(sums)
        step = total[1:] / total[0].clamp(min=1e-300)
        ok = (total[0] > 0) & torch.isfinite(total).all()
        rate = torch.where(self.updates > 0, torch.full_like(total[0], self.momentum), torch.ones_like(total[0]))
        self.moments.copy_(torch.where(ok, (1 - rate) * self.moments + rate * step, self.moments))
        self.updates += ok.long()
        self.sums = None


def with_length(out: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """The forward's outputs with the length output as their last column: [n, 2] for a reward alone, [n, 2 + A]
    for a reward and A attributes (`split_length` undoes it)."""
    return torch.cat([out.reshape(len(length), -1), length[:, None]], dim=1)


def split_length(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the outputs as a forward without the length column returns them, the length outputs [n])."""
    rest = out[:, :-1]
    return (rest[:, 0] if rest.shape[1] == 1 else rest), out[:, -1]
