"""The actor's and critic's update counters (they seed the mini-batch shuffle) travel in the checkpoint's extra
state: a resumed role continues the count instead of restarting it at 0."""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace

import torch

from tests.checkpoint.fsdp_ckpt_runs import manager
from verl.checkpoint.fsdp_checkpoint_manager import extra_state_name
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.critic.dp_critic import DataParallelPPOCritic


def _roles_with_counts(actor_calls: int, critic_calls: int):
    actor, critic = object.__new__(DataParallelPPOActor), object.__new__(DataParallelPPOCritic)
    actor._update_calls, critic._update_calls = actor_calls, critic_calls
    for role in (actor, critic):  # the non-finite-gradient streak (section deadlines) rides in the same step state
        role._nonfinite_streak = SimpleNamespace(count=0)
    return actor, critic


def _save_and_load(tmp_path, saved_role, fresh_role) -> None:
    from tests.helpers.tiny_model import tiny_llama

    model = tiny_llama(seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    saver = manager(model, optimizer, scheduler, contents=["model", "optimizer", "extra"])
    saver.step_state = saved_role
    saver.save_checkpoint(str(tmp_path / "ckpt"), global_step=3)
    loader = manager(model, optimizer, scheduler, contents=["model", "optimizer", "extra"])
    loader.step_state = fresh_role
    loader.load_checkpoint(str(tmp_path / "ckpt"))


def test_actor_and_critic_counters_are_saved_and_restored(tmp_path):
    actor, critic = _roles_with_counts(5, 4)
    fresh_actor, fresh_critic = _roles_with_counts(0, 0)
    _save_and_load(tmp_path / "actor", actor, fresh_actor)
    _save_and_load(tmp_path / "critic", critic, fresh_critic)
    assert fresh_actor._update_calls == 5 and fresh_critic._update_calls == 4
    extra = torch.load(tmp_path / "actor" / "ckpt" / extra_state_name(1, 0), weights_only=True)
    assert extra["step_state"]["update_calls"] == 5  # plain ints: loads with weights_only=True


def test_a_checkpoint_without_counters_warns_and_keeps_zero(tmp_path, caplog):
    fresh_actor, _ = _roles_with_counts(0, 0)
    with caplog.at_level(logging.WARNING, logger="verl.checkpoint.fsdp_checkpoint_manager"):
        _save_and_load(tmp_path, None, fresh_actor)  # saved as before this change: no step state
    assert fresh_actor._update_calls == 0
    assert "predates saved update counters" in caplog.text
    assert os.path.exists(tmp_path / "ckpt" / extra_state_name(1, 0))

