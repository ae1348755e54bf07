"""verl.utils.rollout_skip.RolloutSkip: dump the first steps' generations, then replay them per post_dump_action."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.utils.rollout_skip import DataProto, RolloutSkip, dataproto_compress, dataproto_decompress, read_dumped_data


def _config(tmp_path, **skip):
    return OmegaConf.create({
        "trainer": {"project_name": "proj", "experiment_name": "exp"},
        "data": {"gen_batch_size": 2, "max_prompt_length": 4, "max_response_length": 3},
        "actor_rollout_ref": {"rollout": {"n": 2, "skip": {"enable": True, "dump_dir": str(tmp_path), **skip}}},
    })


class FakeGroup:
    """generate_sequences returns a new batch each call, marked with the call number."""

    def __init__(self):
        self.calls = 0

    def generate_sequences(self, batch, **kwargs):
        self.calls += 1
        return DataProto.from_dict(tensors={"responses": torch.full((4, 3), self.calls)})


def _prompts(step):
    return DataProto.from_dict(
        tensors={"prompts": torch.full((4, 4), step)},
        non_tensors={"reward_model": np.array([{"ground_truth": step}] * 4, dtype=object)},
    )


def _run(skip, group, steps):
    seen = []
    for step in range(1, steps + 1):
        prompts = _prompts(step)
        skip.record(prompts)
        out = group.generate_sequences(None)
        seen.append((int(out.batch["responses"][0, 0]), int(prompts.batch["prompts"][0, 0]),
                     prompts.non_tensor_batch["reward_model"][0]["ground_truth"]))
    return seen


def test_disabled_without_a_skip_section_or_with_enable_false(tmp_path):
    assert not RolloutSkip({"actor_rollout_ref": {"rollout": {"n": 2}}}).is_enable
    skip = RolloutSkip(_config(tmp_path, enable=False))
    group = FakeGroup()
    original = group.generate_sequences
    skip.wrap_generate_sequences(group)
    assert group.generate_sequences == original and not skip.is_activate


def test_init_reads_the_config_and_wrapping_activates(tmp_path, capsys):
    skip = RolloutSkip(_config(tmp_path, dump_step=2))
    assert (skip.n, skip.gbs, skip.prompt_length, skip.response_length) == (2, 2, 4, 3)
    assert skip.do_compress and skip.dump_step == 2
    assert skip.specify_dumped_dir == tmp_path / "exp_proj" / "GBS2_N2_in4_out3"
    assert not skip.is_activate and not skip.is_dump_step
    group = FakeGroup()
    skip.wrap_generate_sequences(group)
    assert skip.is_activate and skip.is_dump_step and skip._rollout_wg is group
    assert "Successfully patched" in capsys.readouterr().out


def test_upstreams_current_constructor_takes_the_group(tmp_path):
    group = FakeGroup()
    skip = RolloutSkip(_config(tmp_path, dump_step=2), group)
    assert not skip.is_active
    skip.wrap_generate_sequences()
    assert skip.is_active and skip._rollout_wg is group
    with pytest.raises(ValueError, match="no rollout worker group"):
        RolloutSkip(_config(tmp_path, dump_step=2)).wrap_generate_sequences()


@pytest.mark.parametrize("compress", [True, False])
def test_repeat_cycles_through_the_dumped_steps_with_their_prompts(tmp_path, compress):
    skip = RolloutSkip(_config(tmp_path, dump_step=2, post_dump_action="repeat", compress=compress))
    group = FakeGroup()
    skip.wrap_generate_sequences(group)
    seen = _run(skip, group, 5)
    # steps 1-2 generate and dump; steps 3, 4, 5 replay dumps 1, 2, 1 with their own prompts and ground truths
    assert seen == [(1, 1, 1), (2, 2, 2), (1, 1, 1), (2, 2, 2), (1, 1, 1)]
    assert group.calls == 2
    assert skip.list_dumped_steps == [1, 2]


def test_a_second_run_loads_the_dumps_instead_of_generating(tmp_path):
    first = RolloutSkip(_config(tmp_path, dump_step=2, post_dump_action="repeat_last"))
    group = FakeGroup()
    first.wrap_generate_sequences(group)
    _run(first, group, 2)
    again = RolloutSkip(_config(tmp_path, dump_step=2, post_dump_action="repeat_last"))
    fresh = FakeGroup()
    fresh.calls = 100
    again.wrap_generate_sequences(fresh)
    seen = _run(again, fresh, 4)
    assert seen == [(1, 1, 1), (2, 2, 2), (2, 2, 2), (2, 2, 2)]
    assert fresh.calls == 100  # nothing generated


@pytest.mark.parametrize("action, dumped", [("rollout", False), ("rollout_with_dump", True)])
def test_rollout_actions_generate_after_the_dump_steps(tmp_path, action, dumped):
    skip = RolloutSkip(_config(tmp_path, dump_step=1, post_dump_action=action))
    group = FakeGroup()
    skip.wrap_generate_sequences(group)
    seen = _run(skip, group, 3)
    assert [s[0] for s in seen] == [1, 2, 3]
    assert skip.get_path_dump(3).exists() is dumped
    assert skip.get_path_dump(1).exists()


def test_generation_without_a_record_is_an_assertion_error(tmp_path):
    skip = RolloutSkip(_config(tmp_path, dump_step=1, post_dump_action="rollout_with_dump"))
    group = FakeGroup()
    skip.wrap_generate_sequences(group)
    skip.record(_prompts(1))
    group.generate_sequences(None)
    with pytest.raises(AssertionError, match="record"):
        group.generate_sequences(None)


def test_dump_step_zero_needs_a_rollout_action(tmp_path):
    with pytest.raises(ValueError, match="dump_step=0"):
        RolloutSkip(_config(tmp_path, dump_step=0, post_dump_action="repeat"))
    assert RolloutSkip(_config(tmp_path, dump_step=0, post_dump_action="rollout")).dump_step == 0


def test_typed_sections_work_too(tmp_path):
    config = SimpleNamespace(
        trainer=SimpleNamespace(project_name="p", experiment_name="e"),
        data=SimpleNamespace(gen_batch_size=None, train_batch_size=8, max_prompt_length=4, max_response_length=3),
        actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(n=4, skip={"enable": True, "dump_dir": str(tmp_path)})),
    )
    skip = RolloutSkip(config)
    assert skip.gbs == 8 and skip.n == 4 and skip.post_dump_action.value == "rollout"  # upstream's action=cache
    config.actor_rollout_ref.rollout.skip.update(max_dump_step=3, action="repeat_last")  # its current spelling
    skip = RolloutSkip(config)
    assert skip.dump_step == 3 and skip.post_dump_action.value == "repeat_last"


def test_compress_round_trip_and_dump_files_need_no_pickle(tmp_path):
    gen, new = FakeGroup().generate_sequences(None), _prompts(7)
    data = {"gen_batch": gen, "new_batch": new, "compressed": ["gen_batch", "new_batch"]}
    info = dataproto_compress(data)
    assert isinstance(data["gen_batch"], bytes) and 0 < info["ratio"] < 1
    assert info["size_compressed_data"] < info["size_data"]
    dataproto_decompress(data)
    assert torch.equal(data["gen_batch"].batch["responses"], gen.batch["responses"])
    assert data["new_batch"].non_tensor_batch["reward_model"][0] == {"ground_truth": 7}

    skip = RolloutSkip(_config(tmp_path, dump_step=1))
    group = FakeGroup()
    skip.wrap_generate_sequences(group)
    _run(skip, group, 1)
    assert read_dumped_data(skip.get_path_dump(1))["gen_batch"].batch["responses"][0, 0] == 1
    bad = tmp_path / "evil.pt"
    bad.write_bytes(pickle.dumps({"format": "x", "obj": SimpleNamespace()}))
    with pytest.raises(pickle.UnpicklingError):
        read_dumped_data(bad)
