"""rollout.agent.* and the multi_turn keys not covered by the tool-agent flows: each one's effect."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers.tiny_model import tiny_llama
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.workers.rollout.agent_loop.helpers import arr_config, hf_manager, prompt_batch
from tests.workers.rollout.agent_loop.test_tool_agent import CALL, _config, _run, _turns
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.workers.rollout.agent_loop.rendering import ChatRenderer, truncate_text

PARAMS = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_tokens": 8}


class EchoAgent(AgentLoopBase):
    """Answers without the engine: the prompt's own last ``repeat`` tokens, ``repeat`` from the YAML entry."""

    def __init__(self, *args, repeat: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.repeat = repeat

    async def run(self, sampling_params, **kwargs):
        prompt = list(kwargs["raw_prompt_ids"])
        return AgentLoopOutput(prompt_ids=prompt, response_ids=prompt[-self.repeat:], response_mask=[1] * self.repeat,
                               num_turns=2)


def test_agent_loop_config_path_adds_loops_with_their_yaml_kwargs(tmp_path):
    path = tmp_path / "loops.yaml"
    path.write_text(yaml.safe_dump([{"name": "echo", "_target_": f"{__name__}.EchoAgent", "repeat": 2}]))
    config = arr_config(**{"rollout.agent.agent_loop_config_path": str(path)})
    batch = prompt_batch(lengths=(6, 3, 5, 2), columns={"agent_name": ["echo"] * 4}, do_sample=False, validate=True)
    out = hf_manager(tiny_llama(), config).generate_sequences(batch, PARAMS)
    ids = batch.batch["input_ids"]
    assert out.batch["responses"][:, :2].tolist() == ids[:, -2:].tolist()  # repeat=2 reached the constructor
    assert out.batch["response_mask"][:, 2:].sum() == 0


def test_default_agent_loop_serves_rows_without_agent_name(tmp_path):
    path = tmp_path / "loops.yaml"
    path.write_text(yaml.safe_dump([{"name": "echo", "_target_": f"{__name__}.EchoAgent"}]))
    config = arr_config(**{"rollout.agent.agent_loop_config_path": str(path), "rollout.agent.default_agent_loop": "echo"})
    batch = prompt_batch(do_sample=False, validate=True)  # no agent_name column
    out = hf_manager(tiny_llama(), config).generate_sequences(batch, PARAMS)
    assert out.batch["response_mask"].sum(-1).tolist() == [1, 1, 1, 1]  # echo's one token, not the model's eight


def test_agent_loop_config_errors_name_the_file_and_entry(tmp_path):
    path = tmp_path / "loops.yaml"
    path.write_text(yaml.safe_dump([{"name": "broken"}]))
    with pytest.raises(ValueError, match=r"entry 0 needs 'name' and '_target_'"):
        hf_manager(tiny_llama(), arr_config(**{"rollout.agent.agent_loop_config_path": str(path)}))
    path.write_text(yaml.safe_dump([{"name": "x", "_target_": "no_such_pkg.Loop"}]))
    config = arr_config(**{"rollout.agent.agent_loop_config_path": str(path)})
    batch = prompt_batch(columns={"agent_name": ["x"] * 4})
    with pytest.raises(ImportError, match="cannot import 'no_such_pkg.Loop'"):
        hf_manager(tiny_llama(), config).generate_sequences(batch, PARAMS)


@pytest.mark.parametrize("side, expected", [("left", "12345...(truncated)"), ("right", "...(truncated)56789"),
                                            ("middle", "12...(truncated)789")])
def test_tool_response_truncate_side(side, expected):
    assert truncate_text("123456789", 5, side) == expected
    assert truncate_text("1234", 5, side) == "1234"


def test_tokenization_sanity_check_modes():
    tokenizer = build_tiny_tokenizer()
    renderer = ChatRenderer(tokenizer, "verl_hermes", "key")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]
    text = renderer.render(messages, None, add_generation_prompt=False)
    same = tokenizer.encode(text.rstrip("\n"))
    differs = tokenizer.encode(text.replace("hello there", "hello  there").rstrip("\n"))
    assert renderer.check_tokens(same, messages, None, "strict")
    assert not renderer.check_tokens(differs, messages, None, "strict")
    assert renderer.check_tokens(differs, messages, None, "ignore_strippable")  # only whitespace differs
    assert renderer.check_tokens(tokenizer.encode("unrelated"), messages, None, "disable")


def test_tokenization_check_mode_reaches_the_trajectory(tmp_path):
    tokenizer = build_tiny_tokenizer()
    # a reply with a special token inside: the conversation's text drops it, the trained tokens keep it
    for mode, mismatch in (("strict", 1), ("ignore_strippable", 1), ("disable", 0)):
        config = _config(tmp_path, **{"rollout.multi_turn.tokenization_sanity_check_mode": mode})
        out, _ = _run(config, tokenizer, _turns(["#### <|pad|>4"]))
        assert out.non_tensor_batch["__tokenization_mismatch__"][0] == mismatch, mode
    out, _ = _run(_config(tmp_path), tokenizer, _turns([CALL % "2+2", "#### 4"]))
    assert out.non_tensor_batch["__tokenization_mismatch__"][0] == 0  # a clean tool round trip matches
