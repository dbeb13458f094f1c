"""The card section of a merged export (`rm merge`, rm/scoring/weight_average.py): its members, their weights, how far
each sits from the average, and each one's held-out accuracy beside the merged model's."""

from __future__ import annotations

from typing import Any

from rm.data.data_report import shown_path


def merged_section(facts: Any) -> str:
    """'Merged from' for a card whose `facts.members` are set (a `CardFacts`: typed Any, card imports this)."""
    if not facts.members:
        return ""
    merged = (facts.eval_result or {}).get("overall", {})
    rows = [
        f"| {shown_path(m.name)} | {m.weight:.4f} | {m.distance:.4f} | {shown(m.accuracy)} | {m.n or 'n/a'} |"
        for m in facts.members
    ]
    rows.append(f"| **merged** | | | {shown(merged.get('accuracy'))} | {merged.get('n', 'n/a')} |")
    return (
        "## Merged from\n\n"
        f"These weights are the weighted average of {len(facts.members)} reward models fine-tuned from one "
        "initialization (WARM, Ramé et al. 2024): one model's cost when read. Distance is each member's "
        "||w - w_merged|| / ||w_merged||; accuracies are each member's own held-out eval (its eval.json) and the "
        "merged weights' on the first member's held-out pairs.\n\n"
        "| member | weight | distance | held-out accuracy | pairs |\n| --- | ---: | ---: | ---: | ---: |\n"
        + "\n".join(rows)
        + "\n\n"
    )


def shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
