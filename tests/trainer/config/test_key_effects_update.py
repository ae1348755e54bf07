"""Effect tests for the update keys of the actor and the critic (shuffle, ppo_epochs, grad_clip, entropy_coeff,
use_kl_loss, kl_loss_coef) and for two trainer keys (data.dataloader_num_workers, rollout.n): each test changes
the key and checks what the runtime does differently, against numbers computed by hand where there are any."""

from __future__ import annotations

import copy
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from tests.trainer.ppo.test_trainer_keys import make_trainer, typed
from tests.workers.actor.test_dp_actor import actor_config, manual_log_probs, training_batch
from tests.workers.critic.test_dp_critic import _training_data, critic_config, tiny_critic
from verl.protocol import DataProto
from verl.workers.actor import DataParallelPPOActor
from verl.workers.critic import DataParallelPPOCritic

ARR = "actor_rollout_ref"


# ---------------------------------------------------------------- shared: one role's update on the tiny models


def _role(role: str, lr: float = 1.0, **cfg):
    """(a fresh model, its update worker, its optimizer, the data, update(data) -> metrics) for 'actor' or
    'critic', SGD so that a step is exactly -lr * the (clipped) gradient."""
    if role == "actor":
        base = tiny_llama()
        data = training_batch(base)
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        worker = DataParallelPPOActor(actor_config(**cfg), model, optimizer)
        return model, worker, optimizer, data, worker.update_policy
    base = tiny_critic()
    data = _training_data(base)
    model = copy.deepcopy(base)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    worker = DataParallelPPOCritic(critic_config(**cfg), model, optimizer)
    return model, worker, optimizer, data, worker.update_critic


def _row_order(worker, data: DataProto, update) -> list[int]:
    """Which rows of ``data`` the update's forwards saw, in order (micro-batches of one row)."""
    rows = data.batch["input_ids"]
    seen: list[int] = []
    forward = worker._forward_micro_batch

    def spy(micro_batch, *args, **kwargs):
        (row,) = micro_batch["input_ids"]
        seen.append(next(i for i in range(len(rows)) if torch.equal(rows[i], row)))
        return forward(micro_batch, *args, **kwargs)

    worker._forward_micro_batch = spy
    update(data)
    return seen


def _params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _delta(before: dict, model) -> dict[str, torch.Tensor]:
    return {k: v.detach() - before[k] for k, v in model.named_parameters()}


def _norm(tensors: dict[str, torch.Tensor]) -> float:
    return torch.sqrt(sum((t.double() ** 2).sum() for t in tensors.values())).item()


# ---------------------------------------------------------------- actor.shuffle / critic.shuffle


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_shuffle_draws_a_seeded_permutation_per_epoch(role):
    common = dict(ppo_epochs=2, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1)
    _, worker, _, data, update = _role(role, **common, shuffle=False)
    assert _row_order(worker, data, update) == [0, 1, 2, 3, 0, 1, 2, 3]  # in order, every epoch

    _, worker, _, data, update = _role(role, **common, shuffle=True)
    # the n-th update call seeds one generator with data_loader_seed (42, the default) * 1_000_003 + n and draws a
    # fresh permutation for each epoch from it
    for call in (0, 1):
        generator = torch.Generator().manual_seed(42 * 1_000_003 + call)
        expected = torch.randperm(4, generator=generator).tolist() + torch.randperm(4, generator=generator).tolist()
        got = _row_order(worker, data, update)
        assert got == expected
        assert sorted(got[:4]) == sorted(got[4:]) == [0, 1, 2, 3]  # each epoch still sees every row once
    assert expected != [0, 1, 2, 3, 0, 1, 2, 3]  # the seeds used here really reorder


# ---------------------------------------------------------------- actor.ppo_epochs / critic.ppo_epochs


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_ppo_epochs_repeats_the_optimizer_steps(role, monkeypatch):
    steps = {}
    for epochs in (1, 2, 3):
        _, worker, optimizer, data, update = _role(role, ppo_epochs=epochs, ppo_mini_batch_size=2)
        calls = []
        real_step = optimizer.step
        monkeypatch.setattr(optimizer, "step",
                            lambda *a, _calls=calls, _step=real_step, **kw: _calls.append(1) or _step(*a, **kw))
        metrics = update(data)
        steps[epochs] = len(calls)
        assert len(metrics[f"{role}/grad_norm"]) == len(calls)  # one grad norm per optimizer step
    assert steps == {1: 2, 2: 4, 3: 6}  # 4 rows / mini-batch of 2 = 2 steps per epoch


