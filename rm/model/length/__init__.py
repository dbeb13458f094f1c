"""The length-disentangled reward head (`model.head.length`): ODIN done per pair and additively.

ODIN (Chen et al. 2024, arXiv 2402.07319) reads two outputs off the same last-token state: a quality output and a
length output. The preference loss ranks their sum, a correlation term drives the length output's Pearson
correlation with the response's token count to 1 and the quality output's to 0, and an orthogonality term keeps
the two heads' weight vectors apart; the length output is then dropped, so the reward used downstream is the
quality output alone. rm keeps the quality output in the score head (row 0, what every export and scorer reads)
and the length output in a linear layer of the training wrapper (`LengthHead`), so nothing but training sees it.

rm correlates differences within the ordered pairs the preference loss compares (the loss
sees nothing else), so a reward that ranks by quality alone is not penalised where the better answer is mostly
the longer. A batch's correlation is not a sum over its pairs, and token budgets make micro-batches
length-grouped, so a per-micro-batch correlation would change with the number of processes and accumulation
steps. Here each pair's term is standardised by running means and deviations (detached, updated once per
optimizer step from statistics summed over every micro-batch of the step on every process): the summed term is
the first-order expansion of Pearson's correlation at those statistics, its gradient the gradient of the step's
correlation, and N processes compute exactly what one process accumulating N micro-batches computes.

    length_head.py    the layer, its running statistics and their per-step update
    length_loss.py    the correlation and orthogonality terms, the responses' token counts
    length_report.py  the correlations reached on the held-out set (eval.json), the head kept beside the run
"""
