"""Response-only loss masks of SFTDataset and MultiTurnSFTDataset, checked by hand on tiny examples."""

from __future__ import annotations

import copy

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from verl.data.multiturn_sft_dataset import ChatTemplateNotIncrementalError, MultiTurnSFTDataset
from verl.data.sft_dataset import SFTDataset, SFTResponseTooLongError
from verl.trainer.config.sft import SFTCustomClsConfig, SFTDataConfig, SFTMultiTurnConfig


class CharTokenizer:
    """One id per character (its code point), so every expected id and mask can be written by hand.

    Template: each message renders as '<R>:<content>|' (R = first letter of the role, upper case); the generation
    prompt is 'A:'. EOS is '$', padding id 0.
    """

    eos_token = "$"
    eos_token_id = ord("$")
    pad_token_id = 0
    chat_template = "char-stub"

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False, **kwargs):
        text = "".join(f"{m['role'][0].upper()}:{m['content']}|" for m in messages)
        return text + ("A:" if add_generation_prompt else "")

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def write(tmp_path, rows, name="data.parquet") -> str:
    path = str(tmp_path / name)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def cfg(**data):
    return SFTDataConfig(**{"max_length": 12, **data})


def test_single_turn_mask_by_hand(tmp_path):
    path = write(tmp_path, [{"prompt": "hi", "response": "ok"}])
    item = SFTDataset(path, CharTokenizer(), cfg())[0]
    # "U:hi|A:" is the prompt (7 tokens, never trained), "ok$" the response (EOS included).
    assert item["input_ids"].tolist() == ids("U:hi|A:ok$") + [0, 0]
    assert item["attention_mask"].tolist() == [1] * 10 + [0, 0]
    assert item["position_ids"].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9]
    # position t is trained when token t+1 is a response token: positions 6 ('A:' colon -> 'o'), 7, 8.
    assert item["loss_mask"].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0]


def test_chat_prompt_and_dict_keys(tmp_path):
    rows = [{"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
             "extra": {"answer": {"text": "yes"}}}]
    path = write(tmp_path, rows)
    item = SFTDataset(path, CharTokenizer(), cfg(response_key="extra", response_dict_keys=["answer", "text"],
                                                   max_length=16))[0]
    assert item["input_ids"].tolist()[:13] == ids("S:s|U:q|A:yes$")[:13]
    trained = [ids("S:s|U:q|A:yes$")[t + 1] for t in range(15) if item["loss_mask"][t]]
    assert "".join(map(chr, trained)) == "yes$"


def test_truncation_modes(tmp_path):
    path = write(tmp_path, [{"prompt": "abcdef", "response": "xy"}])  # "U:abcdef|A:xy$" = 14 tokens
    with pytest.raises(SFTResponseTooLongError, match="data.max_length=10"):
        SFTDataset(path, CharTokenizer(), cfg(max_length=10))[0]
    left = SFTDataset(path, CharTokenizer(), cfg(max_length=10, truncation="left"))[0]
    assert left["input_ids"].tolist() == ids("cdef|A:xy$")  # the start of the prompt is dropped
    assert left["loss_mask"].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 0]
    right = SFTDataset(path, CharTokenizer(), cfg(max_length=10, truncation="right"))[0]
    assert right["input_ids"].tolist() == ids("U:abcdef|A")
    assert right["loss_mask"].tolist() == [0] * 10  # the whole response was cut off


def test_multi_turn_only_assistant_turns_by_hand(tmp_path):
    conversation = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"}, {"role": "assistant", "content": "de"}]
    path = write(tmp_path, [{"messages": conversation}])
    config = SFTDataConfig(multiturn=SFTMultiTurnConfig(enable=True), max_length=20)
    item = MultiTurnSFTDataset(path, CharTokenizer(), config)[0]
    text = "U:a|A:b|U:c|A:de|"
    # trained tokens: 'b|' (indices 6, 7) and 'de|' (14, 15, 16); the headers 'A:' are given, not trained
    assert item["input_ids"].tolist() == ids(text) + [0, 0, 0]
    token_trained = [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1]
    assert item["loss_mask"].tolist() == token_trained[1:] + [0] + [0, 0, 0]
    assert item["attention_mask"].tolist() == [1] * 17 + [0, 0, 0]


