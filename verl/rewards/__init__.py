"""Rule-based rewards, chosen by a row's `data_source`.

`default_compute_score(data_source, solution_str, ground_truth, extra_info)` is what the reward managers call
when the user gives no `custom_reward_function.path`. Add a data source with `register_data_source`.

Code-contest data sources (`CODE_DATA_SOURCES`) are scored by running their tests: in a SandboxFusion sandbox when
the reward managers pass a `sandbox_fusion_url` (from `reward_model.sandbox_fusion.url`), else on this machine in
a confined child process (`verl.rewards.prime_code`), as upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.rewards.result import RewardResult

ScoreFn = Callable[[str, Any, dict | None], float | dict[str, Any] | RewardResult]

_SCORERS_BY_NAME: dict[str, ScoreFn] = {}
_SCORERS_BY_PREFIX: dict[str, ScoreFn] = {}


def register_data_source(*names: str, prefix: bool = False) -> Callable[[ScoreFn], ScoreFn]:
    """Route these data_source values (or every value starting with them, when `prefix`) to the function."""
    table = _SCORERS_BY_PREFIX if prefix else _SCORERS_BY_NAME

    def decorator(fn: ScoreFn) -> ScoreFn:
        for name in names:
            if name in table and table[name] is not fn:
                raise ValueError(f"reward data_source {name!r} is already registered to {table[name].__name__}")
            table[name] = fn
        return fn

    return decorator


@register_data_source("openai/gsm8k")
def _score_gsm8k(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    from verl.rewards import gsm8k

    return gsm8k.compute_score(solution_str, ground_truth)


# Upstream's NuminaMath subsets (PRIME's data) are scored by PRIME's math reward: the final answer taken from the
# text (boxed or not), normalized, then checked symbolically (math_verify) when installed.
NUMINA_DATA_SOURCES = (
    "numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12",
    "numina_olympiads",
)  # fmt: skip


@register_data_source(*NUMINA_DATA_SOURCES)
def _score_prime_math(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    from verl.rewards import prime_math

    is_correct, _format_ok, _answer = prime_math.compute_score(solution_str, ground_truth)
    return float(is_correct)


@register_data_source("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
def _score_math(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    from verl.rewards import math_reward

    return math_reward.compute_score(solution_str, ground_truth)


@register_data_source("math_dapo")
@register_data_source("aime", prefix=True)
def _score_math_dapo(solution_str: str, ground_truth: Any, extra_info: dict | None) -> dict[str, Any]:
    from verl.rewards import math_dapo

    return math_dapo.compute_score(solution_str, ground_truth)


@register_data_source("hiyouga/geometry3k", "geometry3k")
def _score_geo3k(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    from verl.rewards import geo3k

    return geo3k.compute_score(solution_str, ground_truth)


@register_data_source("visual_count")
def _score_visual_count(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    from verl.rewards import geo3k

    return geo3k.count_score(solution_str, ground_truth)


@register_data_source("countdown")
def _score_countdown(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    from verl.rewards import countdown

    return countdown.compute_score(solution_str, ground_truth)


@register_data_source("arithmetic")
def _score_arithmetic(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    from verl.rewards import arithmetic

    return arithmetic.compute_score(solution_str, ground_truth)


# Upstream's code-contest data sources: the ground truth is {"inputs": [...], "outputs": [...]} stdin/stdout tests.
CODE_DATA_SOURCES = ("codecontests", "apps", "codeforces", "taco")


def _score_code(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    sandbox_fusion_url: str | None = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: int = 1024,
    **_: Any,
) -> float:
    if sandbox_fusion_url:
        from verl.rewards import sandbox_fusion

        score, _metadata = sandbox_fusion.compute_score(
            sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, solution_str, ground_truth, continuous=True
        )
        return float(score)
    from verl.rewards import prime_code

    # the semaphore bounds concurrent executions whichever way they run
    if concurrent_semaphore is None:
        score, _metadata = prime_code.compute_score(solution_str, ground_truth, continuous=True,
                                                    memory_limit_mb=memory_limit_mb)  # fmt: skip
    else:
        with concurrent_semaphore:
            score, _metadata = prime_code.compute_score(solution_str, ground_truth, continuous=True,
                                                        memory_limit_mb=memory_limit_mb)  # fmt: skip
    return float(score)


def known_data_sources() -> list[str]:
    names = sorted([*_SCORERS_BY_NAME, *CODE_DATA_SOURCES])
    return names + sorted(f"{prefix}*" for prefix in _SCORERS_BY_PREFIX)


def _find_scorer(data_source: str) -> ScoreFn:
    if data_source in _SCORERS_BY_NAME:
        return _SCORERS_BY_NAME[data_source]
    for prefix, fn in _SCORERS_BY_PREFIX.items():
        if data_source.startswith(prefix):
            return fn
    raise NotImplementedError(
        f"No default reward function for data_source={data_source!r}. Known data sources: "
        f"{', '.join(known_data_sources())}. Write your own compute_score(data_source, solution_str, "
        "ground_truth, extra_info) and set custom_reward_function.path=<file.py> (and "
        "custom_reward_function.name=<function>, default 'compute_score')."
    )


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    **kwargs: Any,
) -> float | dict[str, Any] | RewardResult:
    """The score of one response: a float, or a dict with at least "score" (or a RewardResult, from a registered
    scorer) for scorers that report more.

    Upstream's reward managers also pass sandbox settings as keyword arguments (`sandbox_fusion_url`,
    `concurrent_semaphore`, `memory_limit_mb`); only the code-contest data sources use them.
    """
    if str(data_source) in CODE_DATA_SOURCES:
        return _score_code(str(data_source), solution_str, ground_truth, **kwargs)
    result = _find_scorer(str(data_source))(solution_str, ground_truth, extra_info)
    if isinstance(result, dict | RewardResult):
        return result
    if isinstance(result, int | float | bool):
        return float(result)
    raise TypeError(
        f"reward for data_source={data_source!r} returned {type(result).__name__}, expected a number, a dict or "
        "a RewardResult"
    )


# Upstream's older name, still used in user code.
_default_compute_score = default_compute_score

__all__ = [
    "default_compute_score", "register_data_source", "known_data_sources", "CODE_DATA_SOURCES", "NUMINA_DATA_SOURCES",
]  # fmt: skip
