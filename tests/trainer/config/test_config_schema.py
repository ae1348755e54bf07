"""The yaml, the dataclasses and the type/enum/unknown-key checks agree with each other."""

from __future__ import annotations

import sys
import types

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from verl.trainer.config import (
    AlgoConfig,
    ConfigError,
    PPOTrainerConfig,
    schema_keys,
    validate_config,
)
from verl.trainer.config.yaml_files import flat_yaml


def _yaml_keys(node: dict, prefix: str, free_form: frozenset[str]) -> set[str]:
    keys = set()
    for key, value in node.items():
        if key == "_target_":  # the section's class, not a key of its own
            continue
        path = f"{prefix}{key}"
        keys.add(path)
        if isinstance(value, dict) and path not in free_form:
            keys |= _yaml_keys(value, path + ".", free_form)
    return keys


def _problems(cfg: DictConfig) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, check_files=False)
    return info.value.problems


def _interpolated_sections(node: dict, prefix: str = "") -> set[str]:
    """Paths whose yaml value is a whole-section interpolation (`rollout.mtp: ${oc.select:...model.mtp,null}`, as
    upstream's yaml writes them): their keys are the section's they point at."""
    found = set()
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, str) and value.startswith("${"):
            found.add(path)
        elif isinstance(value, dict):
            found |= _interpolated_sections(value, path + ".")
    return found


def test_yaml_lists_exactly_the_schema_keys():
    raw = OmegaConf.to_container(OmegaConf.load(flat_yaml("ppo_trainer")), resolve=False)
    known, free_form = schema_keys(PPOTrainerConfig)
    below = free_form | _interpolated_sections(raw)
    below_free_form = {k for k in known if any(k.startswith(f + ".") for f in below)}
    assert _yaml_keys(raw, "", free_form) == set(known) - below_free_form


def test_dataclass_defaults_equal_the_yaml_defaults(cfg):
    assert validate_config(cfg, check_files=False).to_dict() == PPOTrainerConfig().to_dict()


def test_default_config_validates_with_existing_files(cfg, local_run_files):
    cfg.data.train_files = local_run_files["train"]
    cfg.data.val_files = [local_run_files["val"]]
    cfg.actor_rollout_ref.model.path = local_run_files["model"]
    typed = validate_config(cfg)
    assert typed.data.train_files == [local_run_files["train"]]
    assert typed.trainer.logger == ["console"]
    assert typed.critic.rollout_n == 1
    assert typed.critic.model.path == local_run_files["model"]  # interpolated from the actor's
    assert typed.actor_rollout_ref.actor.checkpoint.load_contents == ["model", "optimizer", "extra"]
    assert typed.use_critic and not typed.use_reference_policy
    assert typed.world_size == 2


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("data.train_batch_size", "eight", "data.train_batch_size must be an integer, got 'eight' (str)"),
        ("data.train_batch_size", 8.0, "data.train_batch_size must be an integer, got 8.0 (float)"),
        ("trainer.val_before_train", "yes", "trainer.val_before_train must be true or false, got 'yes'"),
        ("actor_rollout_ref.actor.optim.lr", "fast", "actor_rollout_ref.actor.optim.lr must be a number"),
        ("actor_rollout_ref.actor.optim.betas", 0.9, "actor_rollout_ref.actor.optim.betas must be a list, got 0.9"),
        ("actor_rollout_ref.actor.optim.betas", [0.9, "x"], "actor_rollout_ref.actor.optim.betas[1] must be a number"),
        ("data.max_prompt_length", 0, "data.max_prompt_length must be >= 1, got 0"),
        ("actor_rollout_ref.rollout.n", None, "actor_rollout_ref.rollout.n must be set (got null)"),
        ("data.custom_cls", 3, "data.custom_cls must be a section"),
    ],
)
def test_wrong_types_name_the_key(cfg, key, value, expected):
    OmegaConf.update(cfg, key, value, merge=False)
    problems = _problems(cfg)
    assert any(expected in p for p in problems), problems


