"""BaseCheckpointManager's retention (ensure_checkpoint_capacity / register_checkpoint) and should_save_ckpt_esi,
at upstream's path verl.utils.checkpoint.checkpoint_manager."""

from __future__ import annotations

import os
import time

import pytest

from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager, should_save_ckpt_esi


@pytest.fixture
def manager():
    return BaseCheckpointManager(model=object(), optimizer=object(), checkpoint_config=None)


def _ckpt(root, step):
    path = root / f"global_step_{step}"
    path.mkdir()
    (path / "model.pt").write_text(str(step))
    return str(path)


def test_keep_one_deletes_the_old_checkpoint_only_after_the_new_one_is_registered(manager, tmp_path):
    first = _ckpt(tmp_path, 100)
    manager.register_checkpoint(first, max_ckpt_to_keep=1)
    manager.ensure_checkpoint_capacity(1)
    assert os.path.exists(first) and manager.previous_saved_paths == [first]
    second = _ckpt(tmp_path, 200)
    manager.register_checkpoint(second, 1)
    assert not os.path.exists(first) and os.path.exists(second)
    assert manager.previous_saved_paths == [second]


def test_keep_k_makes_room_for_one_before_the_save(manager, tmp_path):
    paths = [_ckpt(tmp_path, s) for s in (1, 2, 3)]
    manager.previous_saved_paths = list(paths)
    manager.ensure_checkpoint_capacity(max_ckpt_to_keep=3)  # keeps 2, the newest
    assert manager.previous_saved_paths == paths[1:]
    assert not os.path.exists(paths[0]) and all(os.path.exists(p) for p in paths[1:])
    fourth = _ckpt(tmp_path, 4)
    manager.register_checkpoint(fourth, 3)
    assert manager.previous_saved_paths == [*paths[1:], fourth]


@pytest.mark.parametrize("keep", [0, None])
def test_zero_or_none_keeps_everything(manager, tmp_path, keep):
    paths = [_ckpt(tmp_path, s) for s in (1, 2)]
    manager.previous_saved_paths = list(paths)
    manager.ensure_checkpoint_capacity(keep)
    third = _ckpt(tmp_path, 3)
    manager.register_checkpoint(third, keep)
    manager.register_checkpoint(third, keep)  # registering twice records it once
    assert manager.previous_saved_paths == [*paths, third]
    assert all(os.path.exists(p) for p in manager.previous_saved_paths)


@pytest.fixture
def no_esi_env(monkeypatch):
    monkeypatch.delenv("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", raising=False)
    monkeypatch.delenv("SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", raising=False)
    return monkeypatch


def test_esi_without_an_expiration_never_saves(no_esi_env):
    assert not should_save_ckpt_esi(100)


@pytest.mark.parametrize("var", ["MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP",
                                 "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"])
def test_esi_saves_when_one_more_step_and_a_save_would_not_fit(no_esi_env, var):
    now = time.time()
    no_esi_env.setenv(var, str(int(now + 80)))
    assert should_save_ckpt_esi(30)  # 80 s left <= 30 s step + 60 s save
    assert not should_save_ckpt_esi(0)  # no step timed yet
    no_esi_env.setenv(var, str(int(now + 200)))
    assert not should_save_ckpt_esi(30)  # 200 s > 90 s: there is time for more steps
    assert should_save_ckpt_esi(30, redundant_time=120)  # 200 s <= 30 + 60 + 120
    no_esi_env.setenv(var, str(int(now - 10)))
    assert not should_save_ckpt_esi(30)  # the block has already ended
    no_esi_env.setenv(var, "soon")
    assert not should_save_ckpt_esi(30)
