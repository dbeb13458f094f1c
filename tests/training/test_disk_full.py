"""A full disk, simulated in process by a writer that fails with ENOSPC: one line naming the path
and the free space, never a traceback; nothing already written is lost, no temporary file holds space."""

import errno
import json
import shutil

import accelerate
import pytest

import rm.config.atomic
import rm.export.folder
from conftest import QUICKSTART, SHORT
from rm.cli import main as cli
from rm.config.atomic import DiskFull
from rm.evaluation.metrics import write_eval
from rm.tokens import cache


def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def one_line(capsys) -> str:
    err = capsys.readouterr().err  # progress bars aside
    assert len([line for line in err.splitlines() if "error:" in line]) == 1 and "Traceback" not in err, err
    return err


def test_eval_json_is_whole_or_as_it_was(tmp_path, monkeypatch):
    """A 0-byte eval.json after a full disk made `rm export` fail with JSONDecodeError."""
    path = tmp_path / "eval.json"
    write_eval(path, {"overall": {"accuracy": 0.5}})
    monkeypatch.setattr(rm.config.atomic.os, "fsync", full)
    with pytest.raises(DiskFull, match=r"eval.json: no space left on the device \(.* free\)"):
        write_eval(path, {"overall": {"accuracy": 0.9}})
    assert json.loads(path.read_text()) == {"overall": {"accuracy": 0.5}}
    assert [p.name for p in tmp_path.iterdir()] == ["eval.json"]  # no temporary file left


def test_a_full_disk_during_a_checkpoint_is_one_line_and_the_last_one_resumes(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real, calls = accelerate.Accelerator.save_state, []

    def second_save_fails(self, output_dir=None, **kwargs):
        calls.append(output_dir)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", f"{output_dir}/model.safetensors")
        return real(self, output_dir, **kwargs)

    monkeypatch.setattr(accelerate.Accelerator, "save_state", second_save_fails)
    assert cli(["train", str(QUICKSTART), *SHORT, f"output_dir={out}"]) == 2
    err = one_line(capsys)
    assert f"{out}/checkpoints" in err and ": no space left on the device (" in err and " free)" in err
    assert (out / "checkpoints" / "step-1" / "trainer_state.json").is_file()
    assert not (out / ".rm.lock").exists()
    monkeypatch.setattr(accelerate.Accelerator, "save_state", real)
    assert cli(["train", str(out / "config.yaml"), "train.resume=auto"]) == 0
    assert json.loads((out / "eval.json").read_text())["train"]["resumed_from"].endswith("step-1")


TORCH_SHORT_WRITE = "[enforce fail at inline_container.cc:672] . unexpected pos 41792 vs 41680"
"""What torch.save raised for optimizer.bin when a 460 KiB tmpfs filled during a checkpoint (no errno, no words
about space): a traceback, though nothing was lost."""


@pytest.mark.parametrize("free", [0, 2**30], ids=["full", "not-full"])
def test_torchs_short_write_on_a_full_disk_is_the_disk_full_line_and_only_there(tmp_path, monkeypatch, capsys, free):
    out = tmp_path / "run"
    real, calls = accelerate.Accelerator.save_state, []

    def second_save_fails(self, output_dir=None, **kwargs):
        calls.append(output_dir)
        if len(calls) == 2:
            raise RuntimeError(TORCH_SHORT_WRITE)
        return real(self, output_dir, **kwargs)

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(accelerate.Accelerator, "save_state", second_save_fails)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=free))
    if free:  # space left: some other fault of torch's writer, not called a full disk
        with pytest.raises(RuntimeError, match="unexpected pos"):
            cli(["train", str(QUICKSTART), *SHORT, f"output_dir={out}"])
        return
    assert cli(["train", str(QUICKSTART), *SHORT, f"output_dir={out}"]) == 2
    err = one_line(capsys)
    assert f"{out}/checkpoints: no space left on the device (0.0 MiB free)" in err
    assert (out / "checkpoints" / "step-1" / "trainer_state.json").is_file()
    assert not list((out / "checkpoints").glob(".partial-*"))


def test_a_full_disk_during_an_export_keeps_the_old_one_and_no_partial_folder(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert cli(["train", str(QUICKSTART), *SHORT, "train.save_steps=2", f"output_dir={run}"]) == 0
    before = {p.name: p.read_bytes() for p in (run / "export").iterdir()}
    capsys.readouterr()
    monkeypatch.setattr(rm.export.folder, "write_eval", full)
    assert cli(["export", str(run), "--out", str(run / "export"), "--overwrite"]) == 2
    assert "no space left on the device" in one_line(capsys)
    assert {p.name: p.read_bytes() for p in (run / "export").iterdir()} == before
    assert not (run / ".export.partial").exists()


def test_a_failed_cache_write_removes_its_temporary_folder_at_once(tmp_path, monkeypatch):
    """It used to hold the space until a build an hour later found it stale."""
    with pytest.raises(OSError), cache.building(tmp_path, "data-abc") as tmp:
        (tmp / "train.arrow").write_bytes(b"half")
        full()
    assert list(tmp_path.iterdir()) == []
    tmp = cache.new_entry(tmp_path, "data-abc")
    (tmp / "train.arrow").write_bytes(b"whole")
    monkeypatch.setattr(cache, "write_text", full)  # the marker cannot be written
    with pytest.raises(OSError):
        cache.publish(tmp, "data-abc")
    assert list(tmp_path.iterdir()) == []
