"""Upstream verl's import path, kept for users' code: the very module `verl.rewards.result`, so `RewardResult`
exists once whichever path imports it (isinstance checks in the reward managers depend on that)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.rewards.result")
