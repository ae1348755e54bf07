"""Ten vision-language command lines in the shape of upstream verl's VLM examples (examples/grpo_trainer/
run_qwen2_5_vl-7b*.sh, run_qwen3_vl-8b-fsdp2, the visualwebinstruct and geo3k multi-turn recipes), with upstream's
keys and the sizes shrunk to a tiny random Qwen2.5-VL on the bundled visual_count rows, each with both rollouts:

- every line passes the checks main_ppo runs before Ray (the datasets with their images, the config, the refusals
  of docs/vlm.md) — in the default suite;
- every line trains two GRPO / PPO steps through main_ppo's builder and Ray — marked slow (twenty runs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, fit_run, tiny_run_overrides

pytestmark = pytest.mark.e2e

ARR = "actor_rollout_ref"
# run_qwen2_5_vl-7b.sh's keys (geo3k GRPO), sizes aside
GEO3K = (
    "algorithm.adv_estimator=grpo", "data.filter_overlong_prompts=True", "data.truncation=error",
    "data.image_key=images", f"{ARR}.model.use_remove_padding=True", f"{ARR}.actor.use_kl_loss=True",
    f"{ARR}.actor.kl_loss_coef=0.01", f"{ARR}.actor.kl_loss_type=low_var_kl", f"{ARR}.actor.entropy_coeff=0",
    f"{ARR}.model.enable_gradient_checkpointing=True", f"{ARR}.actor.fsdp_config.param_offload=False",
    f"{ARR}.actor.fsdp_config.optimizer_offload=False", f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=4",
    f"{ARR}.rollout.tensor_model_parallel_size=1", f"{ARR}.rollout.gpu_memory_utilization=0.6",
    f"{ARR}.rollout.enable_chunked_prefill=False", f"{ARR}.rollout.enforce_eager=False",
    f"{ARR}.rollout.free_cache_engine=False", f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=4",
    f"{ARR}.ref.fsdp_config.param_offload=True", "algorithm.use_kl_in_reward=False", "trainer.critic_warmup=0",
)
TOOL_CONFIG = REPO / "examples/sglang_multiturn/config/tool_config/geo3k_tool_config.yaml"
LINES = {
    "geo3k_grpo": GEO3K,
    "geo3k_lora": GEO3K + (f"{ARR}.model.lora_rank=8", f"{ARR}.model.lora_alpha=16",
                           f"{ARR}.model.target_modules=all-linear", f"{ARR}.model.exclude_modules=.*visual.*"),
    "geo3k_seq_balance": GEO3K + (f"{ARR}.actor.use_dynamic_bsz=True", f"{ARR}.actor.ppo_max_token_len_per_gpu=2048",
                                  f"{ARR}.ref.log_prob_max_token_len_per_gpu=2048"),
    "freeze_vision_tower": GEO3K + (f"{ARR}.actor.freeze_vision_tower=True", "data.return_multi_modal_inputs=True"),
    "fsdp2_recipe": GEO3K + (  # run_qwen3_vl-8b-fsdp2's engine keys
        f"{ARR}.actor.strategy=fsdp2", "critic.strategy=fsdp2", f"{ARR}.actor.use_torch_compile=False",
        f"{ARR}.actor.fsdp_config.forward_prefetch=False", f"{ARR}.ref.fsdp_config.forward_prefetch=False",
        f"{ARR}.actor.entropy_from_logits_with_chunking=True", f"{ARR}.ref.entropy_from_logits_with_chunking=True",
        f"{ARR}.rollout.ignore_eos=False", f"{ARR}.rollout.max_num_batched_tokens=8192",
        f"{ARR}.rollout.enable_chunked_prefill=True", "data.shuffle=False"),
    "ppo_critic": tuple(k for k in GEO3K if not k.startswith("algorithm.adv_estimator")) + (
        "algorithm.adv_estimator=gae", "critic.model.use_remove_padding=True",
        "critic.model.enable_gradient_checkpointing=True", "critic.ppo_micro_batch_size_per_gpu=2"),
    "visualwebinstruct_rloo": (  # the visualwebinstruct recipe's keys, a rule reward instead of its verifier
        "algorithm.adv_estimator=rloo", "data.return_raw_chat=True", "data.truncation=left", "data.image_key=images",
        "data.prompt_key=prompt", f"{ARR}.model.use_remove_padding=True", f"{ARR}.actor.use_kl_loss=True",
        f"{ARR}.actor.kl_loss_coef=0.01", f"{ARR}.actor.clip_ratio=0.2", f"{ARR}.actor.kl_loss_type=low_var_kl",
        f"{ARR}.rollout.temperature=0.7", f"{ARR}.rollout.val_kwargs.n=1", f"{ARR}.rollout.max_model_len=512",
        f"{ARR}.rollout.max_num_batched_tokens=1024", "algorithm.use_kl_in_reward=True",
        "algorithm.kl_ctrl.kl_coef=0.001", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.horizon=10000",
        "algorithm.kl_ctrl.target_kl=0.01"),
    "two_workers_padded": GEO3K + ("trainer.n_gpus_per_node=2", f"{ARR}.model.use_remove_padding=False"),
    "gspo": GEO3K + (f"{ARR}.actor.policy_loss.loss_mode=gspo", f"{ARR}.actor.clip_ratio_low=0.0003",
                     f"{ARR}.actor.clip_ratio_high=0.0004", f"{ARR}.actor.loss_agg_mode=seq-mean-token-mean"),
    "geo3k_multiturn_tool": GEO3K + (  # the geo3k tool-agent recipe
        "data.return_raw_chat=True", f"{ARR}.rollout.multi_turn.enable=True",
        f"{ARR}.rollout.multi_turn.max_assistant_turns=2", f"{ARR}.rollout.multi_turn.tool_config_path={TOOL_CONFIG}"),
}
ROLLOUTS = {"hf": (f"{ARR}.rollout.name=hf",),
            # upstream's VLM engine key, and the fp32 CPU settings the other vLLM e2e tests use
            "vllm": (f"{ARR}.rollout.name=vllm", f"+{ARR}.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache=True",
                     f"{ARR}.rollout.dtype=float32", f"{ARR}.rollout.max_num_seqs=16")}
CASES = [(line, rollout) for line in LINES for rollout in ROLLOUTS]


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory) -> tuple[Path, Path]:
    from tests.helpers.tiny_vlm_vllm import save_tiny_vllm_vlm_dir

    root = tmp_path_factory.mktemp("vlm_lines")
    model = Path(save_tiny_vllm_vlm_dir(root / "model", "qwen2_5_vl"))  # a head size vLLM's CPU attention takes
    data = root / "data"
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/visual_count.py"), "--local_save_dir",
                    str(data), "--train_size", "16", "--test_size", "4", "--max_count", "3"],
                   check=True, capture_output=True)
    return model, data


def _overrides(model_and_data, run_dir: Path, line: str, rollout: str) -> list[str]:
    model, data = model_and_data
    return tiny_run_overrides(model, data, run_dir, n_workers=1) + [
        "trainer.device=cpu", f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "data.max_prompt_length=256", "data.max_response_length=16",
        *ROLLOUTS[rollout], *LINES[line]]


@pytest.mark.parametrize(("line", "rollout"), CASES, ids=[f"{line}-{rollout}" for line, rollout in CASES])
def test_the_line_passes_the_checks_before_ray(model_and_data, tmp_path: Path, line: str, rollout: str,
                                              monkeypatch) -> None:
    import ray

    import verl.utils.ray_utils
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    class ReachedRay(Exception):
        pass

    def stop(*args, **kwargs):  # every check main_ppo runs before Ray has passed when the launcher gets here
        raise ReachedRay

    monkeypatch.setattr(verl.utils.ray_utils, "init_ray", stop)
    with pytest.raises(ReachedRay):
        build_trainer(validate_config(load_config(_overrides(model_and_data, tmp_path, line, rollout))))
    assert not ray.is_initialized()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("line", "rollout"), CASES, ids=[f"{line}-{rollout}" for line, rollout in CASES])
def test_the_line_trains_two_steps(model_and_data, tmp_path: Path, line: str, rollout: str) -> None:
    rows = fit_run(_overrides(model_and_data, tmp_path, line, rollout))
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert 0.0 <= row["critic/score/mean"] <= 1.0 and row["response_length/mean"] > 0
