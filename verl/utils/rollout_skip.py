"""Upstream verl's import path, kept for users' code: the very module `verl.trainer.ppo.rollout_skip` (one object)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.trainer.ppo.rollout_skip")
