"""Item 13: train.overwrite over a run directory where the user keeps files of their own inside rm's folders.

A finished run (its checkpoint, TensorBoard's files under rm/, its export); then the user adds a note to the export
(export/MY_CARD_EDITS.md), a backup to checkpoints/ (my-backup/weights.bin) and their own TensorBoard run to rm/
(my-tb/events.out.tfevents.123.mine, named as TensorBoard names its files). `rm train ... train.overwrite=true`
must stop in one line naming all three, with not a byte of output_dir changed (it used to delete the three folders
whole). Once the user moves them out, the same command replaces the run and keeps a file outside rm's names."""

from __future__ import annotations

import shutil

USERS = {
    "export/MY_CARD_EDITS.md": b"my notes on the card\n",
    "checkpoints/my-backup/weights.bin": b"\0" * 4096,
    "rm/my-tb/events.out.tfevents.123.mine": b"my own TensorBoard run",
}
RUN = ["train.max_steps=2", "train.report_to=[tensorboard]"]


def check(c, expect) -> str:
    out, aside = c.root / "overwrite-run", c.root / "overwrite-moved"
    c.ran(c.train(out, *RUN), "the first run")
    for name, data in USERS.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    before = c.files(out)
    line = c.one_line(c.train(out, *RUN, "train.overwrite=true"))
    expect(all(name in line for name in USERS), f"the refusal does not name the user's three files: {line}")
    expect("move these out of output_dir" in line, f"the refusal does not say what to do: {line}")
    changed = sorted(name for name, data in c.files(out).items() if before.get(name) != data)
    expect(not changed and c.files(out).keys() == before.keys(), f"output_dir changed: {changed}")
    for name in USERS:  # what the refusal asks: the user's files moved out
        (aside / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(out / name, aside / name)
    (out / "notes.txt").write_text("mine, outside rm's names\n")
    c.ran(c.train(out, *RUN, "train.overwrite=true"), "overwrite once they were moved")
    expect((out / "notes.txt").read_text() == "mine, outside rm's names\n", "notes.txt changed")
    expect((out / "eval.json").is_file() and (out / "export" / "model.safetensors").is_file(), "no new run")
    expect(all((aside / name).read_bytes() == data for name, data in USERS.items()), "a moved file changed")
    return f"refused, nothing touched: {line[:150]}…; replaced once the three were moved, notes.txt kept"
