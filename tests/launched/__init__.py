"""One launched job per process count: the "N processes equal one process" scenarios (scenarios.py) run in turn
inside one `accelerate launch` of 2 processes and one of 3, a session; the tests read what they wrote through the
`launched` fixture (tests/conftest.py, launch.py)."""
