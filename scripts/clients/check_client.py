"""Score the cases of scripts/clients/make_exports.py the way one client does, and compare with `rm score`.

Runs inside the client's own venv (rm is not installed there), on CPU, float32:

    python check_client.py CLIENT WORK_DIR      # transformers, trl, rewardbench, openrlhf, trl-served, openrlhf-served

Prints one JSON line per export kind and path: {"client", "kind", "path", "n", "max_abs_diff", "diffs", "error"}, where
`diffs` holds the largest |output - rm score| per named output (`reward`, and each attribute of the `attributes`
export, whose reference is `rm score`'s `*_attributes`; the `reward-only` export is held to the attributes
export's `rm score` reward). A client that refuses a multi-output model says so in a row with `client_refuses`.
Each client is driven through its own code where it has some: TRL's GRPOTrainer._calculate_rewards
(conversational prompts), RewardBench's model config, dialogue formatting and pipeline, OpenRLHF's
get_llm_for_sequence_regression. `trl-served` and `openrlhf-served` call a live `rm serve` of each export
(check_clients.sh starts them and writes their URLs to WORK_DIR/served.json) through the clients' own remote-reward
paths: TRL's _calculate_rewards with rm.client.trl_reward_func, OpenRLHF's SingleTurnAgentExecutor.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
import types
from pathlib import Path

import torch

KINDS = ("random", "lora", "bos", "attributes", "reward-only")
Outputs = dict[str, list[float]]
"""Per named output (`reward`, then the attributes), one value per text: chosen, rejected, chosen, ..."""


def load(work: Path, kind: str) -> tuple[list[dict], Outputs]:
    """The cases and `rm score`'s outputs for them; the reward-only export is held to the full export's reward."""
    cases = [json.loads(line) for line in (work / "cases.jsonl").read_text().splitlines()]
    scored = work / ("attributes" if kind == "reward-only" else kind) / "rm_score.jsonl"
    ref = [json.loads(line) for line in scored.read_text().splitlines()]
    out = {"reward": [r[f"{side}_reward"] for r in ref for side in ("chosen", "rejected")]}
    if kind == "attributes":
        for name in ref[0]["chosen_attributes"]:
            out[name] = [r[f"{side}_attributes"][name] for r in ref for side in ("chosen", "rejected")]
    return cases, out


def names_of(model) -> list[str]:
    """The outputs' names in index order, as the loaded config has them (output 0 is the reward)."""
    return [model.config.id2label[i] for i in range(model.config.num_labels)]


def refused(client: str, load_model, instead: str) -> dict:
    """The row of a client that cannot load a multi-output export: it builds a one-output head, and transformers
    refuses the checkpoint's 1 + A-row score weight. Any other failure is the check's own, and raises."""
    try:
        load_model()
    except Exception as e:  # noqa: BLE001 - the refusal is the finding
        if "mismatched" not in str(e):  # transformers: "You set `ignore_mismatched_sizes` to `False` ..."
            raise
        why = f"{client} loads an export path with a one-output head, and transformers refuses the 1 + A-row score"
        return {"client_refuses": True, "error": f"{why} weight (size mismatch, {type(e).__name__}): {instead}"}
    return {"error": f"{client} loaded a multi-output export as one output: check what it reads"}


def texts_of(cases: list[dict]) -> list[str]:
    return [c[k] for c in cases for k in ("chosen", "rejected")]


