"""Upstream verl's import path, kept for users' code: the very module `verl.trainer.tracking` (one object, one registry)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.trainer.tracking")
