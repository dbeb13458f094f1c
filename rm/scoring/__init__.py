"""The scoring room: one loader for every inference path (`rm score`, `rm redteam`, `rm serve`, `rm.load`).

It sits above `export` (a run without an export is rebuilt from its checkpoint as `rm export` rebuilds it) and
below `training`, so every command that scores a trained model loads it the one way (rm/scoring/inference.py).
Step scores (a process reward model's) have their inputs read in one place too (rm/scoring/step_inputs.py), and
`rm score`'s stepwise records their job (rm/scoring/step_file.py).
"""

from rm.scoring.inference import Loaded, load

__all__ = ["Loaded", "load"]
