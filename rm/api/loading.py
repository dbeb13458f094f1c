"""`rm.load(source)`: a trained reward model from Python, with `score` (what `rm score` writes) and `evaluate` (what
`rm eval` writes to eval.json).

`source` is what `rm serve` takes: an export folder, a run directory (its export, or its newest checkpoint rebuilt
as `rm export` rebuilds it), one of its checkpoints, or a Hub id; it is loaded by the one loader every command
scores through (rm/scoring/inference.py). `score` is `rm score`'s own job on a list (`RecordScoring`: the same text,
the same fitting into max_length, the same batch layout), so its rewards are the ones `rm score` writes for the same
records. `score_steps` is a process reward, P(step correct) for every step of a solution: `score_steps`
(rm/evaluation/steps/step_scoring.py) on the inputs `rm score` and `rm serve` read (rm/scoring/step_inputs.py), with
the scorer's layout, device and max_length. `evaluate` is `rm eval` (`evaluate_model`) on the
loaded model's folder.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rm.api.given_data import Data, is_path, jsonl_text, records_of
from rm.config import load_config
from rm.config.atomic import write_text
from rm.config.exportdir import ExportDir
from rm.data.data_report import DataReport
from rm.errors import ConfigError, DataError, ModelError, RecordError
from rm.evaluation.eval_report import EvalOptions, evaluate_model
from rm.evaluation.score_file import RecordScoring
from rm.evaluation.steps.step_scoring import score_steps
from rm.scoring import inference
from rm.scoring.ensemble import record_fields
from rm.scoring.step_inputs import asks_for_steps, step_input
from rm.serve.scorer import Scorer, load_ensemble_scorer, scorer_of

Scored = float | None | dict[str, Any]
"""One input's result: a text's reward (None where not finite), or a record's output fields."""
StepResult = list[float | None] | list[list[float | None]]
"""One problem's step scores: per step for one solution (`completions`), else per solution, per step."""


