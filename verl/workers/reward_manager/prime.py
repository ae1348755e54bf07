"""PRIME's reward manager: every response verified in parallel scoring processes, each with its own deadline.

For slow or hang-prone verifiers (code execution, heavy symbolic checks). It is the naive manager's scoring with
a time limit that cannot be switched off and upstream's `num_processes` / `timeout` arguments: a sample whose
verification runs past `timeout` seconds (counted from when a process picks it up, not from the batch's start)
has its process killed and replaced and is scored 0 (or stops the run with on_timeout="error"). Dict results
(the built-in math_dapo/aime scorers) keep their extra fields; a timed-out row gets 0/False/None in them. A
scorer that returns None is refused, as in the other managers, not taken for a timeout.
"""

from __future__ import annotations

from typing import Any

from verl.workers.reward_manager.abstract import RawRewardFn
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register
from verl.workers.reward_manager.timed_scoring import DEFAULT_TIMEOUT


@register("prime")
class PrimeRewardManager(NaiveRewardManager):
    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None = None,
        reward_fn_key: str = "data_source",
        num_processes: int | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        on_timeout: str = "zero",
        **reward_kwargs: Any,
    ) -> None:
        if not timeout:
            raise ValueError(
                f"reward_model.reward_manager=prime scores in processes with a deadline; timeout={timeout!r} turns "
                "that off. Set reward_model.scoring.timeout to a number of seconds, or use "
                "reward_model.reward_manager=naive to score in the driver without a limit."
            )
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout=timeout,
                         on_timeout=on_timeout, num_processes=num_processes, **reward_kwargs)
        self.num_processes = self.scorer.num_processes
        self.timeout = self.scorer.timeout
