"""single_turn_agent with videos (tiny Qwen2-VL / Qwen2.5-VL, HF backend): each row's videos go with its request
(video_data), the greedy batch equals the sync rollout's with the same (bs, 4, L) positions and the dataset's video
inputs, and sampled log-probs equal the actor's recomputation."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.rollout.agent_loop.test_single_turn_vlm import _async_batch, _config, _generate
from tests.workers.rollout.test_hf_rollout_video import video_prompts
from tests.workers.rollout.test_hf_rollout_vlm import gen_batch, with_images
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_greedy_single_turn_with_videos_equals_the_sync_rollout(tmp_path, family):
    from tests.helpers.tiny_vlm import tiny_vlm

    batch, tokenizer, processor = video_prompts(tmp_path, family)
    model = tiny_vlm(family)
    config = _config(**{"rollout.prompt_length": 96})
    sync = HFRollout(model, config.rollout).generate_sequences(
        gen_batch(batch, tokenizer, do_sample=False, validate=True))
    prompts = _async_batch(batch, tokenizer, do_sample=False, validate=True)
    out, manager = _generate(model, config, processor, prompts)
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert torch.equal(out.batch[key], sync.batch[key]), key
    # the actor trains on the trajectory's inputs: the dataset's video inputs, row by row
    for got, want in zip(out.non_tensor_batch["multi_modal_inputs"], batch["multi_modal_inputs"]):
        assert sorted(got) == sorted(want)
        assert all(torch.equal(torch.as_tensor(got[k]), torch.as_tensor(want[k])) for k in want)
    assert manager.last_stats["agent/engine_steps"] == 1


def test_sampled_log_probs_with_videos_equal_the_actors(tmp_path):
    from tests.helpers.tiny_vlm import tiny_vlm

    batch, tokenizer, processor = video_prompts(tmp_path, "qwen2_5_vl")
    model = tiny_vlm("qwen2_5_vl")
    torch.manual_seed(5)
    prompts = _async_batch(batch, tokenizer, do_sample=True)
    out, _ = _generate(model, _config(**{"rollout.prompt_length": 96}), processor, prompts)
    mask = out.batch["response_mask"].bool()
    assert mask.sum() >= 8
    data = with_images(out, prompts)
    data.non_tensor_batch["multi_modal_inputs"] = out.non_tensor_batch["multi_modal_inputs"]
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        recomputed, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(recomputed[mask], out.batch["rollout_log_probs"][mask], rtol=1e-4, atol=1e-4)


@register("test_video_blind_agent")
class VideoBlindAgent(AgentLoopBase):
    """Sends the prompt's tokens without its videos."""

    async def run(self, sampling_params, **kwargs):
        out = await self.server_manager.generate("blind", prompt_ids=list(kwargs["raw_prompt_ids"]),
                                                 sampling_params=sampling_params)
        return AgentLoopOutput(prompt_ids=list(kwargs["raw_prompt_ids"]), response_ids=out.token_ids,
                               response_mask=[1] * len(out.token_ids))


def test_a_loop_that_drops_the_rows_videos_is_refused(tmp_path):
    from tests.helpers.tiny_vlm import tiny_vlm

    batch, tokenizer, processor = video_prompts(tmp_path, "qwen2_vl")
    prompts = _async_batch(batch, tokenizer, do_sample=False, validate=True)
    prompts.non_tensor_batch["agent_name"] = prompts.non_tensor_batch["data_source"].copy()
    prompts.non_tensor_batch["agent_name"][:] = "test_video_blind_agent"
    with pytest.raises(ValueError, match="carries 0 videos but its row has 1"):
        _generate(tiny_vlm("qwen2_vl"), _config(**{"rollout.prompt_length": 96}), processor, prompts)


def test_the_tool_loop_refuses_a_qwen3_vl_video_row_naming_the_key(tmp_path):
    from tests.helpers.tiny_video import save_tiny_video_vlm_dir
    from verl.models.loader import load_tokenizer
    from verl.models.processor import load_processor
    from verl.workers.rollout.agent_loop.vision import VisionChat

    folder = save_tiny_video_vlm_dir(tmp_path / "model", "qwen3_vl")
    chat = VisionChat(load_processor(folder, load_tokenizer(folder, "k"), "k"))
    with pytest.raises(NotImplementedError, match=r"writes timestamps .*multi_turn\.enable=false"):
        chat.messages([{"role": "user", "content": "<video>What moves?"}], 0, "tool_agent row (index 0)", 1)
