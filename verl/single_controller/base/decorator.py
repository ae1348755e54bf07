"""`@register`: how a worker method is split across ranks (dispatch), where it runs (execute), and whether the
driver waits for it (blocking).

The decorator only records these choices on the function; a WorkerGroup reads them when it binds the method, and
the dispatch/collect functions in `dispatch.py` do the splitting and gathering.
"""

from __future__ import annotations

import functools
import inspect
from enum import Enum
from typing import Any, Callable, Mapping

# A name unlikely to collide with anything a user puts on a method.
MAGIC_ATTR = "_verl_register_attrs_5f3a"


class Dispatch(Enum):
    """How the driver's arguments reach the ranks and how their results come back.

    RANK_ZERO: same args to every rank (so collectives inside the method still line up); rank 0's result returned.
    ONE_TO_ALL: same args to every rank; the list of per-rank results returned.
    ALL_TO_ALL: arguments that are lists of length world_size are split one element per rank, anything else is
        sent to every rank as is; the list of per-rank results returned.
    DP_COMPUTE: every argument is already a list of length world_size (element i goes to rank i); list returned.
    DP_COMPUTE_PROTO: every argument is a DataProto / DataProtoFuture, padded to a multiple of world_size and
        chunked; the per-rank DataProtos are concatenated and the padding removed.
    DP_COMPUTE_PROTO_WITH_FUNC: the first argument is a function sent to every rank; the rest as DP_COMPUTE_PROTO.
    DP_COMPUTE_METRIC: split as DP_COMPUTE_PROTO; the list of per-rank results (e.g. metric dicts) returned.
    """

    RANK_ZERO = "rank_zero"
    ONE_TO_ALL = "one_to_all"
    ALL_TO_ALL = "all_to_all"
    DP_COMPUTE = "dp_compute"
    DP_COMPUTE_PROTO = "dp_compute_proto"
    DP_COMPUTE_PROTO_WITH_FUNC = "dp_compute_proto_with_func"
    DP_COMPUTE_METRIC = "dp_compute_metric"


class Execute(Enum):
    """Which ranks run the method: every rank, or rank 0 alone (with the driver's arguments unchanged)."""

    ALL = "all"
    RANK_ZERO = "rank_zero"


# Execute.RANK_ZERO hands rank 0 the driver's raw arguments, which is only meaningful when nothing is split.
_RANK_ZERO_COMPATIBLE = {Dispatch.RANK_ZERO, Dispatch.ONE_TO_ALL, Dispatch.ALL_TO_ALL}


def _check_dispatch_mode(dispatch_mode: Any) -> None:
    if isinstance(dispatch_mode, Dispatch):
        return
    if isinstance(dispatch_mode, Mapping):
        missing = [k for k in ("dispatch_fn", "collect_fn") if not callable(dispatch_mode.get(k))]
        if missing:
            raise ValueError(
                f"register(dispatch_mode=...) got a dict without callable {missing}; a custom dispatch mode is "
                "{'dispatch_fn': f(worker_group, *args, **kwargs) -> (args, kwargs), "
                "'collect_fn': g(worker_group, outputs) -> result}"
            )
        return
    raise TypeError(
        f"register(dispatch_mode=...) must be a Dispatch member or a dict with dispatch_fn/collect_fn, "
        f"got {dispatch_mode!r}"
    )


def _check_execute_mode(execute_mode: Any, dispatch_mode: Any) -> None:
    if not isinstance(execute_mode, Execute):
        raise TypeError(f"register(execute_mode=...) must be an Execute member, got {execute_mode!r}")
    if execute_mode is Execute.RANK_ZERO and dispatch_mode not in _RANK_ZERO_COMPATIBLE:
        raise ValueError(
            f"register(execute_mode=Execute.RANK_ZERO) runs rank 0 alone with the driver's arguments, so it cannot "
            f"split data with dispatch_mode={dispatch_mode!r}; use one of "
            f"{sorted(m.name for m in _RANK_ZERO_COMPATIBLE)} or Execute.ALL"
        )


def _materialize_futures(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Turn DataProtoFuture arguments into DataProtos inside the worker, so a non-blocking call's output can be
    passed straight to the next call without the driver waiting."""
    from verl.protocol import DataProtoFuture

    args = tuple(a.get() if isinstance(a, DataProtoFuture) else a for a in args)
    kwargs = {k: (v.get() if isinstance(v, DataProtoFuture) else v) for k, v in kwargs.items()}
    return args, kwargs


def register(
    dispatch_mode: Dispatch | Mapping[str, Callable] = Dispatch.ALL_TO_ALL,
    execute_mode: Execute = Execute.ALL,
    blocking: bool = True,
    materialize_futures: bool = True,
) -> Callable[[Callable], Callable]:
    """Mark a Worker method as callable on the whole worker group.

    Args:
        dispatch_mode: a `Dispatch` member, or a dict {"dispatch_fn", "collect_fn"} for a custom split.
        execute_mode: `Execute.ALL` (every rank) or `Execute.RANK_ZERO`.
        blocking: when False the driver gets futures back at once (a DataProtoFuture for DataProto results, else
            Ray ObjectRefs) and can hand them to the next call.
        materialize_futures: resolve DataProtoFuture arguments inside the worker before the method runs.
    """
    _check_dispatch_mode(dispatch_mode)
    _check_execute_mode(execute_mode, dispatch_mode)

    def decorator(func: Callable) -> Callable:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def wrapper(*args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize_futures(args, kwargs)
                return await func(*args, **kwargs)

        else:

            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize_futures(args, kwargs)
                return func(*args, **kwargs)

        setattr(
            wrapper,
            MAGIC_ATTR,
            {"dispatch_mode": dispatch_mode, "execute_mode": execute_mode, "blocking": blocking},
        )
        return wrapper

    return decorator


def get_registered_attrs(obj: Any) -> dict | None:
    """The @register settings of a function/method, or None if it was not registered."""
    return getattr(obj, MAGIC_ATTR, None)


def registered_methods(cls: type) -> dict[str, dict]:
    """Every @register-ed method of a class (including inherited ones), name -> settings."""
    found: dict[str, dict] = {}
    for name in dir(cls):
        if name.startswith("__"):
            continue
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        attrs = get_registered_attrs(attr) or get_registered_attrs(getattr(attr, "__func__", None))
        if attrs is not None:
            found[name] = attrs
    return found
