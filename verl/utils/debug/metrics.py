"""Upstream verl's import path, kept for users' code: the very module `verl.workers.rollout.metrics` (one object)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.workers.rollout.metrics")
