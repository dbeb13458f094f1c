"""Judging a reward model: summaries per subset, rewards gathered across processes, reports, plots, scoring files."""
