"""The batch-key table (verl.protocol.keys): check_batch on hand-made batches, producers, expected_keys per config."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

import verl.protocol
from verl.protocol import DataProto
from verl.protocol.keys import BATCH_KEYS, check_batch, expected_keys
from verl.trainer.config import AlgoConfig
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.workers.config import ActorRolloutRefConfig, FSDPActorConfig, RolloutConfig

ROWS, PROMPT, RESPONSE = 4, 6, 3


def _config(adv_estimator: str = "grpo", **flags: bool) -> PPOTrainerConfig:
    """A fresh config with these keys; the typed worker and algorithm sections are frozen, so built with them."""
    arr = ActorRolloutRefConfig(actor=FSDPActorConfig(use_kl_loss=flags.get("use_kl_loss", False)),
                                rollout=RolloutConfig(calculate_log_probs=flags.get("calculate_log_probs", False)))
    algorithm = AlgoConfig(adv_estimator=adv_estimator, use_kl_in_reward=flags.get("use_kl_in_reward", False))
    config = PPOTrainerConfig(actor_rollout_ref=arr, algorithm=algorithm)
    config.data.return_raw_chat = flags.get("return_raw_chat", False)
    config.data.return_full_prompt = flags.get("return_full_prompt", False)
    return config


def _grpo_batch(values: bool = False) -> DataProto:
    """What a GRPO step (2 prompts x n=2) holds at the actor update, written out by hand."""
    mask = torch.ones(ROWS, PROMPT + RESPONSE, dtype=torch.long)
    resp = torch.zeros(ROWS, RESPONSE)
    tensors = {
        "prompts": torch.randint(3, 100, (ROWS, PROMPT)),
        "responses": torch.randint(3, 100, (ROWS, RESPONSE)),
        "input_ids": torch.randint(3, 100, (ROWS, PROMPT + RESPONSE)),
        "attention_mask": mask,
        "position_ids": torch.arange(PROMPT + RESPONSE).expand(ROWS, -1).clone(),
        "response_mask": torch.ones(ROWS, RESPONSE, dtype=torch.long),
        "old_log_probs": resp.clone(),
        "token_level_scores": resp.clone(),
        "token_level_rewards": resp.clone(),
        "advantages": resp.clone(),
        "returns": resp.clone(),
    }
    if values:
        tensors["values"] = resp.clone()
    non_tensors = {
        "raw_prompt_ids": [[5, 6, 7]] * ROWS,
        "index": [0, 0, 1, 1],
        "uid": ["a", "a", "b", "b"],
        "data_source": ["arithmetic"] * ROWS,
        "reward_model": [{"style": "rule", "ground_truth": "4"}] * ROWS,
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def test_complete_batches_have_no_problems() -> None:
    assert check_batch(_grpo_batch(), _config("grpo")) == []
    assert check_batch(_grpo_batch(values=True), _config("gae")) == []


def test_missing_key_names_it_and_its_producer() -> None:
    batch = _grpo_batch()
    batch.batch.pop("advantages")
    assert check_batch(batch, _config()) == ["advantages: missing; produced by verl.algos.batch:compute_advantage"]

    gae = check_batch(_grpo_batch(values=False), _config("gae"))
    assert gae == ["values: missing; produced by verl.workers.fsdp_workers:CriticWorker.compute_values "
                   "when a critic: algorithm.adv_estimator=gae"]


def test_unknown_key_is_reported_unless_allowed() -> None:
    batch = _grpo_batch()
    batch.non_tensor_batch["score"] = np.array([0.0, 1.0, 0.0, 1.0], dtype=object)  # a reward extra field
    problems = check_batch(batch, _config())
    assert len(problems) == 1 and problems[0].startswith("score: not in verl.protocol.keys.BATCH_KEYS")
    assert check_batch(batch, _config(), allow=["score"]) == []

    batch.batch["score_tensor"] = torch.zeros(ROWS)
    assert check_batch(batch, _config(), allow=["score", "score_tensor"]) == [
        "score_tensor: allowed extras are per-row objects, but it is a tensor"]


def test_key_the_config_does_not_produce_is_reported() -> None:
    problems = check_batch(_grpo_batch(values=True), _config("grpo"))
    assert problems == ["values: present, but expected only with a critic: algorithm.adv_estimator=gae "
                        "(produced by verl.workers.fsdp_workers:CriticWorker.compute_values)"]
    batch = _grpo_batch()
    batch.batch["entropys"] = torch.zeros(ROWS, RESPONSE)
    assert [p.split(":")[0] for p in check_batch(batch, _config())] == ["entropys"]


def test_wrong_dtype_rank_and_part_are_reported() -> None:
    batch = _grpo_batch()
    batch.batch["old_log_probs"] = batch.batch["old_log_probs"].double()
    assert check_batch(batch, _config()) == ["old_log_probs: dtype torch.float64, expected torch.float32"]

    batch = _grpo_batch()
    batch.batch["response_mask"] = batch.batch["response_mask"].bool()
    assert check_batch(batch, _config()) == ["response_mask: dtype torch.bool, expected torch.int64"]

    batch = _grpo_batch()
    batch.batch["advantages"] = torch.zeros(ROWS)
    assert check_batch(batch, _config()) == [
        "advantages: rank 1 (4,), expected ('batch', 'response_length')"]

    batch = _grpo_batch()
    batch.non_tensor_batch.pop("uid")
    batch.batch["uid"] = torch.zeros(ROWS, dtype=torch.long)
    assert check_batch(batch, _config()) == [
        "uid: stored in batch (tensor), but the table says an object array"]


def test_shape_symbols_must_agree_across_keys() -> None:
    batch = _grpo_batch()
    batch.batch["returns"] = torch.zeros(ROWS, RESPONSE + 1)
    assert check_batch(batch, _config()) == [
        f"returns: response_length={RESPONSE + 1}, but advantages has response_length={RESPONSE}"]

    batch = _grpo_batch()
    for key in ("input_ids", "attention_mask", "position_ids"):
        batch.batch[key] = batch.batch[key][:, 1:]
    assert check_batch(batch, _config()) == [
        f"attention_mask: sequence_length={PROMPT + RESPONSE - 1}, expected prompt_length + response_length = "
        f"{PROMPT} + {RESPONSE}"]


def test_every_key_has_exactly_one_producer_that_exists() -> None:
    for name, spec in BATCH_KEYS.items():
        assert spec.name == name
        assert isinstance(spec.producer, str) and spec.producer.count(":") == 1, name
        module_name, qualname = spec.producer.split(":")
        target = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)  # a renamed stage fails here, naming the stale producer
        assert callable(target), f"{name}: producer {spec.producer} is not a function"
        assert spec.meaning and "\n" not in spec.meaning, name
        assert len(spec.shape) >= 1 and spec.shape[0] == "batch", name
        assert spec.tensor == isinstance(spec.dtype, torch.dtype), name


@pytest.mark.parametrize(("adv_estimator", "flags", "added"), [
    ("gae", {}, {"values"}),
    ("grpo", {"use_kl_loss": True}, {"ref_log_prob"}),
    ("grpo", {"use_kl_in_reward": True}, {"ref_log_prob"}),
    ("remax", {}, {"reward_baselines"}),
    ("grpo", {"calculate_log_probs": True}, {"rollout_log_probs"}),
    ("grpo", {"return_raw_chat": True, "return_full_prompt": True}, {"raw_prompt", "full_prompts"}),
    ("gae", {"use_kl_in_reward": True, "calculate_log_probs": True}, {"values", "ref_log_prob", "rollout_log_probs"}),
])
def test_expected_keys_follow_the_config(adv_estimator: str, flags: dict, added: set[str]) -> None:
    base = expected_keys(_config("grpo"))
    assert base == {"prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask",
                    "old_log_probs", "token_level_scores", "token_level_rewards", "advantages", "returns",
                    "raw_prompt_ids", "index", "uid"}
    assert expected_keys(_config(adv_estimator, **flags)) - base == added
    assert base <= expected_keys(_config(adv_estimator, **flags))


def test_protocol_docstring_points_to_the_table() -> None:
    doc = verl.protocol.__doc__
    assert "verl.protocol.keys" in doc
    assert "token_level_rewards" not in doc  # the table lives in one place
