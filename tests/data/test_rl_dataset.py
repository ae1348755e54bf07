"""RLHFDataset over verl-format parquet files, with the in-memory tiny tokenizer."""

import numpy as np
import pytest
import torch
from torch.utils.data import SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from tests.data.conftest import make_row, write_rows
from verl.data import RLHFDataset, collate_fn, create_rl_dataset, create_rl_sampler
from verl.protocol import DataProto
from verl.trainer.config import CustomClsConfig, DataConfig


def data_config(**overrides):
    """The typed `data` section RLHFDataset receives from the trainer."""
    base = dict(prompt_key="prompt", max_prompt_length=64, truncation="error", filter_overlong_prompts=False,
                return_raw_chat=False, shuffle=False, seed=1)
    base.update(overrides)
    if isinstance(base.get("custom_cls"), dict):
        base["custom_cls"] = CustomClsConfig(**base["custom_cls"])
    return DataConfig(**base)


def chat_ids(tokenizer, content):
    text = "<|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer.encode(text, add_special_tokens=False)


def test_item_layout(tokenizer, parquet_file):
    dataset = RLHFDataset(parquet_file, tokenizer, data_config(return_raw_chat=True))
    assert len(dataset) == 6
    item = dataset[2]
    expected_ids = chat_ids(tokenizer, "Tom has 2 apples.")
    n = len(expected_ids)
    assert item["raw_prompt_ids"] == expected_ids
    assert item["input_ids"].shape == (64,) and item["input_ids"].dtype == torch.long
    assert item["input_ids"][-n:].tolist() == expected_ids
    assert item["input_ids"][: 64 - n].tolist() == [tokenizer.pad_token_id] * (64 - n)  # left padding
    assert item["attention_mask"].tolist() == [0] * (64 - n) + [1] * n
    assert item["position_ids"].tolist() == [0] * (64 - n) + list(range(n))
    assert item["raw_prompt"] == [{"role": "user", "content": "Tom has 2 apples."}]
    assert item["data_source"] == "arithmetic"
    assert item["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert item["extra_info"] == {"split": "train", "index": 102}
    assert item["index"] == 102
    assert item["ability"] == "math"
    assert "prompt" not in item


def test_raw_chat_only_when_asked(tokenizer, parquet_file):
    item = RLHFDataset(parquet_file, tokenizer, data_config())[0]
    assert "raw_prompt" not in item


def test_several_files_are_concatenated(tokenizer, tmp_path, parquet_file):
    second = write_rows(tmp_path / "more.parquet", [make_row("Anna has 9 pencils.", index=0, source="openai/gsm8k")])
    dataset = RLHFDataset([parquet_file, second], tokenizer, data_config())
    assert len(dataset) == 7
    assert dataset[6]["data_source"] == "openai/gsm8k"


def test_filter_overlong_prompts_drops_and_reports(tokenizer, tmp_path, capsys):
    short = make_row("hi", index=0)
    long = make_row("apples " * 80, index=1)
    path = write_rows(tmp_path / "mixed.parquet", [short, long, short])
    dataset = RLHFDataset(path, tokenizer, data_config(filter_overlong_prompts=True))
    assert len(dataset) == 2
    assert "dropped 1 of 3" in capsys.readouterr().out


def test_overlong_prompt_with_error_truncation_names_the_row(tokenizer, tmp_path):
    path = write_rows(tmp_path / "long.parquet", [make_row("hi", 0), make_row("apples " * 80, 1)])
    dataset = RLHFDataset(path, tokenizer, data_config())
    with pytest.raises(ValueError, match="row 1 has .* data.max_prompt_length=64"):
        dataset[1]


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes_keep_max_prompt_length(tokenizer, tmp_path, mode):
    content = "apples " * 80
    path = write_rows(tmp_path / "long.parquet", [make_row(content, 0)])
    item = RLHFDataset(path, tokenizer, data_config(truncation=mode))[0]
    full = chat_ids(tokenizer, content)
    expected = {"left": full[-64:], "right": full[:64], "middle": full[:32] + full[-32:]}[mode]
    assert item["raw_prompt_ids"] == expected
    assert item["input_ids"].tolist() == expected
    assert item["attention_mask"].sum().item() == 64


def test_max_samples_takes_the_first_rows_without_shuffle(tokenizer, parquet_file):
    dataset = RLHFDataset(parquet_file, tokenizer, data_config(), max_samples=3)
    assert [dataset[i]["index"] for i in range(len(dataset))] == [100, 101, 102]


def test_max_samples_with_shuffle_is_seeded(tokenizer, parquet_file):
    first = RLHFDataset(parquet_file, tokenizer, data_config(shuffle=True, seed=7), max_samples=3)
    again = RLHFDataset(parquet_file, tokenizer, data_config(shuffle=True, seed=7), max_samples=3)
    picked = [first[i]["index"] for i in range(3)]
    assert picked == [again[i]["index"] for i in range(3)]
    assert len(set(picked)) == 3 and set(picked) <= set(range(100, 106))


def test_plain_string_prompts_are_one_user_message(tokenizer, tmp_path):
    path = write_rows(tmp_path / "plain.parquet", [{"question": "Tom has 3 apples.", "data_source": "arithmetic"}])
    item = RLHFDataset(path, tokenizer, data_config(prompt_key="question", return_raw_chat=True))[0]
    assert item["raw_prompt"] == [{"role": "user", "content": "Tom has 3 apples."}]
    assert item["index"] == 0  # no extra_info: the row position


def test_missing_prompt_column_names_column_file_and_key(tokenizer, parquet_file):
    with pytest.raises(ValueError) as info:
        RLHFDataset(parquet_file, tokenizer, data_config(prompt_key="question"))
    message = str(info.value)
    for part in ("'question'", parquet_file, "data.prompt_key", "reward_model"):
        assert part in message


def test_missing_file_names_the_path(tokenizer, tmp_path):
    missing = str(tmp_path / "nope.parquet")
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        RLHFDataset(missing, tokenizer, data_config())


def test_non_parquet_file_names_the_file(tokenizer, tmp_path):
    bad = tmp_path / "train.parquet"
    bad.write_text("data_source,prompt\narithmetic,hi\n")
    with pytest.raises(ValueError, match="train.parquet.*not a readable parquet"):
        RLHFDataset(str(bad), tokenizer, data_config())


def test_bad_truncation_value(tokenizer, parquet_file):
    with pytest.raises(ValueError, match="data.truncation"):
        RLHFDataset(parquet_file, tokenizer, data_config(truncation="both"))


def test_collate_fn_stacks_tensors_and_keeps_objects_per_row():
    batch = collate_fn([
        {"input_ids": torch.tensor([1, 2]), "raw_prompt_ids": [5, 6], "reward_model": {"ground_truth": "1"}},
        {"input_ids": torch.tensor([3, 4]), "raw_prompt_ids": [7, 8], "reward_model": {"ground_truth": "2"}},
    ])
    assert batch["input_ids"].tolist() == [[1, 2], [3, 4]]
    ids = batch["raw_prompt_ids"]
    assert isinstance(ids, np.ndarray) and ids.dtype == object and ids.shape == (2,)  # not a 2-D int array
    assert ids[1] == [7, 8]
    assert batch["reward_model"][0] == {"ground_truth": "1"}


def test_sampler_is_seeded_random_or_sequential(tokenizer, parquet_file):
    dataset = RLHFDataset(parquet_file, tokenizer, data_config())
    sequential = create_rl_sampler(data_config(shuffle=False), dataset)
    assert isinstance(sequential, SequentialSampler) and list(sequential) == [0, 1, 2, 3, 4, 5]
    config = data_config(shuffle=True, seed=3)
    first, second = create_rl_sampler(config, dataset), create_rl_sampler(config, dataset)
    assert isinstance(first, RandomSampler)
    order = list(first)
    assert order == list(second) and sorted(order) == [0, 1, 2, 3, 4, 5]


def test_stateful_dataloader_batches_become_dataproto(tokenizer, parquet_file):
    config = data_config(shuffle=True, seed=3, return_raw_chat=True)
    dataset = create_rl_dataset(parquet_file, config, tokenizer, max_samples=-1)
    loader = StatefulDataLoader(dataset, batch_size=4, sampler=create_rl_sampler(config, dataset),
                                collate_fn=collate_fn, drop_last=True, num_workers=0)
    batches = list(loader)
    assert len(batches) == 1  # 6 rows, batch 4, drop_last
    data = DataProto.from_single_dict(batches[0])
    assert len(data) == 4
    assert data.batch["input_ids"].shape == (4, 64)
    assert set(data.non_tensor_batch) >= {"data_source", "reward_model", "extra_info", "index", "raw_prompt_ids",
                                          "raw_prompt"}


def test_custom_dataset_class_from_file(tokenizer, parquet_file, tmp_path):
    source = tmp_path / "my_dataset.py"
    source.write_text(
        "from verl.data import RLHFDataset\n"
        "class Doubled(RLHFDataset):\n"
        "    def __len__(self):\n"
        "        return 2 * super().__len__()\n"
    )
    config = data_config(custom_cls={"path": str(source), "name": "Doubled"})
    assert len(create_rl_dataset(parquet_file, config, tokenizer)) == 12
    with pytest.raises(AttributeError, match="Missing"):
        create_rl_dataset(parquet_file, data_config(custom_cls={"path": str(source), "name": "Missing"}), tokenizer)


@pytest.mark.parametrize("column", ["images", "videos"])
def test_image_or_video_columns_without_a_processor_are_refused_at_load(tokenizer, tmp_path, parquet_file, column):
    rows = [{**make_row("Look at this.", index=0), column: [{"bytes": b"\x89PNG", "path": "a.png"}]}]
    media = write_rows(tmp_path / "vlm.parquet", rows)
    with pytest.raises(NotImplementedError) as info:
        RLHFDataset([parquet_file, media], tokenizer, data_config())
    message = str(info.value)
    key = "data.image_key" if column == "images" else "data.video_key"
    assert f"{column!r} ({key})" in message
    assert "no multi-modal processor" in message
