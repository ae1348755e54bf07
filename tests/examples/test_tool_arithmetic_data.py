"""The bundled tool task's generators: RL rows (tool_arithmetic.py) and SFT traces (tool_arithmetic_sft.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from verl.data.chat_templates import VERL_HERMES_TEMPLATE

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "examples" / "data_preprocess"
TOOL_CONFIG = ROOT / "examples" / "tool_arithmetic" / "code_interpreter_tool_config.yaml"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"test_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tool_arithmetic = _load("tool_arithmetic")
tool_arithmetic_sft = _load("tool_arithmetic_sft")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tool_arithmetic")
    rl_train, rl_test = tool_arithmetic.main(["--local_dir", str(root / "rl"), "--train_size", "20", "--test_size", "10"])
    _, no_tool_test = tool_arithmetic.main(["--local_dir", str(root / "no_tool"), "--train_size", "20",
                                            "--test_size", "10", "--no_tool"])
    sft_train, _ = tool_arithmetic_sft.main(["--local_dir", str(root / "sft"), "--train_size", "30", "--test_size", "4",
                                             "--exclude_questions_from", rl_test])
    read = lambda path: pq.read_table(path).to_pylist()  # noqa: E731
    return {"rl_train": read(rl_train), "rl_test": read(rl_test), "no_tool_test": read(no_tool_test),
            "sft_train": read(sft_train)}


def _factors(question: str) -> tuple[int, int]:
    a, b = question.removeprefix("Compute ").removesuffix(".").split(" * ")
    return int(a), int(b)


def test_rl_rows_are_tool_agent_rows_with_correct_products(data):
    rows = data["rl_train"]
    assert len(rows) == 20 and len(data["rl_test"]) == 10
    for i, row in enumerate(rows):
        a, b = _factors(row["extra_info"]["question"])
        assert 100 <= a <= 999 and 10 <= b <= 999  # defaults: 3-digit times 2- or 3-digit
        assert row["data_source"] == "arithmetic" and row["agent_name"] == "tool_agent"
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(a * b)}
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert "code_interpreter" in row["prompt"][0]["content"] and "####" in row["prompt"][0]["content"]
        assert row["prompt"][1]["content"] == f"Compute {a} * {b}."
        assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == i
        assert row["extra_info"]["tools_kwargs"] == {"code_interpreter": {"create_kwargs": {"ground_truth": str(a * b)}}}
    assert len({row["extra_info"]["question"] for row in rows + data["rl_test"]}) == 30  # all distinct


def test_no_tool_rows_ask_the_same_questions_without_the_tool(data):
    assert [r["extra_info"]["question"] for r in data["no_tool_test"]] == \
        [r["extra_info"]["question"] for r in data["rl_test"]]
    for row in data["no_tool_test"]:
        assert row["agent_name"] == "single_turn_agent" and "tools_kwargs" not in row["extra_info"]
        assert "code_interpreter" not in row["prompt"][0]["content"]


def test_sft_traces_call_the_tool_and_answer_its_result(data):
    test_questions = {row["extra_info"]["question"] for row in data["rl_test"]}
    for row in data["sft_train"]:
        assert row["extra_info"]["question"] not in test_questions
        system, user, call, tool, answer = row["messages"]
        a, b = _factors(user["content"])
        assert (system["role"], user["role"], call["role"], tool["role"], answer["role"]) == \
            ("system", "user", "assistant", "tool", "assistant")
        (tool_call,) = call["tool_calls"]
        assert call["content"] == "" and tool_call["type"] == "function"
        assert tool_call["function"]["name"] == "code_interpreter"
        arguments = tool_call["function"]["arguments"]
        assert isinstance(arguments, str)  # a JSON string survives parquet unchanged; a dict would become a struct
        code = json.loads(arguments)["code"]
        assert code == f"print({a} * {b})"
        assert tool["content"] == str(a * b) and answer["content"] == f"#### {a * b}"
        assert row["tools"] == [tool_arithmetic.TOOL_SCHEMA]


def test_rendered_trace_holds_the_tool_schema_call_and_response():
    messages = tool_arithmetic_sft.trace(tool_arithmetic.Problem(437, 86))
    text = build_tiny_tokenizer().apply_chat_template(messages, tools=[tool_arithmetic.TOOL_SCHEMA], tokenize=False,
                                                      chat_template=VERL_HERMES_TEMPLATE)
    assert '"name": "code_interpreter"' in text.split("<|im_start|>user")[0]  # the schema in the system turn
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "code_interpreter", "arguments": '
            '{"code": "print(437 * 86)"}}\n</tool_call><|im_end|>') in text
    assert "<|im_start|>tool\n<tool_response>\n37582\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n#### 37582<|im_end|>\n")


def test_tool_config_schema_is_the_one_the_traces_render():
    tool = yaml.safe_load(TOOL_CONFIG.read_text())["tools"][0]
    assert tool["class_name"] == "verl.tools.sandbox_fusion_tools.SandboxFusionTool"
    assert tool["config"]["type"] == "native" and tool["config"]["sandbox_fusion_url"] is None
    assert tool["tool_schema"] == tool_arithmetic.TOOL_SCHEMA


def test_bad_digit_counts_are_refused_with_the_flag_format():
    with pytest.raises(ValueError, match="comma-separated"):
        tool_arithmetic.main(["--local_dir", "/nonexistent", "--a_digits", "three"])
    with pytest.raises(ValueError, match="1..9"):
        tool_arithmetic.parse_digits("0")
