"""tool_agent with images on tiny random Qwen2-VL / Qwen2.5-VL folders, the HF agent-loop backend on CPU.

The model's first turn is scripted (a random model calls no tool): a `zoom` call, answered by a tool that returns an
image; every later turn is the HF model's own generation with all the trajectory's images. Checked: the row's
images go with every request, the tool's image joins them, its tokens sit masked in the response, and the batch's
multi_modal_inputs / (bs, 4, P + R) position ids let the actor recompute the same log-probs as plain HF on the whole
sequence with every image.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from tests.helpers.tiny_vlm import collate_rows, image_rows, png, save_tiny_vlm_dir, tiny_vlm
from tests.helpers.typed_config import typed_section
from tests.workers.actor.test_dp_actor import actor_config
from verl.data.vision import mrope_position_ids
from verl.models.vision import suppress_vision_tokens, vision_token_ids
from verl.protocol import DataProto
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse
from verl.trainer.config import ActorRolloutRefConfig
from verl.trainer.ppo.agent_rollout import pop_generation_input
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop.backends import HFBackend
from verl.workers.rollout.agent_loop.manager import AgentLoopManager
from verl.workers.rollout.agent_loop.server import TokenOutput
from verl.workers.rollout.agent_loop.vision import image_inputs
from verl.workers.rollout.vllm.sampling import sampling_kwargs

PROMPT_LEN, RESPONSE_LEN = 1024, 200
TEMPERATURE = 0.8
SCRIPTED_LOG_PROB = -0.5
CALL = '<tool_call>\n{"name": "zoom", "arguments": {"factor": 2}}\n</tool_call>'
TOOL_IMAGE_SIZE = (24, 16)  # a 6 x 4 patch grid: 6 image tokens after the 2 x 2 merge

ZOOM_SCHEMA = {"type": "function", "function": {
    "name": "zoom", "description": "Zoom into the picture.",
    "parameters": {"type": "object", "properties": {"factor": {"type": "integer", "description": "zoom factor"}},
                   "required": ["factor"]}}}


class ZoomTool(BaseTool):
    """Answers every call with a text and one image; `mode` in its config: "image" (a PIL image), "bytes" (a PNG's
    bytes), "array" (an (H, W, 3) uint8 array), "video" (a video, which is refused)."""

    async def execute(self, instance_id, parameters, **kwargs):
        mode = self.config.get("mode", "image")
        if mode == "video":
            return ToolResponse(text="a clip", video=[[Image.new("RGB", (8, 8))]]), 0.0, {}
        image = Image.new("RGB", TOOL_IMAGE_SIZE, (10, 200, 30))
        as_returned = {"image": image, "bytes": png(TOOL_IMAGE_SIZE, (10, 200, 30)), "array": np.asarray(image)}
        return ToolResponse(text="zoomed", image=[as_returned[mode]]), 0.0, {}


class RecordingBackend:
    """``script(conversation text) -> reply text`` answers a request, or ``None`` hands it to ``hf`` (an HFBackend).
    Records each request's row and images."""

    def __init__(self, tokenizer, script, hf: HFBackend | None = None) -> None:
        self.tokenizer, self.script, self.hf = tokenizer, script, hf
        self.scripted: list = []
        self.requests: list[tuple[int, list]] = []  # (row, image_data)

    def add(self, request) -> None:
        self.requests.append((request.order[0], list(request.image_data or [])))
        reply = self.script(self.tokenizer.decode(request.prompt_ids, skip_special_tokens=False))
        if reply is None:
            self.hf.add(request)
        else:
            self.scripted.append((request, reply))

    def has_work(self) -> bool:
        return bool(self.scripted) or (self.hf is not None and self.hf.has_work())

    def idle(self) -> bool:
        return True

    def in_flight(self) -> int:
        return len(self.scripted) + (self.hf.in_flight() if self.hf is not None else 0)

    def step(self):
        done = []
        for request, reply in self.scripted:
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            done.append((request, TokenOutput(ids, [SCRIPTED_LOG_PROB] * len(ids), "stop")))
        self.scripted = []
        if self.hf is not None and self.hf.has_work():
            done += self.hf.step()
        return done

    def fail_all(self, err) -> None:
        for request, _ in self.scripted:
            if not request.future.done():
                request.future.set_exception(RuntimeError(repr(err)))
        self.scripted = []
        if self.hf is not None:
            self.hf.fail_all(err)