# ---------------------------------------------------------------- actor.grad_clip / critic.grad_clip


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_grad_clip_bounds_the_applied_step(role):
    # one mini-batch, SGD with lr=1: the parameter change is minus the (clipped) gradient
    model, _, _, data, update = _role(role, grad_clip=1e6, ppo_micro_batch_size_per_gpu=4)
    before = _params(model)
    (raw_norm,) = update(data)[f"{role}/grad_norm"]
    assert _norm(_delta(before, model)) == pytest.approx(raw_norm, rel=1e-4)  # not clipped: the whole gradient
    clip = raw_norm / 10
    model, _, _, data, update = _role(role, grad_clip=clip, ppo_micro_batch_size_per_gpu=4)
    before = _params(model)
    (reported,) = update(data)[f"{role}/grad_norm"]
    assert reported == pytest.approx(raw_norm, rel=1e-5)  # the metric is the norm before clipping
    assert _norm(_delta(before, model)) == pytest.approx(clip, rel=1e-4)  # the step applied is clipped to it


# ---------------------------------------------------------------- actor.entropy_coeff, use_kl_loss, kl_loss_coef


def _actor_step(data: DataProto, **cfg) -> tuple[dict[str, torch.Tensor], dict]:
    """The parameter change of one SGD step (lr=1, one mini-batch, one micro-batch, no clipping)."""
    model, _, _, _, update = _role("actor", ppo_micro_batch_size_per_gpu=4, grad_clip=1e6, **cfg)
    before = _params(model)
    metrics = update(data)
    return _delta(before, model), metrics


def _hand_gradient(data: DataProto, term) -> tuple[float, dict[str, torch.Tensor]]:
    """The token-mean of ``term(log_probs, entropy)`` on the untrained model, and its gradient."""
    model = tiny_llama()
    log_probs, entropy = manual_log_probs(model, data, temperature=1.0)
    mask = data.batch["response_mask"].float()
    value = (term(log_probs, entropy) * mask).sum() / mask.sum()
    value.backward()
    return value.item(), {k: p.grad.detach().clone() for k, p in model.named_parameters()}


def _assert_close(got: dict, expected: dict) -> None:
    scale = max(t.abs().max().item() for t in expected.values())
    assert scale > 1e-5  # the term moves the weights visibly
    assert max((got[k] - expected[k]).abs().max().item() for k in expected) < 1e-3 * scale


def test_entropy_coeff_subtracts_coeff_times_entropy_from_the_loss():
    data = training_batch(tiny_llama())
    base, base_metrics = _actor_step(data, entropy_coeff=0.0)
    assert "actor/entropy" not in base_metrics  # entropy is neither computed nor reported without a coefficient
    entropy, grad = _hand_gradient(data, lambda log_probs, entropy: entropy)
    for coeff in (0.5, 2.0):
        delta, metrics = _actor_step(data, entropy_coeff=coeff)
        assert metrics["actor/entropy"] == [pytest.approx(entropy, rel=1e-5)]
        assert metrics["actor/pg_loss"] == pytest.approx(base_metrics["actor/pg_loss"], rel=1e-6)
        # loss - coeff * H: one SGD step of lr 1 moves the weights by an extra + coeff * dH/dw
        _assert_close({k: delta[k] - base[k] for k in base}, {k: coeff * g for k, g in grad.items()})


