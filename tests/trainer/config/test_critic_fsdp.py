"""critic.fsdp (later upstream's place of the critic's engine) and critic.model.fsdp_config (v0.7's): one setting
per key, from the command line, a yaml (a composed DictConfig) or either spelling at once."""

from __future__ import annotations

import pytest

from verl.trainer.config import ConfigError, validate_config
from verl.trainer.config.validate import load_config

GAE = "algorithm.adv_estimator=gae"


def typed(*overrides: str):
    return validate_config(load_config([GAE, *overrides]), check_files=False)


@pytest.mark.parametrize("place", ["critic.fsdp", "critic.model.fsdp_config"])
def test_either_place_sets_the_engine_the_critic_worker_reads(place):
    cfg = typed(f"{place}.param_offload=true", f"{place}.mixed_precision.reduce_dtype=bf16", f"{place}.seed=7")
    for engine in (cfg.critic.model.fsdp_config, cfg.critic.fsdp):  # the worker reads model.fsdp_config
        assert (engine.param_offload, engine.mixed_precision.reduce_dtype, engine.seed) == (True, "bf16", 7)
    assert cfg.actor_rollout_ref.actor.fsdp_config.param_offload is False  # the critic's engine only


def test_a_yaml_section_in_the_new_place_is_folded():
    node = load_config([GAE])
    node.critic.fsdp.optimizer_offload = True  # as a user's yaml `critic: {fsdp: {optimizer_offload: true}}` merges
    node.critic.fsdp.wrap_policy.min_num_params = 0
    cfg = validate_config(node, check_files=False)
    assert cfg.critic.model.fsdp_config.optimizer_offload is True
    assert node.critic.model.fsdp_config.optimizer_offload is True  # written back: the workers get the same config


def test_two_different_values_in_the_two_places_are_refused():
    with pytest.raises(ConfigError) as info:
        typed("critic.fsdp.seed=3", "critic.model.fsdp_config.seed=5")
    (problem,) = [p for p in info.value.problems if "seed" in p]
    assert problem.startswith("critic.fsdp.seed=3 and critic.model.fsdp_config.seed=5 are the same setting")
    same = typed("critic.fsdp.seed=3", "critic.model.fsdp_config.seed=3")
    assert same.critic.model.fsdp_config.seed == 3


def test_a_refused_engine_key_is_refused_in_the_new_place_too():
    with pytest.raises(ConfigError, match=r"critic\.model\.fsdp_config\.qat\.enable=True is refused"):
        typed("critic.fsdp.qat.enable=true")
