"""Deprecated keys upstream still runs are run as upstream runs them, each named by a one-line warning.

The effective per-GPU sizes are what the typed config hands the workers (they read `*_per_gpu` first).
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import ConfigWarning, load_config, validate_config

ARR = "actor_rollout_ref"


def _validate(cfg):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        typed = validate_config(cfg, check_files=False)
    return typed, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def _grpo_with_ref(cfg, world: int = 2):
    return set_keys(cfg, algorithm__adv_estimator="grpo", actor_rollout_ref__rollout__n=4, data__train_batch_size=8,
                    actor_rollout_ref__actor__use_kl_loss=True, trainer__n_gpus_per_node=world)


def test_global_micro_batch_sizes_are_divided_by_the_world_size(cfg):
    # upstream's tuning-script shape: only the global sizes, 4 workers
    set_keys(_grpo_with_ref(cfg, world=4), actor_rollout_ref__actor__ppo_mini_batch_size=8,
             actor_rollout_ref__actor__ppo_micro_batch_size=16,
             actor_rollout_ref__rollout__log_prob_micro_batch_size=32,
             actor_rollout_ref__ref__log_prob_micro_batch_size=8)
    typed, messages = _validate(cfg)
    arr = typed.actor_rollout_ref
    assert arr.actor.ppo_micro_batch_size_per_gpu == 4  # 16 / 4
    assert arr.rollout.log_prob_micro_batch_size_per_gpu == 8  # 32 / 4
    assert arr.ref.log_prob_micro_batch_size_per_gpu == 2  # 8 / 4
    # the global keys are consumed: the workers see only the per-GPU sizes, and so does the composed config
    assert arr.actor.ppo_micro_batch_size is None and arr.rollout.log_prob_micro_batch_size is None
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4
    for key in ("actor.ppo_micro_batch_size=16", "rollout.log_prob_micro_batch_size=32",
                "ref.log_prob_micro_batch_size=8"):
        (line,) = [m for m in messages if m.startswith(f"{ARR}.{key} is deprecated")]
        assert "\n" not in line and "divided by the data-parallel size" in line


def test_per_gpu_wins_when_both_are_set(cfg):
    set_keys(_grpo_with_ref(cfg), actor_rollout_ref__rollout__log_prob_micro_batch_size=8,
             actor_rollout_ref__rollout__log_prob_micro_batch_size_per_gpu=1)
    typed, messages = _validate(cfg)
    assert typed.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 1
    assert any(m.startswith(f"{ARR}.rollout.log_prob_micro_batch_size=8 is deprecated") and "_per_gpu wins" in m
               for m in messages)


@pytest.mark.parametrize("section", [f"{ARR}.actor", "critic"])
def test_both_update_sizes_set_per_gpu_wins_in_the_trainer(cfg, section):
    """Upstream's trainer runs tuning scripts that set both (its Python classes refuse them:
    test_actor_config_post_init.py); the per-GPU size wins, with a warning naming both."""
    set_keys(_grpo_with_ref(cfg), algorithm__adv_estimator="gae",
             **{f"{section.replace('.', '__')}__ppo_micro_batch_size": 8,
                f"{section.replace('.', '__')}__ppo_micro_batch_size_per_gpu": 1})
    typed, messages = _validate(cfg)
    node = typed.critic if section == "critic" else typed.actor_rollout_ref.actor
    assert node.ppo_micro_batch_size_per_gpu == 1 and node.ppo_micro_batch_size is None
    assert any(m.startswith(f"{section}.ppo_micro_batch_size=8 is deprecated") and "_per_gpu wins" in m
               for m in messages)


def test_critic_forward_global_size_is_divided_by_the_world_size(cfg):
    set_keys(cfg, critic__forward_micro_batch_size=8)  # gae: the critic runs; 2 workers
    assert cfg.critic.forward_micro_batch_size_per_gpu is None  # the yaml's per-GPU default steps aside
    typed, messages = _validate(cfg)
    assert typed.critic.forward_micro_batch_size_per_gpu == 4 and typed.critic.forward_micro_batch_size is None
    assert typed.critic.ppo_micro_batch_size_per_gpu == 2  # the update's size is its own
    assert any(m.startswith("critic.forward_micro_batch_size=8 is deprecated") for m in messages)


def test_ref_follows_rollouts_derived_size(cfg):
    set_keys(_grpo_with_ref(cfg), actor_rollout_ref__rollout__log_prob_micro_batch_size=8)
    typed, _ = _validate(cfg)
    assert typed.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 4
    assert typed.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 4


def test_critic_global_size_sets_the_update_and_value_pass(cfg):
    set_keys(cfg, critic__ppo_micro_batch_size=4)  # gae: the critic runs
    typed, messages = _validate(cfg)
    assert typed.critic.ppo_micro_batch_size_per_gpu == 2 and typed.critic.forward_micro_batch_size_per_gpu == 2
    assert any(m.startswith("critic.ppo_micro_batch_size=4 is deprecated") for m in messages)


def test_uneven_global_size_is_rounded_down_and_too_small_is_refused(cfg):
    set_keys(_grpo_with_ref(cfg), actor_rollout_ref__actor__ppo_micro_batch_size=5)
    typed, messages = _validate(cfg)
    assert typed.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 2
    assert any("rounded down" in m for m in messages)
    # validation wrote the derived per-GPU size back into cfg; clear it to try a global size below the world
    set_keys(cfg, actor_rollout_ref__actor__ppo_micro_batch_size=1, actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=None)
    assert any(p.startswith(f"{ARR}.actor.ppo_micro_batch_size=1 is a deprecated global size") and "= 2" in p
               for p in problems_of(cfg))


def test_command_line_global_size_composes_without_our_per_gpu_default():
    """The yaml's per-GPU default steps aside for a global size, so `ppo_micro_batch_size=N` alone is not "both"."""
    cfg = load_config([f"{ARR}.actor.ppo_micro_batch_size=8", "algorithm.adv_estimator=grpo",
                       f"{ARR}.rollout.n=4"])
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu is None
    assert load_config([]).actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 2
    typed, _ = _validate(cfg)
    assert typed.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4


def test_val_batch_size_is_the_validation_generation_batch(cfg):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    set_keys(cfg, data__val_batch_size=3)
    typed, messages = _validate(cfg)
    (line,) = [m for m in messages if m.startswith("data.val_batch_size=3 is deprecated")]
    assert "batches of 3 prompts" in line
    host = SimpleNamespace(config=typed)
    RayPPOTrainer._create_dataloader(host, list(range(16)), list(range(7)), None, None)
    assert [len(b) for b in host.val_dataloader] == [3, 3, 1]
    typed.data.val_batch_size = None
    RayPPOTrainer._create_dataloader(host, list(range(16)), list(range(7)), None, None)
    assert [len(b) for b in host.val_dataloader] == [7]


@pytest.mark.parametrize("key", ["data.val_batch_size", f"{ARR}.actor.ppo_micro_batch_size"])
def test_deprecated_keys_are_not_refused(key):
    from verl.trainer.config.ppo_trainer import PPOTrainerConfig
    from verl.utils.config_schema import iter_refusals

    assert key not in {k for k, _, _ in iter_refusals(PPOTrainerConfig)}