def test_use_kl_loss_adds_kl_loss_coef_times_the_kl_to_the_ref_policy():
    data = training_batch(tiny_llama())
    gen = torch.Generator().manual_seed(11)
    ref = data.batch["old_log_probs"] - 0.2 * torch.rand(data.batch["old_log_probs"].shape, generator=gen)
    data.batch["ref_log_prob"] = ref

    def low_var_kl(log_probs, entropy):  # k3 with y = ref - log_prob: e^y - 1 - y
        y = ref - log_probs
        return torch.exp(y) - 1 - y

    kl, grad = _hand_gradient(data, low_var_kl)
    assert kl > 1e-3
    base, base_metrics = _actor_step(data, use_kl_loss=False, kl_loss_coef=0.3)
    assert "actor/kl_loss" not in base_metrics and "actor/kl_coef" not in base_metrics
    # without use_kl_loss the reference log-probs are not needed at all: the same step without them
    without_ref = DataProto(batch=data.batch.exclude("ref_log_prob"), meta_info=data.meta_info)
    _assert_close(_actor_step(without_ref, use_kl_loss=False)[0], base)
    for coef in (0.1, 0.3):
        delta, metrics = _actor_step(data, use_kl_loss=True, kl_loss_coef=coef, kl_loss_type="low_var_kl")
        assert metrics["actor/kl_loss"] == [pytest.approx(kl, rel=1e-5)]
        assert metrics["actor/kl_coef"] == [coef]
        # loss + coef * KL: one SGD step of lr 1 moves the weights by an extra - coef * dKL/dw
        _assert_close({k: delta[k] - base[k] for k in base}, {k: -coef * g for k, g in grad.items()})
    # kl_loss_type picks the estimator: k1 is log_prob - ref
    k1, _ = _hand_gradient(data, lambda log_probs, entropy: log_probs - ref)
    assert abs(k1 - kl) > 1e-3
    _, metrics = _actor_step(data, use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="k1")
    assert metrics["actor/kl_loss"] == [pytest.approx(k1, rel=1e-5)]


# ---------------------------------------------------------------- data.dataloader_num_workers


def _who_collated(rows: list) -> list:
    info = torch.utils.data.get_worker_info()
    return [os.getpid() if info is None else -1 - info.id]


def test_dataloader_num_workers_reaches_the_training_dataloader():
    for workers in (0, 2):
        trainer = make_trainer(f"data.dataloader_num_workers={workers}", "data.train_batch_size=2")
        assert trainer.train_dataloader.num_workers == workers
    # and it is what loads the batches: collated in worker processes 0 and 1, or in this process
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    for workers, expected in ((0, [[os.getpid()], [os.getpid()]]), (2, [[-1], [-2]])):
        trainer = RayPPOTrainer(typed(f"data.dataloader_num_workers={workers}", "data.train_batch_size=2"),
                                tokenizer=None, role_worker_mapping={}, resource_pool_manager=None,
                                train_dataset=list(range(4)), collate_fn=_who_collated)
        assert list(trainer.train_dataloader) == expected


# ---------------------------------------------------------------- rollout.n


class _RecordingRollout:
    """generate_sequences that records the rows it got and answers each with a one-token response: the
    prompt's first token, so the test can tell which prompt a response belongs to."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def generate_sequences(self, gen_batch: DataProto) -> DataProto:
        self.sizes.append(len(gen_batch))
        return DataProto.from_dict({"responses": gen_batch.batch["input_ids"][:, :1].clone()})


@pytest.mark.parametrize("n", [1, 3])
def test_rollout_n_repeats_each_prompt_n_times_interleaved_under_one_uid(n):
    trainer = make_trainer(f"{ARR}.rollout.n={n}", "data.train_batch_size=2", "algorithm.adv_estimator=gae",
                           tokenizer=SimpleNamespace(eos_token_id=2, pad_token_id=0))
    trainer.actor_rollout_wg = rollout = _RecordingRollout()
    prompts = torch.tensor([[10, 11], [20, 21]])
    batch = trainer._new_batch({"input_ids": prompts, "attention_mask": torch.ones(2, 2, dtype=torch.long),
                                "position_ids": torch.tensor([[0, 1], [0, 1]]),
                                "data_source": np.array(["a", "b"], dtype=object)})
    out = trainer._generate(batch)
    assert rollout.sizes == [2 * n]  # the rollout got every prompt n times
    assert out.batch["responses"][:, 0].tolist() == [10] * n + [20] * n  # p0 p0 p0 p1 p1 p1
    assert out.non_tensor_batch["data_source"].tolist() == ["a"] * n + ["b"] * n
    uids = out.non_tensor_batch["uid"].tolist()
    assert uids[:n] == [uids[0]] * n and uids[n:] == [uids[n]] * n and uids[0] != uids[n]


# ---------------------------------------------------------------- actor.loss_agg_mode / critic.loss_agg_mode


def _hand_agg(per_token: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Each loss_agg_mode of a per-token loss, written out (every row here has response tokens)."""
    mask = mask.float()
    row_sums = (per_token * mask).sum(-1)
    return {
        "token-mean": (row_sums.sum() / mask.sum()).item(),
        "token-sum": row_sums.sum().item(),
        "seq-mean-token-sum": row_sums.mean().item(),
        "seq-mean-token-mean": (row_sums / mask.sum(-1)).mean().item(),
        "seq-mean-token-sum-norm": (row_sums.mean() / mask.shape[-1]).item(),  # the padded response length
    }


