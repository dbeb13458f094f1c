"""The run configuration: its schema (typed dataclasses) and how YAML and dotted overrides become one.

The bottom floor of rm: every other folder may import from here, and this folder imports nothing of rm
but `rm.errors`.
"""

from rm.config.checks import choice_problems, get_dotted
from rm.config.loader import (
    apply_overrides,
    build,
    load_config,
    parse_override,
    read_yaml,
    save_config,
    to_dict,
)
from rm.config.schema import (
    ArgillaConfig,
    CollatorConfig,
    DataConfig,
    ExportConfig,
    LoraConfig,
    LossConfig,
    ModelConfig,
    RandomInitConfig,
    RunConfig,
    SyntheticConfig,
    TokenizerConfig,
    TrainConfig,
)
from rm.errors import ConfigError

__all__ = [
    "ArgillaConfig",
    "CollatorConfig",
    "ConfigError",
    "DataConfig",
    "ExportConfig",
    "LoraConfig",
    "LossConfig",
    "ModelConfig",
    "RandomInitConfig",
    "RunConfig",
    "SyntheticConfig",
    "TokenizerConfig",
    "TrainConfig",
    "apply_overrides",
    "build",
    "choice_problems",
    "get_dotted",
    "load_config",
    "parse_override",
    "read_yaml",
    "save_config",
    "to_dict",
]
