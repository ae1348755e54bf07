"""tool_agent end to end on a scripted engine: tool calls, masks, errors, limits and interactions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.helpers.typed_config import typed_section
from tests.workers.rollout.agent_loop.scripted import CALC_SCHEMA, LOG_PROB, CalcTool, ScriptedBackend
from verl.protocol import DataProto
from verl.trainer.config import ActorRolloutRefConfig
from verl.workers.rollout.agent_loop.manager import AgentLoopManager

PROMPT_LEN, RESPONSE_LEN = 1024, 400
CALL = '<tool_call>\n{"name": "calc", "arguments": {"expression": "%s"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def _config(tmp_path, interaction: bool = False, tool_config: dict | None = None, **overrides):
    tools = tmp_path / "tools.yaml"
    tools.write_text(yaml.safe_dump(tool_config or {"tools": [{
        "class_name": "tests.workers.rollout.agent_loop.scripted.CalcTool",
        "config": {"type": "native", "tool_call_timeout": 0.3}, "tool_schema": CALC_SCHEMA}]}))
    values = {"model.path": "unused", "rollout.mode": "async", "rollout.name": "hf",
              "rollout.prompt_length": PROMPT_LEN, "rollout.response_length": RESPONSE_LEN,
              "rollout.multi_turn.enable": True, "rollout.multi_turn.tool_config_path": str(tools),
              "rollout.multi_turn.chat_template": "verl_hermes"}
    if interaction:
        path = tmp_path / "interaction.yaml"
        path.write_text(yaml.safe_dump({"interaction": [{
            "name": "gsm8k", "class_name": "verl.interactions.gsm8k_interaction.Gsm8kInteraction", "config": {}}]}))
        values["rollout.multi_turn.interaction_config_path"] = str(path)
    return typed_section(ActorRolloutRefConfig, values, **overrides)


def _run(config, tokenizer, script, rows: int = 1, extra_info: dict | None = None, meta_info: dict | None = None):
    backend = ScriptedBackend(tokenizer, script)
    manager = AgentLoopManager(config, tokenizer, lambda meta: backend)
    messages = [{"role": "system", "content": "Use the calc tool."}, {"role": "user", "content": "What is 12*13?"}]
    prompt = tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    ids = torch.tensor([prompt] * rows)
    mask = torch.ones_like(ids)
    columns = {"raw_prompt": [messages] * rows, "agent_name": ["tool_agent"] * rows,
               "extra_info": [extra_info or {"tools_kwargs": {"calc": {"create_kwargs": {"seed": 7}}}}] * rows}
    batch = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": mask.cumsum(-1) - 1},
                                non_tensors={k: np.array(v + [None], dtype=object)[:-1] for k, v in columns.items()},
                                meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": 0,
                                           **(meta_info or {})})
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0}
    return manager.generate_sequences(batch, params), backend


def _turns(script_turns):
    """A script answering the k-th assistant turn with script_turns[k]."""
    def script(conversation: str) -> str:
        return script_turns[conversation.count("<|im_start|>assistant") - 1]
    return script


def _segments(out, tokenizer, row=0):
    """(mask value, decoded text) runs of the response."""
    ids = out.batch["responses"][row].tolist()
    mask = out.batch["response_mask"][row].tolist()
    real = int(out.batch["attention_mask"][row, -len(ids):].sum())
    runs, start = [], 0
    for i in range(1, real + 1):
        if i == real or mask[i] != mask[start]:
            runs.append((mask[start], tokenizer.decode(ids[start:i], skip_special_tokens=False)))
            start = i
    return runs


def test_a_tool_call_round_trip_trains_only_the_models_tokens(tmp_path, tokenizer):
    CalcTool.created, CalcTool.released = [], []
    out, _ = _run(_config(tmp_path), tokenizer, _turns([CALL % "12*13", "#### 156"]))
    runs = _segments(out, tokenizer)
    assert [m for m, _ in runs] == [1, 0, 1]
    assert runs[0][1] == CALL % "12*13" + "<|im_end|>"
    assert runs[1][1] == "\n<|im_start|>tool\n<tool_response>\n156\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert runs[2][1] == "#### 156<|im_end|>"
    # the engine's log-probs on model tokens, zero on the tool turn
    lp, mask = out.batch["rollout_log_probs"][0], out.batch["response_mask"][0]
    assert torch.all(lp[mask.bool()] == LOG_PROB) and torch.all(lp[~mask.bool()] == 0)
    cols = out.non_tensor_batch
    assert cols["__num_turns__"][0] == 5 and cols["__tool_calls__"][0] == 1 and cols["__tool_errors__"][0] == 0
    assert cols["__tokenization_mismatch__"][0] == 0 and cols["tool_rewards"][0] == [1.0]
    assert CalcTool.created == [{"seed": 7}] and len(CalcTool.released) == 1  # per-sample create_kwargs; released
    # the prompt carries the tool schema, rendered by the verl_hermes template
    prompt = tokenizer.decode(out.batch["prompts"][0][out.batch["attention_mask"][0, :PROMPT_LEN].bool()])
    assert '"name": "calc"' in prompt and "<tools>" in prompt


@pytest.mark.parametrize("written, error", [
    ('<tool_call>\n{"name": "calc", "arguments": {oops}}\n</tool_call>', "not valid JSON"),
    ('<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>', "unknown tool 'search'"),
    (CALL % "boom", "calc failed: RuntimeError: calculator exploded"),
    (CALL % "slow", "did not answer within 0.3 s"),
    ("<tool_call>\n{\"name\": \"calc\"", "was not closed"),
    (CALL % "1+1" + CALL % "2+2", "at most 1 tool call(s) per turn"),
])
def test_bad_calls_become_error_messages_and_are_counted(tmp_path, tokenizer, written, error):
    out, _ = _run(_config(tmp_path), tokenizer, _turns([written, "#### 156"]))
    runs = _segments(out, tokenizer)
    assert [m for m, _ in runs] == [1, 0, 1]  # the trajectory goes on after the error
    assert error in runs[1][1]
    assert out.non_tensor_batch["__tool_errors__"][0] == 1


def test_tool_responses_are_truncated_to_max_tool_response_length(tmp_path, tokenizer):
    config = _config(tmp_path, **{"rollout.multi_turn.max_tool_response_length": 6})
    out, _ = _run(config, tokenizer, _turns([CALL % "123456789*987654321", "#### 1"]))
    tool_text = _segments(out, tokenizer)[1][1]
    assert "121...(truncated)269" in tool_text  # middle: 3 characters from each end of 121932631112635269


def test_max_assistant_turns_ends_the_trajectory(tmp_path, tokenizer):
    config = _config(tmp_path, **{"rollout.multi_turn.max_assistant_turns": 1})
    out, _ = _run(config, tokenizer, _turns([CALL % "1+1", "never reached"]))
    assert [m for m, _ in _segments(out, tokenizer)] == [1]
    assert out.non_tensor_batch["__num_turns__"][0] == 3


def test_concurrent_trajectories_are_batched(tmp_path, tokenizer):
    out, backend = _run(_config(tmp_path), tokenizer, _turns([CALL % "2*3", "#### 6"]), rows=16)
    assert len(out) == 16 and all(n == 5 for n in out.non_tensor_batch["__num_turns__"])
    assert len(backend.batches) < 8 and max(backend.batches) >= 8  # 32 requests in a few batches


def test_interaction_answers_between_turns_and_its_tokens_are_masked(tmp_path, tokenizer):
    config = _config(tmp_path, interaction=True)
    extra = {"interaction_kwargs": {"name": "gsm8k", "ground_truth": "156"}}
    out, _ = _run(config, tokenizer, _turns(["#### 150", "#### 156"]), extra_info=extra)
    runs = _segments(out, tokenizer)
    assert [m for m, _ in runs] == [1, 0, 1]
    assert "<|im_start|>user\nYour response is incorrect!" in runs[1][1]
    assert out.non_tensor_batch["turn_scores"][0] == [0.0, 1.0]


def test_max_user_turns_limits_the_interaction(tmp_path, tokenizer):
    config = _config(tmp_path, interaction=True, **{"rollout.multi_turn.max_user_turns": 1})
    extra = {"interaction_kwargs": {"name": "gsm8k", "ground_truth": "156"}}
    out, _ = _run(config, tokenizer, _turns(["#### 1", "#### 2", "#### 3"]), extra_info=extra)
    assert [m for m, _ in _segments(out, tokenizer)] == [1, 0, 1]  # one user turn, then the loop stops


def test_model_chat_template_that_cannot_render_tools_is_refused(tmp_path, tokenizer):
    config = _config(tmp_path, **{"rollout.multi_turn.chat_template": "model"})
    with pytest.raises(ValueError, match="does not render tool schemas"):
        _run(config, tokenizer, _turns(["#### 1"]))


def test_unclosed_budget_stops_before_a_turn_that_does_not_fit(tmp_path, tokenizer):
    config = _config(tmp_path, **{"rollout.response_length": 60})
    long_call = CALL % "1+1"
    out, _ = _run(config, tokenizer, _turns([long_call, "#### 2"]))
    runs = _segments(out, tokenizer)
    assert runs[-1][0] == 1  # ends on the model's own turn: no tool turn that leaves no room to answer
    assert out.batch["attention_mask"][0, -60:].sum() <= 60
    assert json.dumps(runs)  # decodable


def test_the_trainers_template_kwargs_reach_the_tool_loops_renders(tmp_path):
    """data.apply_chat_template_kwargs travel with the generation batch (the rollout worker has no data section):
    the tool loop renders its prompt with them, as the dataset rendered the first one."""
    import copy

    from tests.data.test_chat_template_kwargs import THINKING_TEMPLATE
    from verl.workers.rollout.agent_loop.base import with_template_kwargs

    tok = copy.deepcopy(build_tiny_tokenizer())
    tok.chat_template = THINKING_TEMPLATE
    seen = []

    def script(conversation: str) -> str:
        seen.append(conversation)
        return "The answer is 156."

    config = _config(tmp_path, **{"rollout.multi_turn.chat_template": "model"})
    backend = ScriptedBackend(tok, script)
    manager = AgentLoopManager(config, tok, lambda meta: backend)
    messages = [{"role": "user", "content": "What is 12*13?"}]
    ids = torch.tensor([tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))])
    mask = torch.ones_like(ids)
    meta = with_template_kwargs({"eos_token_id": tok.eos_token_id, "pad_token_id": 0},
                                type("Data", (), {"apply_chat_template_kwargs": {"enable_thinking": False}})())
    batch = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": mask.cumsum(-1) - 1},
                                non_tensors={"raw_prompt": np.array([None], dtype=object),
                                             "agent_name": np.array(["tool_agent"], dtype=object)},
                                meta_info=meta)
    batch.non_tensor_batch["raw_prompt"][0] = messages
    manager.generate_sequences(batch, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0})
    assert seen and seen[0].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
