"""Gsm8kTool: create / execute / calc_reward / release, rewards checked by hand."""

import asyncio

import pytest

from verl.tools.gsm8k_tool import Gsm8kTool

SCHEMA = {
    "type": "function",
    "function": {
        "name": "calc_gsm8k_reward",
        "description": "reward of a gsm8k answer",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    },
}


def run(coro):
    return asyncio.run(coro)


def test_execute_scores_answers_and_penalizes_non_improving_submissions():
    tool = Gsm8kTool(config={}, tool_schema=SCHEMA)
    assert tool.name == "calc_gsm8k_reward"

    async def episode():
        iid, initial = await tool.create(ground_truth="1,500")
        assert initial.is_empty()
        steps = [await tool.execute(iid, {"answer": answer}) for answer in ("1400", "1500", "#### 1500", 1500.0)]
        return iid, steps, await tool.calc_reward(iid)

    iid, steps, final = run(episode())
    texts = [response.text for response, _, _ in steps]
    assert texts == [
        "Current parsed answer='1400' reward=0.0",
        "Current parsed answer='1500' reward=1.0",
        "Current parsed answer='#### 1500' reward=1.0",
        "Current parsed answer='1500.0' reward=1.0",  # a number is turned into text; 1500.0 == 1500
    ]
    # 0.0 -> 0.0 is no improvement (-0.05), 0.0 -> 1.0 is (0.0), 1.0 -> 1.0 again is not (-0.05).
    assert [reward for _, reward, _ in steps] == [-0.05, 0.0, -0.05, -0.05]
    assert all(metrics == {} for _, _, metrics in steps)
    assert final == 1.0

    run(tool.release(iid))
    with pytest.raises(KeyError, match="call create"):
        run(tool.calc_reward(iid))


def test_instances_are_independent_and_ids_can_be_given():
    tool = Gsm8kTool(config={}, tool_schema=SCHEMA)

    async def two():
        a, _ = await tool.create("traj-a", ground_truth="7")
        b, _ = await tool.create(create_kwargs={"ground_truth": "8"})  # the create_kwargs spelling
        await tool.execute(a, {"answer": "7"})
        await tool.execute(b, {"answer": "7"})
        return a, b, await tool.calc_reward(a), await tool.calc_reward(b)

    a, b, reward_a, reward_b = run(two())
    assert a == "traj-a" and b != a and len(b) == 36  # a uuid
    assert (reward_a, reward_b) == (1.0, 0.0)


def test_missing_answer_and_missing_ground_truth():
    tool = Gsm8kTool(config={}, tool_schema=SCHEMA)

    async def episode():
        iid, _ = await tool.create(ground_truth="3")
        response, reward, _ = await tool.execute(iid, {})
        return response.text, reward

    assert run(episode()) == ("Current parsed answer='' reward=0.0", -0.05)

    async def no_truth():
        iid, _ = await tool.create()
        await tool.execute(iid, {"answer": "3"})

    with pytest.raises(ValueError, match="create_kwargs.ground_truth"):
        run(no_truth())
