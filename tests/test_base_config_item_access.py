"""BaseConfig item access raises what upstream's does (AttributeError / TypeError) and stays a Mapping."""

from dataclasses import dataclass

import pytest

import verl
from verl.base_config import BaseConfig, MissingConfigKeyError


@dataclass
class _Section(BaseConfig):
    clip_ratio: float = 0.2


def test_missing_key_is_an_attribute_error_and_a_key_error_that_names_the_keys():
    section = _Section()
    with pytest.raises(AttributeError, match="no key 'nope'.*clip_ratio"):
        _ = section["nope"]
    with pytest.raises(KeyError):
        _ = section["nope"]
    assert isinstance(MissingConfigKeyError("x"), (KeyError, AttributeError))
    assert section.get("nope", 7) == 7 and section["clip_ratio"] == 0.2


def test_a_key_that_is_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="keys are strings"):
        _ = _Section()[0]


def test_version_folder_is_the_package_folder_holding_the_trainer_yaml():
    from pathlib import Path

    assert Path(verl.version_folder, "trainer", "config", "ppo_trainer.yaml").is_file()
