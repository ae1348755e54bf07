"""`skip` (upstream after v0.7): the run-wide SkipManager's sections, at upstream's path `verl.utils.skip`.

Upstream main moved its rollout skip (dump a step's generations, replay them instead of generating) out of
`actor_rollout_ref.rollout.skip` into this top-level section, with one entry per trainer loop: `rollout` (the
RayPPOTrainer), `rollout_tq` (its v1 TransferQueue trainer) and `async_rollout` (its fully async trainer), each
choosing the steps to skip by number (`steps`) and what a skipped step does (`action`: cache | repeat).

Here the rollout skip is v0.7's, `actor_rollout_ref.rollout.skip` (verl.utils.rollout_skip): it dumps the first
`dump_step` generation rounds and then acts by `post_dump_action`. A list of step numbers and a cache/repeat action
do not translate into that one-to-one, so every key here is refused unless at its default rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.base_config import BaseConfig
from verl.utils.config_schema import list_field, refused

__all__ = ["SKIP_REFUSAL", "SkipEntryConfig", "SkipManagerConfig"]

SKIP_REFUSAL = (
    "upstream main's SkipManager (skip.rollout, skip.rollout_tq for its v1 TransferQueue trainer, skip.async_rollout "
    "for its fully async trainer) is not built; this build's rollout skip is v0.7's actor_rollout_ref.rollout.skip, "
    "which dumps the first dump_step generation rounds and replays them, and upstream's per-step `steps` list and "
    "`action` (cache | repeat) have no one-to-one translation into it",
    "Leave every skip.* key at its default; dump and replay rollouts with actor_rollout_ref.rollout.skip.enable=true "
    "(and its dump_dir, dump_step, post_dump_action).",
)


@dataclass
class SkipEntryConfig(BaseConfig):
    """One trainer loop's rollout skip: refused unless at upstream's defaults (SKIP_REFUSAL)."""

    enable: bool = refused(False, *SKIP_REFUSAL)
    dump_dir: str = refused("~/.verl/rollout_dump", *SKIP_REFUSAL)
    steps: list[int] = refused(list_field([]), *SKIP_REFUSAL)  # the training steps whose rollout is skipped
    action: str = refused("cache", *SKIP_REFUSAL)  # cache | repeat


@dataclass
class SkipManagerConfig(BaseConfig):
    """`skip`: upstream's SkipManagerConfig (its keys and defaults)."""

    rollout: SkipEntryConfig = field(default_factory=SkipEntryConfig)
    rollout_tq: SkipEntryConfig = field(default_factory=SkipEntryConfig)
    async_rollout: SkipEntryConfig = field(default_factory=SkipEntryConfig)
