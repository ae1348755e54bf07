"""Whole runs (Ray, 2 FSDP ranks, tiny random model, 2 steps) of the algorithms whose extra stages never ran end to
end before: ReMax's greedy baseline rollout, GRPO with a reference model and the KL loss, PPO with the KL penalty in
the reward under the adaptive controller. Each asserts what the stage must do, not just that the run exits.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.helpers.e2e import REPO, fit_run, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides
from verl.protocol import DataProto

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

# a reward the random model earns unevenly, so greedy baselines, advantages and KL-shaped rewards are not all 0
HASH_REWARD = f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}"


def _run(tmp_path: Path, adv_estimator: str, extra: list[str], body) -> list[dict]:
    """Build the trainer, hand it to `body(trainer)` (which calls fit), return the per-step metric rows."""
    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", adv_estimator=adv_estimator)
    steps = fit_run([*overrides, HASH_REWARD, *extra], body)
    assert [r["step"] for r in steps] == [1, 2]
    return steps


def _count_calls(worker_group, method: str) -> list[int]:
    """Wrap ``worker_group.method`` so the returned one-item list counts its calls from now on."""
    calls, original = [0], getattr(worker_group, method)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    setattr(worker_group, method, counted)
    return calls


def _probe_sequences(trainer) -> DataProto:
    """Sampled responses to the validation prompts, from the weights the run starts with."""
    batch = DataProto.from_single_dict(next(iter(trainer.val_dataloader)))
    batch = batch.select(batch_keys=["input_ids", "attention_mask", "position_ids"])
    batch.meta_info.update({"eos_token_id": trainer.tokenizer.eos_token_id,
                            "pad_token_id": trainer.tokenizer.pad_token_id, "do_sample": True})
    torch.manual_seed(0)
    return trainer.actor_rollout_wg.generate_sequences(batch)


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_remax_baseline_is_the_reward_of_the_greedy_response(tmp_path: Path) -> None:
    from verl.trainer.ppo.reward import compute_reward

    seen: list[dict[str, torch.Tensor]] = []

    def body(trainer) -> None:
        add_baseline, compute_advantage = trainer._add_remax_baseline, trainer._compute_advantage

        def probe_baseline(batch: DataProto) -> None:
            add_baseline(batch)
            # the same prompts answered greedily again by the same weights, scored by the same reward function
            prompts = batch.batch["prompts"]
            gen = DataProto.from_dict(tensors={"input_ids": prompts,
                                               "attention_mask": batch.batch["attention_mask"][:, : prompts.size(1)],
                                               "position_ids": batch.batch["position_ids"][:, : prompts.size(1)]},
                                      meta_info=trainer._gen_meta(do_sample=False))
            greedy = trainer.actor_rollout_wg.generate_sequences(gen)
            scored = DataProto(batch=greedy.batch, non_tensor_batch=dict(batch.non_tensor_batch))
            seen.append({"baseline": batch.batch["reward_baselines"].clone(),
                         "greedy_reward": compute_reward(scored, trainer.reward_fn)[0].sum(-1),
                         "greedy_responses": greedy.batch["responses"], "sampled": batch.batch["responses"]})

        def probe_advantage(batch, reward_tensor, reward_extra, metrics):
            out = compute_advantage(batch, reward_tensor, reward_extra, metrics)
            seen[-1].update(advantages=out.batch["advantages"], mask=out.batch["response_mask"].bool(),
                            scores=out.batch["token_level_rewards"].sum(-1))
            return out

        trainer._add_remax_baseline, trainer._compute_advantage = probe_baseline, probe_advantage
        trainer.fit()

    _run(tmp_path, "remax", [], body)
    assert len(seen) == 2
    for step in seen:
        assert step["baseline"].shape == (8,)  # one baseline per response: 4 prompts x n=2
        torch.testing.assert_close(step["baseline"], step["greedy_reward"])
        # the two responses to one prompt share its greedy baseline (rows are interleaved per prompt)
        torch.testing.assert_close(step["baseline"][0::2], step["baseline"][1::2])
        # ReMax: advantage = the response's return - the greedy response's reward, on every response token
        expected = (step["scores"] - step["baseline"])[:, None].expand_as(step["advantages"])
        torch.testing.assert_close(step["advantages"][step["mask"]], expected[step["mask"]])
        assert (step["scores"] != step["baseline"]).any()  # sampled responses earn other rewards: advantages != 0
    # what the trainer used for its baseline really was greedy: the same prompts answered twice agree
    first = seen[0]
    assert not torch.equal(first["greedy_responses"], first["sampled"])


def test_grpo_kl_loss_against_a_frozen_reference(tmp_path: Path) -> None:
    result: dict[str, torch.Tensor] = {}

    def body(trainer) -> None:
        assert trainer.use_reference_policy
        probe = _probe_sequences(trainer)
        mask = probe.batch["response_mask"].bool()
        ref_before = trainer.ref_policy_wg.compute_ref_log_prob(probe).batch["ref_log_prob"]
        actor_before = trainer.actor_rollout_wg.compute_log_prob(probe).batch["old_log_probs"]
        torch.testing.assert_close(ref_before[mask], actor_before[mask])  # both start from the same weights
        passes = _count_calls(trainer.actor_rollout_wg, "compute_log_prob")
        trainer.fit()
        result["old_log_prob_passes"] = passes[0]
        result["vocab"] = len(trainer.tokenizer)
        result.update(mask=mask, ref_before=ref_before,
                      ref_after=trainer.ref_policy_wg.compute_ref_log_prob(probe).batch["ref_log_prob"],
                      actor_before=actor_before,
                      actor_after=trainer.actor_rollout_wg.compute_log_prob(probe).batch["old_log_probs"])

    steps = _run(tmp_path, "grpo", ["actor_rollout_ref.actor.use_kl_loss=true",
                                    "actor_rollout_ref.actor.kl_loss_coef=0.1",
                                    "actor_rollout_ref.actor.kl_loss_type=low_var_kl"], body)
    mask = result["mask"]
    assert torch.equal(result["ref_after"][mask], result["ref_before"][mask]), "the reference policy changed"
    moved = (result["actor_after"] - result["actor_before"])[mask].abs().max().item()
    assert moved > 1e-3, f"the actor did not train (max log-prob change {moved})"
    # before the first update the actor is the reference (KL 0); after it, the loss sees the distance
    assert steps[0]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
    assert math.isfinite(steps[1]["actor/kl_loss"]) and steps[1]["actor/kl_loss"] > 1e-6
    assert steps[1]["actor/kl_coef"] == pytest.approx(0.1)
    # one epoch, one mini-batch (4 prompts per step and per optimizer step): no old-log-prob pass ran; the
    # update's first forward was pi_old (ratio 1) and gave actor/entropy, all-reduced over the 2 ranks
    assert result["old_log_prob_passes"] == 0
    for step in steps:
        assert step["perf/old_log_prob_skipped"] == 1.0 and "timing_s/old_log_prob" not in step
        assert step["actor/ppo_kl"] == 0.0 and step["actor/pg_clipfrac"] == 0.0
        assert 0 < step["actor/entropy"] <= math.log(result["vocab"]) + 1e-4  # at most uniform's


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_ppo_kl_in_reward_with_the_adaptive_controller(tmp_path: Path) -> None:
    horizon, target, init = 10, 0.01, 0.1
    final: dict[str, float] = {}

    def body(trainer) -> None:
        assert trainer.use_reference_policy and trainer.use_critic
        passes = _count_calls(trainer.actor_rollout_wg, "compute_log_prob")
        trainer.fit()
        final["value"] = trainer.kl_ctrl_in_reward.value
        final["old_log_prob_passes"] = passes[0]

    steps = _run(tmp_path, "gae", ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                                   f"algorithm.kl_ctrl.kl_coef={init}", f"algorithm.kl_ctrl.horizon={horizon}",
                                   f"algorithm.kl_ctrl.target_kl={target}"], body)
    kl = [s["actor/reward_kl_penalty"] for s in steps]
    coef = [s["actor/reward_kl_penalty_coeff"] for s in steps]
    assert kl[1] > 0, "after an update the actor differs from the reference: the in-reward KL must be nonzero"
    # the controller's rule, by hand: value *= 1 + clip(kl / target - 1, -0.2, 0.2) * responses / horizon

    def updated(value: float, step_kl: float) -> float:
        return value * (1 + max(-0.2, min(0.2, step_kl / target - 1)) * 8 / horizon)

    assert coef[0] == pytest.approx(init)
    assert coef[1] == pytest.approx(updated(init, kl[0]))
    assert final["value"] == pytest.approx(updated(coef[1], kl[1]))
    assert coef[1] != pytest.approx(init) and final["value"] != pytest.approx(coef[1])  # the coefficient moves
    # the penalty reached the rewards the critic and advantages saw: scores and rewards differ by beta * kl
    assert steps[1]["critic/rewards/mean"] != pytest.approx(steps[1]["critic/score/mean"])
    # the KL penalty needs old_log_probs before the advantages: the pass ran every step
    assert final["old_log_prob_passes"] == 2 and all(s["perf/old_log_prob_skipped"] == 0.0 for s in steps)


@pytest.mark.slow
def test_dynamic_sampling_run_resumes_at_the_exact_data_position(tmp_path: Path) -> None:
    """GRPO with filter_groups through Ray: steps draw several rounds of gen_batch_size prompts, and a run stopped
    after step 2 and resumed generates exactly the prompts an uninterrupted run does (~60 s: three runs)."""
    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    dapo = [HASH_REWARD, "data.gen_batch_size=2", "algorithm.filter_groups.enable=true",
            "algorithm.filter_groups.metric=seq_reward", "algorithm.filter_groups.max_num_gen_batches=20",
            "trainer.save_freq=1"]

    def run(run_dir: Path, steps: int) -> tuple[list[list[int]], list[dict]]:
        overrides = tiny_run_overrides(model_dir, data_dir, run_dir) + [*dapo, f"trainer.total_training_steps={steps}"]
        rounds: list[list[int]] = []

        def body(trainer) -> None:
            new_batch = trainer._new_batch

            def record(batch_dict: dict) -> DataProto:
                batch = new_batch(batch_dict)
                rounds.append([hash(tuple(row.tolist())) for row in batch.batch["input_ids"]])
                return batch

            trainer._new_batch = record
            trainer.fit()

        return rounds, fit_run(overrides, body)

    full_rounds, full_steps = run(tmp_path / "full", 3)
    assert [r["step"] for r in full_steps] == [1, 2, 3]
    for row in full_steps:
        assert row["train/num_gen_batches"] >= 2  # 2 prompts per round, 4 per step
        assert row["train/num_gen_prompts"] == 2 * row["train/num_gen_batches"]
        assert 0 < row["train/kept_group_ratio"] <= 1 and math.isfinite(row["actor/pg_loss"])
    assert len(full_rounds) == sum(r["train/num_gen_batches"] for r in full_steps)

    first_rounds, _ = run(tmp_path / "resumed", 2)
    resumed_rounds, resumed_steps = run(tmp_path / "resumed", 3)  # trainer.resume_mode=auto: from step 2
    assert [r["step"] for r in resumed_steps] == [1, 2, 3]  # the report folder is shared: steps 1-2 from the first
    assert first_rounds + resumed_rounds == full_rounds  # not one prompt skipped or repeated


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_optimal_token_baseline_runs_on_the_log_prob_pass_sum_pi_squared(tmp_path: Path) -> None:
    """adv_estimator=optimal_token_baseline with actor.calculate_sum_pi_squared: the log-prob pass runs (it is not
    skipped) and returns sum_pi_squared, which the advantages are computed from."""
    from verl.algos.otb import compute_optimal_token_baseline_advantage

    seen: list[dict[str, torch.Tensor]] = []

    def body(trainer) -> None:
        compute_advantage = trainer._compute_advantage

        def probe_advantage(batch, reward_tensor, reward_extra, metrics):
            out = compute_advantage(batch, reward_tensor, reward_extra, metrics)
            b = out.batch
            want, _ = compute_optimal_token_baseline_advantage(
                b["token_level_rewards"], b["response_mask"], out.non_tensor_batch["uid"], b["old_log_probs"],
                b["sum_pi_squared"])
            seen.append({"advantages": b["advantages"], "want": want, "spsq": b["sum_pi_squared"],
                         "mask": b["response_mask"].bool()})
            return out

        trainer._compute_advantage = probe_advantage
        trainer.fit()

    rows = _run(tmp_path, "optimal_token_baseline", ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"], body)
    assert [r["perf/old_log_prob_skipped"] for r in rows] == [0.0, 0.0]
    assert len(seen) == 2
    for step in seen:
        assert torch.allclose(step["advantages"], step["want"], atol=1e-6)
        spsq = step["spsq"][step["mask"]]
        assert bool(((spsq > 0) & (spsq <= 1 + 1e-6)).all())  # a probability mass squared and summed
        assert step["advantages"][step["mask"]].abs().sum() > 0


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_a_curriculum_sampler_orders_training_and_sees_every_batch(tmp_path: Path) -> None:
    """data.sampler.class_path / class_name from the command line: the sampler decides the training order and its
    update() gets each trained batch."""
    from tests.data.test_curriculum_sampler import ReverseCurriculum

    seen = {}

    def body(trainer) -> None:
        trainer.fit()
        sampler = trainer.train_dataloader.sampler
        seen.update(kind=type(sampler).__name__, batches=[b.non_tensor_batch["index"].tolist() for b in sampler.seen],
                    size=len(trainer.train_dataloader.dataset))

    _run(tmp_path, "grpo", ["data.sampler.class_path=pkg://tests.data.test_curriculum_sampler",
                            "data.sampler.class_name=ReverseCurriculum", "data.dataloader_num_workers=0"], body)
    assert seen["kind"] == ReverseCurriculum.__name__ and len(seen["batches"]) == 2
    # the dataset's rows from the last one backwards, 4 prompts per step, each repeated for rollout.n=2
    first = sorted(set(seen["batches"][0]))
    assert len(first) == 4 and all(len(b) == 8 for b in seen["batches"])
    assert sorted(set(seen["batches"][1])) < first  # the second step's rows come before the first step's
