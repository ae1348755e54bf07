"""Upstream verl's import path, kept for users' code; the code lives in `verl.data`."""

import importlib

_target = importlib.import_module("verl.data")


def __getattr__(name):
    return getattr(_target, name)
