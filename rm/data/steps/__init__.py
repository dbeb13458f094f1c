"""Stepwise data for process rewards: a solution's steps, each with a label of its own.

step_problems.py   a seeded generator of synthetic problems whose steps a marker word makes wrong
"""
