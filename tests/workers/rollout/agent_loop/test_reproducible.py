"""Sampled multi-turn rollout is reproducible: one seed gives the same trajectories whatever the tools' latency
(HF generate, whose batches would otherwise be formed by arrival time and drawn from one global generator)."""

from __future__ import annotations

import asyncio
import random

import torch

from tests.helpers.tiny_model import VOCAB_SIZE, tiny_llama
from tests.workers.rollout.agent_loop.helpers import arr_config, prompt_batch
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.workers.rollout.agent_loop.backends import HFBackend
from verl.workers.rollout.agent_loop.manager import AgentLoopManager

TURNS, TOKENS_PER_TURN, TOOL_TOKENS = 3, 2, 2
SAMPLED = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}


@register("test_slow_tool_agent")
class SlowToolAgent(AgentLoopBase):
    """Generates, calls a 'tool' that answers after ``latency[(row, turn)]`` seconds with tokens computed from what
    was generated, and goes on for TURNS turns."""

    latency: dict[tuple[int, int], float] = {}

    async def run(self, sampling_params, **kwargs):
        row, prompt = int(kwargs["index"]), list(kwargs["raw_prompt_ids"])
        ids, mask = [], []
        for turn in range(TURNS):
            out = await self.server_manager.generate(
                "r", prompt_ids=prompt + ids, sampling_params={**sampling_params, "max_tokens": TOKENS_PER_TURN})
            ids += out.token_ids
            mask += [1] * len(out.token_ids)
            if turn < TURNS - 1:
                await asyncio.sleep(type(self).latency[(row, turn)])
                answer = [3 + (sum(ids) + k) % (VOCAB_SIZE - 3) for k in range(TOOL_TOKENS)]
                ids += answer
                mask += [0] * TOOL_TOKENS
        return AgentLoopOutput(prompt_ids=prompt, response_ids=ids, response_mask=mask, num_turns=2 * TURNS)


def _run(model, latency_seed: int, seed: int = 0, torch_seed: int = 0):
    # tool answers from 0 to 100 ms, drawn per run: the trajectories come back to the engine in different orders
    # and groupings in every run (the engine's own wait for stragglers is 50 ms)
    draw = random.Random(latency_seed)
    SlowToolAgent.latency = {(row, turn): draw.uniform(0.0, 0.1) for row in range(4) for turn in range(TURNS)}
    config = arr_config(**{"rollout.agent.num_workers": 2,
                           "rollout.response_length": TURNS * TOKENS_PER_TURN + (TURNS - 1) * TOOL_TOKENS})
    rollout = HFRollout(model, config.rollout)
    manager = AgentLoopManager(config, None, lambda meta: HFBackend(rollout, meta, config.rollout.prompt_length),
                               seed=seed)
    batch = prompt_batch(columns={"agent_name": ["test_slow_tool_agent"] * 4, "index": [0, 1, 2, 3]},
                         eos=[VOCAB_SIZE + 1], global_steps=1)  # an EOS never sampled: every turn is full length
    torch.manual_seed(torch_seed)  # whatever else drew from the global generator before
    out = manager.generate_sequences(batch, dict(SAMPLED))
    return out, torch.rand(1)


def test_one_seed_gives_the_same_trajectories_whatever_the_tool_latency():
    model = tiny_llama()
    first, after_first = _run(model, latency_seed=1)
    second, after_second = _run(model, latency_seed=2, torch_seed=5)
    assert SlowToolAgent.latency != {}
    for key in ("responses", "response_mask", "attention_mask", "input_ids"):
        assert torch.equal(first.batch[key], second.batch[key]), key
    expected_mask = ([1] * TOKENS_PER_TURN + [0] * TOOL_TOKENS) * (TURNS - 1) + [1] * TOKENS_PER_TURN
    assert first.batch["response_mask"].tolist() == [expected_mask] * 4
    # the rollout leaves the global generator as it found it
    torch.manual_seed(5)
    assert torch.equal(after_second, torch.rand(1))
    # and the trajectories are sampled: another seed draws others
    other, _ = _run(model, latency_seed=1, seed=1)
    assert not torch.equal(other.batch["responses"], first.batch["responses"])
