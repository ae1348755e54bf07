"""Upstream's generative-reward-model helpers (verl.utils.reward_process) and the judge text they share with the
reward loop's HTTP judge (verl.utils.judge_text): the judge's chat from a sample, the score from its answer."""

from __future__ import annotations

import logging

import pytest
import torch

from verl.utils.judge_text import (
    BOXED_JUDGE_SYSTEM_PROMPT,
    BOXED_JUDGE_TEMPLATE,
    fill_judge_template,
    judge_chat,
    last_boxed_score,
)
from verl.utils.reward_process import reward_postprocess, reward_preprocess
from verl.workers.reward_loop.judge import OpenAIJudge, parse_verdict


def test_preprocess_asks_about_the_response_against_the_reference_with_the_gsm8k_rule_score():
    questions = ["Tom has 2 apples and buys 2 more. How many?", "What is 3 * 3?"]
    answers = ["2 + 2 = 4. #### 4", "I think it is 10. #### 10"]
    chats, extra = reward_preprocess(questions, answers, ["4", "9"])
    assert [[m["role"] for m in chat] for chat in chats] == [["system", "user"]] * 2
    assert chats[0][0]["content"] == BOXED_JUDGE_SYSTEM_PROMPT
    user = chats[1][1]["content"]
    assert "<response> \n I think it is 10. #### 10 \n </response>" in user
    assert "<ground_truth> \n 9 \n </ground_truth>" in user
    assert "\\boxed{5}" in user  # the format the answer is read in, with str.format's braces undone
    assert questions[1] not in user  # the default prompt grades against the reference only
    assert extra.dtype == torch.float32 and extra.tolist() == [1.0, 0.0]  # exact match of the #### answer


def test_preprocess_template_may_use_the_question_and_drop_the_system_message():
    chats, _ = reward_preprocess(["Q?"], ["A."], ["G"], template="{question} | {response} | {ground_truth}",
                                 system_prompt=None)
    assert chats == [[{"role": "user", "content": "Q? | A. | G"}]]


def test_braces_and_backslashes_in_the_texts_reach_the_prompt_verbatim():
    answer = "the set {x | x > 0} and \\boxed{3}"
    text = fill_judge_template(BOXED_JUDGE_TEMPLATE, "q", answer, "{1, 2}")
    assert answer in text and "{1, 2}" in text
    assert judge_chat("{response}", "q", "r", None) == [{"role": "user", "content": "r"}]
    assert fill_judge_template("[{ground_truth}]", "q", "r", None) == "[]"  # no reference: empty, not "None"


@pytest.mark.parametrize(("text", "want"), [
    ("The response is right. \\boxed{5}", 5.0),
    ("\\boxed{0}", 0.0),
    ("first \\boxed{1}, on reflection \\boxed{4}", 4.0),  # the last box is the final rating
    ("Amazing! \\boxed{10}", 5.0),  # out of range: clamped to the scale
    ("\\boxed{007}", 5.0),
])
def test_postprocess_reads_the_last_boxed_integer_clamped_to_0_5(text, want):
    assert reward_postprocess([text]).tolist() == [want]


@pytest.mark.parametrize("text", ["I am not sure.", "", "\\boxed{bad}", "\\boxed{-2}", "\\boxed{2.5}",
                                  "\\boxed{ 4 }", "boxed{4}", "SCORE: 4"])
def test_postprocess_scores_an_unreadable_answer_0_and_says_so(text, caplog):
    with caplog.at_level(logging.WARNING, logger="verl.utils.reward_process"):
        scores = reward_postprocess(["\\boxed{3}", text])
    assert scores.tolist() == [3.0, 0.0]
    assert len(caplog.records) == 1 and "scoring it 0" in caplog.records[0].getMessage()


def test_postprocess_blends_the_rule_scores_on_the_judges_scale():
    rule = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    scores = reward_postprocess(["\\boxed{5}", "\\boxed{5}", "no verdict"], rule)
    assert torch.equal(scores, torch.tensor([5.0, 2.5, 1.25], dtype=torch.float64))
    assert reward_postprocess([]).shape == (0,) and reward_postprocess([]).dtype == torch.float32
    assert reward_postprocess([], torch.zeros(0)).shape == (0,)


def test_a_batch_round_trip_from_samples_to_blended_scores():
    chats, extra = reward_preprocess(["q1", "q2"], ["#### 7", "#### 8"], ["7", "7"])
    assert all("<ground_truth> \n 7 \n </ground_truth>" in chat[1]["content"] for chat in chats)
    judge_answers = ["Right. \\boxed{4}", "Wrong number. \\boxed{1}"]
    assert reward_postprocess(judge_answers, extra).tolist() == [4.5, 0.5]


def test_the_http_judge_builds_the_same_chat_and_reads_the_same_box():
    judge = OpenAIJudge("http://127.0.0.1:9/v1", "m", prompt_template=BOXED_JUDGE_TEMPLATE,
                        system_prompt=BOXED_JUDGE_SYSTEM_PROMPT, max_score=5)
    chats, _ = reward_preprocess(["q"], ["an answer"], ["a reference"])
    assert judge.messages("q", "an answer", "a reference") == chats[0]
    assert OpenAIJudge("http://127.0.0.1:9/v1").messages("q", "r", "g")[0]["role"] == "user"  # no system prompt
    assert parse_verdict("fine \\boxed{2} \\boxed{4}", max_score=5) == 0.8
    assert parse_verdict("SCORE: 3\n\\boxed{9}") == 0.3  # an explicit SCORE line wins over a box
    with pytest.raises(ValueError, match="outside 0..5"):
        parse_verdict("\\boxed{7}", max_score=5)  # the HTTP judge refuses what reward_postprocess clamps
    assert last_boxed_score("\\boxed{-1}") is None and last_boxed_score(None) is None
