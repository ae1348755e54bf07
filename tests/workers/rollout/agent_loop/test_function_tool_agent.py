"""tool_agent with function tools (rollout.multi_turn.function_tool_path): the model's call runs the Python
function, whose return is the tool turn; the prompt shows the schema inferred from the function."""

from __future__ import annotations

import pytest

from tests.tools.test_function_tools import SAMPLE
from tests.workers.rollout.agent_loop.test_tool_agent import _config, _run, _segments, _turns, tokenizer  # noqa: F401
from verl.utils import function_tools

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 144}}\n</tool_call>'


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    monkeypatch.setattr(function_tools, "FUNCTION_TOOL_REGISTRY", {})
    monkeypatch.setattr(function_tools, "_LOADED", {})


def test_a_model_call_runs_the_function(tmp_path, tokenizer):  # noqa: F811
    config = _config(tmp_path, **{"rollout.multi_turn.tool_config_path": None,
                                  "rollout.multi_turn.function_tool_path": SAMPLE})
    out, _ = _run(config, tokenizer, _turns([CALL, "#### 156"]), extra_info={"tools_kwargs": {}})
    runs = _segments(out, tokenizer)
    assert [m for m, _ in runs] == [1, 0, 1]
    assert runs[1][1] == "\n<|im_start|>tool\n<tool_response>\n156\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    prompt = tokenizer.decode(out.batch["prompts"][0][out.batch["attention_mask"][0, :1024].bool()])
    assert '"name": "add"' in prompt and "Add two integers." in prompt and '"name": "shout_text"' in prompt
