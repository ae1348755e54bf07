"""Upstream verl's import path, kept for users' code: the very module `verl.rewards.geo3k` (one object, one registry)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.rewards.geo3k")
