"""algorithm.rollout_correction in the trainer and the actor: the stage writes the IS weights and the rejected
response_mask before the advantages, the actor's loss uses them, and bypass mode skips the old-log-prob pass.

The test names are referenced by the config audit (tests/trainer/config/honoured_keys.py): keep them.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from tests.helpers.tiny_model import rollout_batch, tiny_llama
from tests.trainer.ppo.test_trainer_keys import make_trainer
from tests.workers.actor.test_dp_actor import actor_config
from verl import algos as core_algos
from verl.protocol import DataProto
from verl.workers.actor import DataParallelPPOActor

ON = "actor_rollout_ref.rollout.calculate_log_probs=true"
RC = "algorithm.rollout_correction"
L = math.log


class FakeActorGroup:
    """compute_log_prob returns fixed old log-probs and counts its calls (the actor's log-prob pass)."""

    def __init__(self, old_log_probs: torch.Tensor):
        self.old_log_probs, self.calls = old_log_probs, 0

    def compute_log_prob(self, batch: DataProto) -> DataProto:
        self.calls += 1
        return DataProto.from_dict(tensors={"old_log_probs": self.old_log_probs.clone()})


def grpo_batch() -> DataProto:
    """Two prompts x two responses of 3 tokens; rollout log-probs 0 so pi_old/pi_rollout = exp(old)."""
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]], dtype=torch.float32)
    batch = DataProto.from_dict(tensors={"response_mask": mask, "rollout_log_probs": torch.zeros(4, 3)})
    batch.non_tensor_batch["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    return batch


OLD = torch.tensor([[L(3.0), 0.0, 0.0],  # one token far off: truncated to 2, rejected by token RS
                    [0.1, -0.1, 0.0],
                    [0.0, 0.0, 0.0],
                    [L(0.3), 0.0, 0.0]])  # rho 0.3 < 1/2: rejected by token RS


def run_stage(*overrides: str, old=OLD):
    trainer = make_trainer("algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", *overrides)
    trainer.actor_rollout_wg = FakeActorGroup(old)
    batch, metrics = grpo_batch(), {}
    trainer._add_old_log_prob(batch, metrics)
    return trainer, batch, metrics


def test_stage_writes_is_weights_and_rejection_before_the_advantages():
    trainer, batch, metrics = run_stage(ON, f"{RC}.rollout_is=token", f"{RC}.rollout_rs=token")
    assert trainer.actor_rollout_wg.calls == 1  # the old-log-prob pass runs: the ratio needs pi_old
    weights = batch.batch["rollout_is_weights"]
    assert torch.allclose(weights[0], torch.tensor([2.0, 1.0, 1.0]))  # rho 3 truncated at 2
    assert weights[1, 2] == 0  # padding
    expected_mask = grpo_batch().batch["response_mask"].clone()
    expected_mask[0, 0] = 0
    expected_mask[3, 0] = 0
    assert torch.equal(batch.batch["response_mask"], expected_mask)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 11)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(3.0, rel=1e-5)
    # the advantages are computed with the rejected mask: the rejected tokens get none
    batch.batch["token_level_rewards"] = torch.tensor([[0, 0, 1.0], [0, 0, 0], [0, 0, 1.0], [0, 0, 0]])
    out = core_algos.compute_advantage(batch, adv_estimator="grpo", num_repeat=2)
    assert out.batch["advantages"][0, 0] == 0 and out.batch["advantages"][3, 0] == 0
    assert out.batch["advantages"][0, 1] != 0