def test_tiny_bpe_tokenizer_trains_exactly_the_response(tmp_path):
    tokenizer = build_tiny_tokenizer()
    path = write(tmp_path, [{"prompt": "Tom has 12 apples.", "response": "12 + 5 = 17. #### 17"}])
    item = SFTDataset(path, tokenizer, cfg(max_length=64))[0]
    input_ids, loss_mask = item["input_ids"], item["loss_mask"].bool()
    trained = input_ids[1:][loss_mask[:-1]]
    assert tokenizer.decode(trained.tolist()) == "12 + 5 = 17. #### 17<|im_end|>"
    prompt = input_ids[: int(torch.nonzero(loss_mask)[0]) + 1]
    assert tokenizer.decode(prompt.tolist()).endswith("<|im_start|>assistant\n")


def test_tiny_bpe_multi_turn_trains_assistant_turns(tmp_path):
    tokenizer = build_tiny_tokenizer()
    conversation = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "12 + 5"},
                    {"role": "assistant", "content": "17"}, {"role": "user", "content": "times 2"},
                    {"role": "assistant", "content": "#### 34"}]
    path = write(tmp_path, [{"messages": conversation}])
    config = SFTDataConfig(multiturn=SFTMultiTurnConfig(enable=True), max_length=96)
    item = MultiTurnSFTDataset(path, tokenizer, config)[0]
    mask = item["loss_mask"].bool()
    trained = item["input_ids"][1:][mask[:-1]].tolist()
    assert tokenizer.decode(trained) == "17<|im_end|>\n#### 34<|im_end|>\n"
    whole = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert tokenizer.decode(item["input_ids"][item["attention_mask"].bool()].tolist()) == whole


def test_template_that_rewrites_history_is_refused(tmp_path):
    class Forgetful(CharTokenizer):
        def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False, **kwargs):
            # drops every assistant turn but the last, as reasoning templates drop old thoughts
            last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
            kept = [m for i, m in enumerate(messages) if m["role"] != "assistant" or i == last]
            return super().apply_chat_template(kept, add_generation_prompt)

    conversation = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]
    path = write(tmp_path, [{"messages": conversation}])
    dataset = MultiTurnSFTDataset(path, Forgetful(), SFTDataConfig(max_length=40))
    with pytest.raises(ChatTemplateNotIncrementalError, match="row 0"):
        dataset[0]


def test_missing_columns_name_the_key(tmp_path):
    path = write(tmp_path, [{"question": "q", "answer": "a"}])
    with pytest.raises(ValueError, match="data.prompt_key"):
        SFTDataset(path, CharTokenizer(), cfg())
    with pytest.raises(ValueError, match="data.response_key"):
        SFTDataset(path, CharTokenizer(), cfg(prompt_key="question"))


def test_chat_template_and_its_kwargs(tmp_path):
    template = ("{% for m in messages %}{{ tag }}{{ m['content'] }};{% endfor %}"
                "{% if add_generation_prompt %}=>{% endif %}")
    path = write(tmp_path, [{"prompt": "hi", "response": "ok"}])

    def text(**data) -> str:  # a copy: the dataset sets its chat_template on the tokenizer, the shared one stays
        item = SFTDataset(path, copy.deepcopy(build_tiny_tokenizer()), cfg(max_length=32, **data))[0]
        return build_tiny_tokenizer().decode(item["input_ids"][item["attention_mask"].bool()].tolist())

    assert text().startswith("<|im_start|>user\nhi<|im_end|>")  # the tokenizer's own template
    assert text(chat_template=template, apply_chat_template_kwargs={"tag": "Q:"}) == "Q:hi;=>ok<|im_end|>"
    assert text(chat_template=template, apply_chat_template_kwargs={"tag": "Z "}) == "Z hi;=>ok<|im_end|>"


