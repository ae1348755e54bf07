"""Turning a composed (Hydra/OmegaConf) config into typed dataclasses, checking every key on the way.

The config dataclasses (verl.workers.config, verl.trainer.config; all BaseConfig) are plain declarations: field types say what a key holds, field metadata
says which values are allowed (`choice`, `at_least`). `build_config` walks the config and the dataclass
together, so every problem is reported with its full dotted key, all problems at once.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.base_config import BaseConfig
from verl.utils.config_keys import unknown_key_message

T = TypeVar("T")

__all__ = ["BaseConfig", "MutableConfig", "build_config", "schema_keys"]  # BaseConfig: verl.base_config's, for the schemas

TARGET_KEY = "_target_"  # upstream's yaml names each section's class; checked against (or choosing) the schema


@dataclass
class MutableConfig(BaseConfig):
    """A trainer-level section upstream keeps untyped (a plain, writable DictConfig: data, trainer, reward_model,
    ...): typed and checked here like the rest, and writable as there. The sections upstream types (the worker
    configs, algorithm) are BaseConfig: frozen but for their `_mutable_fields`."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


# ---------------------------------------------------------------- field helpers


def choice(default: Any, choices: Sequence[str], registered: Callable[[str], bool] | None = None) -> Any:
    """A string field limited to `choices`; `registered(name)` may accept names added to a registry at run time."""
    return field(default=default, metadata={"choices": tuple(choices), "registered": registered})


def at_least(default: Any, minimum: float) -> Any:
    return field(default=default, metadata={"min": minimum})


def list_field(default: list, choices: Sequence[str] | None = None) -> Any:
    meta = {"each_choices": tuple(choices)} if choices else {}
    return field(default_factory=lambda: list(default), metadata=meta)


def dict_field(default: dict | None = None) -> Any:
    return field(default_factory=lambda: copy.deepcopy(default or {}))


@dataclass(frozen=True)
class Refusal:
    """Why a key (or one value of it) cannot be honoured in this build, and what the user should do instead."""

    why: str
    todo: str


def _with_meta(spec: Any, **extra: Any) -> Any:
    """`spec` (a plain default or a field(...) from the helpers above) with more metadata."""
    if not isinstance(spec, dataclasses.Field):
        return field(default=spec, metadata=extra)
    meta = {**spec.metadata, **extra}
    if spec.default_factory is not dataclasses.MISSING:
        return field(default_factory=spec.default_factory, metadata=meta)
    return field(default=spec.default, metadata=meta)


def refused(spec: Any, why: str, todo: str, follows: str | None = None) -> Any:
    """A key this build does not implement: its default is accepted, any other value stops the run before Ray
    starts, with the key's dotted name, `why` and `todo`. Never accepted and ignored.

    `follows` names the key whose value the yaml interpolates into this one (`gen_batch_size:
    ${data.train_batch_size}`): that value is the accepted one, so changing the followed key alone is fine.
    On a section (a dataclass field) every leaf must keep its default.
    """
    default = spec.default if isinstance(spec, dataclasses.Field) else spec
    if isinstance(spec, dataclasses.Field) and spec.default_factory is not dataclasses.MISSING:
        default = spec.default_factory()
    return _with_meta(spec, refused=Refusal(why, todo), refused_default=default, refused_follows=follows)


def refused_values(spec: Any, values: Mapping[Any, Refusal]) -> Any:
    """A key whose other values work but these are refused (e.g. `rollout.name=sglang`); for a list, any entry."""
    return _with_meta(spec, refused_values=dict(values))


def iter_refusals(cls: type, prefix: str = "") -> Iterator[tuple[str, Any, Refusal]]:
    """(dotted key, the value refused — or `None` for "anything but the default" — , refusal) for a schema."""
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        if "refused" in f.metadata:
            yield path, None, f.metadata["refused"]
        for value, refusal in f.metadata.get("refused_values", {}).items():
            yield path, value, refusal
        tp = _strip_optional(hints[f.name])
        if dataclasses.is_dataclass(tp) and "refused" not in f.metadata:
            yield from iter_refusals(tp, path + ".")


@dataclass(frozen=True)
class RefusedKey:
    """One row of the refusal table (docs/config.md): what is refused and what is still accepted."""

    key: str
    refused: str  # "any other value", or the refused value
    accepted: str
    why: str
    todo: str


