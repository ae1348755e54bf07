"""data.tool_config_path and data.image_patch_size (upstream v0.7): the tools' schemas count in the overlong-prompt
filter (verl.data.tool_schemas), and images are resized to multiples of image_patch_size * merge before the processor
(verl.data.image_resize)."""

from __future__ import annotations

import io
import logging

import pytest
import yaml
from PIL import Image

from tests.data.conftest import make_row, write_rows
from tests.helpers.tiny_vlm import save_tiny_vlm_dir
from verl.data import RLHFDataset, image_resize
from verl.data.data_check import RowNeeds, check_split
from verl.data.image_resize import fit_image_to_patches, patch_size_for
from verl.models.loader import load_tokenizer
from verl.models.processor import load_processor
from verl.trainer.config import DataConfig
from verl.trainer.config.validate import load_config, validate_config
from verl.utils.config_errors import ConfigError

# renders the tools' names and descriptions in front of the conversation, as tool-aware templates do
TOOLS_TEMPLATE = ("{% if tools %}{{ '<|im_start|>system\n' }}{% for t in tools %}{{ t['function']['name'] + ': ' + "
                  "t['function']['description'] + '\n' }}{% endfor %}{{ '<|im_end|>\n' }}{% endif %}"
                  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
                  "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                  "{% endif %}")
SCHEMA = {"type": "function", "function": {
    "name": "calc_gsm8k_reward", "description": "A tool for calculating the reward of gsm8k answers to questions",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string", "description": "the answer"}},
                   "required": ["answer"]}}}


def _tool_file(tmp_path) -> str:
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": [{"class_name": "verl.tools.gsm8k_tool.Gsm8kTool",
                                               "config": {"type": "native"}, "tool_schema": SCHEMA}]}))
    return str(path)


def _text_config(**overrides) -> DataConfig:
    base = dict(max_prompt_length=40, filter_overlong_prompts=True, shuffle=False, truncation="error")
    return DataConfig(**{**base, **overrides})


def test_tool_config_path_counts_the_tool_schemas_in_the_overlong_filter(tmp_path, tokenizer):
    tokenizer.chat_template = TOOLS_TEMPLATE
    short, long = "Tom has 3 apples.", "apples " * 120
    rows = write_rows(tmp_path / "p.parquet", [make_row(short, index=0), make_row(long, index=1)])

    def length(content, **kwargs):
        text = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                             tokenize=False, **kwargs)
        return len(tokenizer.encode(text, add_special_tokens=False))

    limit = length(long)  # the long prompt fits exactly without the tools
    assert length(short, tools=[SCHEMA]) <= limit < length(long, tools=[SCHEMA])
    without = RLHFDataset(rows, tokenizer, _text_config(max_prompt_length=limit))
    assert len(without) == 2 and without.tool_schemas is None
    tools = _tool_file(tmp_path)
    with_tools = RLHFDataset(rows, tokenizer, _text_config(max_prompt_length=limit, tool_config_path=tools))
    assert with_tools.tool_schemas == [SCHEMA]
    assert len(with_tools) == 1  # the long prompt no longer fits once the tool list is in front of it
    # as upstream, the schemas only enter the filter: the item's prompt is the conversation (the tool agent loop
    # renders the tools itself)
    assert with_tools[0]["raw_prompt_ids"] == without[0]["raw_prompt_ids"]
    # the data check before Ray counts the rows the filter will drop the same way
    needs = RowNeeds(has_scorer=None)
    assert check_split("data.train_files", [rows], _text_config(max_prompt_length=limit), tokenizer, needs).filtered == 0
    report = check_split("data.train_files", [rows], _text_config(max_prompt_length=limit, tool_config_path=tools),
                         tokenizer, needs)
    assert report.filtered == 1 and report.kept == 1
    with pytest.raises(FileNotFoundError, match="data.tool_config_path"):
        RLHFDataset(rows, tokenizer, _text_config(tool_config_path=str(tmp_path / "missing.yaml")))


def test_data_tool_config_path_follows_the_multi_turn_one():
    cfg = load_config(["actor_rollout_ref.rollout.multi_turn.tool_config_path=/x/tools.yaml"])
    assert cfg.data.tool_config_path == "/x/tools.yaml"
    assert load_config([]).data.tool_config_path is None
    assert load_config(["data.tool_config_path=/y.yaml"]).data.tool_config_path == "/y.yaml"
    with pytest.raises(ConfigError) as info:  # a path of its own is checked before Ray, as the multi_turn one is
        validate_config(load_config(["data.tool_config_path=/nonexistent/tools.yaml"]))
    assert "data.tool_config_path" in str(info.value) and "/nonexistent/tools.yaml" in str(info.value)


