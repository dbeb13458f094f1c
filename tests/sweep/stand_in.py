"""`python tests/sweep/stand_in.py sweep FILE ...`: `python -m rm sweep` whose trials train nothing.

The scheduling tests (tests/sweep/test_scheduling.py) need many trials from several processes and
threads at once; a real run costs seconds of both CPUs each, so here a trial only waits and returns
an eval result made from its parameters. Everything else (study, queue, budget, heartbeat, recovery,
reports) is the sweep's own code. A trial first waits until the file named by RM_TEST_GATE exists, so
that a test can hold every thread's first trial until all processes are up and then release them at once.
"""

import os
import sys
import time
from pathlib import Path

import rm.sweep.driver


def stand_in(trial, *args) -> dict:
    gate = Path(os.environ.get("RM_TEST_GATE", ""))
    deadline = time.monotonic() + 120
    while os.environ.get("RM_TEST_GATE") and not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(float(os.environ.get("RM_TEST_TRIAL_SECONDS", "0.1")))
    accuracy = sum(float(v) for v in trial.params.values())
    return {"overall": {"accuracy": accuracy, "loss": 1.0}, "subsets": {}}


rm.sweep.driver.run_child = rm.sweep.driver.run_in_process = stand_in

if __name__ == "__main__":
    from rm.cli import main

    sys.exit(main(sys.argv[1:]))
