"""BaseConfig: what every typed config section is built on, as in upstream verl.

A section reads like an object (``cfg.actor.clip_ratio``) and like a read-only mapping (``cfg["clip_ratio"]``,
``cfg.get("clip_ratio", 0.2)``, ``dict(cfg)``, ``for key in cfg``). Its fields are frozen once built: assigning
to one raises ``dataclasses.FrozenInstanceError`` unless the class lists it in ``_mutable_fields`` (the values a
run fills in after the check, such as ``optim.total_training_steps``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, ClassVar


class MissingConfigKeyError(KeyError, AttributeError):
    """A config section has no such key: a KeyError for mapping code, an AttributeError as upstream raises."""


@dataclass
class BaseConfig(Mapping):
    """Attribute and mapping access to a dataclass; fields frozen unless named in ``_mutable_fields``."""

    _mutable_fields: ClassVar[frozenset[str]] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        # Set once (by __init__); later writes only to the fields the class declares mutable.
        if name in self.__dict__ and name not in self._mutable_fields:
            raise FrozenInstanceError(
                f"{type(self).__name__}.{name} is frozen once the config is built; "
                f"change it in the yaml or on the command line instead"
            )
        super().__setattr__(name, value)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self else default

    def __getitem__(self, key: str) -> Any:
        # Upstream reads cfg[key] as getattr(cfg, key): a missing key raises AttributeError and a key that is
        # not a string TypeError. The missing-key error is also a KeyError, so mapping code keeps working.
        if not isinstance(key, str):
            raise TypeError(f"{type(self).__name__} keys are strings, got {type(key).__name__} {key!r}")
        try:
            return getattr(self, key)
        except AttributeError:
            raise MissingConfigKeyError(
                f"{type(self).__name__} has no key {key!r}; its keys are {list(_field_names(type(self)))}"
            ) from None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in _field_names(type(self))

    def __iter__(self) -> Iterator[str]:
        return iter(_field_names(type(self)))

    def __len__(self) -> int:
        return len(_field_names(type(self)))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _field_names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


_NAMES: dict[type, tuple[str, ...]] = {}
