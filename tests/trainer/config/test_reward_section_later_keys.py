"""Later upstream's (after v0.7) leaves of the `reward:` section: the section's `_target_`s, the judge engine's
scheduling_policy (a vLLM engine argument, engine_kwargs.vllm), and the judge-engine keys with no counterpart here,
refused unless at upstream's default (reward_section.REFUSED_ROLLOUT, why and what: JUDGE_KEY_REFUSALS)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.trainer.config.test_reward_section import compose_user_yaml, typed
from tests.trainer.config.test_reward_section_mirrors import JUDGE_ON
from verl.trainer.config import ConfigError, validate_config
from verl.trainer.config.aliases import rewrite_aliases
from verl.trainer.config.reward_section import REFUSED_ROLLOUT, V07_REFUSED
from verl.trainer.config.yaml_files import GENERATED
from verl.workers.config.reward_model import JUDGE_KEY_REFUSALS

ROLLOUT = "reward.reward_model.rollout"
# later upstream's refused judge keys -> a value other than its default
LATER_REFUSED = {
    "pipeline_model_parallel_size": 2, "layered_summon": True, "full_determinism": True, "seed": 7,
    "multi_stage_wake_up": True, "ignore_eos": True, "temperature": 0.5, "top_k": 5, "top_p": 0.9,
    "do_sample": False, "n": 2, "quantization": "fp8", "quantization_config_file": "/q.json",
    "disaggregation.enabled": True, "disaggregation.prefill_replicas": 2, "disaggregation.decode_replicas": 2,
    "disaggregation.decode_tensor_model_parallel_size": 2, "disaggregation.transfer_backend": "mooncake",
    "disaggregation.bootstrap_port": 8998, "disaggregation.ib_device": "mlx5_0", "mtp.enable": True,
}


def _nested(dotted: str, value: object) -> dict:
    *parents, leaf = dotted.split(".")
    node: dict = {leaf: value}
    for part in reversed(parents):
        node = {part: node}
    return node


def _judge_kwargs(reward_model) -> dict:
    """The vllm.LLM arguments the judge engine starts with (verl.workers.genrm_engine)."""
    from transformers import Qwen2Config

    from verl.workers.genrm_engine import vllm_judge_config
    from verl.workers.rollout.vllm.engine import engine_kwargs

    hf = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, vocab_size=100)
    return engine_kwargs(vllm_judge_config(reward_model), "/rm", hf, seed=0, engines_per_node=1)


# ---------------------------------------------------------------- _target_


def test_the_section_declares_upstreams_targets_and_builds_this_schemas_classes(tmp_path):
    from verl.workers.config import reward as section_classes

    shipped = OmegaConf.to_container(OmegaConf.load(GENERATED).reward)
    assert shipped["_target_"] == "verl.workers.config.RewardConfig"
    assert shipped["reward_model"]["_target_"] == "verl.workers.config.RewardModelConfig"
    assert shipped["sandbox_fusion"]["_target_"] == "verl.workers.config.SandboxFusionConfig"
    # upstream's section written whole with its targets (and the older module's spelling) is accepted
    body = ("reward:\n  _target_: verl.workers.config.reward.RewardConfig\n  reward_model:\n"
            "    _target_: verl.workers.config.RewardModelConfig\n    nnodes: 1\n  sandbox_fusion:\n"
            "    _target_: verl.workers.config.SandboxFusionConfig\n    max_concurrent: 3\n")
    got = validate_config(compose_user_yaml(tmp_path, body), check_files=False)
    assert type(got.reward) is section_classes.RewardConfig
    assert type(got.reward.reward_model) is section_classes.RewardModelConfig  # not the older section's class
    assert got.reward_model.nnodes == got.reward.reward_model.nnodes == 1
    assert got.reward_model.sandbox_fusion.max_concurrent == got.reward.sandbox_fusion.max_concurrent == 3


def test_another_target_for_the_judge_section_is_refused(tmp_path):
    cfg = compose_user_yaml(tmp_path, "reward:\n  reward_model:\n    _target_: my.Own\n")
    with pytest.raises(ConfigError, match=r"reward.reward_model._target_='my.Own' \(your yaml\)"):
        validate_config(cfg, check_files=False)


# ---------------------------------------------------------------- scheduling_policy: a vLLM engine argument


def test_unset_scheduling_policy_reads_as_the_judge_engines():
    got = typed(*JUDGE_ON)
    assert got.reward.reward_model.rollout.scheduling_policy == _judge_kwargs(got.reward_model)["scheduling_policy"]
    assert got.reward.reward_model.rollout.scheduling_policy == "fcfs"


@pytest.mark.parametrize("spelling", ["yaml", "reward.reward_model.rollout", "reward_model.rollout"])
def test_scheduling_policy_reaches_the_judge_engine(tmp_path, spelling):
    if spelling == "yaml":
        cfg = compose_user_yaml(tmp_path, OmegaConf.to_yaml({"reward": _nested(
            "reward_model.rollout.scheduling_policy", "priority")}))
        for line in JUDGE_ON:
            key, value = line.split("=")
            OmegaConf.update(cfg, key, {"true": True}.get(value, value), force_add=True)
        got = validate_config(cfg, check_files=False)
    else:
        got = typed(f"{spelling}.scheduling_policy=priority", *JUDGE_ON)
    assert got.reward_model.rollout.engine_kwargs["vllm"]["scheduling_policy"] == "priority"
    assert got.reward.reward_model.rollout.scheduling_policy == "priority"  # the mirror reads it back
    assert _judge_kwargs(got.reward_model)["scheduling_policy"] == "priority"  # what vllm.LLM gets


# ---------------------------------------------------------------- refused unless upstream's default


def test_every_later_judge_key_is_in_the_table_once():
    names = {name for name in REFUSED_ROLLOUT if name.split(".")[0] not in V07_REFUSED}
    assert names | {"mtp.enable"} == set(LATER_REFUSED) | {"mtp"}
    assert all(name.split(".")[0] in JUDGE_KEY_REFUSALS for name in names)
    shipped = OmegaConf.to_container(OmegaConf.load(GENERATED).reward)
    for name, default in REFUSED_ROLLOUT.items():  # the yaml declares upstream's default of each
        assert OmegaConf.select(OmegaConf.create(shipped), f"reward_model.rollout.{name}") == default, name


@pytest.mark.parametrize("name", sorted(LATER_REFUSED))
def test_a_later_judge_key_off_its_default_is_refused_in_a_yaml(tmp_path, name):
    body = OmegaConf.to_yaml({"reward": _nested(f"reward_model.rollout.{name}", LATER_REFUSED[name])})
    cfg = compose_user_yaml(tmp_path, body)
    why, what = JUDGE_KEY_REFUSALS[name.split(".")[0]]
    with pytest.raises(ConfigError) as raised:
        validate_config(cfg, check_files=False)
    message = str(raised.value)
    assert f"{ROLLOUT}.{name} is later upstream's judge-engine key {name}, which has no counterpart here" in message
    assert why in message and what in message


@pytest.mark.parametrize("name", ["seed", "temperature", "disaggregation.enabled", "quantization"])
def test_a_later_judge_key_is_refused_on_the_command_line(name):
    with pytest.raises(ConfigError, match=f"{ROLLOUT}.{name} is later upstream's judge-engine key"):
        rewrite_aliases([f"{ROLLOUT}.{name}={LATER_REFUSED[name]}"])


def test_upstreams_section_copied_at_its_defaults_runs(tmp_path):
    """Later upstream's judge section written whole at its defaults (`top_p: 1` as its yaml spells it): no key is
    refused, and the run's values are this schema's."""
    rollout = {name: REFUSED_ROLLOUT[name] for name in REFUSED_ROLLOUT if not name.startswith("disaggregation.")}
    rollout |= {"top_p": 1, "scheduling_policy": "fcfs", "disaggregation": {
        name.split(".")[1]: default for name, default in REFUSED_ROLLOUT.items() if name.startswith("disaggregation.")}}
    cfg = compose_user_yaml(tmp_path, OmegaConf.to_yaml({"reward": {"reward_model": {"rollout": rollout}}}))
    got = validate_config(cfg, check_files=False)
    assert got.reward.reward_model.rollout.seed == 42 and got.reward.reward_model.rollout.disaggregation.enabled is False
    assert "scheduling_policy" not in got.reward_model.rollout.engine_kwargs["vllm"]  # upstream's default: not written
