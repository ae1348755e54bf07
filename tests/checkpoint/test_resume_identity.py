"""Resume only the same run: identities, the checkpoint-folder lock, a finished run, manifests from elsewhere."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading

import pytest

from verl.checkpoint import manifest as manifest_mod
from verl.checkpoint.identity import file_fingerprint, identity_differences, write_identity
from verl.checkpoint.layout import step_dir, write_tracker
from verl.checkpoint.lock import LOCK_NAME, CheckpointDirLock, CheckpointDirLocked
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.resume_guard import ResumeRefused, RunFinished, planned_total_steps, preflight, run_identity

SMALL = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
         "critic.ppo_micro_batch_size_per_gpu=1", "data.train_batch_size=2"]


def _config(tmp_path, *extra: str):
    data = tmp_path / "train.parquet"
    if not data.exists():
        data.write_bytes(b"x" * 3000)
    return validate_config(load_config([f"trainer.default_local_dir={tmp_path / 'run'}",
                                        f"data.train_files=[{data}]", *SMALL, *extra]), check_files=False)


def _checkpoint(root, step: int, identity) -> str:
    folder = step_dir(str(root), step)
    os.makedirs(folder)
    write_identity(folder, identity)
    write_tracker(str(root), step)
    return folder


# -- fingerprints and identities ------------------------------------------------------------------------------------


def test_fingerprint_is_size_and_both_ends_not_mtime(tmp_path):
    path = tmp_path / "f.bin"
    body = bytes(range(256)) * (3 * 4096 * 2)  # 6 MiB: first and last MiB are read, the middle is not
    path.write_bytes(body)
    before = file_fingerprint(str(path))
    assert before.startswith(f"{len(body)} bytes, ends sha256 ")
    path.write_bytes(body)  # regenerated identically: a new mtime, the same fingerprint
    os.utime(path, (1, 1))
    assert file_fingerprint(str(path)) == before
    changed = bytearray(body)
    changed[-1] ^= 1  # the last byte lies in the last MiB
    path.write_bytes(bytes(changed))
    assert file_fingerprint(str(path)) != before
    assert file_fingerprint(str(tmp_path / "nope")) == "missing"


def test_identity_lists_what_differs_with_paths(tmp_path):
    a, b = _config(tmp_path), _config(tmp_path, "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4",
                                      "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2")
    diffs = identity_differences(run_identity(a), run_identity(b))
    assert "algorithm.adv_estimator: gae -> grpo" in diffs
    assert "actor_rollout_ref.rollout.n: 1 -> 4" in diffs
    assert "trainer.n_gpus_per_node: 1 -> 2" in diffs
    assert len(diffs) == 3  # learning-rate-like keys and batch sizes are not identity
    assert identity_differences(run_identity(a), run_identity(_config(tmp_path, "actor_rollout_ref.actor.optim.lr=1"))) == []


def test_a_model_with_another_config_json_differs(tmp_path):
    for name, layers in (("m1", 2), ("m2", 3)):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "config.json").write_text(json.dumps({"num_hidden_layers": layers}))
    one = run_identity(_config(tmp_path, f"actor_rollout_ref.model.path={tmp_path / 'm1'}"))
    two = run_identity(_config(tmp_path, f"actor_rollout_ref.model.path={tmp_path / 'm2'}"))
    (diff,) = identity_differences(one, two)
    assert diff.startswith(f"actor_rollout_ref.model.path config.json: {tmp_path / 'm1'} (sha256 ")
    assert f"-> {tmp_path / 'm2'} (sha256 " in diff


# -- preflight: refuse, warn, finished ------------------------------------------------------------------------------


def test_auto_refuses_another_runs_checkpoint_listing_differences_and_overrides(tmp_path):
    folder = _checkpoint(tmp_path / "run", 2, run_identity(_config(tmp_path)))
    with pytest.raises(ResumeRefused) as err:
        preflight(_config(tmp_path, "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2"), 100)
    message = str(err.value)
    assert folder in message and "algorithm.adv_estimator: gae -> grpo" in message
    assert "trainer.resume_mode=resume_path" in message and f"trainer.resume_from_path={folder}" in message
    assert "trainer.experiment_name=" in message and "trainer.default_local_dir=" in message


def test_resume_path_accepts_another_identity_with_a_warning(tmp_path, capsys):
    folder = _checkpoint(tmp_path / "run", 2, run_identity(_config(tmp_path)))
    checked = preflight(_config(tmp_path, "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                                "trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder}"), 100)
    assert checked.checked_folder == folder
    assert "written by a different run" in capsys.readouterr().err


def test_same_identity_resumes_and_regenerated_data_is_the_same_run(tmp_path):
    config = _config(tmp_path)
    folder = _checkpoint(tmp_path / "run", 2, run_identity(config))
    (tmp_path / "train.parquet").write_bytes(b"x" * 3000)  # regenerated: same bytes, new mtime
    assert preflight(_config(tmp_path), 100).checked_folder == folder
    (tmp_path / "train.parquet").write_bytes(b"y" * 3000)
    with pytest.raises(ResumeRefused, match="data.train_files"):
        preflight(_config(tmp_path), 100)


def test_a_finished_run_says_so_and_writes_nothing(tmp_path):
    config = _config(tmp_path, "trainer.total_epochs=2")
    assert planned_total_steps(config, 7) == 6  # 3 full batches of 2 per epoch (drop_last), 2 epochs
    root = tmp_path / "run"
    _checkpoint(root, 6, run_identity(config))
    before = {p: os.stat(os.path.join(root, p)).st_mtime_ns for p in os.listdir(root)}
    with pytest.raises(RunFinished, match=r"run already finished at step 6/6; nothing to do"):
        preflight(config, 7)
    assert {p: os.stat(os.path.join(root, p)).st_mtime_ns for p in os.listdir(root)} == before
    # one more epoch asked for: not finished
    assert preflight(_config(tmp_path, "trainer.total_epochs=3"), 7).checked_folder == step_dir(str(root), 6)


def test_a_checkpoint_without_identity_resumes_with_a_warning(tmp_path, caplog):
    root = tmp_path / "run"
    os.makedirs(step_dir(str(root), 2))
    write_tracker(str(root), 2)
    with caplog.at_level(logging.WARNING):
        preflight(_config(tmp_path), 100)
    assert "records no run identity" in caplog.text


# -- the lock -------------------------------------------------------------------------------------------------------


def test_a_second_lock_on_the_folder_is_refused_naming_pid_and_host(tmp_path):
    first = CheckpointDirLock(str(tmp_path)).acquire()
    with pytest.raises(CheckpointDirLocked) as err:
        CheckpointDirLock(str(tmp_path)).acquire()
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in str(err.value)
    first.release()
    assert (tmp_path / LOCK_NAME).read_text() == ""  # released cleanly: free
    CheckpointDirLock(str(tmp_path)).acquire().release()


def test_a_killed_holders_lock_is_taken_over_with_a_warning(tmp_path, caplog):
    code = ("import sys, os; from verl.checkpoint.lock import CheckpointDirLock; CheckpointDirLock(sys.argv[1]).acquire();"
            "print('held', flush=True); os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "held" and proc.returncode == -9
    dead = json.loads((tmp_path / LOCK_NAME).read_text())
    with caplog.at_level(logging.WARNING):
        lock = CheckpointDirLock(str(tmp_path)).acquire()
    assert f"stale lock of pid {dead['pid']}" in caplog.text
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


def test_without_flock_a_live_holder_keeps_the_folder_and_a_dead_one_is_stale(tmp_path, monkeypatch):
    import errno

    import verl.checkpoint.lock as lock_mod

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock_mod.fcntl, "flock", no_flock)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(CheckpointDirLocked, match=f"pid {os.getppid()}"):
        CheckpointDirLock(str(tmp_path)).acquire()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1 << 22, "host": "other-node"}))
    with pytest.raises(CheckpointDirLocked, match="cannot be checked"):
        CheckpointDirLock(str(tmp_path)).acquire()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1 << 22, "host": socket.gethostname()}))  # > pid_max
    lock = CheckpointDirLock(str(tmp_path)).acquire()
    assert lock.fcntl_supported is False
    lock.release()


def test_lock_refusal_takes_milliseconds(tmp_path):
    # Refused without waiting for the holder: a blocking lock would never return while `held` is kept, so the
    # thread's join (a generous deadline, not a timing bound) tells the two apart.
    held = CheckpointDirLock(str(tmp_path)).acquire()
    outcome = []

    def second():
        try:
            CheckpointDirLock(str(tmp_path)).acquire()
            outcome.append("acquired")
        except CheckpointDirLocked:
            outcome.append("refused")

    thread = threading.Thread(target=second, daemon=True)
    thread.start()
    thread.join(120)
    try:
        assert outcome == ["refused"], "the second acquire blocked on the held lock" if not outcome else outcome
    finally:
        held.release()


# -- manifests from elsewhere ---------------------------------------------------------------------------------------


def test_a_manifest_from_another_user_or_host_warns_once(tmp_path, caplog):
    manifest_mod.write_manifest(str(tmp_path), {}, {})
    assert manifest_mod.warn_if_foreign(str(tmp_path)) is None  # ours
    body = json.loads((tmp_path / "manifest.json").read_text())
    body["written_by"] = {"uid": os.getuid() + 1, "user": "mallory", "host": "elsewhere"}
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING):
        assert manifest_mod.warn_if_foreign(str(tmp_path)) == f"user mallory (uid {os.getuid() + 1}) on host elsewhere"
        manifest_mod.warn_if_foreign(str(tmp_path))
    assert caplog.text.count("written by user mallory") == 1


def test_the_probe_refuses_a_held_folder_and_writes_nothing(tmp_path):
    from verl.checkpoint.lock import probe_checkpoint_dir

    probe_checkpoint_dir(str(tmp_path / "run"))  # nothing there: nothing created
    assert not (tmp_path / "run").exists()
    held = CheckpointDirLock(str(tmp_path)).acquire()
    content = (tmp_path / LOCK_NAME).read_text()
    with pytest.raises(CheckpointDirLocked, match=f"pid {os.getpid()}"):
        probe_checkpoint_dir(str(tmp_path) + "/")  # a second path spelling of the same folder
    held.release()
    probe_checkpoint_dir(str(tmp_path))  # free: passes, and leaves the (empty) file as it was
    assert (tmp_path / LOCK_NAME).read_text() == "" and content
