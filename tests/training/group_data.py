"""Groups whose order the text decides, in the generic `responses` layout (rm/data/formats/ranked.py), written by
the tests that train on K responses per prompt: each response opens with one of four words, ranked
great > good > poor > awful, and two responses with the same word tie. Prompts repeat (a few records share
one), so the hold-out by prompt has something to keep together. Each response also carries an attribute,
`length` (its word count; missing on every seventh response), read only by runs that name it.

`write_soft_pairs` adds pairwise records in the `prompt/chosen/rejected` layout with a preference `strength` (the
gap between the two words' ranks, 0 for two of a kind), read as soft labels only by runs with loss.strength=soft."""

import json
import random
from pathlib import Path

WORDS = ("great", "good", "poor", "awful")
FILLER = "the a one two three four five six seven eight nine ten answer text here more words".split()


def write_groups(path: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            k = rng.choice((2, 3, 3, 4, 4, 5))
            words = [rng.choice(WORDS) for _ in range(k)]
            if len(set(words)) < 2:
                words[0] = "great" if words[0] != "great" else "awful"
            responses, seen = [], set()
            for w in words:
                text = w + " " + " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 9)))
                while text in seen:
                    text += " " + rng.choice(FILLER)
                seen.add(text)
                response = {"text": text, "score": float(len(WORDS) - WORDS.index(w))}
                if (i + len(responses)) % 7:
                    response["attributes"] = {"length": float(len(text.split()))}
                responses.append(response)
            prompt = f"question {i // 2}: which answer is best?"  # every prompt twice
            subset = "even" if i % 4 < 2 else "odd"
            f.write(json.dumps({"prompt": prompt, "responses": responses, "subset": subset}) + "\n")
    return path


def write_soft_pairs(path: Path, n: int, seed: int = 0) -> Path:
    """Append `n` pairs on prompts of their own (`pair question j`), chosen's word ranked at or above rejected's."""
    rng = random.Random(seed)
    with open(path, "a") as f:
        for j in range(n):
            a, b = sorted(rng.sample(range(len(WORDS)), 2) if j % 5 else [rng.randrange(len(WORDS))] * 2)
            chosen, rejected = (
                f"{WORDS[w]} {tag} " + " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 9)))
                for w, tag in ((a, "one"), (b, "two"))
            )
            record = {"prompt": f"pair question {j}: which is best?", "chosen": chosen, "rejected": rejected}
            f.write(json.dumps(record | {"strength": float(b - a), "subset": "pairs"}) + "\n")
    return path
