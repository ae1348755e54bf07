"""Exceptions and warnings raised while checking a trainer config."""

from __future__ import annotations


class ConfigError(ValueError):
    """One or more problems in a config; each message names the full dotted key.

    `problems` keeps the individual messages so callers (and tests) can inspect them one by one;
    str(error) joins them one per line, which is what the command line prints.
    """

    def __init__(self, problems: list[str] | str):
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class RewardFunctionError(ConfigError, TypeError):
    """custom_reward_function.path/.name name no usable function: the file is missing, the name is not defined
    there, or its signature does not take what the reward manager passes (a TypeError too, as a bad call would be).
    Found before Ray starts; the command line prints it as a config problem."""


class ConfigWarning(UserWarning):
    """A config that will run but probably not the way the user meant."""
