"""A non-finite gradient norm skips the optimizer step; max_consecutive_nonfinite_grad_skips in a row stop the run."""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainer.config.test_key_effects_update import _role
from verl.workers.nonfinite_grads import NonFiniteGradError, NonFiniteGradStreak


def test_streak_counts_consecutive_skips_and_resets_on_a_finite_norm():
    streak = NonFiniteGradStreak("actor", 3, "actor_rollout_ref.actor.max_consecutive_nonfinite_grad_skips")
    for norm in (math.nan, math.inf, 1.0, math.nan, math.nan):  # the finite norm breaks the first streak
        streak.record(norm, "here")
    assert streak.count == 2
    with pytest.raises(NonFiniteGradError, match=r"actor grad norm was nan for 3 consecutive optimizer steps"):
        streak.record(math.nan, "update call 7, epoch 0, mini-batch 0")
    for limit in (None, 0):  # never stop
        forever = NonFiniteGradStreak("critic", limit, "critic.max_consecutive_nonfinite_grad_skips")
        for _ in range(100):
            forever.record(math.nan, "here")
        assert forever.count == 100


def _poison(model: torch.nn.Module, on: list[bool]) -> None:
    """NaN gradients (the loss stays finite) while on[0] is set."""
    param = next(p for p in model.parameters() if p.requires_grad)
    param.register_hook(lambda grad: grad * math.nan if on[0] else grad)


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_role_stops_after_n_consecutive_nonfinite_grad_norms(role):
    key = ("actor_rollout_ref.actor" if role == "actor" else "critic") + ".max_consecutive_nonfinite_grad_skips=3"
    model, worker, _, data, update = _role(role, max_consecutive_nonfinite_grad_skips=3, ppo_micro_batch_size_per_gpu=4)
    on = [True]
    _poison(model, on)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for _ in range(2):  # skipped and recorded, the run goes on
        metrics = update(data)
        assert metrics[f"{role}/grad_norm_nonfinite"] == [1.0]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no step was applied
    assert worker.step_state()["nonfinite_grad_streak"] == 2
    with pytest.raises(NonFiniteGradError) as info:
        update(data)
    msg = str(info.value)
    assert f"{role} grad norm was nan for 3 consecutive optimizer steps" in msg
    assert "update call 2, epoch 0, mini-batch 0" in msg and key in msg
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_streak_resets_on_a_finite_step_and_survives_a_resume(role):
    model, worker, _, data, update = _role(role, max_consecutive_nonfinite_grad_skips=2, ppo_micro_batch_size_per_gpu=4)
    on = [True]
    _poison(model, on)
    update(data)
    on[0] = False
    assert update(data)[f"{role}/grad_norm_nonfinite"] == [0.0]  # a finite step: the streak starts over
    on[0] = True
    update(data)
    state = worker.step_state()
    assert state["nonfinite_grad_streak"] == 1
    # a resumed worker (its step state loaded from the checkpoint) continues the streak: the next skip stops it
    model2, worker2, _, _, update2 = _role(role, max_consecutive_nonfinite_grad_skips=2, ppo_micro_batch_size_per_gpu=4)
    _poison(model2, [True])
    worker2.load_step_state(state)
    with pytest.raises(NonFiniteGradError, match="for 2 consecutive"):
        update2(data)
    worker2.load_step_state({"update_calls": 0})  # a checkpoint written before the streak was saved
    assert worker2.step_state()["nonfinite_grad_streak"] == 0


def test_zero_means_never_stop():
    model, _, _, data, update = _role("critic", max_consecutive_nonfinite_grad_skips=0, ppo_micro_batch_size_per_gpu=4)
    _poison(model, [True])
    for _ in range(5):
        assert update(data)["critic/grad_norm_nonfinite"] == [1.0]
