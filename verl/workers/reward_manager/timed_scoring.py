"""Running compute_score with a time limit per call, for every built-in reward manager.

With a timeout (the default, `reward_model.scoring.timeout`), calls run in a `verl.rewards.score_pool.ScorePool`
kept for the manager's lifetime; a call past its limit has its process killed and replaced, and is either scored
0 (counted per sample in the `reward_timeout` extra field, summed into the `reward/timeouts` metric) or stops the
run (`on_timeout=error`). `timeout=None` (or 0) is the explicit opt-out: calls run in this process, unlimited.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from verl.rewards.score_pool import ScorePool, call_to_completion
from verl.workers.reward_manager.scoring import ExtraInfoCollector, RewardScoreError, describe_fn

DEFAULT_TIMEOUT = 300.0  # upstream's prime manager limit per sample
ON_TIMEOUT = ("zero", "error")
TIMEOUT_FIELD = "reward_timeout"  # per-sample extra info: True where the sample's scoring ran out of time

# reward_model.scoring.<key> -> the constructor argument of the same name (reward_model.reward_kwargs.<key> wins)
SCORING_KEYS = ("timeout", "on_timeout", "num_processes")


class RewardTimeoutError(RewardScoreError):
    """A sample's scoring ran past reward_model.scoring.timeout with on_timeout=error."""


class TimedOut:
    """Stands in for the result of a call that ran out of time (None is a scorer's own, refused, result)."""

    def __repr__(self) -> str:
        return "<timed out>"


TIMED_OUT = TimedOut()


def scoring_kwargs_from_config(config: Any) -> dict[str, Any]:
    """The constructor arguments reward_model.scoring gives a built-in manager."""
    scoring = config.reward_model.scoring
    return {key: getattr(scoring, key) for key in SCORING_KEYS}


class TimedScorer:
    """Calls `fn(**kwargs)` for a list of calls with the manager's time limit; errors name the sample."""

    def __init__(self, fn: Callable[..., Any], timeout: float | None = DEFAULT_TIMEOUT, on_timeout: str = "zero",
                 num_processes: int | None = None) -> None:
        if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
            raise ValueError(f"reward_model.scoring.timeout must be a number of seconds >= 0 or null, got {timeout!r}")
        if on_timeout not in ON_TIMEOUT:
            raise ValueError(f"reward_model.scoring.on_timeout must be one of {', '.join(ON_TIMEOUT)}, "
                             f"got {on_timeout!r}")
        if num_processes is not None and (not isinstance(num_processes, int) or num_processes < 1):
            raise ValueError(f"reward_model.scoring.num_processes must be >= 1 or null, got {num_processes!r}")
        self.fn = fn
        self.timeout = float(timeout) if timeout else None
        self.on_timeout = on_timeout
        self.num_processes = num_processes or os.cpu_count() or 1
        self._pool: ScorePool | None = None

    @property
    def limited(self) -> bool:
        return self.timeout is not None

    def __getstate__(self) -> dict:
        # Shipped to a Ray task (launch_reward_fn_async) or deep-copied: the copy starts its own processes.
        return {**self.__dict__, "_pool": None}

    def _get_pool(self) -> ScorePool:
        if self._pool is None:
            self._pool = ScorePool(self.fn, self.num_processes, self.timeout)
        return self._pool

    def close(self) -> None:
        """End the scoring processes (they are restarted if the manager is called again)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def run(self, calls: Sequence[dict[str, Any]], labels: Sequence[str]) -> list[Any]:
        """One raw result per call (fn(**kwargs)), or TIMED_OUT. labels[i] names call i in messages, e.g.
        "sample 3 (data_source='gsm8k') scored by mod.fn" (sample_label)."""
        if not self.limited:
            return [self._call_here(kwargs, label) for kwargs, label in zip(calls, labels)]
        outcomes = self._get_pool().run(calls, stop_on_timeout=self.on_timeout == "error")
        results: list[Any] = []
        for outcome, label in zip(outcomes, labels):
            if outcome.status == "error":
                error = outcome.error
                raise RewardScoreError(f"{label} raised {type(error).__name__}: {error}") from error
            if outcome.status == "timeout":
                self._report_timeout(label, outcome.seconds)
                results.append(TIMED_OUT)
            else:  # "not_run" only follows a timeout under on_timeout=error, which raised above
                results.append(outcome.value)
        return results

    def _call_here(self, kwargs: dict[str, Any], label: str) -> Any:
        try:
            return call_to_completion(self.fn, kwargs)
        except Exception as exc:
            raise RewardScoreError(f"{label} raised {type(exc).__name__}: {exc}") from exc

    def _report_timeout(self, where: str, seconds: float) -> None:
        if self.on_timeout == "error":
            raise RewardTimeoutError(
                f"{where} did not finish within reward_model.scoring.timeout={self.timeout:g} s (stopped after "
                f"{seconds:.1f} s); the run stops because reward_model.scoring.on_timeout=error. Make the scorer "
                "faster, raise the timeout, or set on_timeout=zero to score such samples 0.")
        print(f"WARNING reward: {where} timed out after {seconds:.1f} s (reward_model.scoring.timeout="
              f"{self.timeout:g}); its process was killed and replaced, and the sample is scored 0 "
              "(reward_model.scoring.on_timeout=zero; counted in reward/timeouts)", file=sys.stderr, flush=True)


def sample_label(index: int, data_source: Any, fn: Callable[..., Any]) -> str:
    return f"sample {index} (data_source={data_source!r}) scored by {describe_fn(fn)}"


def fill_timed_out_fields(fields: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Extra fields for every row: a timed-out row (None) gets 0/False for the keys the other rows return as
    numbers (so means stay finite) and None for other keys; `score` is the 0 it was given."""
    template: dict[str, Any] = {}
    for row in fields:
        for key, value in (row or {}).items():
            if key not in template:
                template[key] = False if isinstance(value, bool) else 0.0 if _is_number(value) else None
    if "score" in template:
        template["score"] = 0.0
    return [dict(template) if row is None else row for row in fields]


def timed_extra_info(row_fields: list[dict[str, Any] | None], results: list[Any], limited: bool) -> dict[str, list]:
    """reward_extra_info for a batch: every row's fields (timed-out rows filled in); with a time limit, every row
    also says whether it timed out (TIMEOUT_FIELD), so all rounds and batches carry the same keys."""
    extra = ExtraInfoCollector()
    for fields, result in zip(fill_timed_out_fields(row_fields), results):
        if limited:
            fields[TIMEOUT_FIELD] = result is TIMED_OUT
        extra.add(fields)
    return extra.result(len(results))


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, str | bytes)
