"""The pieces of the vLLM rollout's image path that need no engine (verl/workers/rollout/vllm/vision.py and the
agent loop's VLLMBackend): prompts for vLLM's multi-modal API, the expansion check, the vision tokens' logit bias,
the engine settings a Qwen-VL model gets, and a text-only engine refusing images."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verl.workers.rollout.vllm.vision import (
    check_expansion,
    collapse_image_tokens,
    engine_prompt,
    row_images,
    vision_engine_kwargs,
    vision_token_bias,
    vllm_vision_problem,
    with_logit_bias,
)

IMG = 9


def test_image_tokens_collapse_to_one_per_image_and_go_with_the_images():
    expanded = [1, 7, IMG, IMG, IMG, 8, 7, IMG, IMG, 8, 2]
    assert collapse_image_tokens(expanded, IMG) == [1, 7, IMG, 8, 7, IMG, 8, 2]
    assert collapse_image_tokens([1, IMG, 8], IMG) == [1, IMG, 8]  # already one per image: unchanged
    assert engine_prompt(expanded, ["a", "b"], IMG) == {"prompt_token_ids": [1, 7, IMG, 8, 7, IMG, 8, 2],
                                                        "multi_modal_data": {"image": ["a", "b"]}}
    assert engine_prompt(expanded, None, IMG) == {"prompt_token_ids": expanded}  # a row without images
    with pytest.raises(ValueError, match="image_token_id"):
        engine_prompt([1], ["a"], None)


def test_an_engine_expansion_other_than_the_datas_is_refused_by_row():
    check_expansion([1, IMG, IMG, 2], [1, IMG, IMG, 2], "row 0")
    with pytest.raises(ValueError, match=r"row 3: .* 5 tokens where the data has 4"):
        check_expansion([1, IMG, IMG, 2], [1, IMG, IMG, IMG, 2], "row 3")


def test_rows_images_and_the_vision_tokens_bias():
    column = [{"image": ["a"]}, None, {}, {"image": []}]
    assert [row_images(column, i) for i in range(4)] == [["a"], None, None, None]
    assert row_images(None, 0) is None
    from tests.helpers.tiny_vlm import tiny_vlm_config

    config = tiny_vlm_config("qwen2_vl")
    bias = vision_token_bias(config)
    assert set(bias) == {config.image_token_id, config.video_token_id, config.vision_start_token_id,
                         config.vision_end_token_id} and set(bias.values()) == {-100.0}
    assert vision_token_bias(SimpleNamespace()) == {}  # a text model
    assert with_logit_bias({"temperature": 1.0, "logit_bias": {3: 2.0}}, {4: -100.0})["logit_bias"] == {3: 2.0,
                                                                                                      4: -100.0}
    params = {"temperature": 1.0}
    assert with_logit_bias(params, {}) is params


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_qwen_vl_engine_settings_and_other_architectures_refused(family):
    from tests.helpers.tiny_vlm import tiny_vlm_config

    config = tiny_vlm_config(family)  # in memory: no `architectures`, the model type names it
    assert vllm_vision_problem(config) is None
    kwargs = vision_engine_kwargs(config)
    assert kwargs["skip_tokenizer_init"] is False and kwargs["limit_mm_per_prompt"] == {"video": 0}
    assert kwargs["mm_device_do_normalize"] is False
    other = SimpleNamespace(architectures=["LlavaForConditionalGeneration"], model_type="llava",
                            vision_config=object())
    assert "LlavaForConditionalGeneration" in vllm_vision_problem(other)
    with pytest.raises(ValueError, match="rollout.name=hf"):
        vision_engine_kwargs(other)


def test_a_text_engine_refuses_agent_loop_images():
    pytest.importorskip("vllm")
    from verl.workers.rollout.agent_loop.backends import VLLMBackend
    from verl.workers.rollout.agent_loop.server import EngineRequest
    from verl.workers.rollout.seeding import SamplingSeeds

    rollout = SimpleNamespace(_require_weights=lambda: None, seeds=SamplingSeeds(0, 0),
                              llm=SimpleNamespace(llm_engine=None))
    with pytest.raises(ValueError, match="text-only"):
        VLLMBackend(rollout, {}).add(EngineRequest("r", [1, 2], {"max_tokens": 1}, image_data=["an image"]))