def call_then_model(conversation: str) -> str | None:
    """First assistant turn: the zoom call; later turns: the model."""
    return CALL if "<|im_start|>tool" not in conversation else None


def _config(tmp_path, mode: str = "image", interaction: bool = False, **overrides) -> ActorRolloutRefConfig:
    tools = tmp_path / "tools.yaml"
    tools.write_text(yaml.safe_dump({"tools": [{
        "class_name": f"{__name__}.ZoomTool", "config": {"type": "native", "mode": mode}, "tool_schema": ZOOM_SCHEMA}]}))
    values = {"model.path": "unused", "rollout.mode": "async", "rollout.name": "hf",
              "rollout.prompt_length": PROMPT_LEN, "rollout.response_length": RESPONSE_LEN,
              "rollout.temperature": TEMPERATURE, "rollout.calculate_log_probs": True,
              "rollout.multi_turn.enable": True, "rollout.multi_turn.tool_config_path": str(tools),
              "rollout.multi_turn.max_assistant_turns": 2}
    if interaction:
        path = tmp_path / "interaction.yaml"
        path.write_text(yaml.safe_dump({"interaction": [{
            "name": "gsm8k", "class_name": "verl.interactions.gsm8k_interaction.Gsm8kInteraction", "config": {}}]}))
        values["rollout.multi_turn.interaction_config_path"] = str(path)
    return typed_section(ActorRolloutRefConfig, values, **overrides)


def vlm_rows(tmp_path, family: str, prompt_images=(1, 2, 0)):
    """The trainer's dataset batch (return_raw_chat: the messages with their <image> placeholders), the tokenizer and
    the processor of a tiny folder."""
    rows = image_rows(prompt_images, "What is in the picture?")
    for row in rows:
        row["agent_name"] = "tool_agent"
    return collate_rows(save_tiny_vlm_dir(tmp_path / family, family), tmp_path / f"{family}.parquet", rows,
                        return_raw_chat=True)


def _generate(config, tokenizer, processor, batch: dict, model=None, script=call_then_model, **meta):
    data = DataProto.from_single_dict(batch)
    prompts = pop_generation_input(data, "async")
    prompts.meta_info.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **meta)
    hf = None
    if model is not None:
        hf_rollout = HFRollout(model, config.rollout)
        hf = HFBackend(hf_rollout, prompts.meta_info, config.rollout.prompt_length, processor=processor)
    backend = RecordingBackend(tokenizer, script, hf)
    manager = AgentLoopManager(config, tokenizer, lambda meta: backend, processor=processor)
    params = sampling_kwargs(config.rollout, prompts.meta_info)
    params.pop("n")
    return manager.generate_sequences(prompts, params), backend, data


def _row_images(batch: dict, row: int) -> list:
    return list(batch["multi_modal_data"][row]["image"])


def plain_hf_log_probs(model, out: DataProto, image_token_id: int) -> torch.Tensor:
    """Plain HF on each whole sequence (no padding) with all of its images, the model computing its own positions
    (the vision tokens left out of the distribution, as the rollout samples it and the actor scores it)."""
    result = torch.zeros(out.batch["responses"].shape)
    prompt_length = out.batch["prompts"].size(1)
    for row in range(len(out)):
        mask = out.batch["attention_mask"][row].bool()
        ids = out.batch["input_ids"][row][mask][None]
        inputs = out.non_tensor_batch["multi_modal_inputs"][row]
        kwargs = {k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs}
        model.model.rope_deltas = None
        logits = model(input_ids=ids, mm_token_type_ids=(ids == image_token_id).int(), **kwargs).logits[0]
        logits = suppress_vision_tokens(logits, vision_token_ids(model.config))
        n_prompt = int(mask[:prompt_length].sum())
        n = int(mask[prompt_length:].sum())
        logp = torch.log_softmax(logits[n_prompt - 1: n_prompt + n - 1] / TEMPERATURE, -1)
        result[row, :n] = logp.gather(-1, out.batch["responses"][row, :n, None]).squeeze(-1)
    return result


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl"])
def test_a_tool_image_joins_the_trajectory_and_the_actor_scores_it_like_plain_hf(tmp_path, family):
    batch, tokenizer, processor = vlm_rows(tmp_path, family)
    model = tiny_vlm(family)
    image_token_id = processor.image_token_id
    out, backend, _ = _generate(_config(tmp_path), tokenizer, processor, batch, model=model, do_sample=True)
    tool_grid = image_inputs(processor, [Image.new("RGB", TOOL_IMAGE_SIZE)])["image_grid_thw"]
    tool_tokens = int(tool_grid.prod()) // 4
    prompt_length = out.batch["prompts"].size(1)
    for row in range(len(out)):
        row_images = _row_images(batch, row)
        # every request of the row carries its images; the one after the tool turn the tool's image too
        sent = [images for r, images in backend.requests if r == row]
        assert len(sent) == 2
        assert len(sent[0]) == len(row_images) and all(a is b for a, b in zip(sent[0], row_images))
        assert len(sent[1]) == len(row_images) + 1 and sent[1][-1].size == TOOL_IMAGE_SIZE
        # the tool image's tokens are in the response, masked out of training
        response, mask = out.batch["responses"][row], out.batch["response_mask"][row]
        images_in_response = response == image_token_id
        assert int(images_in_response.sum()) == tool_tokens
        assert not bool(mask[images_in_response].any())
        assert int(mask.sum()) > len(tokenizer.encode(CALL, add_special_tokens=False))  # the model's own turn too
        # multi_modal_inputs: the dataset's inputs of the row's images, then the tool image's
        inputs = out.non_tensor_batch["multi_modal_inputs"][row]
        dataset = batch["multi_modal_inputs"][row]
        tool = image_inputs(processor, [Image.new("RGB", TOOL_IMAGE_SIZE, (10, 200, 30))])
        expected_grid = torch.cat([torch.as_tensor(dataset.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long))),
                                   tool["image_grid_thw"]])
        assert torch.equal(inputs["image_grid_thw"], expected_grid)
        expected_pixels = tool["pixel_values"] if not row_images else torch.cat([dataset["pixel_values"],
                                                                                  tool["pixel_values"]])
        assert torch.equal(inputs["pixel_values"], expected_pixels)
        # position ids: mrope over the whole sequence with every grid
        full = mrope_position_ids(out.batch["input_ids"][row], out.batch["attention_mask"][row], expected_grid,
                                  image_token_id, processor.image_processor.merge_size)
        assert torch.equal(out.batch["position_ids"][row, 1:], full)
    assert out.batch["position_ids"].shape == (len(out), 4, prompt_length + RESPONSE_LEN)
    # the actor (padded and packed) scores the model's tokens as plain HF does on the whole sequence
    data = copy.deepcopy(out)
    data.meta_info.update(temperature=TEMPERATURE, micro_batch_size=2)
    mask = out.batch["response_mask"].bool()
    with torch.no_grad():
        expected = plain_hf_log_probs(model, out, image_token_id)
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        got, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)
    # and the HF-generated turn's sampled log-probs are what the actor recomputes
    sampled = mask & (out.batch["rollout_log_probs"] != SCRIPTED_LOG_PROB)
    assert int(sampled.sum()) >= len(out)
    torch.testing.assert_close(got[sampled], out.batch["rollout_log_probs"][sampled], rtol=1e-4, atol=1e-4)


