"""The reward server, `python -m rm serve` (issue 27)."""
