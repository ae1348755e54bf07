"""reward_model.use_reward_loop and its keys, through the trainer's load_reward_manager (effects, not timings)."""

from __future__ import annotations

import asyncio
import textwrap

import pytest
import torch

from tests.workers.reward_manager.conftest import make_batch
from verl.trainer.config import CustomRewardFunctionConfig, DataConfig, PPOTrainerConfig
from verl.trainer.ppo.reward import compute_reward, load_reward_manager, reward_metrics
from verl.utils.config_schema import build_config
from verl.workers.reward_loop import RateLimitedRewardManager, RewardLoopError, RewardLoopManager
from verl.workers.reward_manager import NaiveRewardManager
from verl.workers.reward_manager.timed_scoring import RewardTimeoutError

SAMPLES = [("Tom has 12", "#### 14", "14"), ("Anna has 9", "#### 10", "11"), ("Compute 1 + 1", "2", "2"),
           ("Compute 3 * 4", "#### 12", "12")]


def make_config(tmp_path, source=None, **rm):
    path = None
    if source is not None:
        path = tmp_path / "my_reward.py"
        path.write_text(textwrap.dedent(source))
    rm.setdefault("scoring", {"timeout": None})
    result = build_config(PPOTrainerConfig, {"reward_model": rm})
    assert not result.problems, result.problems
    config = result.config
    config.custom_reward_function = CustomRewardFunctionConfig(path=str(path) if path else None)
    config.data = DataConfig(reward_fn_key="data_source", max_response_length=32)
    return config


# Each call holds its slot until `expect` calls have been in flight together (the test sets it), so the peak does not
# depend on how the event loop happens to interleave on a loaded box. Bounded: a limit below `expect` shows up as a
# lower peak after 60 s, not as a hang; a limit above it as a higher peak.
GATE = """
import asyncio
import time

state = {"running": 0, "peak": 0, "expect": 1}

async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    state["running"] += 1
    state["peak"] = max(state["peak"], state["running"])
    give_up = time.monotonic() + 60
    while state["peak"] < state["expect"] and time.monotonic() < give_up:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)  # one more turn: a call beyond the limit would start here
    state["running"] -= 1
    return float(solution_str.endswith(str(ground_truth)))
"""


def _gate_state(manager):
    import sys

    fn = manager.manager.compute_score
    return sys.modules[fn.__module__].state


def test_use_reward_loop_false_keeps_the_batch_manager(tmp_path, tokenizer):
    manager = load_reward_manager(make_config(tmp_path), tokenizer, num_examine=0)
    assert isinstance(manager, NaiveRewardManager)


def test_use_reward_loop_scores_through_the_loop_like_the_batch_path(tmp_path, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    loop = load_reward_manager(make_config(tmp_path, use_reward_loop=True), tokenizer, num_examine=0)
    batch = load_reward_manager(make_config(tmp_path), tokenizer, num_examine=0)
    assert isinstance(loop, RewardLoopManager) and loop.spec().manager is loop.manager
    got, want = compute_reward(data, loop), compute_reward(data, batch)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]


@pytest.mark.parametrize("num_workers", [1, 3])
def test_num_workers_is_how_many_samples_are_scored_at_once(tmp_path, tokenizer, num_workers):
    data, _ = make_batch(tokenizer, SAMPLES)
    config = make_config(tmp_path, GATE, use_reward_loop=True, num_workers=num_workers)
    manager = load_reward_manager(config, tokenizer, num_examine=0)  # an async function: the per-sample manager
    assert isinstance(manager.manager, RateLimitedRewardManager)
    _gate_state(manager)["expect"] = num_workers
    tensor, _ = compute_reward(data, manager)
    assert _gate_state(manager)["peak"] == num_workers
    assert tensor.sum(-1).tolist() == [1.0, 0.0, 1.0, 1.0]


