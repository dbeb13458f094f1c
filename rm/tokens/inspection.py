"""`python -m rm data inspect SOURCE`: what a source holds and what loading it would do, before any training.

Reads the source exactly as a run would (same formats, same bad-record rules) and reports per-subset
counts, token-length percentiles, how much of each chosen sequence is the shared prompt, how many
pairs part before the final turn, what `max_length` would truncate or drop (by the collator's own
`encode_pairs`), and every record left out or repaired with its reason. Red-team transcripts, which
training refuses, are described as transcripts.

Groups (K responses to one prompt) are described by what a loss sees in them: how many groups have
each K, the strictly ordered and the tied pairs among their responses, and how many groups rank every response
apart (a total order) rather than only some (ties, or merged pairwise records that leave pairs unordered).
Their token lengths are per response, per sequence (prompt + longest response: what `max_length` bounds)
and per group (prompt + every response: one segment of the shared layout). A source of pairs reads as today.

Token lengths need a tokenizer: `--tokenizer` names one; without it a byte-level BPE is trained on
the source's text, as a random-init run does (so lengths match such a run at the same vocab size).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.formats.group import Group, pairs_of, rank_of, responses_of
from rm.data.formats.pair import Pair
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
    texts = [t for p in pairs for t in (p.prompt, *responses_of(p))]
    tokenizer, tokenizer_desc = _tokenizer(tokenizer_name, texts, vocab_size)

    def lengths(items: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(items, add_special_tokens=False, verbose=False)["input_ids"]]

    subsets = sorted(subset_counts(pairs))
    _, enc = encode_pairs(pairs, tokenizer, max_length, subsets, eos=cfg.eos)  # the fitting as data.eos ends texts
    head = {"source": cfg.source, "split": split, "formats": report.notes.get("formats", {})}
    grouped = any(isinstance(p, Group) for p in pairs)
    shape = _group_lengths(pairs, lengths) if grouped else _pair_lengths(pairs, lengths)
    token_parts = shape.pop("lengths")
    return {
        **head,
        **shape,
        **_bad_records(report),
        "tokenizer": tokenizer_desc,
        **token_parts,
        "max_length": {
            "max_length": max_length,
            "prompt_truncated": enc.prompt_truncated,
            "prompt_cut_inside_turn": enc.prompt_cut_inside_turn,
            **({"responses_dropped": enc.responses_dropped} if grouped else {}),
            "dropped_too_long": len(enc.too_long),
        },
        **{k: v for k, v in report.notes.items() if k in ("argilla", "subset_filter")},
    }


def _pair_lengths(pairs: list[Pair], lengths: Callable[[list[str]], list[int]]) -> dict[str, Any]:
    """A pairwise source's counts and token lengths, as they always were (and its tied pairs, if it says any)."""
    prompt, chosen, rejected = (lengths([getattr(p, k) for p in pairs]) for k in ("prompt", "chosen", "rejected"))
    ties = sum(p.tie for p in pairs)
    return {
        "pairs": len(pairs),
        **({"ties": {"tied_pairs": ties}} if ties else {}),
        "subsets": subset_counts(pairs),
        "lengths": {
            "token_lengths": {
                "prompt": percentiles(prompt),
                "chosen": percentiles(chosen),
                "rejected": percentiles(rejected),
                "pair": percentiles([p + max(c, r) for p, c, r in zip(prompt, chosen, rejected, strict=True)]),
            },
            # Token-weighted: of all tokens in the prompt+chosen sequences, the share that is the shared prompt.
            "shared_prefix_fraction": round(sum(prompt) / max(1, sum(prompt) + sum(chosen)), 4),
            "parts_before_final_turn": sum(p.parts_early for p in pairs),
        },
    }


