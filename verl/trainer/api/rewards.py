"""Python callables -> the scoring function the reward managers call (the same slot custom_reward_function.path
fills), so timeouts, the scoring processes, per-sample errors and reward metrics behave as for a reward file.

Accepted `reward_fn` forms:
- a per-sample function `f(data_source, solution_str, ground_truth, extra_info)` -> float or dict with "score"
- a batched function `f(data_sources, solution_strs, ground_truths, extra_infos)` -> list (upstream's batch
  reward manager; reward_model.reward_manager is switched from the default naive to batch for it)
- a list of functions and `(function, weight)` pairs (a bare function weighs 1.0): the reward is the weighted sum,
  and each function's own score is logged as reward_extra/<name>/mean

Lambdas and closures work: the scoring processes and Ray tasks receive them through cloudpickle.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verl.trainer.config import ConfigError
from verl.trainer.ppo.reward import ship_module_by_value
from verl.workers.reward_manager import get_reward_manager_cls
from verl.workers.reward_manager.scoring import unpack_score

PER_SAMPLE = ("data_source", "solution_str", "ground_truth", "extra_info")
BATCHED = ("data_sources", "solution_strs", "ground_truths", "extra_infos")


def fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _binds(signature: inspect.Signature, params: Sequence[str], kwargs: dict) -> bool:
    try:
        signature.bind(**{name: None for name in params}, **kwargs)
    except TypeError:
        return False
    return True


def is_batched(fn: Callable[..., Any], reward_kwargs: dict | None = None) -> bool:
    """Whether fn takes the batched arguments; TypeError naming fn when it takes neither form by keyword."""
    kwargs = dict(reward_kwargs or {})
    if not callable(fn):
        raise TypeError(f"reward_fn: {fn!r} is not callable; pass a function (or a list of functions / "
                        "(function, weight) pairs)")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False  # no signature to read (some builtins): scored per sample, the first call will tell
    if _binds(signature, PER_SAMPLE, kwargs):
        return False
    if _binds(signature, BATCHED, kwargs):
        return True
    extra = f", {', '.join(kwargs)}" if kwargs else ""
    raise TypeError(
        f"reward_fn {fn_name(fn)}{signature} takes neither the per-sample arguments ({', '.join(PER_SAMPLE)}{extra}) "
        f"nor the batched ones ({', '.join(BATCHED)}{extra}) by keyword. Rename its parameters to one of these "
        "forms (or add **kwargs)."
    )


def ship_by_value(fn: Callable[..., Any]) -> None:
    """Functions pickle by reference to their module; a module the scoring processes or Ray workers cannot import
    (a test file, a script imported by path) has its code sent by value instead. __main__ already is."""
    target = getattr(fn, "func", fn)  # functools.partial
    module_name = getattr(target, "__module__", None)
    module = sys.modules.get(module_name or "")
    if module is None or module_name == "__main__" or module_name.split(".")[0] in ("verl", "builtins"):
        return
    path = os.path.abspath(getattr(module, "__file__", None) or "")
    installed = {os.path.abspath(p) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                              sysconfig.get_paths()["stdlib"])}
    if not path or any(path.startswith(root + os.sep) for root in installed):
        return
    ship_module_by_value(module)


@dataclass(frozen=True)
class Part:
    fn: Callable[..., Any]
    weight: float
    batched: bool
    name: str


def _score_of(result: Any, index: int, data_source: Any, part: Part) -> float:
    return unpack_score(result, index, data_source, part.fn)[0]


class WeightedReward:
    """Weighted sum of several scoring functions, called as one. With any batched part the sum is batched (the
    per-sample parts run over the batch in a loop); the result carries each part's score under its name."""

    def __init__(self, parts: Sequence[Part]) -> None:
        self.parts = list(parts)
        self.batched = any(part.batched for part in self.parts)
        self.__name__ = "weighted(" + ", ".join(f"{p.weight:g}*{p.name}" for p in self.parts) + ")"

    def _combine(self, per_part: list[float]) -> dict[str, float]:
        out = {"score": float(sum(p.weight * s for p, s in zip(self.parts, per_part)))}
        out.update({p.name: s for p, s in zip(self.parts, per_part)})
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.batched:
            return self._call_batched(**kwargs)
        return self._call_one(**kwargs)

    def _call_one(self, data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> dict[str, float]:
        scores = [_score_of(p.fn(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                                 extra_info=extra_info, **kwargs), 0, data_source, p) for p in self.parts]
        return self._combine(scores)

    def _call_batched(self, data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                      extra_infos: Sequence[Any], **kwargs: Any) -> list[dict[str, float]]:
        columns: list[list[float]] = []
        for part in self.parts:
            if part.batched:
                results = list(part.fn(data_sources=data_sources, solution_strs=solution_strs,
                                       ground_truths=ground_truths, extra_infos=extra_infos, **kwargs))
                if len(results) != len(solution_strs):
                    raise ValueError(f"reward_fn {part.name} returned {len(results)} scores for "
                                     f"{len(solution_strs)} samples")
            else:
                results = [part.fn(data_source=s, solution_str=r, ground_truth=g, extra_info=e, **kwargs)
                           for s, r, g, e in zip(data_sources, solution_strs, ground_truths, extra_infos)]
            columns.append([_score_of(res, i, data_sources[i], part) for i, res in enumerate(results)])
        return [self._combine([column[i] for column in columns]) for i in range(len(solution_strs))]


def _parts(reward_fn: Any, reward_kwargs: dict) -> list[Part]:
    items = list(reward_fn) if isinstance(reward_fn, list | tuple) and not _is_pair(reward_fn) else [reward_fn]
    if not items:
        raise TypeError("reward_fn=[] gives no scoring function; pass a function, or leave reward_fn out to use the "
                        "built-in rules")
    parts, names = [], set()
    for i, item in enumerate(items):
        fn, weight = item if _is_pair(item) else (item, 1.0)
        if not isinstance(weight, int | float) or isinstance(weight, bool):
            raise TypeError(f"reward_fn[{i}]: the weight of {fn_name(fn)} must be a number, got {weight!r}")
        # the name keys the part's score in reward_extra/<name>/mean: a lambda's or a repeated name gets its index
        name = getattr(fn, "__name__", None) or type(fn).__name__
        name = f"reward_{i}" if name == "<lambda>" or name in names or name == "score" else name
        names.add(name)
        parts.append(Part(fn, float(weight), is_batched(fn, reward_kwargs), name))
    return parts


def _is_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and callable(item[0]) and not callable(item[1])


@dataclass(frozen=True)
class RewardPlan:
    compute_score: Callable[..., Any]
    batched: bool


def adapt_reward(reward_fn: Any, reward_kwargs: dict | None = None) -> RewardPlan:
    """The scoring function for the managers, with custom_reward_function.reward_kwargs bound in (as for a file)."""
    kwargs = dict(reward_kwargs or {})
    parts = _parts(reward_fn, kwargs)
    for part in parts:
        ship_by_value(part.fn)
    if len(parts) == 1 and parts[0].weight == 1.0:
        fn, batched = parts[0].fn, parts[0].batched
    else:
        fn = WeightedReward(parts)
        batched = fn.batched
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    return RewardPlan(fn, batched)


def plug_reward(cfg: Any, plan: RewardPlan) -> None:
    """Check the composed config can take the callable and pick the manager for its form (in place)."""
    path = cfg.custom_reward_function.path
    if path:
        raise ConfigError(f"reward_fn= and custom_reward_function.path={path!r} are both given; pass one of them "
                          "(drop the path to score with the callable, or drop reward_fn to use the file).")
    manager = cfg.reward_model.reward_manager
    if plan.batched and manager == "naive":  # the default: upstream's batch manager takes batched functions
        cfg.reward_model.reward_manager = "batch"
        manager = "batch"
    try:
        params = tuple(get_reward_manager_cls(manager).compute_score_params)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    wanted = BATCHED if plan.batched else PER_SAMPLE
    if params != wanted:
        form = "batched" if plan.batched else "per-sample"
        raise ConfigError(f"reward_fn is a {form} function ({', '.join(wanted)}) but reward_model.reward_manager="
                          f"{manager} calls its compute_score with ({', '.join(params)}); pick a manager that takes "
                          f"a {form} function (naive for per-sample, batch for batched) or change the function.")
