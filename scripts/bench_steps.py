"""Process rewards on K sampled solutions of a problem: the shared layout (the problem once, its K solutions after
it, every step read in the same forward) against one sequence per solution, interleaved in one process.

    python scripts/bench_steps.py                         # K=8, medium model, 5 turns
    python scripts/bench_steps.py --size small --turns 3  # a quick run

Data: the repo's generated stepwise problems (rm/data/steps/step_problems.py), K solutions each, through rm's own
path: loaded and grouped by `load_data`, tokenized step by step (rm/tokens/steps/), the same encoded groups in
every mode. Modes, each a forward and backward pass of the step loss (`training_loss` on `group_outputs`, the code
`rm train` runs) over the same micro-batches of --problems problems, the random-init Llama of bench_train.py
(--size), fp32:
- shared: rm's shared layout (`SharedCollator`): `[problem | solution 1 | ... | solution K]`, each solution seeing
  the problem and itself;
- packed: one sequence per solution, the problem copied before each, packed without padding (`PackedCollator`);
- padded: one right-padded row per solution (`PaddedCollator`).
After one untimed pass of every mode (the first pass of a shape is slower), the modes run in turns, A B C then
B C A and so on (the machine's speed drifts within a minute, so no mode is timed
after another), each turn a pass over every micro-batch; a mode's rate is solutions per second over a turn, the
median over turns quoted with every turn's value. Slots are the token positions a mode computes, padding included;
the token ceiling of shared over a mode is that mode's slots over shared's, the speed-up sharing the problem allows
if a slot costs the same in both; the fraction is the measured speed-up over that ceiling.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (puts the repo on the path)

from rm.collate.pack import PackedCollator, SharedCollator  # noqa: E402
from rm.collate.padded import PaddedCollator  # noqa: E402
from rm.config import load_config  # noqa: E402
from rm.config.loss_config import LossConfig  # noqa: E402
from rm.data.load import load_data  # noqa: E402
from rm.data.steps.step_problems import write_step_dataset  # noqa: E402
from rm.model.objective import training_loss  # noqa: E402
from rm.model.reward import RewardModel, group_outputs  # noqa: E402
from rm.tokens.prepare import encoded  # noqa: E402
from rm.tokens.tokenizer import train_bpe  # noqa: E402

COLLATORS = {"shared": SharedCollator, "packed": PackedCollator, "padded": PaddedCollator}


def step_groups(work: Path, problems: int, k: int, seed: int):
    """The encoded stepwise groups and the tokenizer, as `rm train` makes them."""
    data = write_step_dataset(work / "data", n_train=problems, n_test=1, seed=seed, k=k)["train"].parent.parent
    cfg = load_config(benchlib.REPO / "configs" / "quickstart.yaml", [
        f"data.source={data}", f"output_dir={work / 'run'}", "collator.max_length=1024", "data.cache=false",
    ])  # fmt: skip
    loaded = load_data(cfg.data, work / "run")
    tokenizer = train_bpe([t for g in loaded.train for t in (g.prompt, *g.responses)], vocab_size=2048)
    return list(encoded(cfg, loaded, tokenizer, False).train), tokenizer


def turn(model, batches: list[dict], cfg: LossConfig) -> float:
    """Seconds of one pass of forward and backward over `batches`."""
    start = time.perf_counter()
    for batch in batches:
        loss, weight = training_loss(cfg, group_outputs(model, batch), batch)
        (loss / weight).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=8, help="solutions per problem")
    parser.add_argument("--problems", type=int, default=2, help="problems per micro-batch")
    parser.add_argument("--batches", type=int, default=4, help="micro-batches per turn")
    parser.add_argument("--turns", type=int, default=5, help="turns of every mode (>= 5 for the quoted median)")
    parser.add_argument("--size", choices=sorted(benchlib.SIZES), default="medium")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here too")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    benchlib.set_size(args.size)
    with tempfile.TemporaryDirectory() as tmp:
        groups, tokenizer = step_groups(Path(tmp), args.problems * args.batches, args.k, args.seed)
    model = RewardModel(benchlib.random_model(len(tokenizer), tokenizer.pad_token_id, None, args.seed)).train()
    chunks = [groups[i : i + args.problems] for i in range(0, len(groups), args.problems)]
    batches = {m: [c(tokenizer.pad_token_id)(chunk) for chunk in chunks] for m, c in COLLATORS.items()}
    slots = {m: sum(b["input_ids"].numel() for b in bs) for m, bs in batches.items()}
    solutions = sum(len(g.response_ids) for g in groups)
    cfg, modes, seconds = LossConfig(), list(COLLATORS), {m: [] for m in COLLATORS}
    for mode in modes:  # a warm-up pass of every mode's shapes, not timed
        turn(model, batches[mode], cfg)
    for t in range(args.turns):
        order = modes[t % len(modes) :] + modes[: t % len(modes)]
        for mode in order:
            seconds[mode].append(turn(model, batches[mode], cfg))
        print(f"turn {t + 1}: " + ", ".join(f"{m} {seconds[m][-1]:.2f} s" for m in modes), flush=True)
    rates = {m: [solutions / s for s in seconds[m]] for m in modes}
    result = {
        "k": args.k, "problems": len(groups), "solutions": solutions, "size": args.size, "turns": args.turns,
        "threads": torch.get_num_threads(), "slots": slots,
        "solutions_per_s": {m: {"median": statistics.median(r), "turns": [round(x, 2) for x in r]}
                            for m, r in rates.items()},
    }  # fmt: skip
    for other in ("packed", "padded"):
        ceiling = slots[other] / slots["shared"]
        speedup = result["solutions_per_s"]["shared"]["median"] / result["solutions_per_s"][other]["median"]
        result[f"shared_over_{other}"] = {"token_ceiling": ceiling, "speedup": speedup, "fraction": speedup / ceiling}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
