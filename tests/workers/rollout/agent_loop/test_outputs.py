"""Trajectories -> the rollout batch: padding, masks, log-probs, agent scores."""

import pytest
import torch

from verl.workers.rollout.agent_loop import AgentLoopOutput
from verl.workers.rollout.agent_loop.outputs import outputs_to_batch


def test_layout_with_interior_and_trailing_tool_tokens():
    outs = [AgentLoopOutput(prompt_ids=[5, 6], response_ids=[1, 2, 3, 4, 7, 8], response_mask=[1, 0, 0, 1, 0, 0],
                            response_logprobs=[-0.1, 0, 0, -0.4, 0, 0], reward_score=2.0, num_turns=4),
            AgentLoopOutput(prompt_ids=[9], response_ids=[4], response_mask=[1], response_logprobs=[-0.2])]
    b = outputs_to_batch(outs, prompt_length=3, response_length=5, pad_token_id=0)
    assert b.batch["prompts"].tolist() == [[0, 5, 6], [0, 0, 9]]
    # the trailing tool tokens 7, 8 come after the model's last token: dropped
    assert b.batch["responses"].tolist() == [[1, 2, 3, 4, 0], [4, 0, 0, 0, 0]]
    assert b.batch["response_mask"].tolist() == [[1, 0, 0, 1, 0], [1, 0, 0, 0, 0]]
    assert b.batch["attention_mask"].tolist() == [[0, 1, 1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0, 0, 0]]
    assert b.batch["position_ids"][0].tolist() == [0, 0, 1, 2, 3, 4, 5, 5]
    assert b.batch["rollout_log_probs"][0].tolist() == pytest.approx([-0.1, 0, 0, -0.4, 0])
    assert b.batch["rm_scores"].tolist() == [[0, 0, 0, 2.0, 0], [0] * 5]  # on the model's last token
    assert list(b.non_tensor_batch["__rm_scored__"]) == [True, False]
    assert list(b.non_tensor_batch["__num_turns__"]) == [4, 0]
    assert torch.equal(b.batch["input_ids"], torch.cat([b.batch["prompts"], b.batch["responses"]], dim=1))


def test_bad_outputs_are_named():
    with pytest.raises(ValueError, match="output 0: response_mask has 1 entries for 2"):
        outputs_to_batch([AgentLoopOutput([1], [1, 2], [1])], 2, 2, 0)
    with pytest.raises(ValueError, match="over rollout.prompt_length=2; raise data.max_prompt_length"):
        outputs_to_batch([AgentLoopOutput([1, 2, 3], [1], [1])], 2, 2, 0)
