"""The data check over parquet files (verl.data.data_check) with the in-memory tiny tokenizer."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.data.conftest import make_row, write_rows
from verl.data import RLHFDataset
from verl.data.data_check import RowNeeds, check_split, sample_rows
from verl.trainer.config import DataConfig

KNOWN = {"arithmetic", "openai/gsm8k"}
BUILTIN = RowNeeds(has_scorer=lambda source: source in KNOWN)


def data_config(**overrides) -> DataConfig:
    base = dict(max_prompt_length=64, truncation="error", filter_overlong_prompts=False, shuffle=False, seed=1)
    base.update(overrides)
    return DataConfig(**base)


def templated_length(tokenizer, content: str) -> int:
    text = "<|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n"
    return len(tokenizer.encode(text, add_special_tokens=False))


def rows(n: int, **kwargs) -> list[dict]:
    return [make_row(f"Tom has {i} apples.", index=i, truth=str(i), **kwargs) for i in range(n)]


def test_clean_file_passes(tokenizer, tmp_path):
    path = write_rows(tmp_path / "train.parquet", rows(6))
    report = check_split("data.train_files", [path], data_config(), tokenizer, BUILTIN)
    assert (report.rows, report.filtered, report.problems) == (6, 0, [])


def test_missing_columns_name_the_file_and_key(tokenizer, tmp_path):
    table = pa.Table.from_pylist([{"question": "hi", "data_source": "arithmetic"}])
    pq.write_table(table, tmp_path / "a.parquet")
    report = check_split("data.train_files", [str(tmp_path / "a.parquet")], data_config(), tokenizer, BUILTIN)
    text = "\n".join(report.problems)
    assert len(report.problems) == 2  # prompt and reward_model
    assert "a.parquet" in text and "no column 'prompt' (data.prompt_key" in text
    assert "no column 'reward_model'" in text and "['question', 'data_source']" in text


def test_missing_ground_truth_names_rows(tokenizer, tmp_path):
    data = rows(5)
    data[1]["reward_model"] = {"style": "rule", "ground_truth": None}
    data[3]["reward_model"] = None
    path = write_rows(tmp_path / "train.parquet", data)
    report = check_split("data.train_files", [path], data_config(), tokenizer, BUILTIN)
    assert len(report.problems) == 1
    assert "2 of 5 rows have no reward_model.ground_truth" in report.problems[0]
    assert "train.parquet rows 1, 3." in report.problems[0]
    # a custom reward function decides what a missing ground truth means
    custom = RowNeeds(ground_truth=False, has_scorer=None)
    assert check_split("data.train_files", [path], data_config(), tokenizer, custom).problems == []


def test_reward_model_struct_without_ground_truth(tokenizer, tmp_path):
    data = [{"data_source": "arithmetic", "prompt": "hi", "reward_model": {"style": "rule"}}] * 2
    path = write_rows(tmp_path / "train.parquet", data)
    report = check_split("data.train_files", [path], data_config(), tokenizer, BUILTIN)
    assert "2 of 2 rows have no reward_model.ground_truth" in report.problems[0]


def test_overlong_refused_with_rows_and_token_counts(tokenizer, tmp_path):
    data = rows(6)
    long_text = "Tom has 12 apples. " * 10
    data[2]["prompt"] = [{"role": "user", "content": long_text}]
    data[5]["prompt"] = [{"role": "user", "content": long_text + "x"}]
    path = write_rows(tmp_path / "train.parquet", data)
    limit = max(templated_length(tokenizer, f"Tom has {i} apples.") for i in range(6))  # the longest short one
    assert templated_length(tokenizer, long_text) > limit
    report = check_split("data.train_files", [path], data_config(max_prompt_length=limit), tokenizer, BUILTIN)
    (problem,) = report.problems
    first, second = templated_length(tokenizer, long_text), templated_length(tokenizer, long_text + "x")
    assert f"2 of 6 prompts are longer than data.max_prompt_length={limit}" in problem
    assert f"train.parquet rows 2 ({first} tokens), 5 ({second} tokens)" in problem
    assert "data.filter_overlong_prompts=true" in problem
    # truncation other than error: the dataset cuts them, nothing to refuse
    cut = check_split("data.train_files", [path], data_config(max_prompt_length=limit, truncation="left"),
                      tokenizer, BUILTIN)
    assert (cut.problems, cut.filtered) == ([], 0)


def test_overlong_filtered_counts_and_refuses_too_few_left(tokenizer, tmp_path):
    data = rows(6)
    for i in (0, 1, 4):
        data[i]["prompt"] = [{"role": "user", "content": "Tom has 12 apples. " * 10}]
    path = write_rows(tmp_path / "train.parquet", data)
    config = data_config(max_prompt_length=40, filter_overlong_prompts=True)
    report = check_split("data.train_files", [path], config, tokenizer, BUILTIN, min_rows=3)
    assert (report.rows, report.filtered, report.kept, report.problems) == (6, 3, 3, [])
    short = check_split("data.train_files", [path], config, tokenizer, BUILTIN, min_rows=4)
    assert short.problems == ["data.train_files: 3 rows left after data.filter_overlong_prompts (3 of 6 prompts are "
                              "longer than data.max_prompt_length=40 tokens), fewer than one batch "
                              "(data.gen_batch_size, null: data.train_batch_size)=4; raise data.max_prompt_length."]


def test_unknown_data_source_refused_unless_custom_reward(tokenizer, tmp_path):
    data = rows(4)
    data[0]["data_source"] = data[2]["data_source"] = "my_task"
    path = write_rows(tmp_path / "train.parquet", data)
    report = check_split("data.train_files", [path], data_config(), tokenizer, BUILTIN)
    (problem,) = report.problems
    assert "2 rows have data_source='my_task', which no built-in scorer takes: train.parquet rows 0, 2" in problem
    assert "custom_reward_function.path" in problem
    assert check_split("data.train_files", [path], data_config(), tokenizer, RowNeeds()).problems == []


def test_malformed_prompts_named(tokenizer, tmp_path):
    data = [{"prompt": "fine", "n": 0}, {"prompt": None, "n": 1}, {"prompt": "fine", "n": 2}]
    path = write_rows(tmp_path / "train.parquet", data)
    prompt_only = RowNeeds(reward_columns=(), ground_truth=False)
    (problem,) = check_split("data.train_files", [path], data_config(), tokenizer, prompt_only).problems
    assert "1 rows of column 'prompt' (data.prompt_key) hold neither chat messages" in problem
    assert "train.parquet row 1." in problem


def test_empty_val_file_refused_with_the_way_out(tokenizer, tmp_path):
    path = str(tmp_path / "test.parquet")
    pq.write_table(pa.Table.from_pylist(rows(1)).slice(0, 0), path)
    for filter_overlong in (False, True):
        config = data_config(filter_overlong_prompts=filter_overlong)
        (problem,) = check_split("data.val_files", [path], config, tokenizer, BUILTIN).problems
        assert problem.startswith("data.val_files: no rows to validate on (test.parquet: 0)")
        assert "data.val_files=null" in problem and "longer" not in problem


def test_rows_numbered_within_their_file(tokenizer, tmp_path):
    first = write_rows(tmp_path / "a.parquet", rows(3))
    data = rows(3)
    data[1]["reward_model"] = {"style": "rule", "ground_truth": None}
    second = write_rows(tmp_path / "b.parquet", data)
    (problem,) = check_split("data.train_files", [first, second], data_config(), tokenizer, BUILTIN).problems
    assert "1 of 6 rows" in problem and "b.parquet row 1." in problem


def test_max_samples_checks_the_rows_the_dataset_keeps(tokenizer, tmp_path):
    data = rows(10)
    bad = 7
    data[bad]["reward_model"] = {"style": "rule", "ground_truth": None}
    path = write_rows(tmp_path / "train.parquet", data)
    config = data_config(shuffle=True, seed=3)
    picked = sample_rows(10, 4, shuffle=True, seed=3)
    dataset = RLHFDataset(path, tokenizer, config, max_samples=4)
    assert [dataset[i]["extra_info"]["index"] for i in range(4)] == picked
    report = check_split("data.train_files", [path], config, tokenizer, BUILTIN, max_samples=4)
    assert report.rows == 4
    assert bool(report.problems) == (bad in picked)
    assert sample_rows(10, -1, True, 3) is None and sample_rows(10, 4, False, 3) == [0, 1, 2, 3]


@pytest.mark.parametrize("rows_in_file", [0, 2])
def test_dataset_filter_message_says_what_happened(tokenizer, tmp_path, rows_in_file):
    """The dataset's own refusal (users who build RLHFDataset without the trainer): an empty file is not
    'every prompt is too long'."""
    path = str(tmp_path / "train.parquet")
    table = pa.Table.from_pylist([make_row("Tom has 12 apples. " * 10, index=0)] * max(rows_in_file, 1))
    pq.write_table(table.slice(0, rows_in_file), path)
    with pytest.raises(ValueError) as info:
        RLHFDataset(path, tokenizer, data_config(max_prompt_length=8, filter_overlong_prompts=True))
    if rows_in_file:
        assert "every one of the 2 prompts" in str(info.value)
    else:
        assert "hold no rows" in str(info.value) and "longer" not in str(info.value)


def test_rows_with_audio_are_refused_naming_the_column(tokenizer, tmp_path):
    """data.audio_key (upstream after v0.7): audio inputs are not built, so a split holding audio is refused."""
    clips = rows(3)
    clips[1]["audios"] = [{"path": "a.wav"}]
    clips[0]["audios"], clips[2]["audios"] = [], []
    path = write_rows(tmp_path / "a.parquet", clips)
    (problem,) = check_split("data.train_files", [path], data_config(), tokenizer, BUILTIN).problems
    assert problem.startswith("data.train_files: 1 rows hold audio in column 'audios' (data.audio_key)")
    # another column name: the files have none, nothing to refuse
    assert check_split("data.train_files", [path], data_config(audio_key="clips"), tokenizer, BUILTIN).problems == []


def test_mm_processor_kwargs_are_refused_unless_empty():
    from tests.trainer.config.overrides_helpers import refusal_of

    assert "data.mm_processor_kwargs" in refusal_of("+data.mm_processor_kwargs.max_pixels=1024")