def _png(size) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):  # the tiny Qwen2-VL processor: patch 4, merge 2
    folder = save_tiny_vlm_dir(tmp_path_factory.mktemp("vlm"))
    tokenizer = load_tokenizer(folder, "actor_rollout_ref.model.path")
    return tokenizer, load_processor(folder, tokenizer, "actor_rollout_ref.model.path")


@pytest.mark.parametrize(("patch", "side", "tokens"), [
    (14, 16, 4),  # the default with a patch-4 processor: the image goes as it is (20 -> 16 by the processor)
    (4, 16, 4),  # the processor's own patch: multiples of 8, the size the processor would choose
    (6, 24, 9),  # multiples of 12: 24 x 24 -> 6 x 6 patches -> 9 merged tokens
])
def test_image_patch_size_resizes_the_images_before_the_processor(tmp_path, vlm, patch, side, tokens):
    tokenizer, processor = vlm
    row = {**make_row("<image>What colour?", index=0), "images": [{"bytes": _png((20, 20))}]}
    rows = write_rows(tmp_path / "vl.parquet", [row])
    config = DataConfig(max_prompt_length=64, shuffle=False, image_patch_size=patch)
    item = RLHFDataset(rows, tokenizer, config, processor=processor)[0]
    grid = item["multi_modal_inputs"]["image_grid_thw"].tolist()
    assert grid == [[1, side // 4, side // 4]]
    assert int((item["input_ids"] == processor.image_token_id).sum()) == tokens
    if patch == 6:
        assert item["multi_modal_data"]["image"][0].size == (24, 24)  # what the rollout engine receives
        # the overlong filter counts the resized image: 9 image tokens no longer fit where 4 did
        prompt = len(item["raw_prompt_ids"]) - 1 + tokens
        short = DataConfig(max_prompt_length=prompt - 1, shuffle=False, filter_overlong_prompts=True)
        assert len(RLHFDataset(rows, tokenizer, short, processor=processor)) == 1
        with pytest.raises(ValueError, match="every one of the 1 prompts"):
            RLHFDataset(rows, tokenizer, DataConfig(max_prompt_length=prompt - 1, shuffle=False,
                                                    filter_overlong_prompts=True, image_patch_size=6),
                        processor=processor)


class _Proc:
    class image_processor:  # noqa: N801 - stands in for a processor's attribute
        patch_size = 14


def test_fit_follows_qwen_vl_utils_and_the_default_follows_the_processor(caplog, vlm):
    image = Image.new("RGB", (100, 50))
    assert fit_image_to_patches(image, 14).size == (112, 56)  # multiples of 28
    assert fit_image_to_patches(image, 16).size == (96, 64)  # multiples of 32
    assert fit_image_to_patches(image, 14, {"resized_height": 60, "resized_width": 60}).size == (56, 56)
    assert fit_image_to_patches(image, 14, {"max_pixels": 28 * 28 * 4}).size == (56, 28)  # the entry's bound
    assert patch_size_for(_Proc(), 14) == 14 and patch_size_for(_Proc(), 16) == 16
    image_resize._warned.clear()
    with caplog.at_level(logging.WARNING, logger="verl.data.image_resize"):
        assert patch_size_for(vlm[1], 14) is None  # left at 14 for a patch-4 processor: not resized
        assert patch_size_for(vlm[1], 8) == 8
    assert "set data.image_patch_size=4" in caplog.text
    with pytest.raises(ValueError, match="data.image_patch_size must be >= 1"):
        fit_image_to_patches(image, 0)


def test_image_patch_size_also_sizes_the_video_frames(tmp_path):
    from tests.helpers.tiny_video import save_tiny_video_vlm_dir, write_mp4
    from verl.data.video import load_video

    folder = save_tiny_video_vlm_dir(tmp_path / "vlm", "qwen2_5_vl")
    tokenizer = load_tokenizer(folder, "actor_rollout_ref.model.path")
    processor = load_processor(folder, tokenizer, "actor_rollout_ref.model.path")
    clip = write_mp4(tmp_path / "clip.mp4", frames=8, fps=4.0, height=16, width=24)
    frames, _ = load_video({"video": clip}, "row 0", processor)
    assert frames.shape[2:] == (16, 24)  # the processor's patch 4 x merge 2: multiples of 8
    frames, _ = load_video({"video": clip}, "row 0", processor, patch_size=6)
    assert frames.shape[2:] == (12, 24)  # multiples of 12, as upstream's process_video(image_patch_size=6)
    row = {**make_row("<video>What moves?", index=0), "videos": [{"video": clip}]}
    rows = write_rows(tmp_path / "v.parquet", [row])
    item = RLHFDataset(rows, tokenizer, DataConfig(max_prompt_length=256, shuffle=False, image_patch_size=6),
                       processor=processor)[0]
    assert tuple(item["multi_modal_data"]["video"][0][0].shape[2:]) == (12, 24)