def test_stage_sequence_and_geometric_rejection():
    _, batch, _ = run_stage(ON, f"{RC}.rollout_rs=sequence")  # products 3, 1, 1, 0.3 out of [0.5, 2]
    assert batch.batch["response_mask"].sum(-1).tolist() == [0, 2, 3, 0]
    _, batch, m = run_stage(ON, f"{RC}.rollout_rs=geometric", f"{RC}.rollout_rs_threshold=1.3")
    # geometric means: 3^(1/3) = 1.44 (out), 1, 1, 0.3^(1/3) = 0.67 (< 1/1.3 = 0.77: out)
    assert batch.batch["response_mask"].sum(-1).tolist() == [0, 2, 3, 0]
    assert m["rollout_corr/rollout_rs_seq_masked_fraction"] == 0.5
    _, batch, _ = run_stage(ON, f"{RC}.rollout_rs=geometric", f"{RC}.rollout_rs_threshold=1.5")
    # with [1/1.5, 1.5] = [0.667, 1.5] both 1.44 and 0.669 are inside: nothing rejected
    assert batch.batch["response_mask"].sum(-1).tolist() == [3, 2, 3, 3]


def test_stage_sequence_is_and_batch_normalize():
    _, batch, _ = run_stage(ON, f"{RC}.rollout_is=sequence", f"{RC}.rollout_is_threshold=5.0")
    assert torch.allclose(batch.batch["rollout_is_weights"][:, 0], torch.tensor([3.0, 1.0, 1.0, 0.3]), atol=1e-6)
    _, batch, _ = run_stage(ON, f"{RC}.rollout_is=sequence", f"{RC}.rollout_is_threshold=5.0",
                            f"{RC}.rollout_is_batch_normalize=true")
    assert torch.allclose(batch.batch["rollout_is_weights"][:, 0], torch.tensor([3.0, 1.0, 1.0, 0.3]) / 1.325)


def test_stage_veto_rejects_sequences():
    old = OLD.clone()
    old[2, 1] = L(1e-6)
    _, batch, m = run_stage(ON, f"{RC}.rollout_token_veto_threshold=1e-4", old=old)
    assert batch.batch["response_mask"].sum(-1).tolist() == [3, 2, 0, 3]
    assert m["rollout_corr/rollout_is_veto_fraction"] == 0.25
    assert "rollout_is_weights" not in batch.batch.keys()


def test_metrics_only_when_log_probs_are_on_and_correction_off():
    _, batch, metrics = run_stage(ON)
    assert "rollout_is_weights" not in batch.batch.keys()
    assert torch.equal(batch.batch["response_mask"], grpo_batch().batch["response_mask"])
    assert metrics["rollout_corr/kl"] == pytest.approx(-(L(3) + L(0.3)) / 11, rel=1e-5)
    assert metrics["rollout_corr/k3_kl"] > 0


def test_bypass_mode_skips_the_old_log_prob_pass():
    trainer, batch, metrics = run_stage(ON, f"{RC}.bypass_mode=true", f"{RC}.loss_type=reinforce",
                                        f"{RC}.rollout_is=sequence")
    assert trainer.actor_rollout_wg.calls == 0
    assert torch.equal(batch.batch["old_log_probs"], batch.batch["rollout_log_probs"])
    assert batch.meta_info["rollout_correction"]["rollout_is"] == "sequence"
    assert "rollout_is_weights" not in batch.batch.keys() and metrics == {}


# ---------------------------------------------------------------- the actor's loss


def actor_batch(model, weights=None, **meta):
    data = rollout_batch([6, 3, 5, 2], [5, 1, 3, 2], seed=0, meta_info=meta)
    old, _ = DataParallelPPOActor(actor_config(), model).compute_log_prob(data)
    data.batch["old_log_probs"] = old
    gen = torch.Generator().manual_seed(3)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    if weights is not None:
        data.batch["rollout_is_weights"] = weights * data.batch["response_mask"].float()
    return data


def pg_loss(model, data, **cfg) -> float:
    model = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(ppo_micro_batch_size_per_gpu=4, **cfg), model,
                                 torch.optim.SGD(model.parameters(), lr=0.0))
    return actor.update_policy(data)["actor/pg_loss"][0], actor


