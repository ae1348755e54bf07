"""Inconsistent batch sizes are caught before a run, and the message shows the numbers."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import ConfigWarning, PPOTrainerConfig, validate_config
from verl.trainer.config.checks import check_actor_batches
from verl.workers.config import ActorRolloutRefConfig, FSDPActorConfig, RolloutConfig

ACTOR = "actor_rollout_ref.actor"




def _grpo(cfg: DictConfig, n: int) -> DictConfig:
    """GRPO has no critic, so only the actor's batch sizes are checked."""
    return set_keys(cfg, algorithm__adv_estimator="grpo", actor_rollout_ref__rollout__n=n)


def test_mini_batch_must_divide_the_train_batch(cfg):
    set_keys(_grpo(cfg, 2), data__train_batch_size=8, actor_rollout_ref__actor__ppo_mini_batch_size=3)
    message = next(p for p in problems_of(cfg) if p.startswith("data.train_batch_size"))
    assert "8 * 2 = 16 is not divisible by actor_rollout_ref.actor.ppo_mini_batch_size" in message
    assert "3 * 2 = 6" in message


def test_mini_batch_larger_than_train_batch(cfg):
    set_keys(_grpo(cfg, 2), data__train_batch_size=4, actor_rollout_ref__actor__ppo_mini_batch_size=8)
    assert any(
        "actor_rollout_ref.actor.ppo_mini_batch_size (8) is larger than data.train_batch_size (4)" in p
        for p in problems_of(cfg)
    )


def test_mini_batch_must_split_over_the_workers(cfg):
    # 1 prompt x 3 responses per optimizer step cannot be shared by 2 workers.
    set_keys(_grpo(cfg, 3), actor_rollout_ref__actor__ppo_mini_batch_size=1)
    message = next(p for p in problems_of(cfg) if "data-parallel" in p)
    assert message.startswith("actor_rollout_ref.actor.ppo_mini_batch_size * actor_rollout_ref.rollout.n = 1 * 3 = 3")
    assert "over 2 data-parallel workers" in message and "1 * 2 / 1" in message


def test_micro_larger_than_the_per_worker_mini_batch(cfg):
    # 4 prompts x 1 response over 2 workers = 2 per worker, less than the micro-batch of 4.
    set_keys(cfg, actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=4)
    assert any(
        p.startswith(
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (4) is larger than the mini-batch each "
            "worker gets, 2 (= actor_rollout_ref.actor.ppo_mini_batch_size 4 * actor_rollout_ref.rollout.n 1 "
            "/ 2 workers)"
        )
        for p in problems_of(cfg)
    )


def test_per_worker_mini_batch_must_divide_into_micro_batches(cfg):
    # 4 prompts x 3 responses / 2 workers = 6 per worker, not a multiple of 4.
    set_keys(_grpo(cfg, 3), data__train_batch_size=8, actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=4)
    assert any("each worker gets, 6" in p and "not divisible by" in p and "(4)" in p for p in problems_of(cfg))


# The deprecated global micro-batch sizes: tests/trainer/config/test_deprecated_keys.py


def test_micro_batch_size_is_required_without_dynamic_batching(cfg):
    set_keys(cfg, actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=None)
    assert any(p.startswith("Set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") for p in problems_of(cfg))
    set_keys(cfg, actor_rollout_ref__actor__use_dynamic_bsz=True, critic__ppo_micro_batch_size_per_gpu=None)
    validate_config(cfg, check_files=False)


def test_token_budget_shorter_than_one_sequence_warns(cfg):
    set_keys(cfg, actor_rollout_ref__actor__use_dynamic_bsz=True, actor_rollout_ref__actor__ppo_max_token_len_per_gpu=1000)
    with pytest.warns(ConfigWarning) as record:
        validate_config(cfg, check_files=False)
    messages = [str(w.message) for w in record]
    assert any(
        m.startswith("actor_rollout_ref.actor.ppo_max_token_len_per_gpu (1000) is less than")
        and "512 + 512 = 1024" in m
        for m in messages
    )


