"""examples/data_preprocess/{geo3k,visual_count}.py: rows in upstream's geo3k layout that RLHFDataset reads."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from tests.examples.test_data_preprocess import load_script, read
from verl.data.vision import load_image
from verl.rewards import default_compute_score


def png(color) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (30, 20), color).save(buffer, format="PNG")
    return buffer.getvalue()


def test_geo3k_from_a_local_copy_in_the_hub_layout(tmp_path):
    source = tmp_path / "geometry3k" / "data"
    source.mkdir(parents=True)
    for split, answer in (("train", "3"), ("test", "\\frac{1}{2}")):
        rows = [{"problem": "<image>Find x.", "answer": answer, "images": [{"bytes": png((1, 2, 3)), "path": None}]}]
        pq.write_table(pa.Table.from_pylist(rows), source / f"{split}-00000-of-00001.parquet")
    train, test = load_script("geo3k").main(["--local_dataset_path", str(tmp_path / "geometry3k"),
                                             "--local_save_dir", str(tmp_path / "out")])
    row = read(train)[0]
    assert row["data_source"] == "hiyouga/geometry3k" and row["prompt"][0]["content"].startswith("<image>Find x. ")
    assert "\\boxed{}" in row["prompt"][0]["content"]
    assert load_image(row["images"][0], "row 0").getpixel((0, 0)) == (1, 2, 3)
    truth = read(test)[0]["reward_model"]["ground_truth"]
    assert default_compute_score(row["data_source"], "<think>x</think> \\boxed{0.5}", truth) == 1.0
    assert abs(default_compute_score(row["data_source"], "\\boxed{0.5}", truth) - 0.9) < 1e-9
    assert abs(default_compute_score(row["data_source"], "<think>x</think> \\boxed{2}", truth) - 0.1) < 1e-9


def test_visual_count_images_hold_the_counted_shapes(tmp_path):
    train, test = load_script("visual_count").main(["--local_save_dir", str(tmp_path), "--train_size", "12",
                                                    "--test_size", "4", "--max_count", "4"])
    rows = read(train)
    assert len(rows) == 12 and len(read(test)) == 4
    for i, row in enumerate(rows):
        image = load_image(row["images"][0], f"row {i}")
        truth = int(row["reward_model"]["ground_truth"])
        assert 1 <= truth <= 4
        # count the 28x28 grid cells that hold colour (each shape fills one cell)
        cells = {(x // 28, y // 28) for x in range(84) for y in range(84) if image.getpixel((x, y)) != (255, 255, 255)}
        assert len(cells) == truth, i
        assert default_compute_score("visual_count", f"I see \\boxed{{{truth}}}", str(truth)) == 1.0
        assert default_compute_score("visual_count", f"\\boxed{{{truth + 1}}}", str(truth)) == 0.0
    again, _ = load_script("visual_count").main(["--local_save_dir", str(tmp_path / "again"), "--train_size", "12",
                                                 "--test_size", "4", "--max_count", "4"])
    assert read(again) == rows  # deterministic for a seed


def test_geo3k_multiturn_rows_carry_the_tool_and_its_ground_truth(tmp_path):
    import asyncio

    import yaml

    from tests.examples.test_data_preprocess import SCRIPTS
    from verl.tools.geo3k_tool import Geo3kTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    source = tmp_path / "geometry3k"
    source.mkdir()
    for split in ("train", "test"):
        rows = [{"problem": "<image>Find x.", "answer": "3", "images": [{"bytes": png((1, 2, 3)), "path": None}]}]
        pq.write_table(pa.Table.from_pylist(rows), source / f"{split}.parquet")
    train, _ = load_script("geo3k_multiturn_w_tool").main(["--local_dataset_path", str(source),
                                                           "--local_save_dir", str(tmp_path / "out")])
    row = read(train)[0]
    assert row["agent_name"] == "tool_agent" and [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert "calc_geo3k_reward" in row["prompt"][0]["content"] and row["prompt"][1]["content"].startswith("<image>")
    kwargs = row["extra_info"]["tools_kwargs"]["calc_geo3k_reward"]
    assert kwargs["create_kwargs"] == {"ground_truth": "3"} and row["extra_info"]["need_tools_kwargs"]

    config = yaml.safe_load((SCRIPTS.parent / "sglang_multiturn/config/tool_config/geo3k_tool_config.yaml").read_text())
    entry = config["tools"][0]
    assert entry["class_name"] == "verl.tools.geo3k_tool.Geo3kTool"
    tool = Geo3kTool(entry["config"], OpenAIFunctionToolSchema.model_validate(entry["tool_schema"]))

    async def session():
        instance, _ = await tool.create(**kwargs)
        wrong = await tool.execute(instance, {"answer": "4"})
        right = await tool.execute(instance, {"answer": "3"})  # the bare answer, no \boxed{} (use_boxed=False)
        again = await tool.execute(instance, {"answer": "3"})
        await tool.release(instance)
        return wrong, right, again

    wrong, right, again = asyncio.run(session())
    assert wrong[1] == -0.05 and "reward=0.0" in wrong[0].text  # not above the start (0.0): the penalty
    assert right[1] == 0.0 and "reward=1.0" in right[0].text
    assert again[1] == -0.05  # resubmitting does not improve


def test_visual_count_sft_rows_feed_the_image_sft_dataset(tmp_path):
    from tests.helpers.tiny_vlm import save_tiny_vlm_dir
    from verl.data.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.models.loader import load_tokenizer
    from verl.models.processor import load_processor
    from verl.trainer.config.sft import SFTDataConfig, SFTMultiTurnConfig

    train, _ = load_script("visual_count").main(["--local_save_dir", str(tmp_path / "data"), "--train_size", "4",
                                                 "--test_size", "2", "--sft"])
    rows = read(train)
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
        assert row["messages"][0]["content"] == row["prompt"][0]["content"]  # the RL prompt, then the answer
        assert default_compute_score("visual_count", row["messages"][1]["content"], truth) == 1.0
    folder = save_tiny_vlm_dir(tmp_path / "model", "qwen2_vl")
    tokenizer = load_tokenizer(folder, "model.partial_pretrain")
    dataset = MultiTurnSFTDataset(train, tokenizer, SFTDataConfig(max_length=256, multiturn=SFTMultiTurnConfig(
        enable=True)), processor=load_processor(folder, tokenizer, "model.partial_pretrain"))
    item = dataset[0]
    assert item["position_ids"].shape[0] == 4  # the mrope rows: the image is in
    trained = tokenizer.decode(item["input_ids"][item["loss_mask"].bool()])
    assert "\\boxed{" in trained and "How many shapes" not in trained  # only the answer is trained
