"""`python -m rm export RUN_OR_CHECKPOINT --out DIR`: a run's weights as a standard transformers reward model."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass

from rm.config.flags import add_flags, add_settings, option


@dataclass
class ExportFlags:
    """`rm export`'s options; --normalize and --reward-only, unset, take the run's export.* keys."""

    source: str = option("", positional=True, metavar="RUN_OR_CHECKPOINT_DIR")
    """a run directory or one of its checkpoints, RUN/checkpoints/step-N"""
    out: str = option("", required=True, metavar="DIR")
    """folder to write (must be empty or absent)"""
    push_to_hub: str | None = option(None, metavar="REPO_ID")
    """then upload the folder (token: HF_TOKEN or login), as training's export.push_to_hub"""
    private: bool = option(False)
    """create the Hub repo private, as export.private"""
    revision: str | None = option(None, metavar="REV")
    """Hub branch to push to (created if missing), as export.revision"""
    normalize: bool | None = option(None)
    """store the mean/std of rewards over the run's training pairs in config.json (unset: export.normalize)"""
    eval: bool = option(False)
    """score the run's held-out pairs with these weights"""
    reward_only: bool | None = option(None)
    """write the reward output alone (num_labels=1) of a model with attribute outputs, for tools that read one
    output (unset: export.reward_only)"""
    with_length_head: bool = option(False)
    """keep a model.head.length run's length output too, last and named `length`, for analysis (default: the
    reward alone, the quality output)"""
    overwrite: bool = option(False)
    """replace an earlier export in --out"""
    require_finished: bool = option(False)
    """refuse a run that has not finished (stopped early: no final eval.json) and any but its final weights"""


def add(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's final weights, or one checkpoint's, as a standard transformers reward model",
        description="Rebuild the model from the run's config.yaml and tokenizer, load the weights (LoRA merged), "
        "and write an AutoModelForSequenceClassification folder with a model card. Options may also be given as "
        "key=value.",
    )
    add_flags(p, ExportFlags)
    add_settings(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.config.flags import settle

    args = settle(args, ExportFlags)
    if (args.private or args.revision) and not args.push_to_hub:
        print("error: --private and --revision only apply with --push-to-hub REPO_ID", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from pathlib import Path

    from rm.errors import ExportError
    from rm.export.folder import export_run
    from rm.export.hub import check_push, push_folder
    from rm.model.threads import set_threads

    set_threads(0)  # the default every command uses (rm/model/threads.py): --normalize and --eval score data
    if args.push_to_hub:
        check_push(args.push_to_hub)  # name and token before minutes of exporting, not after
    if args.require_finished:  # before anything is written or pushed
        from rm.export.restore import resolve_source

        resolve_source(args.source).require_finished()
    out = Path(args.out)
    if (
        args.push_to_hub
        and not args.overwrite
        and holds_same_export(out, args.source, args.normalize, args.reward_only, args.with_length_head)
    ):
        print(f"{out} already holds this export (a retried push?): pushing it as it is")
    else:
        out = export_run(
            args.source,
            args.out,
            normalize=args.normalize,
            evaluate=args.eval,
            model_id=args.push_to_hub or ".",
            overwrite=args.overwrite,
            reward_only=args.reward_only,
            with_length_head=args.with_length_head,
        )
        print(f"exported to {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    if args.push_to_hub:
        try:
            print(f"pushed: {push_folder(out, args.push_to_hub, private=args.private, revision=args.revision)}")
        except ExportError as e:
            raise ExportError(f"{e}: run the same command again to retry (the folder is reused as it is)") from None
    return 0


def holds_same_export(
    out, source: str, normalize: bool | None, reward_only: bool | None = None, with_length: bool = False
) -> bool:
    """Whether `out` is rm's export of these very weights (same run config, step, normalisation and outputs),
    so that retrying a failed push needs neither --overwrite nor a second export."""
    import json

    from rm.config import to_dict
    from rm.config.exportdir import ExportDir
    from rm.config.rundir import saved_config
    from rm.errors import RMError
    from rm.export.restore import resolve_source

    folder = ExportDir(out)
    if not folder.from_rm or not folder.holds_model:
        return False
    try:
        src = resolve_source(source)
        saved = folder.saved()
    except RMError:
        return False
    normalize = src.cfg.export.normalize if normalize is None else normalize
    reward_only = src.cfg.export.reward_only if reward_only is None else reward_only
    card = folder.card.read_text() if folder.card.is_file() else ""
    config = json.loads(folder.model_config.read_text())
    return (
        saved == to_dict(saved_config(src.cfg))
        and src.step is not None
        and f"after {src.step} optimizer steps" in card
        and ("reward_normalization" in config) == normalize
        and (len(config.get("id2label") or {0: "reward"}) == 1 + with_length)
        == (reward_only or not src.cfg.model.head.attributes)
        and ("length" in (config.get("id2label") or {}).values()) == with_length
    )
