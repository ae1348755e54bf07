"""The trainer's deadlines keys reach the worker groups, and a worker-group failure says where the run can resume."""

from __future__ import annotations

import os

import pytest

from tests.trainer.ppo.test_trainer_keys import make_trainer, typed
from verl.checkpoint.layout import write_tracker
from verl.single_controller.base.deadlines import WorkerDeadlines
from verl.single_controller.ray import WorkerDeadlineError
from verl.single_controller.roles import Role
from verl.trainer.ppo.worker_failures import last_checkpoint_note, worker_deadlines


def test_trainer_keys_become_the_groups_deadlines():
    config = typed("trainer.ray_wait_register_center_timeout=120", "trainer.worker_call_timeout_s=600",
                   "trainer.worker_call_timeout_per_sample_s=2.5").trainer
    d = worker_deadlines(config)
    assert d == WorkerDeadlines(startup_s=120.0, call_s=600.0, per_sample_s=2.5)
    assert d.for_call("init_model") == 120 and d.for_call("update_actor", samples=16) == 600 + 16 * 2.5
    defaults = worker_deadlines(typed().trainer)
    assert (defaults.startup_s, defaults.call_s, defaults.per_sample_s) == (300.0, 1800.0, 30.0)
    off = worker_deadlines(typed("trainer.ray_wait_register_center_timeout=null",
                                 "trainer.worker_call_timeout_s=null").trainer)
    assert off.for_call("init_model") is None and off.for_call("update_actor", 16) is None


def test_note_names_the_last_complete_checkpoint_or_none(tmp_path):
    assert "there is no complete checkpoint in" in last_checkpoint_note(str(tmp_path / "absent"))
    os.makedirs(tmp_path / "global_step_2")
    os.makedirs(tmp_path / "global_step_3.tmp-abc")  # a save in progress is not a checkpoint
    write_tracker(str(tmp_path), 2)
    note = last_checkpoint_note(str(tmp_path))
    assert f"the last complete checkpoint is {tmp_path / 'global_step_2'} (step 2)" in note
    assert os.path.isdir(tmp_path / "global_step_3.tmp-abc")  # reading it touched nothing


class _HungGroup:
    """Stands in for RayWorkerGroup: records its deadlines, then overruns start-up."""

    seen: list = []

    def __init__(self, resource_pool, ray_cls_with_init, name_prefix, deadlines):
        _HungGroup.seen.append(deadlines)
        raise WorkerDeadlineError("deadline overrun: stage worker start-up", stage="worker start-up",
                                  method="__init__", pending_ranks=[1], timeout_s=deadlines.startup_s)


class _Pools:
    def create_resource_pool(self):
        pass

    def get_resource_pool(self, role):
        return "pool"


def test_init_workers_passes_the_deadlines_and_notes_the_checkpoint(tmp_path):
    trainer = make_trainer("trainer.ray_wait_register_center_timeout=7", f"trainer.default_local_dir={tmp_path}",
                           ray_worker_group_cls=_HungGroup)
    trainer.resource_pool_manager = _Pools()
    trainer.role_worker_mapping = {role: object for role in Role}
    with pytest.raises(WorkerDeadlineError) as info:
        trainer.init_workers()
    assert _HungGroup.seen[-1].startup_s == 7
    assert any(f"there is no complete checkpoint in {tmp_path}" in n for n in info.value.__notes__)
