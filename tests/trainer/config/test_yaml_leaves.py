"""Every leaf of every shipped yaml: the dataclasses agree on its name, default and type, and it is either
honoured (a named test shows its effect) or refused (a `refused(...)` marker in the dataclasses), never both.

Interpolations (`${data.train_batch_size}`) are compared by what they resolve to in the default yaml.
Free-form sections (`override_config`, `reward_kwargs`, `ray_init`, ...) are one leaf each: their content is
the user's.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.util
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from verl.trainer.config.yaml_files import flat_yaml
from verl.utils.config_schema import build_config, iter_refusals, schema_keys, type_hints

REPO = Path(__file__).resolve().parents[3]

# yaml name -> (module, root dataclass, honoured table file, its variable)
_SFT_TABLE = "tests/trainer/sft/honoured_keys.py"
SCHEMAS = {
    "ppo_trainer": ("verl.trainer.config.ppo_trainer", "PPOTrainerConfig", "tests/trainer/config/honoured_keys.py",
                    "HONOURED"),
    "sft_trainer": ("verl.trainer.config.sft", "SFTTrainerConfig", _SFT_TABLE, "HONOURED_SFT"),
    "generation": ("verl.trainer.config.generation", "GenerationConfig", _SFT_TABLE, "HONOURED_GENERATION"),
    "evaluation": ("verl.trainer.config.evaluation", "EvaluationConfig", _SFT_TABLE, "HONOURED_EVALUATION"),
}


def _schema(name: str) -> type:
    module, cls, _, _ = SCHEMAS[name]
    return getattr(importlib.import_module(module), cls)


def _honoured(name: str) -> dict[str, str]:
    _, _, path, var = SCHEMAS[name]
    assert (REPO / path).is_file(), f"{path} (the honoured keys of {name}.yaml) does not exist"
    spec = importlib.util.spec_from_file_location(f"_honoured_{name}", REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, var)


def _yaml(name: str, resolve: bool) -> dict:
    return OmegaConf.to_container(OmegaConf.load(flat_yaml(name)), resolve=resolve)


def yaml_leaves(name: str) -> list[str]:
    """Dotted leaves of a shipped yaml; a free-form section counts as one leaf."""
    free = schema_keys(_schema(name))[1]

    def walk(node: dict, prefix: str):
        for key, value in node.items():
            if key == "_target_":  # the section's class, checked by the builder
                continue
            path = f"{prefix}{key}"
            if isinstance(value, dict) and path not in free:
                yield from walk(value, path + ".")
            else:
                yield path

    return list(walk(_yaml(name, resolve=False), ""))


def refused_keys(cls: type) -> set[str]:
    """Keys refused whatever their value (a refused section refuses every leaf below it); keys with only some
    values refused (`rollout.name=sglang`) are honoured for the others, so they are not in this set."""
    return {key for key, value, _ in iter_refusals(cls) if value is None}


def _is_refused(leaf: str, refused: set[str]) -> bool:
    return any(leaf == key or leaf.startswith(key + ".") for key in refused)


@functools.cache
def _test_functions(path: str) -> frozenset[str]:
    tree = ast.parse((REPO / path).read_text())
    return frozenset(
        node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def _type_ok(tp: Any, value: Any) -> bool:
    """`value` has type `tp` without any coercion; the one exception is the builder's documented one, a bare
    string where a list of strings is declared (`train_files: ~/data/train.parquet`)."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(member, value) for member in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(tp)
        if item is str and isinstance(value, str):
            return True
        return isinstance(value, list) and all(_type_ok(item, v) for v in value)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    return type(value) is tp  # bool is not an int here, nor an int a float


def _type_drift(cls: type, node: Any, prefix: str = "") -> list[str]:
    out = []
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        path, tp = f"{prefix}{f.name}", hints[f.name]
        value = node.get(f.name) if isinstance(node, dict) else None
        inner = next((a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)), tp)
        if dataclasses.is_dataclass(inner):
            out += _type_drift(inner, value, path + ".")
            continue
        default = getattr(cls(), f.name)
        if not _type_ok(tp, value):
            out.append(f"{path}: yaml {value!r} is not {tp}")
        if not _type_ok(tp, default):
            out.append(f"{path}: dataclass default {default!r} is not {tp}")
    return out


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_yaml_and_dataclasses_agree_on_names_and_defaults(name):
    cls = _schema(name)
    result = build_config(cls, OmegaConf.load(flat_yaml(name)))
    assert result.problems == []
    assert result.config.to_dict() == cls().to_dict()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_yaml_and_dataclasses_agree_on_types(name):
    assert _type_drift(_schema(name), _yaml(name, resolve=True)) == []


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_leaf_is_honoured_or_refused_exactly_once(name):
    leaves = yaml_leaves(name)
    refused = refused_keys(_schema(name))
    honoured = _honoured(name)
    neither = [leaf for leaf in leaves if leaf not in honoured and not _is_refused(leaf, refused)]
    both = [leaf for leaf in leaves if leaf in honoured and _is_refused(leaf, refused)]
    assert not neither, "honour these keys (name a test in the table) or refuse them:\n" + "\n".join(neither)
    assert both == []
    assert sorted(set(honoured) - set(leaves)) == [], "the honoured table names keys the yaml does not have"
    assert sorted(refused - set(schema_keys(_schema(name))[0])) == []


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_honoured_key_names_an_existing_test(name):
    missing = []
    for key, test in sorted(_honoured(name).items()):
        path, _, function = test.partition("::")
        if not (REPO / path).is_file() or function not in _test_functions(path):
            missing.append(f"{key}: {test}")
    assert not missing, "\n".join(missing)
