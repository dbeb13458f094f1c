"""The answers of /classify and /pooling, shaped as vLLM 0.34.0 shapes them, and its error body.

`ClassificationResponse` (vllm/entrypoints/pooling/classify/protocol.py, built in classify/serving.py):
`{"id": "classify-<request id>", "object": "list", "created", "model", "data": [{"index", "label", "probs",
"num_classes"}, ...], "usage": {"prompt_tokens", "total_tokens", "completion_tokens": 0,
"completion_tokens_details": null}}`; `PoolingResponse` (pooling/protocol.py): the same with `"id": "pool-..."` and
`data: [{"index", "object": "pooling", "data"}]`, where `data` is what the classify task pools, the same list as
`probs`. `label` is the config's `id2label` of the largest output, as vLLM picks it. Usage counts each text's
tokens as scored, as vLLM counts its prompt tokens (a prompt shared by several texts counts once for each).

The outputs are /score's for the same text: the reward (normalised under --normalize) then any attribute outputs,
raw. vLLM then applies its pooler's activation unless `use_activation` is false, chosen from the model's config by
vLLM's rule (vllm/model_executor/layers/pooler/activations.py `get_act_fn`, the number of labels read from the
output): `problem_type` "regression" -> identity; "multi_label_classification" -> sigmoid; otherwise (and for
"single_label_classification") sigmoid for one output, softmax for several, unless a sentence-transformers
`activation_fn` names Identity. rm exports set `problem_type: "regression"` (rm/export/outputs.py), so an rm
export's `probs` is its raw reward, equal to /score's, in vLLM and here; another model served by rm gets what vLLM
gives it (a one-label model without a problem_type: sigmoid(reward), with the raw reward on /score). An ensemble
answers its chosen reward, with identity.

Errors: vLLM's `ErrorResponse` (vllm/entrypoints/serve/engine/protocol.py), `{"error": {"message", "type",
"param", "code"}}`, the type as vLLM names it for that status (serve/exception_handling/error_response.py).
"""

from __future__ import annotations

import math
import time
from http import HTTPStatus
from typing import Any

from rm.model.reward import transformers_model
from rm.serve.batch_plan import Output
from rm.serve.scorer import Scorer
from rm.serve.vllm_api.vllm_requests import VllmAsked

ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 422: "UnprocessableEntityError",
               500: "InternalServerError", 501: "NotImplementedError", 503: "ServiceUnavailableError"}  # fmt: skip
"""vLLM's error `type` by status; other statuses get the HTTP phrase, as vLLM's HTTPException handler gives them."""
PREFIXES = {"classify": "classify", "pooling": "pool"}
"""The `id` prefixes of vLLM's response models."""


def error_body(status: int, message: str, param: str | None = None) -> dict:
    """vLLM's ErrorResponse for a refused or failed request."""
    kind = ERROR_TYPES.get(status) or HTTPStatus(status).phrase
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def vllm_answer(asked: VllmAsked, raw: list[list[Output]], scorer: Scorer, model: str, request_id: str) -> dict:
    """The response body of a scored /classify or /pooling request (`raw`: one output per item)."""
    config = served_config(scorer)
    rule = activation(config) if asked.use_activation is not False else "identity"
    vectors = [activated(values, rule) for values in outputs(raw, scorer)]
    if asked.route == "classify":
        labels = names(config, scorer)
        data: list[dict[str, Any]] = [
            {"index": i, "label": labels.get(top(v)), "probs": v, "num_classes": len(v)} for i, v in enumerate(vectors)
        ]
    else:
        data = [{"index": i, "object": "pooling", "data": v} for i, v in enumerate(vectors)]
    n = sum(asked.tokens)
    return {
        "id": f"{PREFIXES[asked.route]}-{asked.request_id or request_id}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0, "completion_tokens_details": None},
    }


def outputs(raw: list[list[Output]], scorer: Scorer) -> list[list[float | None]]:
    """Per item (one text each), what /score answers for it: the reward, then the attribute outputs in order."""
    flat = [r for item in raw for r in item]
    if scorer.ensemble is not None:
        pairs = [(c.reward, c.attributes) for c in scorer.ensemble.combine(flat)]
    else:
        pairs = [scorer.outputs(r) for r in flat]
    return [[reward, *(attributes or {}).values()] for reward, attributes in pairs]


def served_config(scorer: Scorer) -> Any:
    """The transformers config of the served model; None for an ensemble (several models)."""
    inner = getattr(scorer.model, "module", scorer.model)
    hf = getattr(inner, "hf", None)
    return transformers_model(hf).config if scorer.ensemble is None and hf is not None else None


def activation(config: Any) -> str:
    """vLLM 0.34's pooler activation for this config (`get_act_fn`): identity, sigmoid or classify (sigmoid for
    one output, softmax for several)."""
    if config is None:
        return "identity"
    problem = getattr(config, "problem_type", None) or ""
    if problem == "regression":
        return "identity"
    if problem == "multi_label_classification":
        return "sigmoid"
    if problem == "single_label_classification":
        return "classify"
    st = getattr(config, "sentence_transformers", None)
    name = st.get("activation_fn") if isinstance(st, dict) else None
    name = name or getattr(config, "sbert_ce_default_activation_function", None)
    if name is not None and name.rsplit(".", 1)[-1] == "Identity":
        return "identity"
    return "classify"


def activated(values: list[float | None], rule: str) -> list[float | None]:
    """`values` through the activation; a non-finite output (null) stays null, and makes a softmax null."""
    if rule == "classify":
        rule = "sigmoid" if len(values) < 2 else "softmax"
    if rule == "identity":
        return values
    if rule == "sigmoid":
        return [None if v is None else sigmoid(v) for v in values]
    if any(v is None for v in values):
        return [None] * len(values)
    top_value = max(values)  # type: ignore[type-var]
    exps = [math.exp(v - top_value) for v in values]  # type: ignore[operator]
    return [e / sum(exps) for e in exps]


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def names(config: Any, scorer: Scorer) -> dict[int, str]:
    """Output index -> label: the config's id2label, else rm's names (an ensemble's reward and attributes)."""
    id2label = getattr(config, "id2label", None)
    if id2label:
        return {int(k): v for k, v in id2label.items()}
    return dict(enumerate(["reward", *scorer.attributes]))


def top(values: list[float | None]) -> int:
    """The index vLLM's `np.argmax` picks: the first largest, or the first non-finite (NaN wins argmax)."""
    if any(v is None for v in values):
        return values.index(None)
    return max(range(len(values)), key=lambda i: (values[i], -i))
