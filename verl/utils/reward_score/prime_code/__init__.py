"""Upstream verl's import path, kept for users' code: the very package `verl.rewards.prime_code` (and its `utils`
module), so each exists once whichever path imports it."""

import importlib
import sys

sys.modules[__name__ + ".utils"] = importlib.import_module("verl.rewards.prime_code.utils")
sys.modules[__name__] = importlib.import_module("verl.rewards.prime_code")
