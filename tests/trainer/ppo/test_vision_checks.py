"""Settings that would ignore the rows' images (or are not verified with them) are named with their keys."""

from omegaconf import OmegaConf

from verl.trainer.config import PPOTrainerConfig
from verl.trainer.config.validate import load_config
from verl.trainer.ppo.vision_checks import vision_run_problems
from verl.utils.config_schema import build_config


def _problems(*overrides: str) -> str:
    base = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=hf", "algorithm.adv_estimator=grpo"]
    tree = OmegaConf.to_container(load_config(base + list(overrides)), resolve=True)
    return "\n".join(vision_run_problems(build_config(PPOTrainerConfig, tree).config))


def test_the_built_path_passes():
    assert _problems() == ""
    assert _problems("actor_rollout_ref.rollout.mode=sync") == ""
    # built since: the critic, LoRA on the language model, more than one worker, the tool / interaction loop
    assert _problems("algorithm.adv_estimator=gae", "actor_rollout_ref.model.lora_rank=8",
                     "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.multi_turn.enable=true") == ""


def test_each_unbuilt_setting_is_named_by_its_key():
    cases = {
        "actor_rollout_ref.rollout.name=vllm": "actor_rollout_ref.rollout.name=vllm",  # the default model: text
        "data.return_multi_modal_inputs=false": "data.return_multi_modal_inputs=false",
    }
    for override, key in cases.items():
        assert key in _problems(override), override


def test_ulysses_with_images_passes_the_check_for_every_qwen_vl_family(tmp_path):
    from tests.helpers.tiny_vlm import save_tiny_vlm_dir

    sp = ("trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
          "actor_rollout_ref.model.use_remove_padding=true")
    for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):  # Qwen3-VL: its deepstack rows sliced per rank
        folder = save_tiny_vlm_dir(tmp_path / family, family)
        assert _problems(*sp, f"actor_rollout_ref.model.path={folder}") == ""


def test_vllm_serves_the_qwen_vl_architectures_it_is_built_for(tmp_path):
    from tests.helpers.tiny_vlm import save_tiny_vlm_dir

    for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        folder = save_tiny_vlm_dir(tmp_path / family, family)
        assert _problems("actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.model.path={folder}") == ""
        assert "engine_kwargs.vllm.mm_processor_kwargs" in _problems(
            "actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.model.path={folder}",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_kwargs.max_pixels=1024")
    # another family's architecture is refused naming the ones built: tests/workers/rollout/test_vllm_vision_parts.py


def test_the_reward_model_must_see_the_images(tmp_path):
    from tests.helpers.e2e import default_tokenizer_dir
    from tests.helpers.tiny_vlm import save_tiny_vlm_dir

    folder = save_tiny_vlm_dir(tmp_path / "vlm", "qwen2_vl")
    assert _problems("reward_model.enable=true", f"reward_model.model.path={folder}") == ""
    text = _problems("reward_model.enable=true", f"reward_model.model.path={default_tokenizer_dir()}")
    assert "is a text-only model" in text and "reward_model.model.path" in text
    assert "reward_model.use_reward_loop" in _problems("reward_model.enable=true", f"reward_model.model.path={folder}",
                                                       "reward_model.use_reward_loop=true")
