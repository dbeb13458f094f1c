"""The client venvs of scripts/check_clients.sh install from full pin lists (scripts/clients/locks/NAME.txt): every
client has one, every line pins one package to one version, torch is the local CPU build's 2.13.0, and a version its
recipe names (transformers==5.24.0 for TRL...) is the one its lock holds, so a row's label is what ran."""

import re

import pytest

from conftest import REPO

SCRIPT = REPO / "scripts" / "check_clients.sh"
LOCKS = REPO / "scripts" / "clients" / "locks"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.!+-]*$")


def clients() -> list[str]:
    (names,) = re.findall(r"^CLIENTS=\(([^)]*)\)$", SCRIPT.read_text(), re.M)
    return names.split()


def recipe_pins(name: str) -> dict[str, str]:
    """name -> version for each `pkg==version` the client's recipe (its case in `recipe`) installs."""
    body = SCRIPT.read_text().split("recipe() {", 1)[1].split("\n}\n", 1)[0]
    (case,) = re.findall(rf"^\s+{re.escape(name)}\)(.*?);;", body, re.M | re.S)
    return dict(re.findall(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)", case))


def locked(name: str) -> dict[str, str]:
    lines = [line for line in (LOCKS / f"{name}.txt").read_text().splitlines() if line and not line.startswith("#")]
    bad = [line for line in lines if not PIN.match(line)]
    assert not bad, f"{name}: lines that pin no single version: {bad}"
    pins = dict(line.split("==") for line in lines)
    return {k.lower().replace("_", "-"): v for k, v in pins.items()}


def test_every_client_has_a_lock_and_nothing_else_does():
    assert sorted(p.stem for p in LOCKS.glob("*.txt")) == sorted(clients())


@pytest.mark.parametrize("name", clients())
def test_a_lock_pins_every_package_and_what_its_recipe_names(name):
    pins = locked(name)
    assert pins["torch"] == "2.13.0"  # not the +cpu local label: the Makefile's torch==2.13.0 finds the CPU build
    for package, version in recipe_pins(name).items():
        assert pins.get(package.lower()) == version, f"{name}: recipe installs {package}=={version}"


def test_the_lock_checks_fail_on_a_loose_or_contradicting_lock(tmp_path, monkeypatch):
    (tmp_path / "trl.txt").write_text("# header\ntorch==2.13.0\ntrl==1.16.0\ntransformers>=5\n")
    monkeypatch.setattr(f"{__name__}.LOCKS", tmp_path)
    with pytest.raises(AssertionError, match="pin no single version"):
        locked("trl")
    (tmp_path / "trl.txt").write_text("torch==2.13.0\ntrl==1.16.0\ntransformers==5.25.0\n")
    with pytest.raises(AssertionError, match="recipe installs transformers==5.24.0"):
        test_a_lock_pins_every_package_and_what_its_recipe_names("trl")
