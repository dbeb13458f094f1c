"""pyproject.toml in the form the installed setuptools expects: installing rm prints no deprecation banner."""

import tomllib

from conftest import REPO


def test_the_licence_is_a_pep_639_spdx_string_and_setuptools_is_new_enough_for_it():
    """A `license = {text = ...}` table made setuptools print a 10-line deprecation banner three times during
    `make demo`; an SPDX string needs setuptools 77 or later in the build requirements."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    assert int(setuptools.removeprefix("setuptools>=").split(".")[0]) >= 77
