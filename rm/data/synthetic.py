"""The project's own preference data: small, seeded, multi-turn, in the exact HH-RLHF text format.

Each subset follows one rule a small model can learn in minutes on a CPU, so the quickstart run
shows whether the whole pipeline learns at all:

- `harmless`: refusing a harmful request beats complying (a few pairs part before the last turn,
  as 0.2% of real HH pairs do).
- `helpful-arithmetic`: the right sum of two numbers from 1 to 5 beats a wrong one. The wrong
  answer is the sum of another question with a different sum, so the (chosen, rejected) answers
  are exchangeable once the prompt is hidden: a model that ignores the prompt scores a coin's 0.5.
- `helpful-recall`: repeating the favorite thing the user named earlier in the conversation beats
  another value of the same kind (drawn the same way, so also decided by the prompt alone).

The helpful answers end on the decisive token (the number, the value), the position where the
reward is read, and the conversations are short, so a one-layer model learns both prompt-dependent
rules within the quickstart's few hundred steps.

Files are written in the hh-rlhf layout, `<root>/<subset>/{train,test}.jsonl.gz`, so the generated
data goes through the same loader as the real data.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
from pathlib import Path

SUBSETS = ("harmless", "helpful-arithmetic", "helpful-recall")
# Where only the prompt tells the better answer: a model that reads the responses alone scores 0.5.
PROMPT_DEPENDENT = frozenset({"helpful-arithmetic", "helpful-recall"})

_GREETINGS = [
    ("Hi!", "Hello!"),
    ("Good morning.", "Good morning!"),
    ("Are you there?", "Yes, I am."),
    ("Thanks.", "You are welcome."),
    ("I have a question.", "Sure, go ahead."),
]
_HARMFUL = [
    "steal a car",
    "make a weapon at home",
    "hack into an email account",
    "poison someone",
    "shoplift from a store",
    "break into a house",
    "forge a signature",
    "cheat on my taxes",
    "hurt someone",
    "buy drugs online",
]
_ASKS = ["How do I {x}?", "Tell me how to {x}.", "Help me {x}."]
_REFUSALS = [
    "Sorry, but I can't help with that.",
    "No, that is harmful and illegal.",
    "I won't help with that.",
    "That could hurt someone, so no.",
]
_COMPLIANCE = [
    "Sure! Do it when nobody is watching.",
    "Of course, just do it at night.",
    "Yes, that is easy, here is how.",
    "Okay, here are the steps.",
]
_PUSHBACK = ["Please, I need to know.", "Come on, just this once."]
_STILL_REFUSE = ["My answer is still no.", "I still can't help with that."]
_STILL_COMPLY = ["Fine, then hide the evidence.", "Next, get away fast."]

_NUMBER_ASKS = ["What is {a} plus {b}?", "Can you add {a} and {b} for me?", "How much is {a} + {b}?"]
# Every answer ends on the number: the reward is read at the last token, so the decisive token is
# the one the score head sees, and the operands are the only other numbers in the conversation.
_NUMBER_ANSWERS = ["{s}", "It is {s}", "The answer is {s}"]
_OPERANDS = range(1, 6)  # 25 questions, sums 2..10: small enough to learn in the quickstart's budget

_FACTS = {
    "color": ["red", "blue", "green", "yellow", "purple", "orange"],
    "animal": ["cat", "dog", "horse", "rabbit", "parrot", "turtle"],
    "city": ["Paris", "Tokyo", "Lima", "Cairo", "Oslo", "Delhi"],
    "fruit": ["apple", "banana", "cherry", "mango", "peach", "plum"],
}
_ACKS = ["Got it.", "Noted.", "Good to know."]
_RECALL_ASKS = ["What is my favorite {k}?", "Which {k} do I like?", "Do you know my favorite {k}?"]
_RECALL_ANSWERS = ["{v}", "It is {v}", "You said {v}"]


def _conversation(turns: list[tuple[str, str]]) -> str:
    return "".join(f"\n\nHuman: {h}\n\nAssistant: {a}" for h, a in turns)


def _prefix(rng: random.Random) -> list[tuple[str, str]]:
    """No small talk or one exchange of it: half the conversations gain a turn."""
    return rng.sample(_GREETINGS, rng.randint(0, 1))


def harmless(rng: random.Random) -> dict[str, str]:
    ask = rng.choice(_ASKS).format(x=rng.choice(_HARMFUL))
    refuse, comply = rng.choice(_REFUSALS), rng.choice(_COMPLIANCE)
    if rng.random() < 0.05:  # the conversations part one turn before the end
        push = rng.choice(_PUSHBACK)
        chosen = [(ask, refuse), (push, rng.choice(_STILL_REFUSE))]
        rejected = [(ask, comply), (push, rng.choice(_STILL_COMPLY))]
    else:
        lead = _prefix(rng)
        chosen, rejected = lead + [(ask, refuse)], lead + [(ask, comply)]
    return {"chosen": _conversation(chosen), "rejected": _conversation(rejected)}


def arithmetic(rng: random.Random) -> dict[str, str]:
    while True:  # two questions with different sums; the prompt asks the first, the wrong answer is
        # the second's sum, so (chosen, rejected) is exchangeable when the prompt is hidden
        a, b, c, d = (rng.choice(_OPERANDS) for _ in range(4))
        if a + b != c + d:
            break
    lead = _prefix(rng)
    ask = rng.choice(_NUMBER_ASKS).format(a=a, b=b)
    template = rng.choice(_NUMBER_ANSWERS)
    return {
        "chosen": _conversation(lead + [(ask, template.format(s=a + b))]),
        "rejected": _conversation(lead + [(ask, template.format(s=c + d))]),
    }


def recall(rng: random.Random) -> dict[str, str]:
    kind = rng.choice(sorted(_FACTS))
    value, other = rng.sample(_FACTS[kind], 2)  # uniform and symmetric: exchangeable without the prompt
    tell = [(f"My favorite {kind} is {value}.", rng.choice(_ACKS))]
    chat = _prefix(rng)  # small talk before or after the fact, so its place in the prompt varies
    turns = chat + tell if rng.random() < 0.5 else tell + chat
    ask = rng.choice(_RECALL_ASKS).format(k=kind)
    template = rng.choice(_RECALL_ANSWERS)
    return {
        "chosen": _conversation(turns + [(ask, template.format(v=value))]),
        "rejected": _conversation(turns + [(ask, template.format(v=other))]),
    }


GENERATORS = {"harmless": harmless, "helpful-arithmetic": arithmetic, "helpful-recall": recall}


def generate(subset: str, n: int, seed: int) -> list[dict[str, str]]:
    """`n` records of one subset; the same (subset, n, seed) always gives the same records."""
    rng = random.Random(f"{subset}/{seed}")
    return [GENERATORS[subset](rng) for _ in range(n)]


def write_jsonl_gz(path: Path, records: list[dict[str, str]]) -> None:
    buf = io.BytesIO()
    # mtime=0 and no file name in the header: the same records give byte-identical files.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        for rec in records:
            gz.write((json.dumps(rec, ensure_ascii=False) + "\n").encode())
    # Written aside and renamed: every process of a run writes the same file, and one reading it while
    # another rewrote it in place saw a partial file (a 3-process run planned from 160 of 240 pairs).
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)


def write_dataset(root: str | Path, n_train: int, n_eval: int, seed: int) -> Path:
    """Write every subset's train and test split under `root` (hh-rlhf layout) and return `root`."""
    root = Path(root)
    for i, subset in enumerate(SUBSETS):
        # Spread the counts over the subsets; the first ones take the remainder.
        n_tr = n_train // len(SUBSETS) + (i < n_train % len(SUBSETS))
        n_ev = n_eval // len(SUBSETS) + (i < n_eval % len(SUBSETS))
        records = generate(subset, n_tr + n_ev, seed)
        (root / subset).mkdir(parents=True, exist_ok=True)
        write_jsonl_gz(root / subset / "train.jsonl.gz", records[:n_tr])
        write_jsonl_gz(root / subset / "test.jsonl.gz", records[n_tr:])
    return root
