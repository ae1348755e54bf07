"""A vLLM max_model_len beyond the model's max_position_embeddings is refused before Ray, naming the key."""

from omegaconf import OmegaConf

from tests.helpers.tiny_vlm import save_tiny_vlm_dir
from verl.trainer.config import PPOTrainerConfig
from verl.trainer.config.validate import load_config
from verl.trainer.ppo.engine_length_check import vllm_length_problems
from verl.utils.config_schema import build_config


def _problems(*overrides: str) -> str:
    tree = OmegaConf.to_container(load_config(["trainer.n_gpus_per_node=1", *overrides]), resolve=True)
    return "\n".join(vllm_length_problems(build_config(PPOTrainerConfig, tree).config))


def test_vllm_lengths_beyond_the_models_are_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    model = f"actor_rollout_ref.model.path={save_tiny_vlm_dir(tmp_path, 'qwen2_vl')}"  # max_position_embeddings=512
    vllm = "actor_rollout_ref.rollout.name=vllm"
    assert "actor_rollout_ref.rollout.max_model_len=1024 exceeds the model's max_position_embeddings=512" in _problems(
        model, vllm, "actor_rollout_ref.rollout.max_model_len=1024")
    derived = _problems(model, vllm, "data.max_prompt_length=500", "data.max_response_length=64")
    assert "data.max_prompt_length + data.max_response_length + 1 = 565" in derived
    assert _problems(model, vllm, "actor_rollout_ref.rollout.max_model_len=512") == ""
    assert _problems(model, "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.max_model_len=1024") == ""
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")  # vLLM's own escape hatch
    assert _problems(model, vllm, "actor_rollout_ref.rollout.max_model_len=1024") == ""