class LoadedModel:
    """A reward model loaded by `rm.load`: `score` texts, records and groups; `evaluate` preference data."""

    def __init__(self, source: str, scorer: Scorer):
        self.source = source
        self.scorer = scorer
        """The loaded model, its tokenizer, max_length and batch layout (rm/serve/scorer.py)."""

    @property
    def max_length(self) -> int:
        """Tokens of prompt + response: the run's collator.max_length where the folder says it, else the model's."""
        return self.scorer.max_length

    def score(self, data: str | dict | Sequence[str | dict], *, batch_size: int = 16) -> Scored | list[Scored]:
        """Rewards, as `rm score` gives them for the same input.

        - a text (str) -> its reward (a float; None where the model overflows, as `rm score` writes null);
        - a record (dict of any shape `rm score` reads: `text`, `prompt` + `response`, `chosen` + `rejected`,
          message lists, a group `{"prompt": ..., "responses": [...]}` and the other K-response formats) -> the
          fields `rm score` adds to it: `reward`, or `chosen_reward` and `rejected_reward`, or `rewards` (one per
          response, in order); `attributes` for a model with attribute outputs; `truncated: True` where a text was
          cut to fit max_length;
        - a list of these -> a list of their results, in order.

        A record that cannot be scored raises `rm.errors.DataError` naming it (`input[3]: field 'chosen' ...`).
        """
        one = isinstance(data, str | dict)
        items = [data] if one else list(data)
        s = self.scorer
        # rm score's own job: a bad record raises DataError (error mode): a caller's list has no record to skip
        fields = record_fields(s.ensemble) if s.ensemble is not None else None  # an ensemble's: rm score --model A B
        job = RecordScoring(
            s.model, s.tokenizer, s.layout, s.renderer, DataReport(repair_always=True), "", s.max_length, batch_size,
            fields, s.eos,
        )  # fmt: skip
        records = [
            ("input" if one else f"input[{i}]", {"text": item} if isinstance(item, str) else dict(item))
            for i, item in enumerate(items)
        ]
        for where, record in records:
            if asks_for_steps(record, published=True):
                raise DataError(f"{where}: a stepwise record asks for a score per step: use score_steps")
        out = [
            f["reward"] if isinstance(item, str) else f for item, (_, f) in zip(items, job.scored(records), strict=True)
        ]
        return out[0] if one else out

    def score_steps(
        self, data: dict | Sequence[dict], *, batch_size: int = 16, separator: str | None = None
    ) -> StepResult | list[StepResult]:
        """Step scores, P(the step is correct) for every step, as `rm score` writes `step_scores` for the same input.

        - a problem `{"prompt": str, "solutions": [[step, ...], ...]}` -> `[[p, ...], ...]`, per solution, per step;
        - one solution `{"prompt": str, "completions": [step, ...]}` (TRL's stepwise layout; `labels` are not read),
          or a Math-Shepherd or PRM800K record -> `[p, ...]`;
        - a list of these -> a list of their results, in order.

        p is None for a step that did not fit max_length beside its prompt (or whose output was not finite). Each
        step is followed by `separator` (None: the model's, `Loaded.step_separator`), about `batch_size` solutions a
        forward. A bad input raises `rm.errors.DataError` naming it (`input[3]: field 'solutions[0][2]' ...`).
        """
        if self.scorer.ensemble is not None:
            raise ModelError("score_steps scores one process reward model: an ensemble gives rewards (score)")
        if isinstance(data, str) or not isinstance(data, dict | Sequence):
            raise DataError(f"score_steps takes a problem (a dict) or a list of them, got a {type(data).__name__}")
        if separator is not None and (not isinstance(separator, str) or not separator):
            raise ConfigError(f"separator must be a non-empty string, got {separator!r}")
        one = isinstance(data, dict)
        given = []
        for i, item in enumerate([data] if one else data):
            try:
                given.append(step_input(item, published=True))
            except RecordError as e:
                raise DataError(f"{'input' if one else f'input[{i}]'}: {e.message}") from None
        s = self.scorer
        scores = score_steps(
            s.model, s.tokenizer, s.layout, [g.problem for g in given], max_length=s.max_length,
            separator=separator or s.step_separator, batch_size=batch_size,
        )  # fmt: skip
        out = [g.shaped(problem) for g, problem in zip(given, scores, strict=True)]
        return out[0] if one else out

    def evaluate(
        self,
        data: Data,
        *,
        out: str | Path | None = None,
        split: str = "test",
        holdout: float = 0.0,
        split_seed: int = 0,
        batch_size: int = 16,
        samples: int = 1000,
        seed: int = 0,
        overrides: Sequence[str] = (),
    ) -> dict:
        """`rm eval --model SOURCE --data DATA`: the dict it writes to eval.json (`overall`, `subsets`,
        `calibration`, `length_bins`, `eval`, and for groups and attributes their blocks), NaN where a metric is
        undefined (eval.json writes null). `data`: a path or Hub name (its `split`; with `holdout`, the held-out
        fraction of it drawn as the model's run drew it), a `datasets.Dataset` or a list of records (scored whole).
        `out`: where report.md, report.html, rewards.jsonl and the plots go (default: a temporary folder, removed).
        `overrides`: `rm eval --set` data keys (`format=nectar`, `columns.prompt=question`)."""
        if self.scorer.ensemble is not None:
            raise ModelError("evaluate scores one model: evaluate an ensemble with python -m rm eval --model A B C")
        folder = inference.exported(self.source)
        if not ExportDir(folder).holds_model:
            raise ModelError(
                f"{self.source}: evaluate needs an export folder (a run directory with export/, or a model); export "
                f"this one first: python -m rm export {self.source} --out DIR"
            )
        options = EvalOptions(batch_size=batch_size, max_length=self.max_length, samples=samples, seed=seed)
        cfg = load_config(None, [f"data.{o}" for o in overrides]).data
        with tempfile.TemporaryDirectory(prefix="rm-evaluate-") as tmp:
            if is_path(data):
                cfg = replace(cfg, source=str(data), eval_split=split)
            else:
                written = Path(tmp) / "data" / "eval.jsonl"
                written.parent.mkdir()
                write_text(written, jsonl_text(records_of(data, "data"), "data"))
                cfg = replace(cfg, source=str(written), eval_split=split)
            if holdout:
                version = ExportDir(folder).split_version(cfg.split_version)
                held = {"train_split": split, "eval_split": "", "eval_fraction": holdout, "split_version": version}
                cfg = replace(cfg, split_seed=split_seed, **held)
            return evaluate_model(folder, cfg, out or Path(tmp) / "report", options)


def load(
    source: str | Path | Sequence[str | Path], *, device: str = "auto", dtype: str = "float32", max_length: int = 0,
    num_threads: int = 0, ensemble_reward: str = "mean", uncertainty_k: float = 1.0,
) -> LoadedModel:  # fmt: skip
    """The reward model at `source` (an export folder, a run directory, a checkpoint or a Hub id), on `device`
    ("auto": the GPU where there is one). `max_length` 0: the run's collator.max_length saved with it, else the
    model's position limit (at most 2048), as `rm score` picks it. A list of sources is an ensemble, as `rm score
    --model A B C` scores it: `score` gives the `ensemble_reward` (mean, conservative = mean - `uncertainty_k` std,
    or min) where one model's reward goes, with `reward_mean`, `reward_std`, `reward_conservative` and
    `reward_members` beside it for a record (a text gets the chosen reward alone)."""
    if not isinstance(source, str | Path):
        names = tuple(str(Path(s).expanduser()) if Path(str(s)).expanduser().exists() else str(s) for s in source)
        scorer = load_ensemble_scorer(
            names, device=device, dtype=dtype, trust_remote_code=False, max_length=max_length, normalize=False,
            num_threads=num_threads, prefix_cache=False, k=uncertainty_k, reward=ensemble_reward,
        )  # fmt: skip
        return LoadedModel(", ".join(names), scorer)
    name = str(Path(source).expanduser()) if Path(str(source)).expanduser().exists() else str(source)
    loaded = inference.load(name, device=device, dtype=dtype, max_length=max_length, num_threads=num_threads)
    return LoadedModel(name, scorer_of(loaded, prefix_cache=False))
