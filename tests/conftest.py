"""Offline by construction: nothing in the suite may wait on a network that is not there."""

import atexit
import gc
import os
import random
import shutil
import signal
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
# The tokenized-data cache's default home (rm/tokens/cache.py): a folder of this session, never the user's
# ~/.cache, and inherited by the processes the tests launch. Tests of the cache itself set data.cache_dir.
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="rm-tests-hf-datasets-")
atexit.register(shutil.rmtree, os.environ["HF_DATASETS_CACHE"], True)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: E402

from rm.tokens.store import EncodedGroup  # noqa: E402
from rm.tokens.tokenizer import special_prefix  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The smallest model and tokenizer the end-to-end tests train: seconds per run on 2 CPU cores.
TINY_MODEL = [
    "model.random_init.hidden_size=32",
    "model.random_init.intermediate_size=64",
    "model.random_init.num_hidden_layers=1",
    "tokenizer.vocab_size=300",
]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
# A short quickstart run with eval, checkpoint and log steps, shared by the end-to-end tests.
TINY = [
    "data.synthetic.n_train=240",
    "data.synthetic.n_eval=61",  # not a multiple of the eval batch: the last batch is short
    *TINY_MODEL,
    "train.batch_size=8",
    "train.eval_batch_size=16",
    "train.max_steps=12",
    "train.eval_steps=5",
    "train.save_steps=10",
    "train.log_steps=4",
    "train.lr=3e-3",
]
# A two-step run on 48 generated pairs: what the run-directory, lock and disk-full tests start, stop and resume.
SHORT = [
    "data.synthetic.n_train=48",
    "data.synthetic.n_eval=16",
    *TINY_MODEL,
    "train.batch_size=8",
    "train.eval_batch_size=16",
    "train.max_steps=2",
    "train.save_steps=1",
    "train.report_to=[]",
    "train.num_threads=1",
]
# Six steps on 96 generated pairs (12 micro-batches an epoch, so a stop after step 4 is inside the first), no
# eval, no export: what the checkpoint-fault and exact-resume tests compare runs on.
SIX_STEPS = [
    "data.synthetic.n_train=96",
    "data.synthetic.n_eval=24",
    *TINY_MODEL,
    "train.batch_size=8",
    "train.eval_batch_size=24",
    "train.max_steps=6",
    "train.log_steps=2",
    "train.eval_steps=0",
    "train.lr=3e-3",
    "train.report_to=[]",
    "train.num_threads=1",
    "export.enabled=false",
]
# The real HH-RLHF test file, where `make data` or RM_HH_DATA put it (scripts/get_hh_data.py: $RM_HH_DATA, then this
# clone's data/hh-rlhf, then ../shared/data/hh-rlhf). The tests that need it skip without it; the summary says so.
sys.path.append(str(REPO / "scripts"))  # after the tests' own folders: no script shadows a test module
from get_hh_data import hh_data_root, missing_line  # noqa: E402

HH_HARMLESS_TEST = hh_data_root() / "harmless-base" / "test.jsonl.gz"


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory):
    from rm.data import synthetic

    return synthetic.write_dataset(tmp_path_factory.mktemp("synthetic"), n_train=300, n_eval=60, seed=7)


@pytest.fixture(scope="session")
def tokenizer(synthetic_root):
    """A byte-level BPE trained on the generated data: offline, and distinct pad and eos."""
    from rm.data.load import load_pairs
    from rm.tokens.tokenizer import train_bpe

    pairs = load_pairs(str(synthetic_root), "train", [])
    return train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], vocab_size=400)


def after_cache(path: Path, tokenizer, *overrides: str):
    """The data of a run on `path` with `overrides` as training has it after the tokenized-data cache: loaded,
    encoded, then what its loss and head make of it (rm/collate/loss_labels.py); `every` lists both splits' groups."""
    from rm.collate.loss_labels import for_loss
    from rm.config import load_config
    from rm.data.load import load_data
    from rm.tokens.prepare import encoded

    run = [f"data.source={path}", "data.eval_split=", f"output_dir={path.parent / 'run'}"]
    cfg = load_config(QUICKSTART, [*run, *overrides])
    data = encoded(cfg, load_data(cfg.data, Path(cfg.output_dir)), tokenizer, False)
    for_loss(cfg, data)
    return data


