"""rollout.over_sample_rate on the scripted engine: once (1 - rate) of the trajectories finished, the others are
aborted (their requests dropped, later ones refused) and come back with an empty response that trains nothing;
validation calls run every row; the pre-Ray checks and the aborted-ratio metric."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import torch
import yaml

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.helpers.typed_config import typed_section
from tests.workers.rollout.agent_loop.scripted import CALC_SCHEMA, CalcTool, ScriptedBackend
from verl.protocol import DataProto
from verl.trainer.config import ActorRolloutRefConfig
from verl.trainer.ppo.agent_rollout import pop_agent_metrics
from verl.workers.rollout.agent_loop import server
from verl.workers.rollout.agent_loop.manager import AgentLoopManager

CALL = '<tool_call>\n{"name": "calc", "arguments": {"expression": "2+2"}}\n</tool_call>'
ABORTED = threading.Event()


class GatedCalcTool(CalcTool):
    """calc that answers only once the engine loop has aborted the call (or after 60 s): the rows in it are then
    the slow ones, whatever the machine's load."""

    async def execute(self, instance_id, parameters, **kwargs):
        for _ in range(6000):
            if ABORTED.is_set():
                break
            await asyncio.sleep(0.01)
        return await super().execute(instance_id, parameters, **kwargs)


def _config(tmp_path, rate: float):
    tools = tmp_path / "tools.yaml"
    tools.write_text(yaml.safe_dump({"tools": [{
        "class_name": f"{__name__}.GatedCalcTool", "config": {"type": "native"}, "tool_schema": CALC_SCHEMA}]}))
    return typed_section(ActorRolloutRefConfig, {
        "model.path": "unused", "rollout.mode": "async", "rollout.name": "hf", "rollout.prompt_length": 1024,
        "rollout.response_length": 128, "rollout.multi_turn.enable": True,
        "rollout.multi_turn.tool_config_path": str(tools), "rollout.multi_turn.chat_template": "verl_hermes",
        "rollout.over_sample_rate": rate})


def _run(config, tokenizer, slow_rows: set[int], rows: int = 8, validate: bool = False):
    """Rows in ``slow_rows`` call the gated tool first; the others answer at once."""
    def script(conversation: str) -> str:
        if "slow" in conversation and "<tool_response>" not in conversation:
            return CALL
        return "#### 4"

    backend = ScriptedBackend(tokenizer, script)
    manager = AgentLoopManager(config, tokenizer, lambda meta: backend)
    chats = [[{"role": "user", "content": f"row {i} {'slow' if i in slow_rows else 'fast'}: 2+2?"}]
             for i in range(rows)]
    prompts = [tokenizer.encode(tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False))
               for c in chats]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    columns = {"raw_prompt": chats, "agent_name": ["tool_agent"] * rows, "extra_info": [{}] * rows}
    batch = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": mask.cumsum(-1) - 1},
                                non_tensors={k: np.array(v + [None], dtype=object)[:-1] for k, v in columns.items()},
                                meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": 0,
                                           "validate": validate})
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0}
    return manager.generate_sequences(batch, params), prompts


@pytest.fixture()
def gate(monkeypatch):
    ABORTED.clear()
    real = server.EngineLoop._abort_if_enough

    def recording(self):
        real(self)
        if self.aborted:
            ABORTED.set()

    monkeypatch.setattr(server.EngineLoop, "_abort_if_enough", recording)
    yield
    ABORTED.set()  # release any tool still waiting


def test_the_slowest_rows_are_aborted_with_empty_responses(tmp_path, gate):
    tokenizer = build_tiny_tokenizer()
    # 8 rows at rate 0.25: the call ends when 6 have finished; rows 2 and 5 are in the tool by then
    out, prompts = _run(_config(tmp_path, 0.25), tokenizer, slow_rows={2, 5})
    aborted = list(out.non_tensor_batch["__aborted__"])
    assert aborted == [i in (2, 5) for i in range(8)]
    mask = out.batch["response_mask"]
    assert mask[[2, 5]].sum() == 0 and bool((mask[[0, 1, 3, 4, 6, 7]].sum(-1) > 0).all())
    for row in (2, 5):  # the aborted row keeps its prompt, as the sync rollout sent it
        real = out.batch["prompts"][row][out.batch["attention_mask"][row, :1024].bool()].tolist()
        assert real == prompts[row]
    assert out.non_tensor_batch["__tool_calls__"][2] == 0  # the finished rows' columns, emptied
    metrics = pop_agent_metrics(out)
    assert metrics["agent/aborted_ratio"] == pytest.approx(0.25)
    assert "__aborted__" not in out.non_tensor_batch


def test_validation_and_rate_zero_run_every_row(tmp_path, gate):
    tokenizer = build_tiny_tokenizer()
    ABORTED.set()  # nothing will abort these calls: let the tool answer
    for config, validate in ((_config(tmp_path, 0.25), True), (_config(tmp_path, 0.0), False)):
        out, _ = _run(config, tokenizer, slow_rows={2, 5}, validate=validate)
        assert "__aborted__" not in out.non_tensor_batch
        assert bool((out.batch["response_mask"].sum(-1) > 0).all())
        assert out.non_tensor_batch["__tool_calls__"][2] == 1


@pytest.mark.parametrize("overrides, message", [
    (["actor_rollout_ref.rollout.over_sample_rate=1.0"], "in [0, 1)"),
    (["actor_rollout_ref.rollout.over_sample_rate=0.2", "actor_rollout_ref.rollout.mode=sync"], "mode=async"),
    (["actor_rollout_ref.rollout.over_sample_rate=0.2", "actor_rollout_ref.rollout.name=vllm",
      "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2"],
     "tensor-parallel engine is not built"),
])
def test_over_sample_rate_is_checked_before_ray(overrides, message):
    from verl.trainer.config import ConfigError, load_config, validate_config

    with pytest.raises(ConfigError) as info:
        validate_config(load_config(overrides), check_files=False)
    assert any(p.startswith("actor_rollout_ref.rollout.over_sample_rate=") and message in p
               for p in info.value.problems), info.value.problems
