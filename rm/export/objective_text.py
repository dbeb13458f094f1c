"""What the model card says was trained: the objective as `loss.*` and `model.head.*` set it, the Hub tags that name
it, and what a micro-batch counted (pairs, or groups of K responses).

Each sentence follows rm/model/objective.py (`preference_loss`, `training_loss`), the loss the run minimised:
Bradley-Terry with its margin, soft labels and reward centring, Plackett-Luce, Davidson's ties with the nu the run
learned (config.json's `rm_davidson_nu`), attribute outputs and a reward that mixes them. A card that named
Bradley-Terry for every run misdescribed listwise and tie-modelling runs. Kept apart from rm/export/card.py for its
size; the shape of the data (groups or pairs) comes from the run's data_report.json, as the chat template's does.
"""

from __future__ import annotations

import json
from pathlib import Path

from rm.config import RunConfig
from rm.config.rundir import RunDir


def run_report(cfg: RunConfig) -> dict:
    """The run's data_report.json ({} where the run directory or the report is not at hand)."""
    try:
        report = json.loads(RunDir(Path(cfg.output_dir)).data_report.read_text())
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def largest_group(report: dict) -> int:
    """The most responses one training or eval example had (2 for pairs; 0 where the report does not say)."""
    shape = report.get("groups") if isinstance(report.get("groups"), dict) else {}
    return max((v.get("largest_group", 0) for v in shape.values() if isinstance(v, dict)), default=0)


def grouped(cfg: RunConfig, report: dict) -> bool:
    """Whether the run trained on groups of K responses (a K-response layout), so a micro-batch counts groups; a
    Plackett-Luce run without a report is taken to have had them (it ranks groups)."""
    return largest_group(report) > 2 if report.get("groups") else cfg.loss.type == "plackett_luce"


def tags(cfg: RunConfig) -> list[str]:
    """The Hub tags that name the objective."""
    found = ["plackett-luce" if cfg.loss.type == "plackett_luce" else "bradley-terry"]
    if cfg.loss.ties == "davidson":
        found.append("davidson-ties")
    if cfg.loss.strength == "soft":
        found.append("soft-labels")
    if cfg.model.head.attributes:
        found.append("attribute-regression")
    if cfg.model.head.length:
        found.append("length-disentangled")
    return found


def method(cfg: RunConfig, groups: bool) -> str:
    """The objective in a few words, for the card's first line of 'Training'."""
    what = (
        "listwise Plackett-Luce reward modelling over ranked groups of responses"
        if cfg.loss.type == "plackett_luce"
        else "Bradley-Terry reward modelling over the ordered pairs of groups of responses"
        if groups
        else "pairwise Bradley-Terry reward modelling"
    )
    if cfg.loss.ties == "davidson":
        what += ", ties by Davidson's model"
    if cfg.model.head.attributes:
        what += f", with {len(cfg.model.head.attributes)} attribute regression outputs"
    if cfg.model.head.length:
        what += ", with a length head trained beside the reward and left out of it (ODIN)"
    return what


def batch_unit(groups: bool) -> str:
    """What `train.batch_size` counted: pairs, or whole groups (one prompt's K responses each)."""
    return "groups" if groups else "pairs"


def nu_text(cfg: RunConfig, nu: float | None) -> str:
    """Davidson's nu as the run had it: the learned value config.json keeps, or the fixed one."""
    if cfg.loss.davidson_nu != "learned":
        return f"nu = {float(cfg.loss.davidson_nu):g}, fixed (`loss.davidson_nu`)"
    if nu is None:
        return "nu learned with the model (its value is not recorded with these weights)"
    return f"nu = {nu:.4g}, learned with the model (config.json `rm_davidson_nu`)"


def soft_scale(cfg: RunConfig, report: dict) -> str:
    """The strength at which a soft label reaches p = 1: declared, else the data's largest |s| (its report)."""
    if cfg.loss.strength_max:
        return f"{cfg.loss.strength_max:g}"
    found = report.get("strength", {}).get("max") if isinstance(report.get("strength"), dict) else None
    return f"{found:g}" if isinstance(found, int | float) else "the data's largest |s|"


