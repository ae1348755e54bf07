"""reward_model's keys before Ray starts: what it needs once enabled, and the refusals that stay."""

from __future__ import annotations

import pytest

from verl.trainer.config import ConfigError, validate_config
from verl.trainer.config.validate import load_config


def _problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(load_config(list(overrides)), check_files=False)
    return info.value.problems


def _typed(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


def test_enable_needs_a_model_path():
    found = _problems("reward_model.enable=true")
    assert any("reward_model.model.path" in p and "classification" in p for p in found)
    assert _typed("reward_model.enable=true", "reward_model.model.path=/some/rm").reward_model.enable


def test_own_resource_pool_needs_its_size():
    found = _problems("reward_model.enable=true", "reward_model.model.path=/rm", "reward_model.enable_resource_pool=true")
    assert any("reward_model.n_gpus_per_node" in p and "reward_model.nnodes" in p for p in found)
    typed = _typed("reward_model.enable=true", "reward_model.model.path=/rm", "reward_model.enable_resource_pool=true",
                   "reward_model.n_gpus_per_node=1", "reward_model.nnodes=1")
    assert (typed.reward_model.n_gpus_per_node, typed.reward_model.nnodes) == (1, 1)


def test_resource_pool_places_the_reward_model():
    from verl.single_controller.roles import Role
    from verl.trainer.ppo.launcher import role_worker_mapping
    from verl.workers.reward_model_worker import RewardModelWorker

    base = ["reward_model.enable=true", "reward_model.model.path=/rm", "trainer.n_gpus_per_node=2"]
    mapping, pools = role_worker_mapping(_typed(*base))
    assert mapping[Role.RewardModel] is RewardModelWorker
    assert pools.mapping[Role.RewardModel] == pools.mapping[Role.ActorRollout] == "global_pool"
    assert pools.resource_pool_spec == {"global_pool": [2]}
    mapping, pools = role_worker_mapping(_typed(*base, "reward_model.enable_resource_pool=true",
                                                "reward_model.n_gpus_per_node=3", "reward_model.nnodes=1"))
    assert pools.mapping[Role.RewardModel] == "reward_pool"
    assert pools.resource_pool_spec == {"global_pool": [2], "reward_pool": [3]}
    mapping, _ = role_worker_mapping(_typed())
    assert Role.RewardModel not in mapping  # disabled: no worker is built


def test_external_lib_must_be_importable():
    found = _problems("reward_model.enable=true", "reward_model.model.path=/rm",
                      "reward_model.model.external_lib=no_such_module_for_the_rm")
    assert any("reward_model.model.external_lib" in p for p in found)


@pytest.mark.parametrize("key", ["reward_model.ulysses_sequence_parallel_size=2", "reward_model.model.use_fused_kernels=true"])
def test_what_stays_refused_says_why(key):
    found = _problems("reward_model.enable=true", "reward_model.model.path=/rm", key)
    assert any(p.startswith(key.split("=")[0]) for p in found), found
