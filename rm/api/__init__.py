"""rm from Python: `rm.train(config, train_data=..., eval_data=..., model=...)` and `rm.load(source).score(...)`.

A thin layer over the commands' own code (training's `rm.training.run.main`, `rm score`'s encoding and scoring,
`rm eval`'s report), so that a reward from `rm.load(...).score` is the one `rm score` writes for the same record and
`evaluate` returns the eval.json `rm eval` writes. Errors are the commands' own `rm.errors.RMError`s, raised, never
printed: a notebook gets the one-line message as the exception's text.

A label of your own (`register_label`), the loss term that reads it (`register_loss_term`) and the eval.json block
computed from it (`register_metric`) are declared here too: README "How it works", adding a label.
"""

from rm.api.loading import LoadedModel, load
from rm.api.training import TrainResult, train
from rm.data.labels import Label
from rm.data.labels import register as register_label
from rm.evaluation.summary import Metric, register_metric
from rm.model.objective import LossTerm, register_loss_term

__all__ = ["Label", "LoadedModel", "LossTerm", "Metric", "TrainResult", "load", "train"]
__all__ += ["register_label", "register_loss_term", "register_metric"]
