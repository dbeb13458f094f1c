"""The leaderboards' own evaluation suites: RewardBench 1 and 2, RM-Bench."""
