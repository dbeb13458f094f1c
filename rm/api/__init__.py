"""rm from Python: `rm.train(config, train_data=..., eval_data=..., model=...)` and `rm.load(source).score(...)`.

A thin layer over the commands' own code (training's `rm.training.run.main`, `rm score`'s encoding and scoring,
`rm eval`'s report), so that a reward from `rm.load(...).score` is the one `rm score` writes for the same record and
`evaluate` returns the eval.json `rm eval` writes. Errors are the commands' own `rm.errors.RMError`s, raised, never
printed: a notebook gets the one-line message as the exception's text.
"""

from rm.api.loading import LoadedModel, load
from rm.api.training import TrainResult, train

__all__ = ["LoadedModel", "TrainResult", "load", "train"]
