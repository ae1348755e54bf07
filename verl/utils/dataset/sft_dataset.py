"""Upstream verl's import path, kept for users' code: the very module `verl.data.sft_dataset` (one object, one registry)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("verl.data.sft_dataset")