def test_critic_batches_are_checked_only_when_the_critic_is_used(cfg):
    set_keys(cfg, critic__ppo_micro_batch_size_per_gpu=3)  # gae: critic share is 4 * 1 / 2 = 2 per worker
    assert any(p.startswith("critic.ppo_micro_batch_size_per_gpu (3) is larger") for p in problems_of(cfg))
    validate_config(_grpo(cfg, 4), check_files=False)


# grpo and rloo with n=1 run as upstream runs them (test_upstream_keys.py); the others have no group of one
@pytest.mark.parametrize("estimator", ["opo", "grpo_passk"])
def test_group_estimator_with_one_response_suggests_more(cfg, estimator):
    set_keys(cfg, algorithm__adv_estimator=estimator)
    assert any(
        p.startswith(f"algorithm.adv_estimator={estimator}") and "actor_rollout_ref.rollout.n=4" in p
        for p in problems_of(cfg)
    )


def test_parallel_sizes_must_divide_the_workers(cfg):
    set_keys(cfg, actor_rollout_ref__rollout__tensor_model_parallel_size=4)
    assert any(
        "actor_rollout_ref.rollout.tensor_model_parallel_size (4) must divide the number of workers" in p
        and "1 * 2 = 2" in p
        for p in problems_of(cfg)
    )


def test_kl_in_reward_and_kl_loss_together_warn(cfg):
    set_keys(cfg, algorithm__use_kl_in_reward=True, actor_rollout_ref__actor__use_kl_loss=True)
    with pytest.warns(ConfigWarning, match="counted twice"):
        validate_config(cfg, check_files=False)


def test_default_config_raises_no_warnings(cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate_config(cfg, check_files=False)


def _splits_evenly(train: int, mini: int, n: int, workers: int, micro: int) -> bool:
    """Hand the responses out the way a step does and see whether every piece is whole."""
    responses = list(range(train * n))
    step = mini * n
    if step > len(responses):
        return False
    for start in range(0, len(responses), step):
        optimizer_step = responses[start : start + step]
        if len(optimizer_step) != step or step % workers:
            return False
        share = step // workers
        if share < micro or share % micro:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    train=st.integers(1, 32),
    mini=st.integers(1, 32),
    n=st.integers(1, 6),
    nodes=st.integers(1, 2),
    gpus=st.integers(1, 4),
    micro=st.integers(1, 8),
)
def test_actor_check_accepts_exactly_the_batches_that_split_evenly(train, mini, n, nodes, gpus, micro):
    # the worker sections are frozen once built (upstream's BaseConfig): build them with the values
    arr = ActorRolloutRefConfig(actor=FSDPActorConfig(ppo_mini_batch_size=mini, ppo_micro_batch_size_per_gpu=micro),
                                rollout=RolloutConfig(n=n))
    cfg = PPOTrainerConfig(actor_rollout_ref=arr)
    cfg.data.train_batch_size = train
    cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node = nodes, gpus
    problems = check_actor_batches(cfg)
    assert (not problems) == _splits_evenly(train, mini, n, nodes * gpus, micro), problems
    for p in problems:
        assert any(str(v) in p for v in (train, mini, micro, mini * n, nodes * gpus)), p


def test_actor_rollout_n_follows_rollout_n_and_a_different_value_is_refused(cfg):
    _grpo(cfg, 4)
    assert validate_config(cfg, check_files=False).actor_rollout_ref.actor.rollout_n == 4  # the interpolation
    set_keys(cfg, actor_rollout_ref__actor__rollout_n=2)
    (problem,) = [p for p in problems_of(cfg) if "actor.rollout_n" in p]
    assert problem.startswith("actor_rollout_ref.actor.rollout_n (2) differs from actor_rollout_ref.rollout.n (4)")
