"""Rollout tracing (upstream's ``verl.utils.rollout_trace``; ``actor_rollout_ref.rollout.trace.*``).

``RolloutTraceConfig.init(project_name, experiment_name, backend, token2text)`` picks a backend once per process:

- ``mlflow``: each traced call is an MLflow span (``mlflow.start_span``), inputs, outputs and the trajectory's
  attributes attached, under the experiment ``project_name`` in the tracking store the run's tracker uses
  (``$MLFLOW_TRACKING_URI``, else the local ``file:`` store); nothing leaves the machine by default;
- ``weave``: each traced call is a Weave call (``client.create_call`` / ``finish_call``), where weave is installed;
- ``None`` / ``"dummy"``: tracing is off and the decorated functions run untouched.

``rollout_trace_attr(sample_index, step, rollout_n, ...)`` marks what follows as one trajectory (a root span for
mlflow, attributes for weave); ``trace=False`` turns tracing off inside it (``max_samples_per_step_per_worker``).
``rollout_trace_op`` decorates an async or plain method whose calls become child spans, named
``<Class>.<method>``, with the call's arguments (``self`` left out) as inputs. With ``token2text`` an output that
carries ``prompt_ids`` / ``response_ids`` also gets their decoded text, when the instance has a ``tokenizer``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["RolloutTraceConfig", "rollout_trace_attr", "rollout_trace_op", "get_trajectory_info", "TRACE_BACKENDS"]

TRACE_BACKENDS = ("weave", "mlflow")
_ATTRS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("verl_rollout_trace_attrs",
                                                                              default=None)


class RolloutTraceConfig:
    """The process's tracing settings (a singleton: ``init`` once, ``reset`` in tests)."""

    _instance: RolloutTraceConfig | None = None

    def __init__(self) -> None:
        self.backend: str | None = None
        self.client: Any = None
        self.token2text = False
        self.project_name: str | None = None
        self.experiment_name: str | None = None
        self._initialized = False

    @classmethod
    def get_instance(cls) -> RolloutTraceConfig:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    @classmethod
    def init(cls, project_name: str, experiment_name: str, backend: str | None, token2text: bool = False,
             tracking_uri: str | None = None) -> None:
        """Set up ``backend`` (first call wins, as upstream: later calls in the process change nothing).
        ``tracking_uri`` (mlflow): the store; default ``$MLFLOW_TRACKING_URI``, else ``file:./mlruns``."""
        config = cls.get_instance()
        if config._initialized:
            return
        config.project_name, config.experiment_name = project_name, experiment_name
        config.token2text = bool(token2text)
        if backend in (None, "dummy"):
            config.backend = None
        elif backend == "weave":
            try:
                import weave
            except ImportError as err:
                raise ImportError("actor_rollout_ref.rollout.trace.backend=weave needs the weave package (`pip "
                                  "install weave`); or use trace.backend=mlflow, which is installed") from err
            config.client = weave.init(project_name)
            config.backend = "weave"
        elif backend == "mlflow":
            import mlflow

            uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
            if not uri:  # the local file store mlflow 3 keeps for clients without SQLAlchemy, as the tracker's
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
                uri = "file:" + os.path.abspath("mlruns")
            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(project_name)
            config.client = mlflow
            config.backend = "mlflow"
        else:
            raise ValueError(f"actor_rollout_ref.rollout.trace.backend={backend!r}: use weave, mlflow or null")
        config._initialized = True

    @classmethod
    def get_backend(cls) -> str | None:
        return cls.get_instance().backend

    @classmethod
    def get_client(cls) -> Any:
        return cls.get_instance().client

    @classmethod
    def enable_token2text(cls) -> bool:
        return cls.get_instance().token2text

    @classmethod
    def reset(cls) -> None:
        cls._instance = None


@contextlib.contextmanager
def rollout_trace_attr(sample_index: Any = None, step: Any = None, rollout_n: Any = None,
                       name: str = "rollout_trace", validate: bool = False, trace: bool = True) -> Iterator[None]:
    """The calls inside belong to one trajectory (its attributes go on every span); ``trace=False``: none traced."""
    config = RolloutTraceConfig.get_instance()
    attrs = {"step": step, "sample_index": sample_index, "rollout_n": rollout_n, "validate": validate,
             "experiment_name": config.experiment_name}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    token = _ATTRS.set({**attrs, "_trace": bool(trace)})
    try:
        if not trace or config.backend is None:
            yield
        elif config.backend == "mlflow":
            with config.client.start_span(name=name) as span:
                span.set_attributes(attrs)
                yield
        else:  # weave
            import weave

            with weave.attributes(attrs):
                yield
    finally:
        _ATTRS.reset(token)


