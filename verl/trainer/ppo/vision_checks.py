"""What a run with images in its data needs, checked before Ray (the rows' images are known once the datasets load).

Built for images: the HF rollout (sync, and the single-turn and tool / interaction agent loops), the vLLM rollout
(Qwen2-VL / Qwen2.5-VL), the actor, the reference, the critic, a vision-language reward model, LoRA and Ulysses
(Qwen2-VL / Qwen2.5-VL), on any number of workers (verl.models.vision.enable_blank_image_forward keeps the sharded
vision blocks' collectives matched).
Every other part would ignore the images (train or score blind) or is not verified with them, so it is refused
here with its key, rather than accepted and ignored.
"""

from __future__ import annotations

from typing import Any

__all__ = ["vision_run_problems", "video_run_problems"]


def vision_run_problems(config: Any) -> list[str]:
    """One message per setting that cannot run with image rows (empty: the run may start)."""
    arr = config.actor_rollout_ref
    problems = []
    if arr.rollout.name == "vllm":
        problems += _vllm_problems(arr)
    if not config.data.return_multi_modal_inputs:
        problems.append("data.return_multi_modal_inputs=false: the rollout and the actor take the rows' pixel_values "
                        "/ image_grid_thw from it (recomputing them in the agent loop is not built); set it to true")
    if config.reward_model.enable:
        problems += _reward_model_problems(config.reward_model)
    return problems


def _vllm_problems(arr: Any) -> list[str]:
    """The vLLM rollout serves the Qwen-VL architectures it is built for, and expands images as the data did."""
    from transformers import AutoConfig

    from verl.models.loader import resolve_model_path
    from verl.workers.rollout.vllm.vision import vllm_vision_problem

    problems = []
    path = resolve_model_path(arr.model.path, "actor_rollout_ref.model.path")
    problem = vllm_vision_problem(AutoConfig.from_pretrained(path, trust_remote_code=arr.model.trust_remote_code))
    if problem:
        problems.append(problem)  # names the key and the architectures built
    if (arr.rollout.engine_kwargs.get("vllm") or {}).get("mm_processor_kwargs"):
        problems.append("actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_kwargs: the engine must expand "
                        "images exactly as the data did; set min_pixels / max_pixels in the model folder's "
                        "preprocessor_config.json instead")
    return problems


def _reward_model_problems(rm: Any) -> list[str]:
    """The reward-model worker scores images with a vision-language reward model; anything that reads text only
    (a text reward model, a generative judge, the reward loop) would score without them."""
    from transformers import AutoConfig

    from verl.models.loader import resolve_model_path
    from verl.models.vision import is_vision_language_config

    if rm.rollout.name is not None or rm.use_reward_loop:
        return ["reward_model.enable=true with reward_model.rollout.name / reward_model.use_reward_loop: the reward "
                "loop and its judges read the text alone; use the reward-model worker with a vision-language reward "
                "model (drop those keys), a rule or custom_reward_function"]
    if not rm.model.path:
        return []  # the reward model's own check names the missing path
    path = resolve_model_path(rm.model.path, "reward_model.model.path")
    if not is_vision_language_config(AutoConfig.from_pretrained(path, trust_remote_code=rm.model.trust_remote_code)):
        return [f"reward_model.model.path={rm.model.path} is a text-only model: it would score the responses "
                "without the images; use a vision-language reward model (a Qwen-VL trunk with a trained score head), "
                "a rule or custom_reward_function"]
    return []


def video_run_problems(config: Any) -> list[str]:
    """What cannot run with video rows (data.video_key). Built: the HF rollout (sync and the agent loops; the tool /
    interaction loop for Qwen2-VL / Qwen2.5-VL videos), the actor, the reference, the critic and a vision-language
    reward model (vision_run_problems checks which reward model), padded, packed and with Ulysses, on Qwen2-VL /
    Qwen2.5-VL / Qwen3-VL."""
    arr = config.actor_rollout_ref
    problems = []
    if arr.rollout.name != "hf":
        problems.append(f"actor_rollout_ref.rollout.name={arr.rollout.name} with videos (data.video_key): only the HF "
                        "rollout takes videos here (the vLLM engine runs with no video input: its video path is not "
                        "built); set actor_rollout_ref.rollout.name=hf")
    if arr.rollout.multi_turn.enable and _processor_class(arr) == "Qwen3VLProcessor":
        problems.append("actor_rollout_ref.rollout.multi_turn.enable=true with Qwen3-VL videos (data.video_key): the "
                        "tool / interaction loop renders Qwen2-VL / Qwen2.5-VL videos only (Qwen3-VL's processor "
                        "writes timestamps into the prompt); use the single-turn loop (multi_turn.enable=false)")
    return problems


def _processor_class(arr: Any) -> str | None:
    from verl.models.loader import resolve_model_path
    from verl.models.processor import processor_class_name

    return processor_class_name(resolve_model_path(arr.model.path, "actor_rollout_ref.model.path"))