class ToolTokenizer(CharTokenizer):
    """Renders the tools and the thinking flag a row passes, as '[T:<names>]' and '[think]' in front."""

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False, tools=None,
                            enable_thinking=None, **kwargs):
        head = f"[T:{','.join(t['name'] for t in tools)}]" if tools else ""
        head += "[think]" if enable_thinking else ""
        return head + super().apply_chat_template(messages, add_generation_prompt)


def test_multi_turn_tools_and_thinking_columns(tmp_path):
    conversation = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    path = write(tmp_path, [{"messages": conversation, "my_tools": [{"name": "calc"}], "think": True}])

    def text(**multiturn) -> str:
        config = SFTDataConfig(multiturn=SFTMultiTurnConfig(enable=True, **multiturn), max_length=40)
        item = MultiTurnSFTDataset(path, ToolTokenizer(), config)[0]
        return "".join(map(chr, item["input_ids"][item["attention_mask"].bool()].tolist()))

    assert text() == "U:a|A:b|"  # the default columns 'tools' and 'enable_thinking' are absent
    assert text(tools_key="my_tools") == "[T:calc]U:a|A:b|"
    assert text(tools_key="my_tools", enable_thinking_key="think") == "[T:calc][think]U:a|A:b|"


def test_custom_dataset_class(tmp_path):
    from verl.trainer.sft.data import create_sft_dataset

    (tmp_path / "my_ds.py").write_text(
        "from torch.utils.data import Dataset\n\n"
        "class Rows(Dataset):\n"
        "    def __init__(self, files, tokenizer, config):\n"
        "        self.files, self.config = files, config\n\n"
        "    def __len__(self):\n"
        "        return 3\n\n"
        "    def __getitem__(self, i):\n"
        "        return i\n")
    config = SFTDataConfig(custom_cls=SFTCustomClsConfig(path=str(tmp_path / "my_ds.py"), name="Rows"))
    dataset = create_sft_dataset(["f.parquet"], config, CharTokenizer())
    assert type(dataset).__name__ == "Rows" and len(dataset) == 3 and dataset.files == ["f.parquet"]
    assert dataset.config is config
    config.custom_cls.name = "Missing"
    with pytest.raises(AttributeError, match="data.custom_cls.name='Missing'"):
        create_sft_dataset(["f.parquet"], config, CharTokenizer())


def test_verl_hermes_names_the_tool_template_sft_and_rollout_share(tmp_path):
    """data.chat_template=verl_hermes: tool schemas in the system turn, tool calls trained, tool results not."""
    import copy
    import json

    from verl.data.chat_templates import VERL_HERMES_TEMPLATE

    tokenizer = copy.deepcopy(build_tiny_tokenizer())  # the dataset sets its chat_template; keep the shared one
    tool = {"type": "function", "function": {"name": "calc", "description": "evaluate",
                                             "parameters": {"type": "object",
                                                            "properties": {"expression": {"type": "string"}}}}}
    call = {"type": "function", "function": {"name": "calc", "arguments": json.dumps({"expression": "12*13"})}}
    conversation = [{"role": "system", "content": "Use calc."}, {"role": "user", "content": "12*13?"},
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "content": "156"}, {"role": "assistant", "content": "#### 156"}]
    path = write(tmp_path, [{"messages": conversation, "tools": [tool]}])
    config = SFTDataConfig(multiturn=SFTMultiTurnConfig(enable=True), max_length=1024, chat_template="verl_hermes")
    item = MultiTurnSFTDataset(path, tokenizer, config)[0]
    assert tokenizer.chat_template == VERL_HERMES_TEMPLATE
    mask = item["loss_mask"].bool()
    trained = tokenizer.decode(item["input_ids"][1:][mask[:-1]].tolist())
    assert trained == ('<tool_call>\n{"name": "calc", "arguments": {"expression": "12*13"}}\n</tool_call><|im_end|>\n'
                       "#### 156<|im_end|>\n")
    whole = tokenizer.decode(item["input_ids"][item["attention_mask"].bool()].tolist())
    assert '"name": "calc", "description": "evaluate"' in whole and "<tool_response>\n156\n</tool_response>" in whole
