"""What a run with images in its data needs, checked before Ray (the rows' images are known once the datasets load).

Built for images: the HF rollout (sync and the single-turn agent loop), the actor and the reference on one worker.
Every other part would ignore the images (train or score blind) or is not verified with them, so it is refused
here with its key, rather than accepted and ignored.
"""

from __future__ import annotations

from typing import Any

__all__ = ["vision_run_problems"]


def vision_run_problems(config: Any) -> list[str]:
    """One message per setting that cannot run with image rows (empty: the run may start)."""
    arr = config.actor_rollout_ref
    problems = []
    if arr.rollout.name == "vllm":
        problems.append("actor_rollout_ref.rollout.name=vllm: vLLM's multi-modal input path is not built here; set "
                        "actor_rollout_ref.rollout.name=hf")
    if not config.data.return_multi_modal_inputs:
        problems.append("data.return_multi_modal_inputs=false: the rollout and the actor take the rows' pixel_values "
                        "/ image_grid_thw from it (recomputing them in the agent loop is not built); set it to true")
    if arr.rollout.mode == "async" and arr.rollout.multi_turn.enable:
        problems.append("actor_rollout_ref.rollout.multi_turn.enable=true: the tool / interaction agent loop does not "
                        "send images yet (only single_turn_agent does); set it to false")
    if config.use_critic:
        problems.append("algorithm.adv_estimator=gae: the critic's forward does not take images (it would value the "
                        "text alone); use grpo, rloo, reinforce_plus_plus or another critic-free estimator")
    if config.reward_model.enable:
        problems.append("reward_model.enable=true: the reward-model worker does not take images; use a rule or "
                        "custom_reward_function")
    for role in ("actor", "ref"):
        if getattr(arr, role).ulysses_sequence_parallel_size > 1:
            problems.append(f"actor_rollout_ref.{role}.ulysses_sequence_parallel_size > 1: Ulysses with images is not "
                            "built; set it to 1")
    if arr.model.lora_rank > 0:
        problems.append("actor_rollout_ref.model.lora_rank > 0: LoRA on a vision-language model is not verified; "
                        "set it to 0")
    workers = config.trainer.n_gpus_per_node * config.trainer.nnodes
    if workers > 1:
        problems.append(f"trainer.n_gpus_per_node x trainer.nnodes = {workers}: images run on one worker only for now "
                        "(FSDP shards the vision blocks, and a rank whose micro-batch has no image would skip their "
                        "collectives while the others wait); set trainer.n_gpus_per_node=1 and trainer.nnodes=1")
    return problems
