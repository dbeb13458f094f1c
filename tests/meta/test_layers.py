"""The layer contract (scripts/check_layers.py) holds for rm, and fails on the breaches it exists to catch."""

import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def checker():
    spec = importlib.util.spec_from_file_location("check_layers", REPO / "scripts" / "check_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copy(tmp_path):
    """A copy of the package to break on purpose."""
    shutil.copytree(REPO / "rm", tmp_path / "rm", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "rm"


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


@pytest.mark.slow
def test_rm_keeps_its_layers_and_has_no_cycles():
    assert checker().problems(REPO / "rm") == []
    assert checker().main([str(REPO / "rm")]) == 0


@pytest.mark.slow
def test_a_back_import_is_caught_even_inside_a_function(copy, capsys):
    append(copy / "data" / "load.py", "\n\ndef _late():\n    from rm.training.run import main\n\n    return main\n")
    found = checker().problems(copy)
    assert "rm.data.load (data) imports rm.training.run (training)" in found[0]
    assert found[0].startswith(f"{copy / 'data' / 'load.py'}:")
    # training imports data, so the back-import also closes a cycle, reported on its own
    assert len(found) == 2 and found[1].startswith("import cycle among:") and "rm.data.load" in found[1]
    assert checker().main([str(copy)]) == 1
    assert "2 breaches of the layer contract" in capsys.readouterr().out


def test_importing_the_sweep_from_training_is_a_breach(copy):
    append(copy / "training" / "loop.py", "\nimport rm.sweep.trial  # noqa\n")
    found = checker().problems(copy)
    assert "rm.training.loop (training) imports rm.sweep.trial (sweep)" in found[0]


def test_a_cycle_inside_one_layer_is_caught(copy):
    append(copy / "tokens" / "tokenizer.py", "\nfrom rm.tokens import encode  # noqa\n")  # encode imports tokenizer
    (found,) = checker().problems(copy)
    assert found.startswith("import cycle among:") and "rm.tokens.encode" in found and "rm.tokens.tokenizer" in found


def test_the_data_layer_may_not_import_tokens(copy):
    append(copy / "data" / "formats" / "chat.py", "\nfrom rm.tokens.tokenizer import special_prefix  # noqa\n")
    found = checker().problems(copy)
    assert "rm.data.formats.chat (data) imports rm.tokens.tokenizer (tokens)" in found[0]


def test_tokens_may_not_import_collate(copy):
    append(copy / "tokens" / "store.py", "\nfrom rm.collate.pack import pack  # noqa\n")
    found = checker().problems(copy)
    assert "rm.tokens.store (tokens) imports rm.collate.pack (collate)" in found[0]


def test_a_folder_outside_the_layers_is_refused(copy):
    (copy / "utils").mkdir()
    (copy / "utils" / "__init__.py").write_text("")
    (found,) = checker().problems(copy)
    assert "utils: not a layer" in found


def test_the_api_is_the_top_layer_and_a_back_import_into_it_is_caught(copy):
    late = "\n\ndef _late():\n    from rm.api.training import train\n\n    return train\n"
    append(copy / "training" / "loop.py", late)
    found = checker().problems(copy)
    assert "rm.training.loop (training) imports rm.api.training (api)" in found[0]
    assert checker().LAYERS[-1] == "api" and checker().layer("rm") == checker().LAYERS.index("api")


def test_rm_init_is_in_the_api_layer_so_the_client_may_not_import_the_package_for_its_api(copy):
    """rm/__init__.py imports rm.api when `rm.load` is read: the torch-free client reading it would import torch."""
    append(copy / "client" / "calls.py", "\nfrom rm import load  # noqa\n")
    found = checker().problems(copy)
    assert any("rm.client.calls (client) imports rm (api)" in line for line in found), found


@pytest.mark.slow
def test_reading_rm_version_alone_imports_nothing_above(copy):
    """`rm.__version__` is defined in rm/__init__.py itself; reading it runs none of the lazy imports."""
    append(copy / "data" / "load.py", "\nimport rm\nfrom rm import __version__  # noqa\n\nVERSION = rm.__version__\n")
    assert checker().problems(copy) == []
    append(copy / "data" / "load.py", "\nTRAIN = rm.train\n")
    (found, *_) = checker().problems(copy)
    assert "rm.data.load (data) imports rm (api)" in found


@pytest.mark.slow
def test_the_scoring_room_sits_above_export_and_below_training(copy):
    """The one loader rebuilds runs with export's code; export (and evaluation under it) may not load through it."""
    layers = checker().LAYERS
    assert layers.index("export") < layers.index("scoring") < layers.index("training")
    append(copy / "export" / "card.py", "\nfrom rm.scoring.inference import load  # noqa\n")
    found = checker().problems(copy)
    assert "rm.export.card (export) imports rm.scoring.inference (scoring)" in found[0]
