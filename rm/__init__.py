r"""rm: pairwise (Bradley-Terry) reward-model training on human preference data.

    import rm
    pairs = [{"chosen": "\n\nHuman: Hi\n\nAssistant: Hello!", "rejected": "\n\nHuman: Hi\n\nAssistant: No."}, ...]
    result = rm.train("configs/quickstart.yaml", train_data=pairs, overrides=["train.max_steps=100"])
    rewards = rm.load(result.export).score(["\n\nHuman: 2+2?\n\nAssistant: 4"])

`import rm` imports neither torch nor transformers: `train` and `load` are imported from `rm.api` when first read
(`import rm` took 0.07 s on 2 CPU cores, `import rm.api` 5.7-6.7 s), and the HTTP client `rm.client` runs in a
policy's venv without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "load", "train"]

if TYPE_CHECKING:  # for type checkers and editors; at run time `__getattr__` imports them on first use
    from rm.api import load, train


def __getattr__(name: str) -> Any:
    if name in ("train", "load"):
        import rm.api

        return getattr(rm.api, name)
    raise AttributeError(f"module 'rm' has no attribute {name!r}")
