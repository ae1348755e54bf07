"""sft_trainer.yaml, generation.yaml and evaluation.yaml agree with their dataclasses: the same keys, and every
yaml default (interpolations resolved) builds exactly the dataclass default."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl.trainer.config.evaluation import EvaluationConfig
from verl.trainer.config.generation import GenerationConfig
from verl.trainer.config.sft import SFTTrainerConfig
from verl.trainer.config.yaml_files import CONFIG_DIR, walk_keys
from verl.utils.config_schema import build_config, schema_keys

SCHEMAS = {"sft_trainer": SFTTrainerConfig, "generation": GenerationConfig, "evaluation": EvaluationConfig}


def composed(name: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=name)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_yaml_defaults_are_the_dataclass_defaults(name):
    result = build_config(SCHEMAS[name], composed(name))
    assert result.problems == []  # every yaml key exists in the schema, with a value of its type
    assert result.config == SCHEMAS[name](), "a yaml default differs from the dataclass default"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_schema_key_is_in_the_yaml(name):
    keys, free = schema_keys(SCHEMAS[name])
    in_yaml = {key for key, _ in walk_keys(OmegaConf.to_container(composed(name), resolve=True))}
    schema = {k for k in keys if not any(k.startswith(f + ".") for f in free)}
    assert schema - in_yaml == set()