def _safe(value: Any, depth: int = 0) -> Any:
    """A JSON-able view of a traced value: containers walked, dataclasses as dicts, anything else as its text
    (cut at 4000 characters), so a span never fails on what the traced call happened to take or return."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth > 4:
        return str(value)[:4000]
    if isinstance(value, dict):
        return {str(k): _safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(v, depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _safe(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    return str(value)[:4000]


def _inputs(fn: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    inputs = dict(bound.arguments)
    inputs.pop("self", None)
    extra = inputs.pop("kwargs", None) if "kwargs" in inspect.signature(fn).parameters else None
    if isinstance(extra, dict):  # **kwargs: their names, as the call spelled them
        inputs.update(extra)
    return {k: _safe(v) for k, v in inputs.items()}


def _with_text(instance: Any, output: Any) -> Any:
    tokenizer = getattr(instance, "tokenizer", None)
    if tokenizer is None or not RolloutTraceConfig.enable_token2text():
        return output
    texts = {}
    for key in ("prompt_ids", "response_ids"):
        ids = getattr(output, key, None)
        if ids is not None:
            texts[key.replace("_ids", "_text")] = tokenizer.decode(list(ids), skip_special_tokens=False)
    return {"output": output, **texts} if texts else output


def _tracing() -> bool:
    attrs = _ATTRS.get()
    return RolloutTraceConfig.get_backend() is not None and (attrs is None or attrs.get("_trace", True))


class _Span:
    """One traced call on the configured backend: ``finish(output=...)`` or ``finish(exception=...)``."""

    def __init__(self, op: str, inputs: dict[str, Any]) -> None:
        config = RolloutTraceConfig.get_instance()
        self.backend, self.client = config.backend, config.client
        attrs = {k: v for k, v in (_ATTRS.get() or {}).items() if not k.startswith("_")}
        if self.backend == "weave":
            self.handle = self.client.create_call(op=op, inputs=inputs, attributes=attrs)
        else:
            self.context = self.client.start_span(name=op)
            self.handle = self.context.__enter__()
            self.handle.set_inputs(inputs)
            self.handle.set_attributes(attrs)

    def finish(self, output: Any = None, exception: BaseException | None = None) -> None:
        if self.backend == "weave":
            if exception is not None:
                self.client.finish_call(self.handle, exception=exception)
            else:
                self.client.finish_call(self.handle, output=output)
            return
        if exception is None:
            self.handle.set_outputs(output)
            self.context.__exit__(None, None, None)
        else:
            self.context.__exit__(type(exception), exception, exception.__traceback__)


def rollout_trace_op(fn: Callable) -> Callable:
    """Trace each call of the decorated (async or plain) method as ``<Class>.<method>`` when tracing is on."""

    def op_name(args: tuple) -> str:
        owner = type(args[0]).__name__ if args else ""
        return f"{owner}.{fn.__name__}" if owner else fn.__name__

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            if not _tracing():
                return await fn(*args, **kwargs)
            span = _Span(op_name(args), _inputs(fn, args, kwargs))
            try:
                result = await fn(*args, **kwargs)
            except BaseException as err:
                span.finish(exception=err)
                raise
            span.finish(output=_safe(_with_text(args[0] if args else None, result)))
            return result

        return traced_async

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        if not _tracing():
            return fn(*args, **kwargs)
        span = _Span(op_name(args), _inputs(fn, args, kwargs))
        try:
            result = fn(*args, **kwargs)
        except BaseException as err:
            span.finish(exception=err)
            raise
        span.finish(output=_safe(_with_text(args[0] if args else None, result)))
        return result

    return traced


def get_trajectory_info(step: int, index: Any, validate: bool) -> list[dict[str, Any]]:
    """One {step, sample_index, rollout_n, validate} per row: rollout_n counts the earlier rows of the same index."""
    seen: dict[Any, int] = {}
    info = []
    for sample_index in list(index):
        n = seen.get(sample_index, 0)
        seen[sample_index] = n + 1
        info.append({"step": step, "sample_index": sample_index, "rollout_n": n, "validate": validate})
    return info
