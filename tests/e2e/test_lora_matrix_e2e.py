"""LoRA RL through the whole stack, over rollout {hf, vllm} x mode {sync, async} x {actor only, actor and critic}.

Each case is a 2-step GRPO (actor only) or GAE (actor and critic, both with an adapter) run on one worker with a
tiny random Llama, fp32 everywhere so "equal" means float precision. Checked in each: the run finishes, the adapter
moves the actor's log-probs, and the engine follows the adapter: after training, what the engine says about a fixed
set of sequences equals the actor's recomputation (vLLM: its own scoring after the sharding manager's sync; HF:
the sampled tokens' log-probs recorded while generating with the actor's module). The critic's case also checks that
the critic trained (a value loss and a non-zero gradient at every step).

The crash this guards against: HF generate on a peft model runs the wrapped model's forward, not the FSDP2 root's,
so the first decoder layer became FSDP2's root and the first training forward failed (fsdp_utils._settle_root).
Two cases run in the default suite; the whole matrix with ``-m slow`` (``make test-all``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")

from tests.e2e.test_vllm_sync import (  # noqa: E402
    TOL,
    _max_gap,
    _probe,
    _synced_engine_log_probs,
    _tiny_vllm_model_dir,
)
from tests.helpers.e2e import REPO, fit_run, make_arithmetic_data, tiny_run_overrides  # noqa: E402

pytestmark = pytest.mark.e2e

ARR = "actor_rollout_ref"
DEFAULT_SUITE = {("hf", "async", True), ("vllm", "async", False)}


def _cases():
    for rollout in ("hf", "vllm"):
        for mode in ("sync", "async"):
            for with_critic in (False, True):
                marks = [] if (rollout, mode, with_critic) in DEFAULT_SUITE else [pytest.mark.slow]
                name = f"{rollout}-{mode}-{'actor_critic' if with_critic else 'actor'}"
                yield pytest.param(rollout, mode, with_critic, id=name, marks=marks)


def _overrides(tmp_path: Path, rollout: str, mode: str, with_critic: bool) -> list[str]:
    model_dir = _tiny_vllm_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1,
                                   adv_estimator="gae" if with_critic else "grpo") + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        f"{ARR}.rollout.name={rollout}", f"{ARR}.rollout.mode={mode}", f"{ARR}.rollout.calculate_log_probs=true",
        f"{ARR}.rollout.dtype=float32", f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        f"{ARR}.model.lora_rank=8", f"{ARR}.model.lora_alpha=16", f"{ARR}.model.target_modules=all-linear",
        f"{ARR}.model.use_remove_padding=true", f"{ARR}.actor.use_kl_loss=true", f"{ARR}.actor.kl_loss_coef=0.01",
    ]
    if rollout == "vllm":
        overrides.append(f"{ARR}.rollout.max_num_seqs=16")
    if with_critic:
        overrides += ["critic.model.lora_rank=8", "critic.model.lora_alpha=16",
                      "critic.model.fsdp_config.mixed_precision.param_dtype=fp32", "critic.ppo_mini_batch_size=4"]
    return overrides


@pytest.mark.parametrize("rollout, mode, with_critic", list(_cases()))
def test_lora_trains_and_the_engine_follows_the_adapter(tmp_path: Path, rollout: str, mode: str,
                                                        with_critic: bool) -> None:
    seen: dict[str, float] = {}

    def body(trainer) -> None:
        wg = trainer.actor_rollout_wg
        fixed = wg.generate_sequences(_probe(trainer))
        mask = fixed.batch["response_mask"].bool()
        before = wg.compute_log_prob(fixed).batch["old_log_probs"]
        trainer.fit()
        after = wg.compute_log_prob(fixed).batch["old_log_probs"]
        seen["moved"] = _max_gap(after, before, mask)
        if rollout == "vllm":
            engine = wg.execute_with_func_generator(_synced_engine_log_probs, fixed).batch["engine_log_probs"]
            seen["engine_gap"] = _max_gap(engine, after, mask)
        else:  # the HF engine samples with the actor's module: its recorded log-probs are the adapter's
            fresh = wg.generate_sequences(_probe(trainer))
            fresh_mask = fresh.batch["response_mask"].bool()
            actor = wg.compute_log_prob(fresh).batch["old_log_probs"]
            seen["engine_gap"] = _max_gap(fresh.batch["rollout_log_probs"], actor, fresh_mask)

    steps = fit_run(_overrides(tmp_path, rollout, mode, with_critic), body)
    assert [row["step"] for row in steps] == [1, 2]
    assert seen["moved"] > 10 * TOL, f"the adapter did not move the actor: {seen['moved']}"
    assert seen["engine_gap"] < TOL, f"the {rollout} engine does not follow the adapter: {seen['engine_gap']}"
    assert steps[-1]["actor/kl_loss"] > 0  # the reference is the base model, which the adapter has left
    if with_critic:
        for row in steps:
            assert row["critic/vf_loss"] >= 0 and row["critic/grad_norm"] > 0
