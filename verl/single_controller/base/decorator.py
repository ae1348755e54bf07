"""`@register`: how a worker method is split across ranks (dispatch), where it runs (execute), and whether the
driver waits for it (blocking).

The decorator only records these choices on the function; a WorkerGroup reads them when it binds the method, and
the dispatch/collect functions in `dispatch.py` do the splitting and gathering.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Mapping

from verl.single_controller.base.dispatch import (
    DISPATCH_MODE_FN_REGISTRY,
    get_predefined_dispatch_fn,
    make_nd_compute_dataproto_dispatch_fn,
)
from verl.single_controller.base.modes import RANK_ZERO_COMPATIBLE, Dispatch, Execute, add_dispatch_member

__all__ = [
    "DISPATCH_MODE_FN_REGISTRY",
    "MAGIC_ATTR",
    "Dispatch",
    "Execute",
    "get_predefined_dispatch_fn",
    "get_registered_attrs",
    "make_nd_compute_dataproto_dispatch_fn",
    "register",
    "register_dispatch_mode",
    "registered_methods",
    "update_dispatch_mode",
]

# A name unlikely to collide with anything a user puts on a method.
MAGIC_ATTR = "_verl_register_attrs_5f3a"


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


def register_dispatch_mode(dispatch_mode_name: str, dispatch_fn: Callable, collect_fn: Callable) -> Dispatch:
    """Add ``Dispatch.<dispatch_mode_name>`` splitting arguments with ``dispatch_fn(worker_group, *args, **kwargs)
    -> (args, kwargs)`` and gathering with ``collect_fn(worker_group, outputs)``; returns the new member. Register
    it where the worker class is defined, so that the worker processes know the member too."""
    fns = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}
    _check_dispatch_mode(fns)
    if dispatch_mode_name in Dispatch.__members__:
        raise AssertionError(f"dispatch mode {dispatch_mode_name!r} already exists; use update_dispatch_mode to change it")
    mode = add_dispatch_member(dispatch_mode_name)
    DISPATCH_MODE_FN_REGISTRY[mode] = fns
    return mode


def update_dispatch_mode(dispatch_mode: Dispatch, dispatch_fn: Callable, collect_fn: Callable) -> None:
    """Replace the dispatch and collect functions of an existing mode (calls made afterwards use them)."""
    _check_dispatch_mode(dispatch_mode)
    if dispatch_mode not in DISPATCH_MODE_FN_REGISTRY:
        raise AssertionError(f"{dispatch_mode!r} has no dispatch functions to update; use register_dispatch_mode")
    fns = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}
    _check_dispatch_mode(fns)
    DISPATCH_MODE_FN_REGISTRY[dispatch_mode] = fns


def _check_execute_mode(execute_mode: Any, dispatch_mode: Any) -> None:
    if not isinstance(execute_mode, Execute):
        raise TypeError(f"register(execute_mode=...) must be an Execute member, got {execute_mode!r}")
    if execute_mode is Execute.RANK_ZERO and dispatch_mode not in RANK_ZERO_COMPATIBLE:
        raise ValueError(
            f"register(execute_mode=Execute.RANK_ZERO) runs rank 0 alone with the driver's arguments, so it cannot "
            f"split data with dispatch_mode={dispatch_mode!r}; use one of "
            f"{sorted(m.name for m in RANK_ZERO_COMPATIBLE)} or Execute.ALL"
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
