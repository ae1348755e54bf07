"""single_turn_agent with images on a tiny random Qwen2.5-VL (fp32): each row's images go with its request
(image_data), the HF backend batches rows with their images, and the batch equals the sync rollout's (greedy) with
the same (bs, 4, L) position ids; sampled log-probs equal the actor's recomputation."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_vlm import collated_vlm_prompts
from tests.helpers.typed_config import typed_section
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.rollout.test_hf_rollout_vlm import gen_batch, with_images
from verl.protocol import DataProto
from verl.trainer.config import ActorRolloutRefConfig
from verl.trainer.ppo.agent_rollout import pop_generation_input
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.workers.rollout.agent_loop.backends import HFBackend
from verl.workers.rollout.agent_loop.manager import AgentLoopManager
from verl.workers.rollout.agent_loop.server import EngineRequest
from verl.workers.rollout.vllm.sampling import sampling_kwargs

RESPONSE = 6
TEMPERATURE = 0.8


def _config(**overrides) -> ActorRolloutRefConfig:
    values = {"model.path": "unused", "rollout.mode": "async", "rollout.name": "hf", "rollout.prompt_length": 64,
              "rollout.response_length": RESPONSE, "rollout.temperature": TEMPERATURE,
              "rollout.calculate_log_probs": True, "rollout.val_kwargs.temperature": 0.0,
              "rollout.val_kwargs.do_sample": False}
    return typed_section(ActorRolloutRefConfig, values, **overrides)


def _async_batch(batch: dict, tokenizer, **meta) -> DataProto:
    """What the trainer sends in async mode: the prompt tensors and every column of the rows."""
    data = DataProto.from_single_dict(batch)
    gen = pop_generation_input(data, "async")
    gen.meta_info.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **meta)
    return gen


def _generate(model, config, processor, prompts: DataProto) -> tuple[DataProto, AgentLoopManager]:
    rollout = HFRollout(model, config.rollout)
    manager = AgentLoopManager(config, None, lambda meta: HFBackend(rollout, meta, config.rollout.prompt_length,
                                                                    processor=processor), processor=processor)
    params = sampling_kwargs(config.rollout, prompts.meta_info)
    params.pop("n")
    return manager.generate_sequences(prompts, params), manager


def test_greedy_single_turn_with_images_equals_the_sync_rollout(tmp_path):
    from tests.helpers.tiny_vlm import tiny_vlm

    batch, tokenizer, processor = collated_vlm_prompts(tmp_path, "qwen2_5_vl")
    model = tiny_vlm("qwen2_5_vl")
    config = _config()
    sync = HFRollout(model, config.rollout).generate_sequences(
        gen_batch(batch, tokenizer, do_sample=False, validate=True))
    out, manager = _generate(model, config, processor, _async_batch(batch, tokenizer, do_sample=False, validate=True))
    assert out.batch["position_ids"].shape == sync.batch["position_ids"].shape == (4, 4, 64 + RESPONSE)
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert torch.equal(out.batch[key], sync.batch[key]), key
    assert manager.last_stats["agent/engine_steps"] == 1  # the four rows, with their images, in one generate call


def test_sampled_log_probs_with_images_equal_the_actors(tmp_path):
    from tests.helpers.tiny_vlm import tiny_vlm

    batch, tokenizer, processor = collated_vlm_prompts(tmp_path, "qwen2_vl")
    model = tiny_vlm("qwen2_vl")
    torch.manual_seed(5)
    prompts = _async_batch(batch, tokenizer, do_sample=True)
    out, _ = _generate(model, _config(), processor, prompts)
    mask = out.batch["response_mask"].bool()
    assert mask.sum() >= 8
    data = with_images(out, prompts)
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        recomputed, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(recomputed[mask], out.batch["rollout_log_probs"][mask], rtol=1e-4, atol=1e-4)


@register("test_blind_agent")
class BlindAgent(AgentLoopBase):
    """Sends the prompt's tokens without its images."""

    async def run(self, sampling_params, **kwargs):
        out = await self.server_manager.generate("blind", prompt_ids=list(kwargs["raw_prompt_ids"]),
                                                 sampling_params=sampling_params)
        return AgentLoopOutput(prompt_ids=list(kwargs["raw_prompt_ids"]), response_ids=out.token_ids,
                               response_mask=[1] * len(out.token_ids))


def test_a_loop_that_drops_the_rows_images_is_refused(tmp_path):
    from tests.helpers.tiny_vlm import tiny_vlm

    batch, tokenizer, processor = collated_vlm_prompts(tmp_path, "qwen2_5_vl", prompt_images=(1, 0))
    prompts = _async_batch(batch, tokenizer, do_sample=False, validate=True)
    prompts.non_tensor_batch["agent_name"] = prompts.non_tensor_batch["data_source"].copy()
    prompts.non_tensor_batch["agent_name"][:] = "test_blind_agent"
    with pytest.raises(ValueError, match="carries 0 images but its row has 1"):
        _generate(tiny_vlm("qwen2_5_vl"), _config(), processor, prompts)


def test_the_hf_backend_needs_a_processor_for_images():
    request = EngineRequest("r", [1, 2], {"max_tokens": 1}, image_data=["an image"])
    backend = HFBackend(rollout=None, meta={"pad_token_id": 0, "eos_token_id": 1}, prompt_length=4)
    with pytest.raises(ValueError, match="processor"):
        backend._image_inputs([request])
