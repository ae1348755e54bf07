"""single_turn_agent through the agent loop against the sync HF rollout, on a tiny model."""

import threading

import pytest
import torch

from tests.helpers.tiny_model import VOCAB_SIZE, tiny_llama
from tests.workers.rollout.agent_loop.helpers import arr_config, hf_manager, prompt_batch
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.workers.rollout.vllm.sampling import sampling_kwargs


def _params(config, meta):
    params = sampling_kwargs(config.rollout, meta)
    params.pop("n")
    return params


def test_greedy_single_turn_equals_the_sync_rollout():
    model = tiny_llama()
    config = arr_config()
    batch = prompt_batch(do_sample=False, validate=True)
    sync = HFRollout(model, config.rollout).generate_sequences(prompt_batch(do_sample=False, validate=True))
    manager = hf_manager(model, config)
    out = manager.generate_sequences(batch, _params(config, batch.meta_info))
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert torch.equal(out.batch[key], sync.batch[key]), key
    assert list(out.non_tensor_batch["__num_turns__"]) == [2, 2, 2, 2]
    # all four single-turn rows were batched into one generate call
    assert manager.last_stats["agent/engine_steps"] == 1 and manager.last_stats["agent/max_in_flight"] == 4


@register("test_two_turn_agent")
class TwoTurnAgent(AgentLoopBase):
    """Generates, splices in three 'tool' tokens, generates again; records its worker thread."""

    threads: set = set()

    async def run(self, sampling_params, **kwargs):
        type(self).threads.add(threading.current_thread().name)
        prompt = list(kwargs["raw_prompt_ids"])
        first = await self.server_manager.generate("r", prompt_ids=prompt, sampling_params={**sampling_params,
                                                                                           "max_tokens": 2})
        tool = [7, 8, 9]
        second = await self.server_manager.generate("r", prompt_ids=prompt + first.token_ids + tool,
                                                    sampling_params={**sampling_params, "max_tokens": 2})
        ids = first.token_ids + tool + second.token_ids
        mask = [1] * len(first.token_ids) + [0, 0, 0] + [1] * len(second.token_ids)
        score = float(kwargs["index"]) if kwargs["index"] % 2 == 0 else None
        return AgentLoopOutput(prompt_ids=prompt, response_ids=ids, response_mask=mask, num_turns=4,
                               reward_score=score, extra_fields={"tag": f"row{kwargs['index']}"})


def test_multi_turn_masks_rm_scores_extra_fields_and_batching():
    model = tiny_llama()
    config = arr_config(**{"rollout.agent.num_workers": 2})
    TwoTurnAgent.threads = set()
    batch = prompt_batch(columns={"agent_name": ["test_two_turn_agent"] * 4, "index": [0, 1, 2, 3]},
                         eos=[VOCAB_SIZE + 1], do_sample=False, validate=True)  # an EOS never sampled
    manager = hf_manager(model, config)
    out = manager.generate_sequences(batch, _params(config, batch.meta_info))
    b = out.batch
    # model, model, tool x3, model, model, then padding
    assert b["response_mask"][0].tolist() == [1, 1, 0, 0, 0, 1, 1, 0]
    assert b["attention_mask"][0, -8:].tolist() == [1, 1, 1, 1, 1, 1, 1, 0]
    assert b["responses"][0, 2:5].tolist() == [7, 8, 9]
    # rows 0 and 2 carry an agent-loop score, on their last response token (index 6)
    assert b["rm_scores"][2, 6] == 2.0 and b["rm_scores"][2].abs().sum() == 2.0
    assert list(out.non_tensor_batch["__rm_scored__"]) == [True, False, True, False]
    assert list(out.non_tensor_batch["tag"]) == ["row0", "row1", "row2", "row3"]
    assert len(TwoTurnAgent.threads) == 2  # rollout.agent.num_workers worker threads
    # four trajectories x two turns, served in batches: fewer generate calls than requests
    assert manager.last_stats["agent/engine_steps"] < 8


def test_unknown_agent_name_names_the_known_loops():
    config = arr_config()
    batch = prompt_batch(columns={"agent_name": ["nope"] * 4}, do_sample=False, validate=True)
    with pytest.raises(KeyError, match="single_turn_agent"):
        hf_manager(tiny_llama(), config).generate_sequences(batch, _params(config, batch.meta_info))
