"""Suites that judge a process reward model step by step (ProcessBench), beside the pair and group suites of
rm/suites/: their items are solutions cut into steps, their numbers come from one score per step.

    bench_records.py   ProcessBench's records read from the Hub, a downloaded folder or a file, one item each
    bench_block.py     eval.json's `suite` block: the paper's first-error F1 per split and averaged, the detection
                       precision/recall F1 apart, the counts, and the console and markdown tables
    bench_eval.py      `rm eval --suite processbench` and `train.eval_suites`: encode, score every step on every
                       process (rm/suites/score_items.py), judge, write eval.json, report.md and step_scores.jsonl
"""
