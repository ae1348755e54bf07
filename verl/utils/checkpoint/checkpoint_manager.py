"""Upstream verl's import path, kept for users' code: the very module `verl.checkpoint.checkpoint_manager` (one object, one registry)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.checkpoint.checkpoint_manager")
