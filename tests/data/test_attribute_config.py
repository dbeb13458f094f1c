"""model.head.attributes, model.head.attribute_scales and loss.{attribute_loss, attribute_coef, preference_coef}:
defaults that leave a run as it was, YAML round trips, and one line naming the key per mistake."""

import re

import pytest

from rm.config import RunConfig, load_config, save_config
from rm.errors import ConfigError


def test_defaults_configure_no_attribute_and_the_preference_loss_alone():
    cfg = RunConfig()
    assert cfg.model.head.attributes == [] and cfg.model.head.attribute_scales == {}
    assert (cfg.loss.attribute_loss, cfg.loss.attribute_coef, cfg.loss.preference_coef) == ("mse", 1.0, 1.0)


def test_attributes_round_trip_through_yaml(tmp_path):
    overrides = [
        "model.head.attributes=[helpfulness, verbosity]",
        "model.head.attribute_scales={helpfulness: [0, 4]}",
        "loss.attribute_loss=gaussian",
        "loss.preference_coef=0",
    ]
    cfg = load_config(None, overrides)
    assert cfg.model.head.attribute_scales == {"helpfulness": [0.0, 4.0]}
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["loss.attribute_loss=huber"], "loss.attribute_loss: 'huber' is not one of 'mse', 'gaussian'"),
        (["loss.attribute_coef=-1"], "loss.attribute_coef: must be >= 0"),
        (["loss.preference_coef=0"], "loss.preference_coef: 0 trains the attributes alone"),
        (["model.head.attributes=[a, a]"], "model.head.attributes: 'a' is given twice"),
        (["model.head.attributes=[reward]"], "model.head.attributes: 'reward' is output 0's label"),
        (["model.head.attributes=[a]", "model.head.attribute_scales={b: [0, 1]}"], "attribute_scales.b: not one of"),
        (["model.head.attributes=[a]", "model.head.attribute_scales={a: [4, 0]}"], "attribute_scales.a: must be"),
        (["model.head.attribute_scales={a: [0, x]}"], "model.head.attribute_scales.a[1]: expected a number"),
        (["model.head.attributes=[a]", "loss.preference_coef=0", "loss.attribute_coef=0"], "leaves nothing"),
    ],
)
def test_mistakes_are_one_line_naming_the_key(overrides, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)) as info:
        load_config(None, overrides)
    assert len(str(info.value).splitlines()) <= 2  # a type error alone, or "invalid config:" and the one problem
