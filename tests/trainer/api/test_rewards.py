"""Reward callables -> the managers' scoring function: forms, weights, signatures, the manager choice, and
lambdas/closures scored in the managers' spawned scoring processes (shipped with cloudpickle)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.workers.reward_manager.conftest import RESPONSE_LEN, make_batch
from verl.trainer.api.builder import compose
from verl.trainer.api.rewards import WeightedReward, adapt_reward, is_batched, plug_reward
from verl.trainer.config import ConfigError, validate_config
from verl.trainer.ppo.reward import compute_reward, load_reward_manager

SAMPLES = [("Tom has 12", "#### 14", "14"), ("Anna has 9", "#### 10", "11")]


def per_sample(data_source, solution_str, ground_truth, extra_info):
    return float(solution_str.split("####")[-1].strip() == ground_truth)


def batched(data_sources, solution_strs, ground_truths, extra_infos):
    return [0.5 * len(s) for s in solution_strs]


def test_forms_are_told_apart_by_parameter_names() -> None:
    assert not is_batched(per_sample)
    assert is_batched(batched)
    assert not is_batched(lambda data_source, solution_str, ground_truth, extra_info=None, **kw: 0.0)
    assert is_batched(lambda data_sources, solution_strs, ground_truths, extra_infos: [])


def test_a_wrong_signature_is_refused_naming_the_function() -> None:
    def my_scorer(text, answer):
        return 0.0

    with pytest.raises(TypeError, match=r"my_scorer\(text, answer\).*data_source, solution_str"):
        adapt_reward(my_scorer)
    with pytest.raises(TypeError, match="not callable"):
        adapt_reward("compute_score")


def test_weighted_list_sums_scores_and_keeps_each_part() -> None:
    plan = adapt_reward([(per_sample, 1.0), (lambda data_source, solution_str, ground_truth, extra_info: 0.5, 0.5)])
    assert isinstance(plan.compute_score, WeightedReward) and not plan.batched
    out = plan.compute_score(data_source="a", solution_str="#### 14", ground_truth="14", extra_info={})
    assert out == {"score": 1.0 * 1.0 + 0.5 * 0.5, "per_sample": 1.0, "reward_1": 0.5}


def test_mixed_list_becomes_batched() -> None:
    plan = adapt_reward([per_sample, (batched, 2.0)])
    assert plan.batched
    out = plan.compute_score(data_sources=["a", "b"], solution_strs=["#### 14", "#### 9"],
                             ground_truths=["14", "11"], extra_infos=[{}, {}])
    # per_sample: 1, 0; batched: 0.5 * len: 3.5 ("#### 14"), 3.0 ("#### 9"), weighted x2
    assert out == [{"score": 8.0, "per_sample": 1.0, "batched": 3.5}, {"score": 6.0, "per_sample": 0.0, "batched": 3.0}]


def test_plug_switches_the_default_manager_for_a_batched_function() -> None:
    cfg = compose(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2"])
    plug_reward(cfg, adapt_reward(batched))
    assert cfg.reward_model.reward_manager == "batch"
    cfg = compose(["reward_model.reward_manager=dapo"])
    with pytest.raises(ConfigError, match="reward_model.reward_manager=dapo"):
        plug_reward(cfg, adapt_reward(batched))


def test_reward_fn_and_a_reward_file_are_refused_together() -> None:
    cfg = compose(["custom_reward_function.path=/some/reward.py"])
    with pytest.raises(ConfigError, match=r"reward_fn= and custom_reward_function.path='/some/reward.py'"):
        plug_reward(cfg, adapt_reward(per_sample))


def _manager_for(fn, overrides=()):
    plan = adapt_reward(fn)
    cfg = compose(["data.max_response_length=32", *overrides])
    plug_reward(cfg, plan)
    typed = validate_config(cfg, check_files=False)
    return load_reward_manager(typed, build_tiny_tokenizer(), num_examine=0, compute_score=plan.compute_score)


@pytest.mark.parametrize("kind", ["lambda", "closure", "batched_closure"])
def test_lambdas_and_closures_score_in_the_spawned_pool(kind: str) -> None:
    bonus = 0.25  # captured: only a by-value pickle carries it to the scoring process
    fns = {
        "lambda": lambda data_source, solution_str, ground_truth, extra_info: bonus + float("14" in solution_str),
        "closure": (lambda b: (lambda data_source, solution_str, ground_truth, extra_info: b))(bonus),
        "batched_closure": lambda data_sources, solution_strs, ground_truths, extra_infos: [bonus] * len(solution_strs),
    }
    manager = _manager_for(fns[kind])
    assert manager.scorer.limited  # the default reward_model.scoring.timeout: scored in spawned processes
    try:
        data, lengths = make_batch(build_tiny_tokenizer(), SAMPLES)
        reward, extra = compute_reward(data, manager)
    finally:
        manager.close()
    expected = torch.zeros(2, RESPONSE_LEN)
    first = 1.25 if kind == "lambda" else 0.25
    expected[0, lengths[0] - 1], expected[1, lengths[1] - 1] = first, 0.25
    assert torch.equal(reward, expected)
    assert extra["reward_timeout"] == [False, False]


def test_weighted_parts_reach_the_reward_extra_info() -> None:
    manager = _manager_for([(per_sample, 2.0), (lambda data_source, solution_str, ground_truth, extra_info: 1.0, -1.0)])
    try:
        data, lengths = make_batch(build_tiny_tokenizer(), SAMPLES)
        reward, extra = compute_reward(data, manager)
    finally:
        manager.close()
    assert reward.sum(-1).tolist() == [2.0 * 1 - 1.0, 2.0 * 0 - 1.0]
    assert extra["per_sample"] == [1.0, 0.0] and extra["reward_1"] == [1.0, 1.0]


def test_the_manager_ships_to_a_fresh_interpreter_by_value(tmp_path) -> None:
    """launch_reward_fn_async sends the manager to a Ray task with Ray's cloudpickle: a lambda and a function of
    this test module (not importable there) must arrive by value."""
    import subprocess
    import sys

    from ray import cloudpickle

    offset = 3.0
    manager = _manager_for([per_sample, lambda data_source, solution_str, ground_truth, extra_info: offset])
    blob = tmp_path / "manager.pkl"
    blob.write_bytes(cloudpickle.dumps(manager))
    code = ("import pickle, sys; m = pickle.loads(open(sys.argv[1], 'rb').read());"
            "print(m.compute_score(data_source='a', solution_str='#### 14', ground_truth='14', extra_info={}))")
    out = subprocess.run([sys.executable, "-c", code, str(blob)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PATH": "", "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str({"score": 4.0, "per_sample": 1.0, "reward_1": 3.0})
