"""Hyperparameter sweeps on Optuna: an add-on over training that nothing else in rm imports (but the CLI)."""
