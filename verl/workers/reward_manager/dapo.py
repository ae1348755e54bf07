"""DAPO's reward manager: the rule score plus a soft penalty for responses that run into the length limit."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from verl.workers.reward_manager.abstract import RawRewardFn
from verl.workers.reward_manager.batch_text import RolloutTexts
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register
from verl.workers.reward_manager.scoring import as_plain_result


def overlong_penalty(valid_response_length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """0 up to max_resp_len - buffer_len tokens, then falling linearly to -penalty_factor at max_resp_len."""
    expected_len = max_resp_len - buffer_len
    exceed_len = valid_response_length - expected_len
    return min(-exceed_len / buffer_len * penalty_factor, 0.0)


OVERLONG_KEYS = ("enable", "len", "penalty_factor", "log")


def _as_read(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The buffer settings as DAPORewardManager reads them (its defaults for keys a mapping leaves out)."""
    return {"enable": bool(cfg.get("enable", False)), "len": cfg.get("len"),
            "penalty_factor": cfg.get("penalty_factor", 1.0), "log": bool(cfg.get("log", True))}


def check_overlong_spellings(typed: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """reward_model.overlong_buffer.* (typed, all keys) vs reward_model.reward_kwargs.overlong_buffer_cfg.*
    (upstream's recipe spelling): unknown keys, or both spellings set to different buffers, stop the run."""
    if not isinstance(given, Mapping):
        raise TypeError("reward_model.reward_kwargs.overlong_buffer_cfg must be a mapping of "
                        f"{'/'.join(OVERLONG_KEYS)}, got {type(given).__name__}")
    unknown = sorted(set(given) - set(OVERLONG_KEYS))
    if unknown:
        raise ValueError(f"reward_model.reward_kwargs.overlong_buffer_cfg has unknown keys {unknown}; "
                         f"it takes {', '.join(OVERLONG_KEYS)}")
    typed_is_set = any(typed[k] != v for k, v in _TYPED_DEFAULTS.items())
    if typed_is_set and _as_read(typed) != _as_read(given):
        differ = [f"{k}: {_as_read(typed)[k]} vs {_as_read(given)[k]}" for k in OVERLONG_KEYS
                  if _as_read(typed)[k] != _as_read(given)[k]]
        raise ValueError(
            "the overlong buffer is set twice, differently: reward_model.overlong_buffer.* and "
            f"reward_model.reward_kwargs.overlong_buffer_cfg.* disagree on {'; '.join(differ)}. Keep one spelling "
            "(upstream's recipe uses +reward_model.reward_kwargs.overlong_buffer_cfg.*).")


# reward_model.overlong_buffer's defaults (ppo_trainer.yaml): a section left alone does not clash
_TYPED_DEFAULTS = {"enable": False, "len": 0, "penalty_factor": 0.0, "log": False}


@register("dapo")
class DAPORewardManager(NaiveRewardManager):
    """overlong_buffer_cfg: {enable, len, penalty_factor, log (default True)}; max_resp_len: the rollout's
    response_length. With a plain-number score, the score is also reported as extra field "acc"."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None = None,
        reward_fn_key: str = "data_source",
        max_resp_len: int | None = None,
        overlong_buffer_cfg: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, **kwargs)
        self.max_resp_len = max_resp_len
        # a user's mapping, or the typed reward_model.overlong_buffer section: held as a plain dict either way
        if dataclasses.is_dataclass(overlong_buffer_cfg):
            overlong_buffer_cfg = dataclasses.asdict(overlong_buffer_cfg)
        self.overlong_buffer_cfg = None if overlong_buffer_cfg is None else dict(overlong_buffer_cfg)
        if self._penalty_enabled():
            buffer_len = overlong_buffer_cfg.get("len")
            if max_resp_len is None:
                raise ValueError(
                    "DAPORewardManager: overlong_buffer_cfg.enable=True needs max_resp_len "
                    "(pass reward_model.reward_kwargs.max_resp_len, normally data.max_response_length)"
                )
            if buffer_len is None or not 0 < buffer_len <= max_resp_len:
                raise ValueError(
                    f"DAPORewardManager: overlong_buffer_cfg.len must be in (0, max_resp_len={max_resp_len}], "
                    f"got {buffer_len}"
                )

    @classmethod
    def kwargs_from_config(cls, config: Any) -> dict[str, Any]:
        """reward_model.overlong_buffer and data.max_response_length (the typed config). Upstream's DAPO recipe
        spells the buffer +reward_model.reward_kwargs.overlong_buffer_cfg.* (with reward_kwargs.max_resp_len):
        the reward kwargs reach the manager after these and win; both spellings at once must agree."""
        typed = dataclasses.asdict(config.reward_model.overlong_buffer)
        given = config.reward_model.reward_kwargs.get("overlong_buffer_cfg")
        if given is not None:
            check_overlong_spellings(typed, given)
        return {**super().kwargs_from_config(config), "overlong_buffer_cfg": typed,
                "max_resp_len": config.data.max_response_length}

    def _penalty_enabled(self) -> bool:
        return bool(self.overlong_buffer_cfg is not None and self.overlong_buffer_cfg.get("enable", False))

    def _score_row(self, texts: RolloutTexts, i: int, result: Any) -> tuple[float, dict[str, Any]]:
        reward, fields = super()._score_row(texts, i, result)
        if not isinstance(as_plain_result(result), dict):
            fields["acc"] = reward
        if self._penalty_enabled():
            cfg = self.overlong_buffer_cfg
            penalty = overlong_penalty(
                texts.valid_response_lengths[i], self.max_resp_len, cfg["len"], cfg.get("penalty_factor", 1.0)
            )
            reward += penalty
            if cfg.get("log", True):
                fields["overlong_reward"] = penalty
                fields["overlong"] = penalty < 0
        return reward, fields
