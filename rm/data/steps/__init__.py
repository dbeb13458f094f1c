"""Stepwise data for process rewards: a solution's steps, each with a label of its own.

step_problems.py   a seeded generator of synthetic problems whose steps a marker word makes wrong
step_records.py    `StepSolution` (a prompt, its steps, one label in [0, 1] per step) and grouping by prompt
step_formats.py    one record of the stepwise, Math-Shepherd or PRM800K layout, told by its fields, as a StepSolution
step_load.py       a .jsonl, .jsonl.gz or .json file of one layout as StepSolutions, bad records raised or skipped
"""