def every(data) -> list[EncodedGroup]:
    """Both splits' groups of `after_cache`'s data, train first."""
    return [*data.train, *data.eval]


def tiny_model(tokenizer, model_type: str = "llama", seed: int = 0, pad_token_id: int | None = None):
    from rm.config import ModelConfig, RandomInitConfig
    from rm.model.build import build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(
        random_init=RandomInitConfig(
            model_type=model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
    )
    pad = tokenizer.pad_token_id if pad_token_id is None else pad_token_id
    return build_model(cfg, len(tokenizer), pad, tokenizer.eos_token_id).eval()


def stopped_run(tokenizer, run: Path, seed: int = 0) -> Path:
    """A run stopped at step 16 of 400 without an export, at `run`: config (max_length 64), tokenizer, one sealed
    checkpoint (weights of a tiny llama seeded `seed`, trainer_state.json): what `rm serve RUN` and `rm score`
    rebuild from a checkpoint."""
    import json
    from dataclasses import replace

    from safetensors.torch import save_file

    from rm.config import ModelConfig, RandomInitConfig, RunConfig
    from rm.config.rundir import STATE, write_config
    from rm.model.reward import RewardModel
    from rm.training.checkpoint_folder import seal

    shape = RandomInitConfig(
        model_type="llama", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    cfg = RunConfig(model=ModelConfig(random_init=shape))
    step = run / "checkpoints" / "step-16"
    step.mkdir(parents=True)
    write_config(replace(cfg, collator=replace(cfg.collator, max_length=64)), run / "config.yaml")
    tokenizer.save_pretrained(run / "tokenizer")
    state = {k: v.contiguous() for k, v in RewardModel(tiny_model(tokenizer, seed=seed)).state_dict().items()}
    save_file(state, step / "model.safetensors")
    (step / STATE).write_text(json.dumps({"step": 16, "max_steps": 400}))
    seal(step, 16)
    return run


@pytest.fixture(scope="session")
def exported_tiny(tokenizer, tmp_path_factory):
    """A tiny random Llama exported as rm exports trained models (no training: the scores are arbitrary
    but fixed, which is all the eval and score tests need)."""
    from rm.config import RunConfig
    from rm.export.folder import Weights, export_model

    out = tmp_path_factory.mktemp("tiny") / "export"
    return export_model(tiny_model(tokenizer), tokenizer, out, RunConfig(), Weights(None, None))


ATTRIBUTE_NAMES = ["helpfulness", "verbosity"]


@pytest.fixture(scope="session")
def attribute_export(tokenizer, tmp_path_factory):
    """A tiny random Llama with a 1 + 2 output head, exported as rm exports a run with model.head.attributes."""
    from rm.config import RandomInitConfig, RunConfig
    from rm.export.folder import Weights, export_model
    from rm.model.build import build_model

    root = tmp_path_factory.mktemp("attribute_export")
    cfg = RunConfig(output_dir=str(root / "run"))
    cfg.model.head.attributes = list(ATTRIBUTE_NAMES)
    cfg.model.head.attribute_scales = {"helpfulness": [0.0, 4.0], "verbosity": [0.0, 4.0]}
    cfg.model.random_init = RandomInitConfig(
        model_type="llama", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(3)
    hf = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).eval()
    with torch.no_grad():  # outputs of distinct scales, so a column mixed up with another shows
        hf.score.weight.mul_(torch.tensor([[1.0], [5.0], [20.0]]))
    return export_model(hf, tokenizer, root / "export", cfg, Weights(None, None))


def plain_outputs(export, tokenizer, prompt: str, response: str) -> list[float]:
    """logits[0] of plain transformers on the tokens `rm score` and `rm serve` build for a text (prompt and response
    apart, the tokenizer's special prefix in front)."""
    model = AutoModelForSequenceClassification.from_pretrained(export).eval()
    ids = special_prefix(tokenizer) + tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids += tokenizer(response, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].tolist()


def plain_transformers_rewards(export: Path, texts: list[str]) -> torch.Tensor:
    """Rewards as a user of plain transformers gets them from an export: padded batch, logits."""
    tokenizer = AutoTokenizer.from_pretrained(export)
    model = AutoModelForSequenceClassification.from_pretrained(export).eval()
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits.squeeze(-1)


def random_pairs(vocab: int, n: int, seed: int, early: bool = True) -> list[EncodedGroup]:
    """Varied prompt and response lengths; some "responses" hold several turns, as in pairs that
    part before the last turn (the layout only sees ids, so these are long multi-segment responses)."""
    rng = random.Random(seed)

    def ids(k):
        return [rng.randrange(2, vocab) for _ in range(k)]

    pairs = []
    for i in range(n):
        p = rng.randint(1, 24)
        c, r = rng.randint(1, 12), rng.randint(1, 12)
        if early and i % 3 == 0:
            c, r = c + 15, r + 9
        pairs.append(EncodedGroup.pair(ids(p), ids(c), ids(r), i % 2, margin=rng.random(), index=i))
    return pairs


def wait_for(condition, what: str, procs: list, timeout: float = 180) -> None:
    """Poll `condition` until it holds; fail naming `what` if a process in `procs` ends first or time runs out."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert all(p.poll() is None for p in procs), f"a sweep process ended while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def padded_cost(pairs: list[EncodedGroup]) -> int:
    """Token slots of a padded micro-batch counted from the pairs themselves (two rows a pair, as wide as the
    widest sequence): the reference `PairBatches.cost` is checked against, as it computes them from arrays."""
    width = max(len(p.prompt_ids) + max(len(p.chosen_ids), len(p.rejected_ids)) for p in pairs)
    return 2 * len(pairs) * width


def packed_cost(pairs: list[EncodedGroup], pack_length: int) -> int:
    """Token slots of a packed micro-batch (prompt duplicated) counted from the pairs: their sequences
    (prompt + chosen, prompt + rejected) first-fit into rows, as the packed collator places them."""
    from rm.collate.planner import shared_cost

    sequences = [len(p.prompt_ids) + len(r) for p in pairs for r in (p.chosen_ids, p.rejected_ids)]
    return shared_cost(sorted(sequences, reverse=True), pack_length)


@pytest.fixture(scope="session")
def launched(exported_tiny, tmp_path_factory):
    """`launched(N)`: the one job of N processes (2 or 3) a session runs the "N processes = 1 process" scenarios in
    (tests/launched/): `launched(2).run("budgets")` is that scenario's output_dir, or the test fails with its
    traceback."""
    from launched.launch import Launches

    base = tmp_path_factory.getbasetemp()  # under pytest-xdist a worker's own: the session's is its parent
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "launched"
    root.mkdir(exist_ok=True)
    return Launches(root, {"exported_tiny": str(exported_tiny)})


def pytest_configure(config):
    """Ctrl-C live, as in a terminal, where a job was started with SIGINT ignored (`(cmd &)` in a script does that,
    and every process it starts inherits it): the tests of Ctrl-C and of rm putting Python's handler back need it.

    A pytest-xdist worker (`make test` starts two) keeps to a core of its own, with what it starts: torch's
    threads in the tests that run rm in process follow the cores a process may use (rm/model/threads.py), and two
    workers each taking every core had four threads contend for two (the fast tier 49 s rather than 39)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.startswith("gw") and 1 < workers <= len(cores):
        os.sched_setaffinity(0, cores[int(worker[2:]) :: workers])


def pytest_collection_finish(session):
    """Freeze what collection left alive (torch, transformers, every module the tests import: 400,000 objects and
    more), so a full garbage collection no longer walks it: accelerate's `free_memory` and rm's
    `hand_back_memory` collect after every in-process run, 0.2 s each in a test session, 17 s of the fast tier."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`: two workers, --dist loadgroup), the tests that read the shared launches are
    one group, meant for one worker while the other takes the rest, so that no worker waits for a launch another
    runs (tests/launched/launch.py). pytest-xdist 3.8 does not honour the group under pytest 9.2
    (pytest-dev/pytest-xdist#1386); the launches' lock keeps them once a session regardless."""
    for item in items:
        if "launched" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("launched"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """Once, after -ra's list of skips and just above the counts: how many tests skipped for want of the real HH
    file, and how to get it (the outermost wrapper: pytest's own writes that list when the hooks inside it return)."""
    yield
    skipped = terminalreporter.stats.get("skipped", [])
    reasons = [r.longrepr[2] if isinstance(r.longrepr, tuple) else str(r.longrepr) for r in skipped]
    if line := missing_line(reasons, HH_HARMLESS_TEST):
        terminalreporter.write_line(line, yellow=True, bold=True)
