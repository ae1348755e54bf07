"""Rollout backends by `actor_rollout_ref.rollout.name`: each returns the engine and the sharding manager that
moves the trainer's weights into it. Every builder takes the typed RolloutConfig and
``trust_remote_code`` (``actor_rollout_ref.model.trust_remote_code``): a backend that loads the model itself (vLLM)
needs it; one that wraps the actor's already-loaded module (HF) does not."""

from __future__ import annotations

from collections.abc import Callable

from verl.workers.config import RolloutConfig

_BUILDERS: dict[str, Callable] = {}


def register_rollout(name: str):
    def deco(fn: Callable) -> Callable:
        if name in _BUILDERS and _BUILDERS[name] is not fn:
            raise ValueError(f"rollout backend {name!r} is already registered")
        _BUILDERS[name] = fn
        return fn

    return deco


@register_rollout("hf")
def _build_hf(config, module, tokenizer, model_path, device_mesh, trust_remote_code):
    from verl.workers.rollout.hf_rollout import HFRollout
    from verl.workers.sharding_manager.fsdp_hf import FSDPHFShardingManager

    return HFRollout(module, config), FSDPHFShardingManager(module)


@register_rollout("vllm")
def _build_vllm(config, module, tokenizer, model_path, device_mesh, trust_remote_code):
    import os

    from verl.workers.rollout.vllm_rollout import vLLMRollout
    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

    env = os.environ
    rollout = vLLMRollout(model_path, config, tokenizer, getattr(module, "config", None),
                          rank=int(env.get("RANK", 0)), local_rank=int(env.get("LOCAL_RANK", 0)),
                          local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)), seed=config.seed,
                          trust_remote_code=trust_remote_code)
    return rollout, FSDPVLLMShardingManager(module, rollout, tp_size=config.tensor_model_parallel_size,
                                            bucket_megabytes=config.checkpoint_engine.update_weights_bucket_megabytes)


def build_rollout(config: RolloutConfig, module, tokenizer, model_path: str, device_mesh, *, trust_remote_code: bool = False):
    """The engine and sharding manager for ``config`` (the RolloutConfig) around the actor's module. The worker passes
    ``trust_remote_code=model.trust_remote_code``; False (HF's own default) serves callers with no model section."""
    name = config.name
    if name not in _BUILDERS:
        raise ValueError(f"actor_rollout_ref.rollout.name={name!r} is not available here; known: {sorted(_BUILDERS)}")
    return _BUILDERS[name](config, module, tokenizer, model_path, device_mesh, trust_remote_code)
