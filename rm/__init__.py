"""rm: pairwise (Bradley-Terry) reward-model training on human preference data."""

__version__ = "0.1.0"
