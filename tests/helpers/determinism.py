"""Undo what full determinism (verl.utils.determinism) changes process-wide, for tests that turn it on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import torch


@contextlib.contextmanager
def restored_determinism(env_names: Iterable[str]) -> Iterator[None]:
    """Unset `env_names` for the block, then put torch's deterministic mode, cuDNN's flags and those variables back
    as they were. Saved by hand: monkeypatch.delenv records nothing for an unset variable, so one the block sets
    would stay set."""
    saved_env = {name: os.environ.pop(name, None) for name in env_names}
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