def _group_lengths(items: list[Pair | Group], lengths: Callable[[list[str]], list[int]]) -> dict[str, Any]:
    """A source with groups (a pair among them counts as a group of two): their shapes and token lengths."""
    prompt = lengths([g.prompt for g in items])
    flat = lengths([r for g in items for r in responses_of(g)])
    responses, at = [], 0
    for g in items:  # each group's response lengths, out of the flat list
        k = len(responses_of(g))
        responses.append(flat[at : at + k])
        at += k
    sequence = [p + r for p, rs in zip(prompt, responses, strict=True) for r in rs]
    return {
        **group_shapes(items),
        "subsets": subset_counts(items),
        "lengths": {
            "token_lengths": {
                "prompt": percentiles(prompt),
                "response": percentiles(flat),
                "sequence": percentiles([p + max(rs) for p, rs in zip(prompt, responses, strict=True)]),
                "group": percentiles([p + sum(rs) for p, rs in zip(prompt, responses, strict=True)]),
            },
            # Token-weighted: of all tokens in the prompt+response sequences, the share that is the shared prompt.
            "shared_prefix_fraction": round(
                sum(p * len(rs) for p, rs in zip(prompt, responses, strict=True)) / max(1, sum(sequence)), 4
            ),
        },
    }


def group_shapes(items: list[Pair | Group]) -> dict[str, Any]:
    """How many groups, responses and comparisons a source holds: `k` counts groups by their number of
    responses; `pairs` are strictly ordered pairs (what a pairwise loss trains on), `ties` the tied ones; a
    group is a `total_order` when no two of its responses share a rank (every one is ordered against every
    other), else a `partial_order` (ties, RewardBench 2's chosen and rejected sets, merged pairwise records
    that leave some responses unordered)."""
    k: Counter[int] = Counter()
    strict = tied = groups_tied = total = 0
    for g in items:
        rank = rank_of(g)
        explicit = pairs_of(g)
        if explicit is None:
            ties = [rank[a] == rank[b] for a in range(len(rank)) for b in range(a + 1, len(rank))]
        else:
            ties = [tie for _, _, tie in explicit]
        k[len(rank)] += 1
        strict += ties.count(False)
        tied += ties.count(True)
        groups_tied += any(ties)
        total += len(set(rank)) == len(rank) and not any(ties)
    return {
        "groups": len(items),
        "responses": sum(n * c for n, c in k.items()),
        "pairs": strict,
        "k": {str(n): k[n] for n in sorted(k)},
        "ties": {"tied_pairs": tied, "groups_with_a_tie": groups_tied},
        "ranks": {"total_order": total, "partial_order": len(items) - total},
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
    unit = "transcripts" if "transcripts" in result else "groups" if "groups" in result else "pairs"
    if unit == "groups":
        lines.append(f"groups: {result['groups']} ({result['responses']} responses, {result['pairs']} ordered pairs)")
    else:
        lines.append(f"{unit}: {result[unit]}")
    width = max([len(s) for s in result["subsets"]] + [6])
    lines += [f"  {name:<{width}}  {n:>7}" for name, n in result["subsets"].items()]
    if unit == "groups":
        ties, ranks = result["ties"], result["ranks"]
        lines.append("responses per group: " + ", ".join(f"K={n}: {c}" for n, c in result["k"].items()))
        lines.append(f"ties: {ties['tied_pairs']} tied pairs, in {ties['groups_with_a_tie']} groups")
        lines.append(f"ranks: {ranks['total_order']} groups in a total order, {ranks['partial_order']} partial")
    elif "ties" in result:
        lines.append(f"tied pairs: {result['ties']['tied_pairs']}")
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
    if unit == "groups":
        ml = result["max_length"]
        lines.append(
            f"shared-prefix fraction (prompt share of prompt+response tokens): {result['shared_prefix_fraction']}"
        )
        lines.append(
            f"at max_length={ml['max_length']}: {ml['prompt_truncated']} prompts lose leading turns "
            f"({ml['prompt_cut_inside_turn']} cut inside their last turn), {ml['responses_dropped']} responses "
            f"left out of their groups, {ml['dropped_too_long']} groups dropped"
        )
    if unit in ("pairs", "groups"):
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