def test_numbers_are_coerced_where_upstream_users_rely_on_it(cfg):
    cfg.actor_rollout_ref.actor.optim.lr = "1e-6"  # YAML 1.1 reads 1e-6 without a dot as a string
    cfg.actor_rollout_ref.rollout.top_p = 1  # int where a float is declared
    cfg.trainer.experiment_name = 2024  # Hydra parses a numeric name as an int
    typed = validate_config(cfg, check_files=False)
    assert typed.actor_rollout_ref.actor.optim.lr == 1e-6
    assert isinstance(typed.actor_rollout_ref.rollout.top_p, float)
    assert typed.trainer.experiment_name == "2024"


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        ("data.truncation", "cut", "error, left, right, middle"),
        ("actor_rollout_ref.rollout.name", "vllmm", "hf, vllm, sglang"),
        ("algorithm.adv_estimator", "grp", "gae, grpo, reinforce_plus_plus"),
        ("actor_rollout_ref.actor.loss_agg_mode", "mean", "token-mean, seq-mean-token-sum"),
        ("algorithm.kl_penalty", "full", "kl, k1, abs, mse, k2, low_var_kl, k3, kl+"),
        ("trainer.resume_mode", "always", "auto, disable, resume_path"),
        ("reward_model.reward_manager", "naïve", "naive, batch, dapo, prime"),
    ],
)
def test_enum_errors_name_the_key_and_the_allowed_values(cfg, key, value, allowed, monkeypatch):
    # Empty registries: the answer must not depend on what other modules register (or on importing torch).
    for module in ("verl.trainer.ppo.core_algos", "verl.workers.reward_manager"):
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    OmegaConf.update(cfg, key, value, merge=False)
    problems = _problems(cfg)
    assert any(f"{key}={value!r} is not allowed" in p and allowed in p for p in problems), problems


def test_list_entries_are_checked(cfg):
    cfg.trainer.logger = ["console", "tensorbord"]
    assert any("trainer.logger contains ['tensorbord']" in p for p in _problems(cfg))


def test_registered_estimator_is_accepted(cfg, monkeypatch):
    fake = types.ModuleType("verl.trainer.ppo.core_algos")
    fake.ADV_ESTIMATOR_REGISTRY = {"my_estimator": object()}
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", fake)
    cfg.algorithm.adv_estimator = "my_estimator"
    assert validate_config(cfg, check_files=False).algorithm.adv_estimator == "my_estimator"
    cfg.algorithm.adv_estimator = "not_registered"
    assert any("algorithm.adv_estimator='not_registered' is not allowed" in p for p in _problems(cfg))


def test_unknown_nested_key_is_named_with_a_suggestion(cfg):
    with open_dict(cfg):
        cfg.actor_rollout_ref.actor.ppo_mini_batch_siz = 2
        cfg.trainer.loger = "console"
    problems = _problems(cfg)
    assert (
        "Unknown config key 'actor_rollout_ref.actor.ppo_mini_batch_siz'. "
        "Did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?"
    ) in problems
    assert "Unknown config key 'trainer.loger'. Did you mean 'trainer.logger'?" in problems


def test_free_form_sections_accept_any_keys(cfg):
    with open_dict(cfg):
        cfg.actor_rollout_ref.model.override_config = {"attention_dropout": 0.0, "rope_scaling": {"factor": 2}}
        cfg.ray_kwargs.ray_init.num_gpus = 0
    typed = validate_config(cfg, check_files=False)
    assert typed.actor_rollout_ref.model.override_config == {"attention_dropout": 0.0, "rope_scaling": {"factor": 2}}
    assert typed.ray_kwargs.ray_init["num_gpus"] == 0


def test_missing_and_unresolvable_values_are_named(cfg):
    cfg.trainer.project_name = "???"
    cfg.data.seed = "${data.no_such_key}"
    problems = _problems(cfg)
    assert any(p.startswith("trainer.project_name is required") for p in problems), problems
    assert any(p.startswith("data.seed could not be resolved") for p in problems), problems


def test_configs_offer_the_upstream_dict_surface():
    algo = AlgoConfig()
    assert algo.get("gamma") == 1.0 and algo["lam"] == 1.0 and "kl_ctrl" in algo
    assert algo.get("no_such_key", 5) == 5 and "no_such_key" not in algo
    with pytest.raises(KeyError):
        algo["no_such_key"]
    assert algo.kl_ctrl.kl_coef == 0.001


def test_known_names_are_registered_in_the_real_registries():
    """The name lists that spare config checks from importing torch must match the registries."""
    from verl.workers.config import registries

    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    reward_managers = pytest.importorskip("verl.workers.reward_manager")
    assert set(registries.ADV_ESTIMATORS) <= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert set(registries.POLICY_LOSSES) <= set(core_algos.POLICY_LOSS_REGISTRY)
    reward_loop = pytest.importorskip("verl.workers.reward_loop")
    assert set(registries.REWARD_MANAGERS) <= (set(reward_managers.REWARD_MANAGER_REGISTRY)
                                               | set(reward_loop.REWARD_LOOP_MANAGER_REGISTRY))


def test_plain_dict_configs_resolve_interpolations(cfg):
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain["actor_rollout_ref"]["rollout"]["n"] = 3
    plain["trainer"]["logger"] = "console"
    typed = validate_config(plain, check_files=False)
    assert typed.critic.rollout_n == 3  # "${actor_rollout_ref.rollout.n}" resolved
    assert plain["trainer"]["logger"] == ["console"]  # normalised in the caller's dict too
