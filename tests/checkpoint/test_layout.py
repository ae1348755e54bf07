"""The on-disk bookkeeping: tracker file, publishing a step folder, crash leftovers, retention."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl.checkpoint.atomic import atomic_write_text, publish_dir
from verl.checkpoint.layout import (
    find_latest_ckpt_path,
    list_step_dirs,
    prune_checkpoints,
    read_tracker,
    recover_or_remove_partials,
    step_of,
    write_tracker,
)


def _make_step(root: str, step: int, roles=("actor", "critic")) -> str:
    folder = os.path.join(root, f"global_step_{step}")
    for role in roles:
        os.makedirs(os.path.join(folder, role))
    open(os.path.join(folder, "data.pt"), "w").close()
    return folder


def test_tracker_round_trip_and_garbage(tmp_path):
    assert read_tracker(str(tmp_path)) is None
    write_tracker(str(tmp_path), 12)
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "12"
    assert read_tracker(str(tmp_path)) == 12
    assert os.listdir(tmp_path) == ["latest_checkpointed_iteration.txt"]  # no temp file left behind
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("twelve")
    with pytest.raises(ValueError, match="latest_checkpointed_iteration.txt should hold one step number"):
        read_tracker(str(tmp_path))


def test_find_latest_follows_the_tracker_not_the_newest_folder(tmp_path):
    root = str(tmp_path)
    assert find_latest_ckpt_path(root) is None
    _make_step(root, 2)
    _make_step(root, 3)  # published but the tracker was never moved (crash in between): not resumed from
    assert find_latest_ckpt_path(root) is None
    write_tracker(root, 2)
    assert find_latest_ckpt_path(root) == os.path.join(root, "global_step_2")
    assert find_latest_ckpt_path(str(tmp_path / "nowhere")) is None


def test_step_of_names_the_path():
    assert step_of("/x/global_step_40/") == 40
    with pytest.raises(ValueError, match="'/x/step_40' is not a checkpoint folder"):
        step_of("/x/step_40")


def test_publish_replaces_an_existing_step_and_leftovers_are_handled(tmp_path):
    root = str(tmp_path)
    old = _make_step(root, 4, roles=("actor",))
    new = os.path.join(root, "global_step_4.tmp-abc123")
    os.makedirs(os.path.join(new, "critic"))
    publish_dir(new, old)
    assert sorted(os.listdir(root)) == ["global_step_4"]
    assert os.listdir(old) == ["critic"]

    # a crash between "move the old copy aside" and "move the new one in": the old copy comes back
    os.rename(old, os.path.join(root, "global_step_4.old-0a1b2c3d"))
    os.makedirs(os.path.join(root, "global_step_5.tmp-deadbeef", "actor"))
    atomic_write_text(os.path.join(root, "note.txt"), "x")
    open(os.path.join(root, ".latest_checkpointed_iteration.txt.tmp-12ab34cd"), "w").close()
    removed = recover_or_remove_partials(root)
    assert sorted(os.path.basename(p) for p in removed) == [".latest_checkpointed_iteration.txt.tmp-12ab34cd",
                                                              "global_step_5.tmp-deadbeef"]
    assert sorted(os.listdir(root)) == ["global_step_4", "note.txt"]  # other files are not ours to touch
    assert os.listdir(os.path.join(root, "global_step_4")) == ["critic"]


def test_an_old_copy_next_to_a_complete_step_is_removed(tmp_path):
    root = str(tmp_path)
    _make_step(root, 4)
    os.makedirs(os.path.join(root, "global_step_4.old-0a1b2c3d"))
    recover_or_remove_partials(root)
    assert sorted(os.listdir(root)) == ["global_step_4"]


def test_tracker_naming_a_missing_folder_says_what_to_do(tmp_path):
    write_tracker(str(tmp_path), 7)
    with pytest.raises(FileNotFoundError, match="names step 7 but .*global_step_7 does not exist.*resume_mode"):
        find_latest_ckpt_path(str(tmp_path))


@settings(max_examples=60, deadline=None)
@given(steps=st.sets(st.integers(1, 30), min_size=1, max_size=8),
       keep_actor=st.one_of(st.none(), st.integers(1, 4)), keep_critic=st.one_of(st.none(), st.integers(1, 4)))
def test_prune_keeps_the_newest_per_role_and_the_current(steps, keep_actor, keep_critic):
    with tempfile.TemporaryDirectory() as root:
        for step in steps:
            _make_step(root, step)
        current = max(steps)
        prune_checkpoints(root, {"actor": keep_actor, "critic": keep_critic}, protect_step=current)
        remaining = [s for s, _ in list_step_dirs(root)]
        assert current in remaining
        for role, keep in (("actor", keep_actor), ("critic", keep_critic)):
            holders = [s for s in remaining if os.path.isdir(os.path.join(root, f"global_step_{s}", role))]
            expected = sorted(steps)[-keep:] if keep else sorted(steps)
            assert holders == expected, (role, keep, holders)
        # a step folder survives exactly when some role still has its copy there
        kept_any = set(sorted(steps)[-keep_actor:] if keep_actor else steps) | set(
            sorted(steps)[-keep_critic:] if keep_critic else steps)
        assert set(remaining) == kept_any