def test_max_concurrent_caps_calls_below_num_workers(tmp_path, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    config = make_config(tmp_path, GATE, use_reward_loop=True, num_workers=4, reward_manager="rate_limited",
                         max_concurrent=2)
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    _gate_state(manager)["expect"] = 2
    compute_reward(data, manager)
    assert _gate_state(manager)["peak"] == 2


def test_rate_limited_without_the_loop_runs_as_a_batch_manager(tmp_path, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    config = make_config(tmp_path, GATE, reward_manager="rate_limited", max_concurrent=3)
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    assert isinstance(manager, RateLimitedRewardManager)
    _gate_state(RewardLoopManager(manager))["expect"] = 3
    tensor, extra = compute_reward(data, manager)
    assert tensor.sum(-1).tolist() == [1.0, 0.0, 1.0, 1.0] and extra == {}
    assert _gate_state(RewardLoopManager(manager))["peak"] == 3


def test_max_rpm_and_max_tpm_take_tokens_per_request(tmp_path, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES[:1])
    config = make_config(tmp_path, GATE, reward_manager="rate_limited", max_rpm=60.0, max_tpm=6000.0,
                         estimated_tokens_per_request=40.0)
    manager = load_reward_manager(config, tokenizer, num_examine=0)

    async def one_call():
        await manager.run_single(data)
        return manager.limits._limiters()

    limiters = asyncio.run(one_call())
    assert limiters["rpm"].rate_limit == 1.0 and limiters["rpm"].max_tokens == 1.0
    assert limiters["tpm"].rate_limit == 100.0
    # one request took 1 of the 1-request bucket and 40 of the 100-token bucket (plus what refilled since)
    assert limiters["rpm"].tokens < 0.5 and limiters["tpm"].tokens < 100.0 - 40.0 + 30.0


HANG = """
import asyncio

async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "2":
        await asyncio.Event().wait()  # never answers
    return 1.0
"""


def test_timeout_scores_a_hanging_sample_zero_and_counts_it(tmp_path, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    config = make_config(tmp_path, HANG, use_reward_loop=True, reward_manager="rate_limited", timeout=0.2)
    tensor, extra = compute_reward(data, load_reward_manager(config, tokenizer, num_examine=0))
    assert tensor.sum(-1).tolist() == [1.0, 1.0, 0.0, 1.0]
    assert extra == {"reward_timeout": [False, False, True, False]}
    assert reward_metrics(extra) == {"reward/timeouts": 1.0}


def test_timeout_with_on_timeout_error_names_the_sample(tmp_path, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    config = make_config(tmp_path, HANG, use_reward_loop=True, reward_manager="rate_limited", timeout=0.2,
                         scoring={"timeout": None, "on_timeout": "error"})
    with pytest.raises(RewardLoopError, match=r"row 2: RewardTimeoutError.*within 0.2 s"):
        compute_reward(data, load_reward_manager(config, tokenizer, num_examine=0))
    assert issubclass(RewardTimeoutError, Exception)


MY_MANAGER = """
from verl.experimental.reward_loop.reward_manager import RewardManagerBase

class LengthManager(RewardManagerBase):
    def __init__(self, config, tokenizer, compute_score=None, **kwargs):
        super().__init__(config, tokenizer)

    async def run_single(self, data):
        length = int(data.batch["attention_mask"][0, -data.batch["responses"].shape[-1]:].sum())
        return {"reward_score": float(length), "reward_extra_info": {"tokens": length}}
"""


def test_reward_loop_source_importlib_loads_the_named_class(tmp_path, tokenizer):
    module = tmp_path / "my_manager.py"
    module.write_text(textwrap.dedent(MY_MANAGER))
    data, lengths = make_batch(tokenizer, SAMPLES)
    config = make_config(tmp_path, use_reward_loop=True, reward_loop_source="importlib",
                         reward_loop_module_path=str(module), reward_loop_class_name="LengthManager")
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    assert type(manager.manager).__name__ == "LengthManager"
    tensor, extra = compute_reward(data, manager)
    assert tensor.sum(-1).tolist() == [float(n) for n in lengths] and extra == {"tokens": lengths}


def test_v07s_importlib_spelling_loads_the_class_named_by_reward_manager_name(tmp_path, tokenizer):
    """reward.reward_manager.{source=importlib, module.path, name}: upstream v0.7's loader takes `name` as the class
    in the file (its module.name only names the imported module); a command line in that spelling scores with it."""
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.config.aliases import rewrite_aliases

    module = tmp_path / "my_manager.py"
    module.write_text(textwrap.dedent(MY_MANAGER))
    overrides = rewrite_aliases(["reward.reward_manager.source=importlib", f"reward.reward_manager.module.path={module}",
                                 "reward.reward_manager.name=LengthManager", "reward.reward_manager.module.name=mine"])
    typed = validate_config(load_config(overrides), check_files=False)
    assert typed.reward_model.reward_loop_class_name == "LengthManager" and typed.reward_model.reward_manager == "naive"
    assert typed.reward.reward_manager.name == "LengthManager"  # v0.7's section reads what its loader would load
    config = make_config(tmp_path, use_reward_loop=typed.reward_model.use_reward_loop,
                         reward_loop_source="importlib", reward_loop_module_path=str(module),
                         reward_loop_class_name=typed.reward_model.reward_loop_class_name)
    data, lengths = make_batch(tokenizer, SAMPLES)
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    assert type(manager.manager).__name__ == "LengthManager"
    assert compute_reward(data, manager)[0].sum(-1).tolist() == [float(n) for n in lengths]


def test_reward_loop_keys_are_checked_before_ray():
    problems = build_config(PPOTrainerConfig, {"reward_model": {"reward_loop_source": "importlib"}}).problems
    from verl.trainer.config.reward import check_reward_model

    cfg = build_config(PPOTrainerConfig, {"reward_model": {"use_reward_loop": True,
                                                           "reward_loop_source": "importlib"}}).config
    assert not problems
    assert any("reward_model.reward_loop_module_path" in p for p in check_reward_model(cfg))
    cfg = build_config(PPOTrainerConfig, {"reward_model": {"reward_loop_class_name": "X"}}).config
    assert any("reward_model.reward_loop_class_name is read by the reward loop only" in p
               for p in check_reward_model(cfg))
    refused = build_config(PPOTrainerConfig, {"reward_model": {"rollout": {"name": "vllm",
                                                                           "tensor_model_parallel_size": 2}}})
    # the judge engine is built (test_genrm_engine.py); tensor parallelism across processes is not
    assert any("reward_model.rollout.tensor_model_parallel_size" in p for p in refused.problems)
    assert build_config(PPOTrainerConfig, {"reward_model": {"num_workers": 0}}).problems
