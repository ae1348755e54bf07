"""verl: reinforcement-learning post-training of LLMs on the HybridFlow design."""

import os
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# The package's folder, as upstream names it (code finds the bundled yaml under version_folder/trainer/config).
version_folder = os.path.dirname(os.path.abspath(__file__))

if TYPE_CHECKING:  # for IDEs and type checkers only: at run time these resolve lazily in __getattr__
    from verl.protocol import DataProto
    from verl.trainer.api.builder import config
    from verl.trainer.api.callbacks import Callback
    from verl.trainer.api.result import TrainResult
    from verl.trainer.api.training import train
    from verl.trainer.config import PPOTrainerConfig

__all__ = ["Callback", "DataProto", "PPOTrainerConfig", "TrainResult", "config", "train"]

# The Python API (verl.trainer.api): `verl.train(...)`, `verl.config(...)` and their types, resolved on first use.
_API = {
    "train": "verl.trainer.api.training",
    "config": "verl.trainer.api.builder",
    "Callback": "verl.trainer.api.callbacks",
    "TrainResult": "verl.trainer.api.result",
    "PPOTrainerConfig": "verl.trainer.config",
}


def __getattr__(name):
    # Lazy so that `import verl.utils.<light module>` (config checks, CLIs) does not pay for torch.
    if name == "DataProto":
        from verl.protocol import DataProto

        return DataProto
    if name in _API:
        from importlib import import_module

        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'verl' has no attribute {name!r}")
