"""Hooks the trainer calls: after each training step, after each validation, after each checkpoint.

Give `callbacks=` one object or a list. Each item is either a `Callback` (or any object with some of the methods
on_step_end / on_validation / on_checkpoint) or a dict of plain functions by hook name:
`{"on_step_end": fn}`. A hook that raises stops the run with its error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

HOOKS = ("on_step_end", "on_validation", "on_checkpoint")


class Callback:
    """Override the hooks you need; every argument is passed by position."""

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        """After training step `step`; `metrics` is the row logged for it (validation metrics included when it
        validated)."""

    def on_validation(self, step: int, val_metrics: dict[str, float]) -> None:
        """After a validation pass at `step` (0 for trainer.val_before_train)."""

    def on_checkpoint(self, step: int, checkpoint_path: str) -> None:
        """After the `global_step_N` folder of `step` is published."""


class _FunctionHooks:
    def __init__(self, hooks: Mapping[str, Callable[..., Any]]) -> None:
        unknown = sorted(set(hooks) - set(HOOKS))
        if unknown:
            raise TypeError(f"callbacks: unknown hook name(s) {unknown}; use {list(HOOKS)}")
        for name, fn in hooks.items():
            if not callable(fn):
                raise TypeError(f"callbacks[{name!r}] = {fn!r} is not callable")
            setattr(self, name, fn)


class CallbackList:
    """What the trainer holds (`trainer.callbacks`): dispatches each hook to every item in order."""

    def __init__(self, items: Any = None) -> None:
        if items is None:
            items = []
        elif not isinstance(items, list | tuple):
            items = [items]
        self.items: list[Any] = []
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                item = _FunctionHooks(item)
            elif not any(callable(getattr(item, name, None)) for name in HOOKS):
                raise TypeError(f"callbacks[{i}] = {item!r} has none of the hooks {list(HOOKS)}; subclass "
                                "verl.trainer.api.Callback or pass a dict {'on_step_end': fn, ...}")
            self.items.append(item)

    def append(self, item: Any) -> None:
        self.items.append(item)

    def call(self, hook: str, step: int, payload: Any) -> None:
        for item in self.items:
            fn = getattr(item, hook, None)
            if callable(fn):
                fn(step, payload)


class Recorder(Callback):
    """The API's own callback: collects what the result reports."""

    def __init__(self) -> None:
        self.history: list[dict[str, float]] = []
        self.validations: list[tuple[int, dict[str, float]]] = []
        self.checkpoints: list[tuple[int, str]] = []

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        self.history.append(dict(metrics))

    def on_validation(self, step: int, val_metrics: dict[str, float]) -> None:
        self.validations.append((step, dict(val_metrics)))

    def on_checkpoint(self, step: int, checkpoint_path: str) -> None:
        self.checkpoints.append((step, checkpoint_path))
