"""Judging a process reward model (PRM): one probability per step of a solution that the step is correct.

Pure functions over plain lists of step probabilities and labels, with no model, tokenizer or run in them, so
each number can be checked by hand and any caller (eval, a suite, a notebook) reads the same definition.

    processbench.py   ProcessBench (Zheng et al. 2024): the first step judged wrong against the earliest erroneous
                      step, accuracies on erroneous and on correct solutions, their harmonic mean per split and
                      the mean over splits; apart from it, the precision/recall F1 of flagging a solution as
                      erroneous that some forks report, which is not the benchmark's F1
    step_metrics.py   step-level accuracy and ROC AUC over every step of every solution (soft targets allowed)
    best_of_n.py      one score per solution from its steps (min, product, last), and best-of-N accuracy beside
                      its oracle and chance bars
"""
