"""The reward server, `python -m rm serve`."""
