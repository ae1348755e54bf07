"""Symbolic answer equivalence through HuggingFace's `math_verify` package, when it is installed.

(This module's name mirrors upstream verl; `import math_verify` below is the third-party package.)
"""

from __future__ import annotations

import functools
import threading


@functools.lru_cache(maxsize=1)
def is_available() -> bool:
    try:
        import math_verify  # noqa: F401
    except ImportError:
        return False
    return True


def _timeout_seconds(requested: int) -> int | None:
    # math_verify times out with SIGALRM, which only the main thread may use; elsewhere run without a limit.
    return requested if threading.current_thread() is threading.main_thread() else None


def verify_equivalent(answer: str, ground_truth: str, timeout_seconds: int = 5) -> bool:
    """True when math_verify parses both `\\boxed{...}` expressions and finds them equal.

    Raises ImportError when math_verify is missing; callers check `is_available()` first.
    """
    from math_verify import parse, verify

    timeout = _timeout_seconds(timeout_seconds)
    gold = parse(f"\\boxed{{{ground_truth}}}", parsing_timeout=timeout)
    pred = parse(f"\\boxed{{{answer}}}", parsing_timeout=timeout)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=timeout))


def compute_score(model_output: str, ground_truth: str, timeout_score: float = 0.0) -> float:
    """1.0 when the last boxed answer in `model_output` is equivalent to `ground_truth`, else 0.0.

    `timeout_score` is kept for upstream's signature: math_verify reports a timed-out comparison as unequal.
    """
    from verl.rewards.math_normalize import extract_boxed_answer

    answer = extract_boxed_answer(model_output)
    if answer is None:
        return 0.0
    return 1.0 if verify_equivalent(answer, ground_truth) else 0.0