def refusal_table(cls: type, prefix: str = "") -> list[RefusedKey]:
    """`iter_refusals` with the accepted value spelled out, for the docs and the audit."""
    rows = []
    fields = {}
    for key, value, refusal in iter_refusals(cls, prefix):
        if key not in fields:
            fields[key] = _field_at(cls, key[len(prefix):])
        meta = fields[key].metadata
        if value is None:
            follows = meta.get("refused_follows")
            default = meta["refused_default"]
            if follows:
                accepted = f"${{{follows}}} (its default)"
            elif dataclasses.is_dataclass(default):
                accepted = "every key below at its default"
            else:
                accepted = f"{_yaml_text(default)} (its default)"
            rows.append(RefusedKey(key, "any other value", accepted, refusal.why, refusal.todo))
        else:
            rows.append(RefusedKey(key, _yaml_text(value), "other values", refusal.why, refusal.todo))
    return rows


def _field_at(cls: type, dotted: str) -> dataclasses.Field:
    *parents, leaf = dotted.split(".")
    for part in parents:
        cls = _strip_optional(type_hints(cls)[part])
    return next(f for f in dataclasses.fields(cls) if f.name == leaf)


def _yaml_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# ---------------------------------------------------------------- schema walking


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def schema_keys(cls: type, prefix: str = "") -> tuple[frozenset[str], frozenset[str]]:
    """(every dotted key the schema defines, sections and leaves alike; the free-form keys among them)."""
    keys: set[str] = set()
    free: set[str] = set()
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        keys.add(path)
        tp = _strip_optional(hints[f.name])
        if dataclasses.is_dataclass(tp):
            sub_keys, sub_free = schema_keys(tp, path + ".")
            keys |= sub_keys
            free |= sub_free
        elif tp is Any or typing.get_origin(tp) is dict or tp is dict:
            # User-chosen keys (HF config overrides, engine kwargs, ray.init kwargs): nothing below is checked.
            free.add(path)
    return frozenset(keys), frozenset(free)


def _strip_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if _is_union(tp) and len(args) == 1:
        return args[0]
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


# ---------------------------------------------------------------- building


@dataclass
class BuildResult:
    config: Any
    problems: list[str]
    # Keys whose bare scalar was wrapped into a one-element list (trainer.logger=console -> [console]).
    normalised: dict[str, list]


def build_config(cls: type[T], node: Any, root: str = "") -> BuildResult:
    """Build `cls` from a DictConfig/dict, collecting problems instead of stopping at the first."""
    builder = _Builder(known=schema_keys(cls, f"{root}." if root else "")[0], root=node)
    config = builder.build(cls, node, root)
    return BuildResult(config=config, problems=builder.problems, normalised=builder.normalised)


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