def test_loss_agg_mode_aggregates_the_actor_and_the_critic_loss():
    # actor: old log-probs are the current ones, so every ratio is 1 and the per-token loss is -advantage
    model = tiny_llama()
    data = training_batch(model)
    data.batch["old_log_probs"], _ = DataParallelPPOActor(actor_config(), model).compute_log_prob(data)
    actor_expected = _hand_agg(-data.batch["advantages"], data.batch["response_mask"])
    # critic: before the first step the predictions are the old values: 0.5 * (value - return)^2 per token
    critic_data = _training_data(tiny_critic())
    b = critic_data.batch
    critic_expected = _hand_agg(0.5 * (b["values"] - b["returns"]) ** 2, b["response_mask"])
    assert len({round(v, 4) for v in actor_expected.values()}) == 5  # the five modes differ on this batch
    for mode in actor_expected:
        (got,) = _actor_step(data, loss_agg_mode=mode)[1]["actor/pg_loss"]
        assert got == pytest.approx(actor_expected[mode], rel=1e-4), mode
        model, _, _, _, update = _role("critic", loss_agg_mode=mode, ppo_micro_batch_size_per_gpu=4)
        (got,) = update(critic_data)["critic/vf_loss"]
        assert got == pytest.approx(critic_expected[mode], rel=1e-4), mode


# ---------------------------------------------------------------- rollout.log_prob_* / ref.log_prob_*


@pytest.mark.parametrize("section", ["rollout", "ref"])
def test_log_prob_batching_follows_its_own_section(section, monkeypatch):
    from tests.helpers.tiny_model import rollout_batch
    from tests.workers.actor.test_dp_actor import PROMPT_LENGTHS, RESPONSE_LENGTHS
    from verl.workers import fsdp_workers
    from verl.workers.actor import dp_actor

    parts: list[tuple[int, int]] = []  # (rows, real tokens) of each micro-batch of the log-prob pass
    real = dp_actor.make_micro_batches

    def spy(*args, **kwargs):
        micro_batches, indices = real(*args, **kwargs)
        parts.extend((len(m), int(m["attention_mask"].sum())) for m in micro_batches)
        return micro_batches, indices

    monkeypatch.setattr(dp_actor, "make_micro_batches", spy)
    other = "ref" if section == "rollout" else "rollout"
    model = tiny_llama()

    def log_probs(*overrides: str) -> torch.Tensor:
        # the other section asks for one micro-batch of all 4 rows: what the pass does shows whose keys it read
        config = typed(*(f"{ARR}.{section}.{o}" for o in overrides), "data.max_prompt_length=6",
                       "data.max_response_length=5",
                       f"{ARR}.{other}.log_prob_micro_batch_size_per_gpu=4", f"{ARR}.{other}.log_prob_use_dynamic_bsz=false")
        worker = object.__new__(fsdp_workers.ActorRolloutRefWorker)  # only what the log-prob passes use
        worker.config, worker._world_size, worker._is_ref = config.actor_rollout_ref, 1, True
        worker.actor = DataParallelPPOActor(config.actor_rollout_ref.actor, model)
        worker.ref_policy = DataParallelPPOActor(config.actor_rollout_ref.ref, model)
        data = rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS)
        for key in ("micro_batch_size", "use_dynamic_bsz", "max_token_len"):
            del data.meta_info[key]
        parts.clear()
        if section == "rollout":
            return worker.compute_log_prob(data).batch["old_log_probs"]
        return worker.compute_ref_log_prob(data).batch["ref_log_prob"]

    one = log_probs("log_prob_micro_batch_size_per_gpu=1", "log_prob_use_dynamic_bsz=false")
    assert [rows for rows, _ in parts] == [1, 1, 1, 1]
    three = log_probs("log_prob_micro_batch_size_per_gpu=3", "log_prob_use_dynamic_bsz=false")
    assert [rows for rows, _ in parts] == [3, 1]
    # token budgets: the rows hold 11, 4, 8 and 4 real tokens; a budget of 12 needs at least 3 micro-batches
    dynamic = log_probs("log_prob_use_dynamic_bsz=true", "log_prob_max_token_len_per_gpu=12")
    assert sum(rows for rows, _ in parts) == 4 and len(parts) >= 3 and max(tokens for _, tokens in parts) <= 12
    assert torch.allclose(one, three, atol=1e-5) and torch.allclose(one, dynamic, atol=1e-5)


