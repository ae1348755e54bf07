"""data.apply_chat_template_kwargs in RL: extra chat-template variables (Qwen3's enable_thinking, say) reach every
place a prompt is rendered: the dataset's items, the overlong-prompt filter, the data check before Ray and the
agent loop's renderer, so the length the check measures is the length trained on."""

from __future__ import annotations

import copy

import pytest

from tests.data.conftest import make_row, write_rows
from tests.data.test_rl_dataset import data_config
from verl.data import RLHFDataset

# a template that, like Qwen3's enable_thinking, changes the generation prompt on a variable
THINKING_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% for c in m.get('tool_calls', []) %}<tool_call>{{ c.function.name }}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


@pytest.fixture
def thinking_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = THINKING_TEMPLATE
    return tok


def _text(tokenizer, ids) -> str:
    return tokenizer.decode(ids)


def test_the_dataset_renders_with_the_kwargs(thinking_tokenizer, parquet_file):
    plain = RLHFDataset(parquet_file, thinking_tokenizer, data_config())[0]
    off = RLHFDataset(parquet_file, thinking_tokenizer,
                      data_config(apply_chat_template_kwargs={"enable_thinking": False}, return_full_prompt=True))[0]
    assert "<think>" not in _text(thinking_tokenizer, plain["raw_prompt_ids"])
    assert off["full_prompts"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert len(off["raw_prompt_ids"]) > len(plain["raw_prompt_ids"])
    assert _text(thinking_tokenizer, off["raw_prompt_ids"]) == off["full_prompts"]


def test_the_length_filter_and_the_data_check_count_the_rendered_prompt(thinking_tokenizer, tmp_path):
    from verl.data.data_check import prompt_lengths

    prompts = [[{"role": "user", "content": "hi"}]]
    (plain,), _ = prompt_lengths(prompts, thinking_tokenizer, "prompt")
    (off,), _ = prompt_lengths(prompts, thinking_tokenizer, "prompt", {"enable_thinking": False})
    assert off > plain
    # a prompt that fits without the kwargs and not with them is dropped by the filter only with them
    path = write_rows(tmp_path / "one.parquet", [make_row("hi", index=0)])
    fits = data_config(max_prompt_length=plain, filter_overlong_prompts=True)
    assert len(RLHFDataset(path, thinking_tokenizer, fits)) == 1
    with pytest.raises(ValueError, match="longer than"):
        RLHFDataset(path, thinking_tokenizer, data_config(max_prompt_length=plain, filter_overlong_prompts=True,
                                                          apply_chat_template_kwargs={"enable_thinking": False}))


def test_the_agent_loop_renderer_uses_them(thinking_tokenizer):
    from verl.workers.rollout.agent_loop.rendering import ChatRenderer

    messages = [{"role": "user", "content": "hi"}]
    key = "actor_rollout_ref.rollout.multi_turn.chat_template"
    plain = ChatRenderer(thinking_tokenizer, "model", key).render(messages, None, True)
    off = ChatRenderer(thinking_tokenizer, "model", key, {"enable_thinking": False}).render(messages, None, True)
    assert off == plain + "<think>\n\n</think>\n\n"


def test_upstreams_command_line_form_appends_into_the_section():
    from verl.trainer.config import ConfigError, validate_config
    from verl.trainer.config.validate import load_config

    cfg = validate_config(load_config(["+data.apply_chat_template_kwargs.enable_thinking=false"]), check_files=False)
    assert dict(cfg.data.apply_chat_template_kwargs) == {"enable_thinking": False}
    # without the +, as in upstream (an empty section), the key is new: refused, saying how to add it
    with pytest.raises(ConfigError, match=r"'\+data.apply_chat_template_kwargs.enable_thinking=false'"):
        load_config(["data.apply_chat_template_kwargs.enable_thinking=false"])