def plain_transformers(folder: Path, cases: list[dict]) -> dict[str, list[float] | Outputs]:
    """AutoModelForSequenceClassification on a padded, truncated batch; and the pipeline's default output.

    The attribute kinds also check that the export loads unchanged (no weight missing, unexpected or reshaped;
    id2label as config.json has it) and read every output, from the logits and from
    pipeline(top_k=None, function_to_apply="none"); the default pipeline, which returns a multi-output model's top
    label, is read from the one-output exports only."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    tok = AutoTokenizer.from_pretrained(folder)
    model, info = AutoModelForSequenceClassification.from_pretrained(folder, output_loading_info=True)
    model.eval()
    texts = texts_of(cases)
    with torch.no_grad():
        batch = tok(texts, padding=True, truncation=True, return_tensors="pt")
        logits = model(**batch).logits
    pipe = pipeline("text-classification", model=model, tokenizer=tok)  # no function_to_apply
    if folder.parent.name not in ("attributes", "reward-only"):
        return {"AutoModel batch": logits[:, 0].tolist(), "pipeline default": [pipe(t)[0]["score"] for t in texts]}
    saved = json.loads((folder / "config.json").read_text())["id2label"]
    if {str(k): v for k, v in model.config.id2label.items()} != saved or any(info.get(k) for k in info):
        return {"loads unchanged": {"error": f"loaded id2label {model.config.id2label}, config.json {saved}; {info}"}}
    names = names_of(model)
    out: dict = {"AutoModel batch": {name: logits[:, i].tolist() for i, name in enumerate(names)}}
    every = pipe(texts, top_k=None, function_to_apply="none")  # per text: [{"label", "score"}, ...], best first
    found = {n: [s["score"] for r in every for s in r if s["label"] == n] for n in names}
    if any(len(v) != len(texts) for v in found.values()):
        found = {"error": f"not every output in every answer: {every[0]}"}
    out["pipeline top_k=None, function_to_apply=none"] = found
    if len(names) == 1:
        out["pipeline default"] = [pipe(t)[0]["score"] for t in texts]
    return out


def grpo_trainer(folder: Path, reward_funcs, prompts: list):
    """A GRPOTrainer on CPU whose policy is any causal LM with the export's tokenizer: only its reward path runs."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        report_to=[],
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=4,
        bf16=False,
        logging_steps=1,
    )
    train = Dataset.from_list([{"prompt": p} for p in prompts])
    policy = str(Path(folder).parents[1] / "pretrained-bos")
    return GRPOTrainer(model=policy, reward_funcs=reward_funcs, args=args, train_dataset=train)


TRL_INSTEAD = (
    "pass reward_funcs a loaded AutoModelForSequenceClassification (TRL reads logits[:, 0]), or the reward-only export"
)


def trl(folder: Path, cases: list[dict]) -> dict[str, list[float] | dict]:
    """GRPOTrainer with the export as its reward model: its own _calculate_rewards on conversational prompts.

    Given a path, TRL loads it with num_labels=1, which refuses an export with attribute outputs; given a loaded
    model, it reads logits[:, 0], the reward: both are checked on the attributes export."""
    from transformers import AutoModelForSequenceClassification

    prompts, completions = [], []
    for c in cases:
        for key in ("chosen_message", "rejected_message"):
            prompts.append(c["prompt_messages"])
            completions.append([c[key]])
    inputs = [{"prompt": p} for p in prompts]
    out: dict = {}
    reward_funcs = str(folder)
    if folder.parent.name == "attributes":
        out["GRPOTrainer._calculate_rewards"] = refused(
            "TRL", lambda: grpo_trainer(folder, str(folder), prompts), TRL_INSTEAD
        )
        reward_funcs = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    trainer = grpo_trainer(folder, reward_funcs, prompts)
    rewards = trainer._calculate_rewards(inputs, prompts, completions, [[0]] * len(prompts))
    path = "GRPOTrainer._calculate_rewards" + (", a loaded model" if folder.parent.name == "attributes" else "")
    return out | {path: rewards[:, 0].tolist()}


def rewardbench(folder: Path, cases: list[dict]) -> dict[str, list[float]]:
    """RewardBench's default seq-classifier config, its chat-template formatting and its pipeline, on CPU.

    Its pipeline sends inputs to "cuda" unconditionally; BatchEncoding.to is redirected to the CPU."""
    import transformers
    from rewardbench.models import REWARD_MODEL_CONFIG
    from rewardbench.utils import check_tokenizer_chat_template, prepare_dialogue_from_tokenizer
    from transformers import AutoTokenizer

    original_to = transformers.BatchEncoding.to
    transformers.BatchEncoding.to = lambda self, device, **kw: original_to(self, "cpu", **kw)
    config = REWARD_MODEL_CONFIG["default"]
    tok = AutoTokenizer.from_pretrained(folder)
    assert check_tokenizer_chat_template(tok), "no chat template: RewardBench would fall back to fastchat"
    tok.padding_side = "left"  # as rewardbench.py sets it
    model = config["model_builder"](str(folder), torch_dtype=torch.float32, device_map="cpu")
    pipe = config["pipeline_builder"]("text-classification", model=model, tokenizer=tok)
    texts = []
    for c in cases:
        example = {"prompt": c["prompt_messages"], "chosen": c["chosen_message"]["content"]}
        example["rejected"] = c["rejected_message"]["content"]
        if len(c["prompt_messages"]) == 1:
            example["prompt"] = c["prompt_messages"][0]["content"]
        example = prepare_dialogue_from_tokenizer(example, tok)
        texts += [example["text_chosen"], example["text_rejected"]]
    kwargs = {"batch_size": 8, "truncation": False, "padding": True, "max_length": 2048, "function_to_apply": "none"}
    logits = pipe(texts, **kwargs)  # (texts, outputs): rewardbench.py compares rows as lists, so output 0 first
    if logits.shape[1] == 1:
        return {"RewardBenchPipeline": logits[:, 0].tolist()}
    return {"RewardBenchPipeline": {name: logits[:, i].tolist() for i, name in enumerate(names_of(model))}}


