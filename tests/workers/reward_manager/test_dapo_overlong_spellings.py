"""DAPO's overlong buffer, spelled as ours (reward_model.overlong_buffer.*) or as upstream's recipe
(+reward_model.reward_kwargs.overlong_buffer_cfg.* with +reward_model.reward_kwargs.max_resp_len): both reach
DAPORewardManager the way the launcher builds it, and two different buffers at once stop the run."""

from __future__ import annotations

import dataclasses

import pytest

from tests.workers.reward_manager.conftest import make_batch
from verl.trainer.config import OverlongBufferConfig, load_config, validate_config
from verl.trainer.ppo.reward import compute_reward, load_reward_manager
from verl.workers.reward_manager import DAPORewardManager
from verl.workers.reward_manager.dapo import _TYPED_DEFAULTS

OURS = ["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=2",
        "reward_model.overlong_buffer.penalty_factor=1.0", "reward_model.overlong_buffer.log=true"]
RECIPE = ["+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
          "+reward_model.reward_kwargs.overlong_buffer_cfg.len=2",
          "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
          "+reward_model.reward_kwargs.overlong_buffer_cfg.log=True", "+reward_model.reward_kwargs.max_resp_len=4"]


def _manager(*overrides: str, tokenizer=None) -> DAPORewardManager:
    config = validate_config(load_config(["reward_model.reward_manager=dapo", "data.max_response_length=4",
                                          *overrides]), check_files=False)
    # as verl.trainer.ppo.launcher.build_trainer does
    return load_reward_manager(config, tokenizer=tokenizer, num_examine=0, **dict(config.reward_model.reward_kwargs))


def test_typed_defaults_match_the_config_section():
    assert dataclasses.asdict(OverlongBufferConfig()) == _TYPED_DEFAULTS


@pytest.mark.parametrize("spelling", [OURS, RECIPE], ids=["ours", "recipe"])
def test_both_spellings_reach_the_manager_and_penalise(spelling, tokenizer):
    manager = _manager(*spelling, tokenizer=tokenizer)
    assert isinstance(manager, DAPORewardManager) and manager.max_resp_len == 4
    assert {k: manager.overlong_buffer_cfg[k] for k in ("enable", "len", "penalty_factor", "log")} == {
        "enable": True, "len": 2, "penalty_factor": 1.0, "log": True}
    data, lengths = make_batch(tokenizer, [("Tom has 12", "#### 14", "14")], data_source="arithmetic", extra=None)
    reward, extra = compute_reward(data, manager)
    # 4 - 2 = 2 tokens free, then -1/2 per token: the 3-token response loses (3 - 2) / 2
    assert lengths[0] == 3
    expected = -0.5
    assert extra["overlong_reward"] == [pytest.approx(expected)]
    assert reward[0, lengths[0] - 1].item() == pytest.approx(extra["acc"][0] + expected)


def test_same_buffer_in_both_spellings_is_accepted():
    assert _manager(*OURS, *RECIPE).overlong_buffer_cfg["len"] == 2


def test_different_buffers_in_both_spellings_stop_naming_both():
    with pytest.raises(ValueError) as info:
        _manager(*OURS, *RECIPE[:1], "+reward_model.reward_kwargs.overlong_buffer_cfg.len=3")
    message = str(info.value)
    assert "reward_model.overlong_buffer.* and reward_model.reward_kwargs.overlong_buffer_cfg.*" in message
    assert "len: 2 vs 3" in message and "Keep one spelling" in message
    with pytest.raises(ValueError, match=r"unknown keys \['length'\]"):
        _manager("+reward_model.reward_kwargs.overlong_buffer_cfg.length=2")