class _Builder:
    def __init__(self, known: frozenset[str], root: Any = None):
        self.known = known
        self.root = root  # the whole config, for refused keys that follow another key
        self.problems: list[str] = []
        self.normalised: dict[str, list] = {}

    def build(self, cls: type, node: Any, path: str) -> Any:
        if not isinstance(node, (Mapping, DictConfig)):
            self.problems.append(
                f"{path or 'the config'} must be a section (a mapping of keys), got {_describe(node)}."
            )
            return cls()
        cls = self._target(cls, node, path)
        hints = type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)} | {TARGET_KEY}
        for key in node.keys():
            if str(key) not in names:
                self.problems.append(unknown_key_message(_join(path, str(key)), self.known))
        kwargs = {}
        present = {str(k) for k in node.keys()}  # `in` on a DictConfig hides ??? values
        for f in dataclasses.fields(cls):
            if f.name not in present:
                continue  # a key deleted with ~key falls back to the dataclass default
            key_path = _join(path, f.name)
            ok, raw = self._read(node, f.name, key_path)
            if not ok:
                continue
            ok, value = self.convert(hints[f.name], raw, key_path)
            if ok and self._allowed(f.metadata, value, key_path):
                kwargs[f.name] = value
        try:
            return cls(**kwargs)
        except ValueError as e:
            # A rule the class checks itself in __post_init__ (upstream's, such as both micro-batch sizes set)
            # is reported with the other problems, under the section's name, instead of stopping the walk.
            self.problems.append(f"{path or 'the config'}: {e}")
            return cls()

    def _target(self, cls: type, node: Any, path: str) -> type:
        """The class a section's `_target_` names: `cls` itself or a dataclass subclass of it (a user's own)."""
        if TARGET_KEY not in node.keys():
            return cls
        key = _join(path, TARGET_KEY)
        target = node[TARGET_KEY]
        if target is None or target == "":
            return cls
        found = import_target(target) if isinstance(target, str) else None
        if found is cls or (isinstance(found, type) and dataclasses.is_dataclass(found) and issubclass(found, cls)):
            return found
        if target in getattr(cls, "_target_aliases", ()):
            return cls  # upstream's yaml names another class for a section of this shape (e.g. global_profiler)
        expected = f"{cls.__module__}.{cls.__qualname__}"
        # A class kept only so upstream's configs load (e.g. McoreActorConfig) says why it cannot run here.
        refusal = getattr(found, "_target_refusal", None)
        if isinstance(refusal, Refusal):
            self.problems.append(f"{key}={target!r} is refused: {refusal.why}. {refusal.todo} "
                                 f"(this section is built as {expected}).")
            return cls
        why = "cannot be imported" if found is None else "is not that class or a dataclass subclass of it"
        self.problems.append(f"{key}={target!r} {why}: this section is built as {expected} "
                             f"(set {key}={expected}, or remove it).")
        return cls

    def _read(self, node: Any, key: str, path: str) -> tuple[bool, Any]:
        if isinstance(node, DictConfig):
            if OmegaConf.is_missing(node, key):
                self.problems.append(f"{path} is required but has no value (???); set it with {path}=<value>.")
                return False, None
            try:
                return True, node[key]
            except OmegaConfBaseException as e:
                self.problems.append(f"{path} could not be resolved: {e}".rstrip())
                return False, None
        return True, node[key]

    # ------------------------------------------------------------ types

    def convert(self, tp: Any, value: Any, path: str) -> tuple[bool, Any]:
        if tp is Any:
            return self._plain(value, path)
        if _is_union(tp):
            return self._union(tp, value, path)
        if dataclasses.is_dataclass(tp):
            return True, self.build(tp, value, path)
        origin = typing.get_origin(tp) or tp
        if origin is dict:
            if not isinstance(value, (Mapping, DictConfig)):
                return self._fail(path, "a mapping", value)
            return self._plain(value, path)
        if origin is list:
            return self._list(tp, value, path)
        return self._scalar(tp, value, path)

    def _plain(self, value: Any, path: str) -> tuple[bool, Any]:
        if isinstance(value, (DictConfig, ListConfig)):
            try:
                return True, OmegaConf.to_container(value, resolve=True)
            except OmegaConfBaseException as e:
                self.problems.append(f"{path} could not be resolved: {e}".rstrip())
                return False, None
        return True, value

    def _union(self, tp: Any, value: Any, path: str) -> tuple[bool, Any]:
        members = typing.get_args(tp)
        if value is None:
            if type(None) in members:
                return True, None
            self.problems.append(f"{path} must be set (got null).")
            return False, None
        for member in members:
            if member is type(None):
                continue
            trial = _Builder(self.known, self.root)
            ok, converted = trial.convert(member, value, path)
            if ok and not trial.problems:
                self.normalised.update(trial.normalised)
                return True, converted
        if len(members) == 2 and type(None) in members:
            # Optional[X]: the message for X alone is the useful one.
            return self.convert(next(m for m in members if m is not type(None)), value, path)
        names = " or ".join(_type_name(m) for m in members)
        return self._fail(path, names, value)

    def _list(self, tp: Any, value: Any, path: str) -> tuple[bool, Any]:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if item_tp is str and isinstance(value, str):
            # Upstream command lines pass both trainer.logger=console and trainer.logger=[console].
            ok, item = self.convert(item_tp, value, path)
            if ok:
                self.normalised[path] = [item]
            return ok, [item]
        if not isinstance(value, (list, tuple, ListConfig)):
            return self._fail(path, "a list", value)
        out, all_ok = [], True
        for i, item in enumerate(value):
            ok, converted = self.convert(item_tp, item, f"{path}[{i}]")
            all_ok &= ok
            out.append(converted)
        return all_ok, out

    def _scalar(self, tp: Any, value: Any, path: str) -> tuple[bool, Any]:
        if value is None:
            self.problems.append(f"{path} must be set (got null); expected {_type_name(tp)}.")
            return False, None
        if tp is bool:
            return (True, value) if isinstance(value, bool) else self._fail(path, "true or false", value)
        if tp is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return True, value
            return self._fail(path, "an integer", value)
        if tp is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True, float(value)
            if isinstance(value, str):
                # YAML 1.1 reads `1e-6` (no dot) as a string; accept what clearly is a number.
                try:
                    return True, float(value)
                except ValueError:
                    pass
            return self._fail(path, "a number", value)
        if tp is str:
            if isinstance(value, str):
                return True, value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # Hydra parses experiment_name=2024 as an int; the user meant the text.
                return True, str(value)
            return self._fail(path, "a string", value)
        raise TypeError(f"schema for {path} uses unsupported type {tp!r}")

    def _lookup(self, dotted: str, missing: Any = None) -> Any:
        node = self.root
        for part in dotted.split("."):
            try:
                node = node[part]
            except (KeyError, TypeError, OmegaConfBaseException):
                return missing
        if isinstance(node, (DictConfig, ListConfig)):
            return OmegaConf.to_container(node, resolve=True)
        return node

    def _fail(self, path: str, expected: str, value: Any) -> tuple[bool, Any]:
        self.problems.append(f"{path} must be {expected}, got {_describe(value)}.")
        return False, None

    # ------------------------------------------------------------ values

    def _allowed(self, meta: Mapping[str, Any], value: Any, path: str) -> bool:
        if "refused" in meta:
            refusal = meta["refused"]
            follows = meta.get("refused_follows")
            # a section composed on its own (no followed key in the tree) accepts its own default
            accepted = self._lookup(follows, meta["refused_default"]) if follows else meta["refused_default"]
            if dataclasses.is_dataclass(accepted):
                changed = _changed_leaves(accepted, value, path)
                if changed:
                    self.problems.append(
                        f"{', '.join(changed)} under {path} refused: {refusal.why}. {refusal.todo} "
                        f"(leave {path} at its defaults)."
                    )
                    return False
            elif value != accepted:
                fine = f"${{{follows}}}" if follows else f"its default, {accepted!r},"
                self.problems.append(f"{path}={value!r} is refused: {refusal.why}. {refusal.todo} ({fine} is fine).")
                return False
        entries = value if isinstance(value, list) else [value]
        refused_any = False
        for entry in entries:
            refusal = meta.get("refused_values", {}).get(entry) if isinstance(entry, (str, int, bool)) else None
            if refusal is not None:
                self.problems.append(f"{path}={entry!r} is refused: {refusal.why}. {refusal.todo}")
                refused_any = True
        if refused_any:
            return False
        if value is None:
            return True
        if "choices" in meta and not _is_choice(value, meta["choices"], meta.get("registered")):
            self.problems.append(f"{path}={value!r} is not allowed; choose one of: {', '.join(meta['choices'])}.")
            return False
        if "each_choices" in meta:
            bad = [v for v in value if v not in meta["each_choices"]]
            if bad:
                allowed = ", ".join(meta["each_choices"])
                self.problems.append(f"{path} contains {bad!r}, which is not allowed; entries must be from: {allowed}.")
                return False
        if "min" in meta and value < meta["min"]:
            self.problems.append(f"{path} must be >= {meta['min']}, got {value}.")
            return False
        return True


def import_target(dotted: str) -> Any:
    """`pkg.module.Name` -> the object, or None when it cannot be imported."""
    import importlib

    module_name, _, name = dotted.rpartition(".")
    if not module_name:
        return None
    try:
        return getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        return None


def _changed_leaves(default: Any, value: Any, path: str) -> list[str]:
    old, new = dataclasses.asdict(default), dataclasses.asdict(value)
    out: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in a:
                walk(a[key], b.get(key), f"{where}.{key}")
        elif a != b:
            out.append(f"{where}={b!r}")

    walk(old, new, path)
    return out


def _is_choice(value: str, choices: Sequence[str], registered: Callable[[str], bool] | None) -> bool:
    return value in choices or (registered is not None and registered(value))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )
