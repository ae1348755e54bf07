"""reward_model.launch_reward_fn_async through a whole train_step: the reward is scored in a Ray task started
before the old-log-prob pass, collected after it, and the step's advantages and scores match the synchronous run.

The worker groups are stand-ins (a fixed rollout, fixed log-probs and values), so the step runs on the driver in
well under a second; only the reward task goes through Ray.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tests.trainer.ppo.test_trainer_keys import SAMPLES, local_ray, make_trainer, tokenizer  # noqa: F401 (fixtures)
from tests.workers.reward_manager.conftest import PROMPT_LEN, make_batch
from verl.protocol import DataProto
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.reward import load_reward_manager

ROWS = SAMPLES[:2]  # data.train_batch_size=2 in make_trainer; scores 1.0 and 0.0


class _PidReward:
    """The real reward manager, plus the process that scored the batch (module level: Ray pickles it by name)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __call__(self, data: DataProto, return_dict: bool = False):
        out = self.inner(data, return_dict=True)
        extra = {**(out.get("reward_extra_info") or {}), "pid": [os.getpid()] * len(data)}
        return {"reward_tensor": out["reward_tensor"], "reward_extra_info": extra}


def _msg(metrics: dict[str, float]) -> DataProto:
    return DataProto(meta_info={"metrics": metrics})


class _ActorGroup:
    """generate_sequences returns a fixed rollout; update_actor keeps the batch it was given."""

    world_size = 1

    def __init__(self, rollout: DataProto, calls: list[str]) -> None:
        self.rollout, self.calls, self.updated = rollout, calls, None

    def generate_sequences(self, gen: DataProto) -> DataProto:
        self.calls.append("generate_sequences")
        assert torch.equal(gen.batch["input_ids"], self.rollout.batch["prompts"])  # the dataloader's prompts
        return self.rollout.select(batch_keys=["prompts", "responses", "input_ids", "attention_mask", "response_mask"],
                                   non_tensor_batch_keys=[])

    def compute_log_prob(self, batch: DataProto) -> DataProto:
        self.calls.append("compute_log_prob")
        return DataProto.from_dict({"old_log_probs": torch.full(batch.batch["responses"].shape, -1.0)})

    def update_actor(self, batch: DataProto) -> DataProto:
        self.calls.append("update_actor")
        self.updated = batch
        return _msg({"actor/pg_loss": [0.1]})


class _CriticGroup:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def compute_values(self, batch: DataProto) -> DataProto:
        self.calls.append("compute_values")
        shape = batch.batch["responses"].shape  # distinct values per token: GAE gives non-trivial advantages
        return DataProto.from_dict({"values": torch.arange(shape[0] * shape[1], dtype=torch.float32).view(shape) / 40})

    def update_critic(self, batch: DataProto) -> DataProto:
        self.calls.append("update_critic")
        return _msg({"critic/vf_loss": [0.2]})


class _Pools:
    def get_n_gpus(self) -> int:
        return 1


def _batch_dict(rollout: DataProto) -> dict:
    """What the dataloader hands train_step: the prompts (left-padded) and the rows' reward fields."""
    prompt_mask = rollout.batch["attention_mask"][:, :PROMPT_LEN]
    return {"input_ids": rollout.batch["prompts"], "attention_mask": prompt_mask,
            "position_ids": torch.cumsum(prompt_mask, -1),
            **{key: np.array(values, dtype=object) for key, values in rollout.non_tensor_batch.items()}}


def _run_step(tok, async_reward: bool) -> tuple[_ActorGroup, list[str], dict[str, float]]:
    import ray

    calls: list[str] = []
    real_async, real_get = ray_trainer.compute_reward_async, ray.get

    def spy_async(*args, **kwargs):
        calls.append("compute_reward_async")
        return real_async(*args, **kwargs)

    def spy_get(refs, *args, **kwargs):
        if isinstance(refs, ray.ObjectRef):
            calls.append("ray.get")
        return real_get(refs, *args, **kwargs)

    rollout, _ = make_batch(tok, ROWS)
    rollout.batch["response_mask"] = rollout.batch["attention_mask"][:, PROMPT_LEN:]
    trainer = make_trainer(f"reward_model.launch_reward_fn_async={str(async_reward).lower()}", tokenizer=tok)
    trainer.reward_fn = _PidReward(load_reward_manager(trainer.config, tok, num_examine=0))
    trainer.actor_rollout_wg, trainer.critic_wg = _ActorGroup(rollout, calls), _CriticGroup(calls)
    trainer.resource_pool_manager = _Pools()
    trainer.global_steps = 1  # past critic_warmup: the actor is updated
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ray_trainer, "compute_reward_async", spy_async)
        # _finish_reward imports ray at call time, so the attribute on the ray module is what it calls
        mp.setattr(ray, "get", spy_get)
        metrics = trainer.train_step(_batch_dict(rollout))
    return trainer.actor_rollout_wg, calls, metrics


def test_async_reward_train_step_matches_sync(tokenizer, local_ray):  # noqa: F811 (fixtures)
    sync, sync_calls, _ = _run_step(tokenizer, async_reward=False)
    assert sync_calls == ["generate_sequences", "compute_log_prob", "compute_values", "update_critic", "update_actor"]
    assert set(sync.updated.non_tensor_batch["pid"]) == {os.getpid()}  # scored in this process

    run, calls, metrics = _run_step(tokenizer, async_reward=True)
    # started before the old-log-prob and value passes, collected only after them, before the updates
    assert calls == ["generate_sequences", "compute_reward_async", "compute_log_prob", "compute_values", "ray.get",
                     "update_critic", "update_actor"]
    (pid,) = set(run.updated.non_tensor_batch["pid"])
    assert pid != os.getpid()  # scored in a Ray worker process
    assert metrics["reward_extra/pid/mean"] == pid

    got, want = run.updated.batch, sync.updated.batch
    assert got["token_level_scores"].sum(-1).tolist() == [1.0, 0.0]  # "#### 14" is right, "#### 10" is not
    for key in ("token_level_scores", "token_level_rewards", "advantages", "returns"):
        assert torch.equal(got[key], want[key]), key
    mask = got["response_mask"].bool()
    assert got["advantages"][mask].abs().sum() > 0  # a real signal, not two all-zero tensors

