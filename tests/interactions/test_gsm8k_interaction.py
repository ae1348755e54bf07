"""Gsm8kInteraction: a "try again" user over a whole conversation, and BaseInteraction's defaults."""

import asyncio

import pytest

from verl.interactions.base import BaseInteraction
from verl.interactions.gsm8k_interaction import CORRECT_TEXT, INCORRECT_TEXT, Gsm8kInteraction


def test_try_again_until_correct():
    interaction = Gsm8kInteraction({"name": "gsm8k"})
    messages = [{"role": "user", "content": "What is 6 * 7?"}]

    async def conversation():
        iid = await interaction.start_interaction(ground_truth="42", query="What is 6 * 7?")
        replies = []
        for attempt in ("I think it is 36.", "Sorry: 6 * 7 = 42, so #### 42"):
            messages.append({"role": "assistant", "content": attempt})
            replies.append(await interaction.generate_response(iid, messages))
            messages.append({"role": "user", "content": replies[-1][1]})
        return iid, replies, await interaction.calculate_score(iid)

    iid, replies, score = asyncio.run(conversation())
    assert replies == [(False, INCORRECT_TEXT, 0.0, {}), (True, CORRECT_TEXT, 1.0, {})]
    assert INCORRECT_TEXT == "Your response is incorrect! You need to reflect on your answer and try again."
    assert score == 1.0
    asyncio.run(interaction.finalize_interaction(iid))
    with pytest.raises(KeyError, match="start_interaction"):
        asyncio.run(interaction.calculate_score(iid))


def test_reads_the_last_assistant_message_only():
    interaction = Gsm8kInteraction({})

    async def score(messages):
        iid = await interaction.start_interaction("t", ground_truth="5")
        return (await interaction.generate_response(iid, messages))[0]

    # Flexible scoring reads the last number of the last assistant turn; the later user turn's number is ignored.
    assert asyncio.run(score([{"role": "assistant", "content": "5"}, {"role": "user", "content": "9"}])) is True
    assert asyncio.run(score([{"role": "assistant", "content": "5"}, {"role": "assistant", "content": "6"}])) is False
    assert asyncio.run(score([{"role": "user", "content": "5"}])) is False  # no assistant turn at all
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "#### 5"}]}]
    assert asyncio.run(score(parts)) is True


def test_ground_truth_is_required():
    with pytest.raises(ValueError, match="interaction_kwargs.ground_truth"):
        asyncio.run(Gsm8kInteraction({}).start_interaction())


def test_base_interaction_defaults():
    base = BaseInteraction({})
    assert base.name == "interaction_agent" and BaseInteraction({"name": "judge"}).name == "judge"

    async def flow():
        iid = await base.start_interaction()
        given = await base.start_interaction("fixed")
        reply = await base.generate_response(iid, [{"role": "assistant", "content": "hi"}])
        score = await base.calculate_score(iid)
        await base.finalize_interaction(iid)
        return iid, given, reply, score

    iid, given, reply, score = asyncio.run(flow())
    assert len(iid) == 36 and given == "fixed"
    assert reply[0] is False and isinstance(reply[1], str) and reply[3] == {} and score == 0.0
    assert list(base._instance_dict) == ["fixed"]  # finalize dropped the first instance's state
