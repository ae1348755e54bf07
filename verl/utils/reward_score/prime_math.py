"""Upstream verl's import path, kept for users' code: the very module `verl.rewards.prime_math`."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.rewards.prime_math")
