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
        for attempt in ("I think it is #### 36.", "Sorry: 6 * 7 = 42, so #### 42"):
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


def test_reads_the_last_assistant_message_as_written_in_strict_mode():
    interaction = Gsm8kInteraction({})

    async def score(messages, ground_truth="5"):
        iid = await interaction.start_interaction("t", ground_truth=ground_truth)
        assert interaction._instance_dict["t"]["ground_truth"] == ground_truth
        done, _, reward, _ = await interaction.generate_response(iid, messages)
        return done, reward

    # Strict, as upstream: the answer must follow "#### "; no prefix is added to what the model wrote.
    assert asyncio.run(score([{"role": "assistant", "content": "#### 5"}, {"role": "user", "content": "#### 9"}])) == (
        True, 1.0)  # fmt: skip
    assert asyncio.run(score([{"role": "assistant", "content": "5"}])) == (False, 0.0)
    assert asyncio.run(score([{"role": "assistant", "content": "#### 5"}, {"role": "assistant", "content": "#### 6"}])) == (
        False, 0.0)  # fmt: skip
    assert asyncio.run(score([{"role": "user", "content": "#### 5"}])) == (False, 0.0)  # no assistant turn at all
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "#### 5"}]}]
    assert asyncio.run(score(parts)) == (True, 1.0)
    assert asyncio.run(score([{"role": "assistant", "content": "#### 5"}], ground_truth=None)) == (False, 0.0)
    asyncio.run(score([{"role": "assistant", "content": "so 5"}]))
    assert interaction._instance_dict["t"]["response"] == "so 5"  # stored as written, no "#### " added


def test_finalizing_an_unknown_instance_raises_key_error():
    interaction = Gsm8kInteraction({})
    with pytest.raises(KeyError):
        asyncio.run(interaction.finalize_interaction("never-started"))
    iid = asyncio.run(interaction.start_interaction())
    assert interaction._instance_dict[iid]["ground_truth"] is None  # kept as None when the row has none
    asyncio.run(interaction.finalize_interaction(iid))
    with pytest.raises(KeyError):
        asyncio.run(interaction.finalize_interaction(iid))


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
