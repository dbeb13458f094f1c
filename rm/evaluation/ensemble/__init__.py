"""Several reward models scored as one (`rm eval --model A B C [--merged M]`): each member scored as `rm eval` scores
one model, the rewards combined per response, and the members' disagreement read as uncertainty.

    ensemble_numbers.py   the pure part: mean, std and conservative reward per response, each member's accuracy
                          with its interval, and how well the std over members predicts the mean's errors (AUC)
    ensemble_eval.py      the recipe: one data read and encoding, every member scored on it (each gathered once
                          across processes), eval.json (the mean's numbers, plus the `ensemble` block) and report
    ensemble_text.py      the ensemble's table and sentences for the console, report.md and report.html
"""
