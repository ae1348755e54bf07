import pytest
import torch

from verl.data.prompt_ids import PromptTooLongError, left_pad, truncate_ids

IDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("left", [7, 8, 9, 10]),
        ("right", [1, 2, 3, 4]),
        ("middle", [1, 2, 9, 10]),
    ],
)
def test_truncate_modes(mode, expected):
    assert truncate_ids(IDS, 4, mode, row=0) == expected


def test_truncate_middle_odd_length_keeps_more_of_the_end():
    assert truncate_ids(IDS, 5, "middle", row=0) == [1, 2, 8, 9, 10]


def test_short_prompts_are_untouched():
    assert truncate_ids([1, 2], 4, "error", row=0) == [1, 2]


def test_error_names_row_length_and_config_keys():
    with pytest.raises(PromptTooLongError) as info:
        truncate_ids(IDS, 4, "error", row=17)
    message = str(info.value)
    for part in ("row 17", "10 tokens", "data.max_prompt_length=4", "data.truncation", "data.filter_overlong_prompts"):
        assert part in message


def test_left_pad():
    input_ids, attention_mask = left_pad([5, 6, 7], 5, pad_token_id=0)
    assert input_ids.tolist() == [0, 0, 5, 6, 7]
    assert attention_mask.tolist() == [0, 0, 1, 1, 1]
    assert input_ids.dtype == torch.long and attention_mask.dtype == torch.long