def test_actor_loss_uses_the_rollout_is_weights():
    model = tiny_llama()
    plain, _ = pg_loss(model, actor_batch(model))
    doubled, _ = pg_loss(model, actor_batch(model, weights=torch.full((4, 5), 2.0)))
    assert plain != 0 and doubled == pytest.approx(2 * plain, rel=1e-5)


def test_actor_loss_in_bypass_mode_reinforce_with_is_weights():
    model = tiny_llama()
    data = actor_batch(model)
    current = data.batch["old_log_probs"].clone()
    rollout = current - 0.1 * data.batch["response_mask"]  # pi_theta/pi_rollout = e^0.1 per token
    data.batch["old_log_probs"] = rollout
    data.meta_info["rollout_correction"] = {"bypass_mode": True, "loss_type": "reinforce", "rollout_is": "token",
                                            "rollout_is_threshold": 2.0}
    model2 = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(ppo_micro_batch_size_per_gpu=4), model2,
                                 torch.optim.SGD(model2.parameters(), lr=0.0))
    metrics = actor.update_policy(data)
    mask = data.batch["response_mask"].float()
    expected = -(data.batch["advantages"] * math.exp(0.1) * current * mask).sum() / mask.sum()
    assert metrics["actor/pg_loss"][0] == pytest.approx(expected.item(), rel=1e-4)
    assert metrics["rollout_corr/rollout_is_mean"][0] == pytest.approx(math.exp(0.1), rel=1e-4)
    assert metrics["rollout_corr/kl"][0] == pytest.approx(-0.1, rel=1e-3)  # rollout less likely than pi_theta


def test_actor_loss_in_bypass_mode_ppo_clip_rejects():
    model = tiny_llama()
    data = actor_batch(model)
    data.batch["old_log_probs"] = data.batch["old_log_probs"] - 5.0 * data.batch["response_mask"]  # rho = e^5
    data.meta_info["rollout_correction"] = {"bypass_mode": True, "loss_type": "ppo_clip", "rollout_rs": "token",
                                            "rollout_is_threshold": 2.0}
    model2 = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(ppo_micro_batch_size_per_gpu=4), model2,
                                 torch.optim.SGD(model2.parameters(), lr=0.0))
    metrics = actor.update_policy(data)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"][0] == 1.0
    assert metrics["actor/pg_loss"][0] == 0.0  # every token rejected: nothing to learn from


def test_actor_in_bypass_mode_ppo_clip_logs_is_weights_it_does_not_apply():
    model = tiny_llama()
    data = actor_batch(model)
    data.batch["old_log_probs"] = data.batch["old_log_probs"] - 5.0 * data.batch["response_mask"]  # rho = e^5
    settings = {"bypass_mode": True, "loss_type": "ppo_clip", "rollout_is_threshold": 2.0}
    results = []
    for extra in ({}, {"rollout_is": "token"}):
        data.meta_info["rollout_correction"] = settings | extra
        model2 = copy.deepcopy(model)
        actor = DataParallelPPOActor(actor_config(ppo_micro_batch_size_per_gpu=4), model2,
                                     torch.optim.SGD(model2.parameters(), lr=0.0))
        results.append(actor.update_policy(copy.deepcopy(data)))
    without, with_is = results
    assert "rollout_corr/rollout_is_mean" not in without
    assert with_is["rollout_corr/rollout_is_mean"][0] == pytest.approx(2.0)  # every rho = e^5, truncated at 2
    assert with_is["actor/pg_loss"][0] == pytest.approx(without["actor/pg_loss"][0], rel=1e-6)  # not applied


def test_stage_rejection_lower_bound():
    _, batch, _ = run_stage(ON, f"{RC}.rollout_rs=token", f"{RC}.rollout_rs_threshold=4.0",
                            f"{RC}.rollout_rs_threshold_lower=0.95")
    # upper 4 keeps rho 3; lower 0.95 rejects 0.905 (row 1) and 0.3 (row 3)
    assert batch.batch["response_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 1], [0, 1, 1]]
