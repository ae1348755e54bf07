"""Upstream's verl.utils.hf_tokenizer on a tokenizer folder written here (no downloads)."""

from __future__ import annotations

import copy

import pytest

from tests.helpers.tiny_tokenizer import EOS_TOKEN, build_tiny_tokenizer


@pytest.fixture
def padless_dir(tmp_path):
    tokenizer = copy.deepcopy(build_tiny_tokenizer())
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    return str(tmp_path)


def test_a_tokenizer_without_a_pad_token_pads_with_eos(padless_dir):
    from verl.utils import hf_tokenizer

    with pytest.warns(UserWarning, match="pad"):
        tokenizer = hf_tokenizer(padless_dir)
    assert tokenizer.pad_token == EOS_TOKEN and tokenizer.pad_token_id == tokenizer.eos_token_id


def test_correct_pad_token_false_and_kwargs_reach_from_pretrained(padless_dir):
    from verl.utils.tokenizer import hf_tokenizer

    tokenizer = hf_tokenizer(padless_dir, correct_pad_token=False, padding_side="right")
    assert tokenizer.pad_token is None and tokenizer.padding_side == "right"


def test_a_missing_folder_is_an_error(tmp_path):
    from verl.utils.tokenizer import hf_tokenizer

    with pytest.raises(OSError):
        hf_tokenizer(str(tmp_path / "absent"))
