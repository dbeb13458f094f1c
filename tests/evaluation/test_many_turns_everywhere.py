"""A prompt of 100,000 turns through every command that fits prompts, in one child process under a memory limit.

Fitting a prompt once tokenized the text from each of its later turns, every suffix at once: 100,000 turns of 26
characters are 130 GB of suffixes, and an 84 KB /score body of 3,000 turns had run 334 s before the server aborted
for memory. Now the cost is bounded by `max_length` (rm/tokens/turn_search.py), so each command finishes within the
limit below; the linear rule ends in a MemoryError while training tokenizes. The child (many_turns_child.py) runs
training with a suite eval, `rm eval`, `rm eval --suite`, `rm score`, `rm redteam` and `rm serve`'s app, and a chat
conversation of 1,201 messages (one interpreter start for all of them).
"""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here runs models end to end (seconds each)

CHILD = Path(__file__).with_name("many_turns_child.py")
LIMIT = 8 << 30
"""Address space for the child: torch, the tiny runs and the 2.6 MB prompt's own tokens take about 3.2 GB of
resident memory at their peak (more address space), the linear rule's suffixes 130 GB."""


@pytest.mark.skipif(resource.RLIMIT_AS is None, reason="no address-space limit on this system")
def test_every_entry_point_fits_a_prompt_of_100000_turns_under_a_memory_limit(tmp_path):
    env = os.environ | {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # The deadline only guards a hang (the child takes under a minute on 2 cores); the test asserts no time.
    done = subprocess.run([sys.executable, str(CHILD), str(tmp_path), str(LIMIT)], env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "all entry points finished" in done.stdout