def test_the_trainer_batch_takes_the_trajectories_images(tmp_path):
    """After `batch.repeat(n).union(output)` (ray_trainer._generate) the actor reads the trajectories' inputs."""
    batch, tokenizer, processor = vlm_rows(tmp_path, "qwen2_vl", prompt_images=(1, 0))
    config = _config(tmp_path, **{"rollout.multi_turn.max_assistant_turns": 1})
    script = call_then_model
    out, _, data = _generate(config, tokenizer, processor, batch, script=script, validate=True)
    assert "multi_modal_inputs" not in data.non_tensor_batch  # moved to the rollout: the trajectory's replaces it
    merged = data.union(out)
    for row in range(2):
        assert merged.non_tensor_batch["multi_modal_inputs"][row] is out.non_tensor_batch["multi_modal_inputs"][row]
    # a single model turn (max_assistant_turns=1): the trailing tool turn is dropped with its image
    assert torch.equal(out.non_tensor_batch["multi_modal_inputs"][0]["image_grid_thw"],
                       batch["multi_modal_inputs"][0]["image_grid_thw"])
    assert out.non_tensor_batch["multi_modal_inputs"][1] == {}


def test_interaction_turns_send_the_rows_images_too(tmp_path):
    batch, tokenizer, processor = vlm_rows(tmp_path, "qwen2_5_vl", prompt_images=(2,))
    batch["extra_info"] = np.array([{"interaction_kwargs": {"name": "gsm8k", "ground_truth": "3"}}], dtype=object)
    config = _config(tmp_path, interaction=True, **{"rollout.multi_turn.max_user_turns": 1})
    out, backend, _ = _generate(config, tokenizer, processor, batch, script=lambda text: "#### 4", validate=True)
    assert [len(images) for _, images in backend.requests] == [2, 2]  # before and after the user turn
    assert out.non_tensor_batch["__num_turns__"][0] == 4  # user, assistant, user (the interaction), assistant
    assert torch.equal(out.non_tensor_batch["multi_modal_inputs"][0]["pixel_values"],
                       batch["multi_modal_inputs"][0]["pixel_values"])


@pytest.mark.parametrize("mode", ["bytes", "array"])
def test_a_tool_may_return_image_bytes_or_arrays(tmp_path, mode):
    batch, tokenizer, processor = vlm_rows(tmp_path, "qwen2_vl", prompt_images=(0,))
    config = _config(tmp_path, mode=mode)
    out, backend, _ = _generate(config, tokenizer, processor, batch, script=lambda text: CALL, validate=True)
    assert [len(images) for _, images in backend.requests] == [0, 1]
    sent = backend.requests[1][1][0]
    assert isinstance(sent, Image.Image) and sent.tobytes() == Image.new("RGB", TOOL_IMAGE_SIZE, (10, 200, 30)).tobytes()
    # the trajectory (image runs collapsed) is the conversation the chat template renders at once
    assert out.non_tensor_batch["__tokenization_mismatch__"][0] == 0
    assert out.non_tensor_batch["multi_modal_inputs"][0]["image_grid_thw"].shape == (1, 3)


def test_a_tool_video_is_refused_with_the_tool_named(tmp_path):
    batch, tokenizer, processor = vlm_rows(tmp_path, "qwen2_vl", prompt_images=(1,))
    with pytest.raises(NotImplementedError, match="tool 'zoom' returned ToolResponse.video"):
        _generate(_config(tmp_path, mode="video"), tokenizer, processor, batch, script=lambda text: CALL,
                  validate=True)


def test_a_tool_image_needs_a_vision_language_model(tmp_path):
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    messages = [{"role": "user", "content": "Zoom in."}]
    ids = torch.tensor([tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                                       tokenize=False))])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(ids.size(1))[None],
             "raw_prompt": np.array([messages, None], dtype=object)[:1], "agent_name": np.array(["tool_agent"], dtype=object)}
    with pytest.raises(ValueError, match="tool 'zoom' returned ToolResponse.image, but the rollout model has no"):
        _generate(_config(tmp_path), tokenizer, None, batch, script=lambda text: CALL, validate=True)
