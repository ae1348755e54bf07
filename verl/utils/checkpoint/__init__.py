"""Upstream verl's import path, kept for users' code; the code lives in `verl.checkpoint`."""

import importlib

_target = importlib.import_module("verl.checkpoint")


def __getattr__(name):
    return getattr(_target, name)
