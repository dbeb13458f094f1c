"""`rm score` on stepwise records: each gets `step_scores`, the rest of the record kept, as other records get `reward`.

A record that asks for step scores (rm/scoring/step_inputs.py: `{prompt, solutions}`, `{prompt, completions}`, a
Math-Shepherd or PRM800K record) is scored through `score_steps` (rm/evaluation/steps/step_scoring.py: a problem's
solutions in one forward, the head read at every step's last token) with the model's step separator; any other
record goes to `rm score`'s record job (rm/evaluation/score_file.py:RecordScoring) unchanged.

One file holds one kind: its first record decides whether the file is stepwise, and a record of the other kind is
a bad record naming its line (it stops the job, or with --on-bad-record skip is left out and counted). A file that
mixes them is two files pasted together, whose outputs (`reward` here, `step_scores` there) a reader of the output
would have to tell apart record by record; rm/data/steps/step_load.py keeps one layout per file for the same reason.
"""

from __future__ import annotations

import json
from typing import Any

from rm.errors import RecordError
from rm.evaluation.score_file import RecordScoring
from rm.evaluation.steps.step_scoring import score_steps
from rm.scoring.step_inputs import STEP_FIELD, StepInput, asks_for_steps, step_input

Window = list[tuple[str, dict]]
"""(origin "file:line", record) of each record of one window."""


class StepFileScoring:
    """`RecordScoring`'s job (`lines`, `summary`) for a file that may be stepwise: its records scored as the file's
    kind decides, the counts of both added up."""

    def __init__(self, records: RecordScoring, separator: str):
        self.records = records
        self.separator = separator
        """The text after the problem and after every step (the model's: `Loaded.step_separator`)."""
        self.kind: tuple[bool, str] | None = None
        """(whether the file is stepwise, the origin of the record that said so), once its first record is read."""
        self.counts = {"step_records": 0, "solutions": 0, "steps": 0, "steps_unscored": 0}
        self.unscored: list[str] = []  # origins of the records with a step left without a score

    def lines(self, chunk: Window) -> list[str]:
        """Each record of `chunk` that could be scored, with its output fields, as a JSON line."""
        plain, steps = [], []
        for origin, record in chunk:
            stepwise = asks_for_steps(record, published=True)
            if self.kind is None:
                self.kind = (stepwise, origin)
            if stepwise != self.kind[0]:
                self.records.report.reject(origin, mixed(stepwise, self.kind[1]))  # raises in error mode
                continue
            (steps if stepwise else plain).append((origin, record))
        scored = self.steps_scored(steps) if steps else self.records.scored(plain)
        return [json.dumps(record | fields, ensure_ascii=False) + "\n" for record, fields in scored]

    def steps_scored(self, chunk: Window) -> list[tuple[dict, dict[str, Any]]]:
        """(record, {"step_scores": ...}) of each stepwise record of `chunk` that could be read, in order."""
        inputs: list[tuple[str, dict, StepInput]] = []
        for origin, record in chunk:
            try:
                inputs.append((origin, record, step_input(record, published=True)))
            except RecordError as e:
                self.records.report.reject(origin, e)
        r = self.records
        problems = [given.problem for _, _, given in inputs]
        scores = score_steps(
            r.model, r.tokenizer, r.layout, problems, max_length=r.max_length, separator=self.separator,
            batch_size=r.batch_size,
        )  # fmt: skip
        out = []
        for (origin, record, given), problem_scores in zip(inputs, scores, strict=True):
            steps = [p for solution in problem_scores for p in solution]
            if unscored := sum(p is None for p in steps):
                self.counts["steps_unscored"] += unscored
                self.unscored.append(origin)
            self.counts["solutions"] += given.solutions
            self.counts["steps"] += len(steps)
            out.append((record, {STEP_FIELD: given.shaped(problem_scores)}))
        self.counts["step_records"] += len(out)
        return out

    def summary(self) -> dict[str, Any]:
        """`RecordScoring.summary`'s counts (records and bad records of both kinds), and for stepwise records
        `solutions`, `steps` and `steps_unscored` (null: past max_length, or not finite) with `unscored_origins`."""
        counts = self.records.summary()
        counts["records"] += self.counts["step_records"]
        if self.kind is not None and self.kind[0]:
            counts.update({k: v for k, v in self.counts.items() if k != "step_records"})
            counts["stepwise"] = True
        if self.unscored:
            counts["unscored_origins"] = self.unscored
        return counts


def mixed(stepwise: bool, first: str) -> RecordError:
    """A record of the other kind than the file's, whose kind the record at `first` set."""
    if stepwise:
        message = (
            f"a stepwise record in a file of records to reward (from {first}): one file holds one kind; score the "
            "stepwise records from a file of their own"
        )
    else:
        message = (
            f"a record to reward in a file of stepwise records (from {first}): one file holds one kind; score it "
            "from a file of its own"
        )
    return RecordError("mixed_kinds", message)