def openrlhf_model_factory():
    """OpenRLHF's get_llm_for_sequence_regression, imported with the stand-ins `openrlhf` names (flash_attn, fp32)."""
    import transformers.modeling_utils  # noqa: F401 - before the stubs, so transformers sees no flash_attn

    stubs = ("flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed")
    for name in stubs:
        module = sys.modules.setdefault(name, types.ModuleType(name))
        for attr in ("index_first_axis", "pad_input", "rearrange", "unpad_input", "all_gather"):
            setattr(module, attr, None)
    import openrlhf.utils.utils as utils
    from openrlhf.models import get_llm_for_sequence_regression

    for name in stubs:  # only OpenRLHF's imports see them; transformers finds no flash_attn
        del sys.modules[name]
    if not getattr(utils.convert_to_torch_dtype, "knows_fp32", False):
        original = utils.convert_to_torch_dtype
        utils.convert_to_torch_dtype = lambda d: torch.float32 if d == "fp32" else original(d)
        utils.convert_to_torch_dtype.knows_fp32 = True
    return get_llm_for_sequence_regression


def openrlhf(folder: Path, cases: list[dict]) -> dict[str, list[float]]:
    """get_llm_for_sequence_regression(model_type="reward"), tokenized as OpenRLHF does (chat template,
    add_special_tokens=False, right padding); raw and with normalize_reward (config.mean / config.std).

    Two stand-ins, because OpenRLHF installs only with CUDA: `flash_attn` (imported at module level by
    its ring-attention helpers, unused without sample packing) is an empty module, and param_dtype
    accepts "fp32" (OpenRLHF knows only bf16/fp16; float32 is needed to compare at 1e-4)."""
    from transformers import AutoTokenizer

    get_llm_for_sequence_regression = openrlhf_model_factory()
    tok = AutoTokenizer.from_pretrained(folder)
    texts = []
    for c in cases:
        for key in ("chosen_message", "rejected_message"):
            texts.append(tok.apply_chat_template(c["prompt_messages"] + [c[key]], tokenize=False))
    batch = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    if folder.parent.name == "attributes":  # its value head has one output: the reward-only export is for it
        load = lambda: get_llm_for_sequence_regression(  # noqa: E731
            str(folder), "reward", param_dtype="fp32", attn_implementation="sdpa"
        )
        return {"raw": refused("OpenRLHF", load, "use the reward-only export")}
    out = {}
    for normalize in (False, True):
        model = get_llm_for_sequence_regression(
            str(folder), "reward", param_dtype="fp32", normalize_reward=normalize, attn_implementation="sdpa"
        ).eval()
        with torch.no_grad():
            out["normalized" if normalize else "raw"] = model(batch["input_ids"], batch["attention_mask"]).tolist()
        config = json.loads((folder / "config.json").read_text())
        read = (model.mean.item(), model.std.item())
        if normalize and read != (config["mean"], config["std"]):
            out["normalized"] = {
                "client_bug": True,
                "error": "OpenRLHF's normalize_reward does not see config.json's mean/std: it copies them into "
                "non-persistent buffers in __init__, which transformers 5 runs on the meta device, so they are "
                "lost when the weights load",
                "detail": f"holds mean {read[0]:.3g}, std {read[1]:.3g}; config.json {config['mean']:.4g}, "
                f"{config['std']:.4g}",
            }
    return out


def served_url(folder: Path) -> str:
    """The URL of the `rm serve` of this export that check_clients.sh started (served.json beside the kinds)."""
    return json.loads((folder.parents[1] / "served.json").read_text())[folder.parent.name]


def trl_served(folder: Path, cases: list[dict]) -> dict[str, list[float]]:
    """GRPOTrainer._calculate_rewards with reward_funcs=[rm.client.trl_reward_func(URL)]: TRL's own reward path
    calling a live `rm serve` of the export, with conversational prompts and with plain-text ones. rm is not
    installed here: rm.client comes from the repository on PYTHONPATH (it imports nothing else of rm, and no
    torch), with httpx installed in this venv."""
    from rm.client import trl_reward_func

    reward = trl_reward_func(served_url(folder))
    out = {}
    for style in ("conversational", "plain text"):
        prompts, completions = [], []
        for c in cases:
            for key in ("chosen", "rejected"):
                if style == "conversational":
                    prompts.append(c["prompt_messages"])
                    completions.append([c[f"{key}_message"]])
                else:  # HH text: the prompt runs to the last "Assistant:" tag
                    cut = c[key].rfind("\n\nAssistant:") + len("\n\nAssistant:")
                    prompts.append(c[key][:cut])
                    completions.append(c[key][cut:])
        trainer = grpo_trainer(folder, [reward], prompts)
        rewards = trainer._calculate_rewards(
            [{"prompt": p} for p in prompts], prompts, completions, [[0]] * len(prompts)
        )
        out[f"GRPOTrainer._calculate_rewards, trl_reward_func ({style})"] = rewards[:, 0].tolist()
    reward.client.close()
    return out


