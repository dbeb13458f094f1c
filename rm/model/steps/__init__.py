"""The step loss of process reward models."""
