"""Upstream verl's public path for the RL algorithm math: the very module `verl.algos` (one registry).

Custom estimators and losses registered through either name land in the same registry; see verl/algos.
"""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.algos")
