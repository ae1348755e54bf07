"""Settings that do not run with video rows (data.video_key) are named with their keys before Ray."""

from omegaconf import OmegaConf

from verl.trainer.config import PPOTrainerConfig
from verl.trainer.config.validate import load_config
from verl.trainer.ppo.vision_checks import video_run_problems
from verl.utils.config_schema import build_config


def _problems(*overrides: str) -> str:
    base = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=hf", "algorithm.adv_estimator=grpo"]
    tree = OmegaConf.to_container(load_config(base + list(overrides)), resolve=True)
    return "\n".join(video_run_problems(build_config(PPOTrainerConfig, tree).config))


def test_the_hf_rollout_sync_and_single_turn_pass():
    assert _problems() == ""
    assert _problems("algorithm.adv_estimator=gae") == ""  # the critic: tests/workers/critic/test_vlm_critic_video.py
    assert _problems("actor_rollout_ref.rollout.mode=sync") == ""
    assert _problems("actor_rollout_ref.rollout.multi_turn.enable=true") == ""  # test_tool_loop_videos.py
    assert _problems("trainer.n_gpus_per_node=2", "actor_rollout_ref.model.use_remove_padding=true") == ""
    # Ulysses: tests/workers/actor/test_vlm_ulysses_video.py
    assert _problems("trainer.n_gpus_per_node=2", "actor_rollout_ref.model.use_remove_padding=true",
                     "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2") == ""


def test_each_unbuilt_setting_is_named_by_its_key():
    cases = {
        ("actor_rollout_ref.rollout.name=vllm",): "actor_rollout_ref.rollout.name=vllm with videos",
    }
    for overrides, key in cases.items():
        assert key in _problems(*overrides), overrides


def test_the_tool_loop_with_qwen3_vl_videos_is_refused(tmp_path):
    from tests.helpers.tiny_video import save_tiny_video_vlm_dir

    for family in ("qwen2_5_vl", "qwen3_vl"):
        folder = save_tiny_video_vlm_dir(tmp_path / family, family)
        problems = _problems("actor_rollout_ref.rollout.multi_turn.enable=true",
                             f"actor_rollout_ref.model.path={folder}")
        assert ("Qwen3-VL videos" in problems) == (family == "qwen3_vl"), problems
