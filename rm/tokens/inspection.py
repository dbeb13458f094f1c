"""`python -m rm data inspect SOURCE`: what a source holds and what loading it would do, before any training.

Reads the source exactly as a run would (same formats, same bad-record rules) and reports per-subset
counts, token-length percentiles, how much of each chosen sequence is the shared prompt, how many
pairs part before the final turn, what `max_length` would truncate or drop (by the collator's own
`encode_pairs`), and every record left out or repaired with its reason. Red-team transcripts, which
training refuses, are described as transcripts.

Token lengths need a tokenizer: `--tokenizer` names one; without it a byte-level BPE is trained on
the source's text, as a random-init run does (so lengths match such a run at the same vocab size).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.load import load_pairs, subset_counts
from rm.errors import NotPreferenceData
from rm.tokens.encode import encode_pairs, percentiles

MAX_BPE_TEXTS = 30_000
"""A BPE trained on at most this many texts (seeded sample): enough for lengths, fast on big sources."""


def _tokenizer(name: str, texts: list[str], vocab_size: int) -> tuple[Any, str]:
    from rm.tokens.tokenizer import load_tokenizer, train_bpe

    if name:
        return load_tokenizer(name), name
    if len(texts) > MAX_BPE_TEXTS:
        texts = random.Random(0).sample(texts, MAX_BPE_TEXTS)
    return train_bpe(texts, vocab_size), f"byte-level BPE trained on this source (vocab {vocab_size})"


def _bad_records(report: DataReport) -> dict[str, Any]:
    return {
        "skipped": report.skipped_counts(),
        "repaired": report.repaired_counts(),
        "rejected": [vars(b) for b in report.skipped],
        "repairs": [vars(b) for b in report.repaired],
    }


def inspect_source(
    cfg: DataConfig, split: str = "train", tokenizer_name: str = "", max_length: int = 512, vocab_size: int = 8192
) -> dict[str, Any]:
    """The statistics of one split of `cfg.source`, as a JSON-ready dict."""
    report = DataReport(cfg.on_bad_record)
    chat_tokenizer = None
    if tokenizer_name:
        from rm.tokens.tokenizer import load_tokenizer

        chat_tokenizer = load_tokenizer(tokenizer_name)
    try:
        pairs = load_pairs(cfg.source, split, cfg.subsets, cfg, tokenizer=chat_tokenizer, report=report)
    except NotPreferenceData as refusal:
        return inspect_transcripts(cfg, tokenizer_name, vocab_size, str(refusal))
    texts = [t for p in pairs for t in (p.prompt, p.chosen, p.rejected)]
    tokenizer, tokenizer_desc = _tokenizer(tokenizer_name, texts, vocab_size)

    def lengths(items: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(items, add_special_tokens=False, verbose=False)["input_ids"]]

    prompt, chosen, rejected = (lengths([getattr(p, k) for p in pairs]) for k in ("prompt", "chosen", "rejected"))
    subsets = sorted(subset_counts(pairs))
    _, enc = encode_pairs(pairs, tokenizer, max_length, subsets)
    return {
        "source": cfg.source,
        "split": split,
        "formats": report.notes.get("formats", {}),
        "pairs": len(pairs),
        "subsets": subset_counts(pairs),
        **_bad_records(report),
        "tokenizer": tokenizer_desc,
        "token_lengths": {
            "prompt": percentiles(prompt),
            "chosen": percentiles(chosen),
            "rejected": percentiles(rejected),
            "pair": percentiles([p + max(c, r) for p, c, r in zip(prompt, chosen, rejected, strict=True)]),
        },
        # Token-weighted: of all tokens in the prompt+chosen sequences, the share that is the shared prompt.
        "shared_prefix_fraction": round(sum(prompt) / max(1, sum(prompt) + sum(chosen)), 4),
        "parts_before_final_turn": sum(p.parts_early for p in pairs),
        "max_length": {
            "max_length": max_length,
            "prompt_truncated": enc.prompt_truncated,
            "prompt_cut_inside_turn": enc.prompt_cut_inside_turn,
            "dropped_too_long": len(enc.too_long),
        },
        **{k: v for k, v in report.notes.items() if k in ("argilla", "subset_filter")},
    }


def inspect_transcripts(cfg: DataConfig, tokenizer_name: str, vocab_size: int, refusal: str) -> dict[str, Any]:
    """red-team-attempts: counts and lengths of the transcripts, and why training refuses them."""
    from rm.data.transcripts import SUBSET, load_transcripts

    report = DataReport(cfg.on_bad_record)
    transcripts = load_transcripts(cfg.source, cfg.on_bad_record, report)
    tokenizer, tokenizer_desc = _tokenizer(tokenizer_name, [t.text for t in transcripts], vocab_size)
    texts = [t.text for t in transcripts]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]
    return {
        "source": cfg.source,
        "formats": {"red-team": len(transcripts)},
        "transcripts": len(transcripts),
        "subsets": {SUBSET: len(transcripts)},
        **_bad_records(report),
        "tokenizer": tokenizer_desc,
        "token_lengths": {"transcript": percentiles(lengths)},
        "model_types": dict(sorted(Counter(str(t.model_type) for t in transcripts).items())),
        "refused_for_training": refusal,
    }


def format_text(result: dict[str, Any]) -> str:
    """The human-readable form of `inspect_source`'s result."""
    lines = [f"source: {result['source']}", f"formats: {result['formats']}"]
    unit = "transcripts" if "transcripts" in result else "pairs"
    lines.append(f"{unit}: {result[unit]}")
    width = max([len(s) for s in result["subsets"]] + [6])
    lines += [f"  {name:<{width}}  {n:>7}" for name, n in result["subsets"].items()]
    lines.append(f"tokens ({result['tokenizer']}):")
    lines.append(f"  {'':<10}" + "".join(f"{k:>8}" for k in ("p50", "p90", "p95", "p99", "max")))
    for name, pct in result["token_lengths"].items():
        lines.append(f"  {name:<10}" + "".join(f"{pct.get(k, 0):>8}" for k in ("p50", "p90", "p95", "p99", "max")))
    if unit == "pairs":
        ml = result["max_length"]
        lines.append(
            f"shared-prefix fraction (prompt share of prompt+chosen tokens): {result['shared_prefix_fraction']}"
        )
        lines.append(f"pairs that part before the final turn: {result['parts_before_final_turn']}")
        lines.append(
            f"at max_length={ml['max_length']}: {ml['prompt_truncated']} prompts lose leading turns "
            f"({ml['prompt_cut_inside_turn']} cut inside their last turn), {ml['dropped_too_long']} pairs dropped"
        )
        for topic in ("argilla", "subset_filter"):
            if topic in result:
                lines.append(f"{topic}: {result[topic]}")
    else:
        lines.append(f"model types: {result['model_types']}")
        lines.append(f"not for training: {result['refused_for_training']}")
    lines.append(f"skipped: {result['skipped'] or 'none'}")
    lines += [f"  {b['origin']}: [{b['reason']}] {b['message']}" for b in result["rejected"]]
    if result["repaired"]:
        lines.append(f"repaired: {result['repaired']}")
        lines += [f"  {b['origin']}: [{b['reason']}] {b['message']}" for b in result["repairs"]]
    return "\n".join(lines)