# ---------------------------------------------------------------- data.train_batch_size


def test_train_batch_size_is_the_prompts_per_step():
    for size, batches in ((1, 4), (2, 2), (4, 1)):
        trainer = make_trainer(f"data.train_batch_size={size}", f"{ARR}.actor.ppo_mini_batch_size={size}",
                               f"critic.ppo_mini_batch_size={size}")
        assert [len(b) for b in trainer.train_dataloader] == [size] * batches  # 4 prompts in the dataset


# ---------------------------------------------------------------- algorithm.use_kl_in_reward, kl_penalty, kl_coef


def test_use_kl_in_reward_subtracts_the_kl_penalty_from_the_scores():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    old = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -1.5, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, -1.0], [-0.5, -2.0, -0.25]])
    scores = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])

    def rewards(*overrides: str) -> tuple[torch.Tensor, dict]:
        trainer = make_trainer("algorithm.adv_estimator=gae", "data.train_batch_size=2", *overrides)
        batch = DataProto.from_dict({"old_log_probs": old, "ref_log_prob": ref, "response_mask": mask,
                                     "values": torch.zeros(2, 3)})
        metrics: dict = {}
        out = trainer._compute_advantage(batch, scores.clone(), {}, metrics)
        return out.batch["token_level_rewards"], metrics

    off, metrics = rewards("algorithm.use_kl_in_reward=false", "algorithm.kl_ctrl.kl_coef=0.5")
    assert torch.equal(off, scores) and "actor/reward_kl_penalty" not in metrics
    k1 = (old - ref) * mask  # [[0.5, -1, 0], [0, 0.5, -0.75]]
    for coef, penalty, kl in ((0.5, "kl", k1), (0.2, "kl", k1), (0.5, "abs", k1.abs())):
        on, metrics = rewards("algorithm.use_kl_in_reward=true", f"algorithm.kl_ctrl.kl_coef={coef}",
                              f"algorithm.kl_penalty={penalty}", "algorithm.kl_ctrl.type=fixed")
        assert torch.allclose(on, scores - coef * kl)
        assert metrics["actor/reward_kl_penalty_coeff"] == coef
        # the batch's mean per-sequence token-mean KL
        assert metrics["actor/reward_kl_penalty"] == pytest.approx(((kl.sum(-1) / mask.sum(-1)).mean()).item())


# ---------------------------------------------------------------- model.override_config / critic.model.override_config


def _loaded_rms_norm_eps(tmp_path, section: str) -> float:
    from verl.models.loader import load_causal_lm

    tiny_llama().save_pretrained(tmp_path)  # saved with rms_norm_eps 1e-6
    config = typed(f"{ARR}.model.path={tmp_path}", f"critic.model.path={tmp_path}",
                   f"+{section}.override_config.rms_norm_eps=0.125")
    model = config.critic.model if section == "critic.model" else config.actor_rollout_ref.model
    loaded = load_causal_lm(model, section, value_head=section == "critic.model")
    return (loaded[0] if isinstance(loaded, tuple) else loaded).config.rms_norm_eps


def test_model_override_config_sets_hf_config_attributes(tmp_path):
    assert _loaded_rms_norm_eps(tmp_path, f"{ARR}.model") == 0.125


def test_critic_override_config_sets_hf_config_attributes(tmp_path):
    assert _loaded_rms_norm_eps(tmp_path, "critic.model") == 0.125
