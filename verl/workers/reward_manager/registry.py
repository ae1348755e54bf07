"""Reward managers by name: `reward_model.reward_manager=<name>` picks the class."""

from __future__ import annotations

from collections.abc import Callable

REWARD_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make the reward manager selectable as `reward_model.reward_manager=<name>`."""

    def decorator(cls: type) -> type:
        existing = REWARD_MANAGER_REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(
                f"reward manager {name!r} is already registered to {existing.__module__}.{existing.__qualname__}; "
                f"pick another name for {cls.__module__}.{cls.__qualname__}"
            )
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(
            f"Unknown reward manager: {name} (reward_model.reward_manager={name!r}). "
            f"Known: {', '.join(sorted(REWARD_MANAGER_REGISTRY))}. "
            "Register your own class with @verl.workers.reward_manager.register(name)."
        )
    return REWARD_MANAGER_REGISTRY[name]