def preference_text(cfg: RunConfig, groups: bool, nu: float | None, report: dict) -> str:
    """The preference term, as `preference_loss` computes it."""
    loss = cfg.loss
    davidson = loss.ties == "davidson"
    both = "r(better) + r(worse)" if groups or loss.type == "plackett_luce" else "r(chosen) + r(rejected)"
    center = (
        f"; plus {loss.center_rewards_coef:g} * ({both})^2 per ordered pair (`loss.center_rewards_coef`)"
        if loss.center_rewards_coef
        else ""
    )
    if loss.type == "plackett_luce":
        return (
            "Plackett-Luce: -log prod_i exp(r_i) / sum_(j ranked at or below i) exp(r_j) over each group's ranking, "
            "one term per group (tied responses are not chosen over each other; for two responses it is "
            f"Bradley-Terry){center}"
        )
    d = "r(better) - r(worse)" if groups else "r(chosen) - r(rejected)"
    if loss.use_margin:
        d += " - margin (the pair's `margin`, `loss.use_margin`)"
    term = (
        f"Davidson's strict term -log(e^(d/2) / (e^(d/2) + e^(-d/2) + nu)) ({nu_text(cfg, nu)}; "
        "Bradley-Terry at nu = 0)"
        if davidson
        else "Bradley-Terry: -log sigmoid(d)"
    )
    text = f"{term}, d = {d}"
    if groups:
        each = "a group's pairs weighing 1 in all" if loss.group_weighting == "group" else "every pair weighing 1"
        text += f", over every strictly ordered pair of a group, {each} (`loss.group_weighting={loss.group_weighting}`)"
    if loss.strength == "soft":
        text += (
            "; a pair with a preference strength s has the soft label p = 0.5 + s / (2 * "
            f"{soft_scale(cfg, report)}) and adds -(p log sigmoid(d) + (1 - p) log sigmoid(-d)) instead "
            "(`loss.strength=soft`)"
        )
    return text + center


def length_text(cfg: RunConfig, eval_result: dict | None) -> str:
    """The length head's terms (rm/model/length/length_loss.py) and the held-out correlations the run reached."""
    loss = cfg.loss
    reached = (eval_result or {}).get("length_head") or {}
    shown = {k: f"{v:.3f}" if isinstance(v, int | float) else "undefined" for k, v in reached.items()}
    measured = (
        f" Reached on the held-out set ({reached.get('responses')} responses, Pearson with n): reward "
        f"{shown.get('quality_pearson', 'undefined')}, length output {shown.get('length_pearson', 'undefined')} "
        "(eval.json `length_head`)."
        if reached
        else " The correlations reached were not measured for these weights (a checkpoint's, not the final ones)."
    )
    return (
        "a second linear output on the same last-token state, the length output l, is trained with the reward r: "
        "the preference term above ranks r + l; plus "
        f"{loss.length_corr_coef:g} * ((1 - corr(dl, dn)) + corr(dr, dn)^2 / 2) (`loss.length_corr_coef`) over the "
        "ordered pairs the preference term compares, d a difference within a pair and n the response's token count "
        "as the model saw it, standardised by means and deviations updated once per optimizer step (momentum "
        f"{loss.length_stats_momentum:g}), so the term adds up over micro-batches and processes; plus "
        f"{loss.length_orth_coef:g} * cos(w_r, w_l)^2 between the two heads' weight rows "
        "(`loss.length_orth_coef`): ODIN (Chen et al. 2024, arXiv 2402.07319), its terms per pair and group. The "
        f"reward of this export is r alone.{measured}"
    )


def objective_rows(cfg: RunConfig, nu: float | None, eval_result: dict | None = None) -> list[tuple[str, str]]:
    """The card's training-table rows that say what was minimised: the preference term, ties, attribute outputs,
    the reward mix and the length head, each where the run had it (`eval_result`: the correlations reached)."""
    report = run_report(cfg)
    groups = grouped(cfg, report)
    loss, head = cfg.loss, cfg.model.head
    weight = f"{loss.preference_coef:g} * " if head.attributes and loss.preference_coef != 1 else ""
    rows = [("objective", weight + preference_text(cfg, groups, nu, report))]
    if loss.ties == "davidson":
        average = ", averaged over the group's tied pairs" if loss.type == "plackett_luce" else ""
        rows.append(
            (
                "ties",
                "Davidson (1970): a tied pair adds -log(nu / (e^(d/2) + e^(-d/2) + nu)), d = r(a) - r(b)"
                f"{average}; {nu_text(cfg, nu)}",
            )
        )
    elif groups or loss.type == "plackett_luce":
        rows.append(("ties", "tied responses add no term (`loss.ties=skip`)"))
    if head.attributes:
        how = (
            "Gaussian negative log-likelihood with a learned sigma per attribute (see 'Outputs')"
            if loss.attribute_loss == "gaussian"
            else "mean squared error"
        )
        names = ", ".join(f"`{n}`" for n in head.attributes)
        rows.append(
            (
                "attributes",
                f"outputs 1..{len(head.attributes)} ({names}) regress the responses' ratings by {how}, weight "
                f"{loss.attribute_coef:g} (`loss.attribute_coef`); a missing rating adds nothing",
            )
        )
    if head.reward_from_attributes:
        mix = " + ".join(f"{w:g} * `{name}`" for name, w in head.reward_from_attributes.items())
        rows.append(("reward", f"reward = {mix} (`model.head.reward_from_attributes`): the preference term trains it"))
    if head.length:
        rows.append(("length head", length_text(cfg, eval_result)))
    return rows
