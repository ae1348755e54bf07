"""Loading the YAML lists users name their own classes in (tools, interactions, agent loops), and importing those
classes by dotted path, with errors that name the file and the entry."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["import_class", "import_file_as_module", "load_extern_object", "load_yaml_list"]


def import_class(dotted: Any, where: str = "") -> type:
    """``pkg.module.Class`` imported; ``where`` (file and entry) prefixes every error."""
    prefix = f"{where}: " if where else ""
    if not isinstance(dotted, str) or "." not in dotted:
        raise ValueError(f"{prefix}class_name must be a dotted path like pkg.module.Class, got {dotted!r}")
    module_name, _, attr = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # a missing module stays a ModuleNotFoundError, as upstream raises
        error = ModuleNotFoundError if isinstance(exc, ModuleNotFoundError) else ImportError
        raise error(f"{prefix}cannot import module {module_name!r} of class_name {dotted!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{prefix}module {module_name!r} has no {attr!r} (class_name {dotted!r})") from None


def load_yaml_list(path: str, list_key: str, what: str, config_key: str, entry_fields: str) -> dict[str, Any]:
    """The YAML file at ``path`` as a dict whose ``list_key`` is a list (``what``: "tool config", ...)."""
    from omegaconf import OmegaConf

    local = os.path.expanduser(str(path))
    if not os.path.isfile(local):
        raise FileNotFoundError(f"{what} {path!r} does not exist ({config_key})")
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(local), resolve=True)
    except Exception as exc:
        raise ValueError(f"{what} {path!r} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict) or not isinstance(loaded.get(list_key), list):
        raise ValueError(f"{what} {path!r}: expected a top-level `{list_key}:` list of {{{entry_fields}}} entries")
    return loaded


def module_name_for(path: str, prefix: str) -> str:
    """The sys.modules name import_file_as_module gives the file at ``path``."""
    return prefix + hashlib.sha1(path.encode()).hexdigest()[:12]


def import_file_as_module(path: str, prefix: str) -> ModuleType:
    """The python file at the absolute ``path`` imported once per process, as ``prefix`` + a hash of the path.

    Registered in sys.modules (pickling and dataclasses need it); an import that fails is removed again and its
    exception propagates unchanged.
    """
    module_name = module_name_for(path, prefix)
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path!r} cannot be imported as a python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def load_extern_object(module_path: str, object_name: str) -> Any:
    """The object named ``object_name`` (a class, function, constant) defined in the python file ``module_path``,
    or in the importable module ``pkg://dotted.module.name``.

    The file is imported once per process under a name derived from its absolute path (so pickling and
    dataclasses work). A missing file raises FileNotFoundError, a file that fails to import RuntimeError (with the
    cause chained), a missing name AttributeError, as upstream.
    """
    if str(module_path).startswith("pkg://"):
        module = importlib.import_module(str(module_path)[len("pkg://"):])
        if not hasattr(module, object_name):
            raise AttributeError(f"{module_path!r} defines no {object_name!r}")
        return getattr(module, object_name)
    path = os.path.abspath(os.path.expanduser(str(module_path)))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no python file at {module_path!r} (looked for {path})")
    try:
        module = import_file_as_module(path, "verl_extern_")
    except Exception as exc:
        raise RuntimeError(f"importing {module_path!r} failed: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, object_name):
        raise AttributeError(f"{module_path!r} defines no {object_name!r}")
    return getattr(module, object_name)


def load_extern_subclass(key: str, module_path: str, class_name: str, base: type, what: str) -> type:
    """``load_extern_object`` for a class a config section names by ``<key>.path`` / ``<key>.name``, checked to be a
    subclass of ``base``; the errors name the keys (``what`` says what the class must be)."""
    try:
        cls = load_extern_object(module_path, class_name)
    except FileNotFoundError:
        raise FileNotFoundError(f"{key}.path={module_path!r}: no such file") from None
    except AttributeError:
        raise AttributeError(f"{key}.name={class_name!r} is not defined in {module_path}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{key}.name={class_name!r} in {module_path} must be {what}")
    return cls