def openrlhf_served(folder: Path, cases: list[dict]) -> dict[str, list[float]]:
    """OpenRLHF's own remote-reward client: SingleTurnAgentExecutor(remote_rm_url=URL/get_reward).execute, which
    tokenizes the prompt, has the engine generate, decodes prompt + answer with its special tokens (so with the
    EOS a generation ends with), posts {"query", "prompts", "labels"} and reads `rewards` and `scores` back. The
    engine is a stand-in (vLLM needs CUDA) whose generation is the case's answer followed by EOS."""
    import asyncio
    from types import SimpleNamespace

    from openrlhf.utils.agent import SingleTurnAgentExecutor
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    executor = SingleTurnAgentExecutor(remote_rm_url=served_url(folder) + "/get_reward")
    params = SimpleNamespace(max_tokens=256, logprobs=None)

    class Engine:
        def __init__(self, answer: str):
            self.ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

        async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
            return SimpleNamespace(outputs=[SimpleNamespace(token_ids=self.ids, finish_reason="stop", logprobs=None)])

    async def rollouts() -> list[dict]:
        runs = []
        for c in cases:
            for key in ("chosen", "rejected"):
                cut = c[key].rfind("\n\nAssistant:") + len("\n\nAssistant:")
                engine = Engine(c[key][cut:])
                runs.append(executor.execute(c[key][:cut], None, params, 1024, tok, engine))
        return await asyncio.gather(*runs)

    outputs = asyncio.run(rollouts())
    if any(o["reward"] is None for o in outputs):  # execute logs the failure and leaves the reward out
        raise RuntimeError("OpenRLHF's executor got no reward from the server (its log above says why)")
    return {
        "SingleTurnAgentExecutor.execute, /get_reward: reward": [o["reward"][0] for o in outputs],
        "SingleTurnAgentExecutor.execute, /get_reward: scores": [o["scores"][0] for o in outputs],
    }


CLIENTS = {"transformers": plain_transformers, "trl": trl, "rewardbench": rewardbench, "openrlhf": openrlhf}
CLIENTS |= {"trl-served": trl_served, "openrlhf-served": openrlhf_served}
PACKAGE = {name: name.removesuffix("-served") for name in CLIENTS}


def main(client: str, work: Path) -> None:
    from importlib.metadata import version

    label = f"{PACKAGE[client]} {version(PACKAGE[client])}"
    if client != "transformers":
        label += f" (transformers {version('transformers')})"
    if client.endswith("-served"):
        label += " -> rm serve"
    for kind in KINDS:
        folder = work / kind / "export"
        cases, ref = load(work, kind)
        row = {"client": label, "kind": kind, "n": len(ref["reward"])}
        try:
            results = CLIENTS[client](folder, cases)
        except Exception as e:  # noqa: BLE001 - reported in the table, with the traceback on stderr
            traceback.print_exc()
            print(json.dumps(row | {"path": "-", "max_abs_diff": None, "error": f"{type(e).__name__}: {e}"[:200]}))
            continue
        config = json.loads((folder / "config.json").read_text())
        for path, got in results.items():
            if "error" in got:  # a fault or a limit of the client's own, found and explained by the check
                print(json.dumps(row | {"path": path, "max_abs_diff": None} | got), flush=True)
                continue
            want = ref
            if path == "normalized":
                want = {"reward": [(r - config["mean"]) / config["std"] for r in ref["reward"]]}
            got = got if isinstance(got, dict) else {"reward": got}
            if set(got) not in ({"reward"}, set(want)):  # a client reads the reward alone, or every output
                error = f"outputs {sorted(got)}, rm score has {sorted(want)}"
                print(json.dumps(row | {"path": path, "max_abs_diff": None, "error": error}), flush=True)
                continue
            diffs = {k: max(abs(a - b) for a, b in zip(got[k], want[k], strict=True)) for k in got}
            row |= {"path": path, "max_abs_diff": max(diffs.values()), "diffs": diffs, "error": ""}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
