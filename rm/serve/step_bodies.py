"""A /score_steps body, checked and tokenized before it may join a batch, and its reply.

Body: one problem, `{"prompt": str, "solutions": [[step, ...], ...]}` (or `{"prompt": str, "completions": [step,
...]}`, one solution, its `labels` if any not read), or several, `{"items": [problem, ...]}`: the shapes
`rm.load(...).score_steps` reads (rm/scoring/step_inputs.py). A problem's solutions are tokenized by the step rule
(rm/tokens/steps/step_tokens.py) with the model's separator (`Scorer.step_separator`, shown by /info) into one
group, its prompt once and each solution a response, which the batcher schedules like a /score_groups group; the
model thread reads the head at every kept step's last token (`Scorer.forward`, through `step_outputs`, as
`score_steps` reads it), in its batches with the other routes' work.

Reply: `{"step_scores": ...}` shaped like the body: for a problem, a list per solution of one P(step correct) per
step (a `completions` problem: the one list); for `items`, one such entry per item. A step past max_length, or
whose output is not finite, is null; with --on-too-long error a solution that does not fit whole is refused (422).

Errors as the other routes' (rm/serve/bodies.py): 400 for the wrong shape (unknown fields, `solutions` and
`completions` both or neither, a step that is not a string), 413 for more problems or solutions than --max-texts,
422 for content that cannot be scored (an empty problem or step, a solution with no step) and for a model that has
no score head to read at a step (one that pools the sequence itself).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from rm.evaluation.steps.step_scoring import probability
from rm.model.reward import RewardModel
from rm.scoring.step_inputs import STEP_FIELD, StepInput, step_input
from rm.serve.batch_plan import Output
from rm.serve.bodies import STEP_ITEMS, Prepared, counted, fields, guarded, listed
from rm.serve.json_body import RequestError, decode
from rm.serve.scorer import Scorer
from rm.tokens.steps.step_tokens import encode_steps

log = logging.getLogger("rm.serve")

PROBLEM_FIELDS = ("prompt", "solutions", "completions", "labels")
"""A problem's fields (`labels`: the stepwise layout's, accepted and not read)."""


@dataclass
class StepsPrepared:
    """A checked /score_steps request: its problems as groups to score, and what shapes their answer."""

    prepared: Prepared
    """Item i: problem i's group (each solution a response, its `step_ends` set)."""
    inputs: list[StepInput]
    cut: list[list[int]]
    """Per problem, per solution: trailing steps that did not fit max_length (scored null)."""
    several: bool
    """The body was `{"items": [...]}`: the reply is one entry per item."""

    def answer(self, raw: list[list[Output]], request_id: str) -> dict[str, Any]:
        """`{"step_scores": ...}` from the head's outputs at each kept step, per item, per solution."""
        scores, overflow = [], False
        for given, cut, outputs in zip(self.inputs, self.cut, self.prepared.answers(raw), strict=True):
            per_solution = []
            for out, n in zip(outputs, cut, strict=True):
                values = out if isinstance(out, list) else [out]
                overflow = overflow or not all(math.isfinite(v) for v in values)
                per_solution.append([probability(v) for v in values] + [None] * n)
            scores.append(given.shaped(per_solution))
        if overflow:
            log.warning("request %s: some step outputs are not finite (the model overflows): sent as null", request_id)
        return {STEP_FIELD: scores if self.several else scores[0]}


def preparing_steps(
    body: bytes, scorer: Scorer, max_texts: int, on_too_long: str
) -> Generator[None, None, StepsPrepared]:
    """The body of a POST to /score_steps as groups to score, or the RequestError that refuses it; a generator of
    bounded steps run by the preparation thread, as `bodies.preparing` is (the body's fields and counts checked
    first, then STEP_ITEMS problems at a time checked and tokenized)."""
    payload = decode(body)
    problems, names = step_problems(payload, max_texts)
    if not isinstance(scorer.model, RewardModel):
        raise RequestError(
            422,
            f"this server's model ({type(scorer.model).__name__}) pools the sequence itself: it has no score at each "
            "step's last token to read; /score_steps needs a decoder reward model with a linear score head",
        )
    inputs, items, cut = [], [], []
    for k, (problem, name) in enumerate(zip(problems, names, strict=True)):
        if k % STEP_ITEMS == 0:
            yield
        given: StepInput = guarded(lambda problem=problem: step_input(problem), name)
        ids = encode_steps(
            scorer.tokenizer, given.problem.prompt, given.problem.solutions, scorer.step_separator,
            scorer.max_length, scorer.prefix,
        )  # fmt: skip
        if on_too_long == "error" and any(ids.steps_cut):
            j = next(j for j, n in enumerate(ids.steps_cut) if n)
            where = f"{name}.completions" if given.single else f"{name}.solutions[{j}]"
            raise RequestError(
                422,
                f"{where} does not fit max_length={scorer.max_length} tokens beside its prompt (this server refuses "
                "texts over max_length: --on-too-long error)",
            )
        inputs.append(given)
        items.append([ids.group])
        cut.append(ids.steps_cut)
    yield
    return StepsPrepared(Prepared(items, grouped=True), inputs, cut, several="items" in payload)


def step_problems(payload: dict, max_texts: int) -> tuple[list[dict], list[str]]:
    """The body's problems and their names in messages, their fields and counts checked: at most `max_texts`
    problems and as many solutions in all."""
    if "items" in payload:
        fields(payload, ("items",))
        problems = listed(payload["items"], "items", dict, " of {prompt, solutions} objects")
        names = [f"items[{i}]" for i in range(len(problems))]
    else:
        problems, names = [payload], ["the body"]
    counted(len(problems), max_texts, "problems")
    for problem, name in zip(problems, names, strict=True):
        fields(problem, PROBLEM_FIELDS, name)
        if ("solutions" in problem) == ("completions" in problem):
            raise RequestError(
                400,
                f"{name}: give either 'solutions' (a list of solutions, each a list of steps) or 'completions' (one "
                "solution's steps), not both or neither",
            )
    solutions = [p["solutions"] if "solutions" in p else [p["completions"]] for p in problems]
    counted(sum(len(s) if isinstance(s, list) else 1 for s in solutions), max_texts, "solutions")
    return problems, names
