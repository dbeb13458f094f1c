"""A client of `rm serve` that imports without torch, for a policy's venv (issue 27)."""
