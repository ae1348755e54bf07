"""The OpenAI-compatible judge against a small server on loopback (127.0.0.1): prompt, verdict parsing,
concurrency through the loop, retries, and faults (a judge that hangs, answers garbage, or is down)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.workers.reward_manager.conftest import make_batch
from verl.trainer.ppo.reward import compute_reward
from verl.workers.reward_loop import RateLimitedRewardManager, RewardLoopError, RewardLoopManager
from verl.workers.reward_loop.judge import (
    JudgeResponseError,
    JudgeUnavailableError,
    OpenAIJudge,
    judge_compute_score,
    parse_verdict,
    verdict_probability,
)

# top_logprobs the fake judge answers for a response text, when the request asks for logprobs
SCRIPTED_TOPS = {
    "plain": [("Yes", -0.2231), ("No", -1.6094), ("Maybe", -5.0)],  # 0.8 / (0.8 + 0.2) = 0.8
    "spread": [("Yes", -0.6931), ("NO", -1.6094), (" yes", -2.3026), ("no\n", -2.3026)],  # 0.6 / 0.9
    "neither": [("Maybe", -0.1), ("Perhaps", -2.0)],
}


class JudgeServer:
    """Answers POST /v1/chat/completions by the response text in the prompt: 'hang' never answers (until the test
    ends), 'garbage' answers text without a verdict, 'notjson' answers non-JSON, 'flaky' fails with 503 the first
    time; otherwise 'SCORE: <len(response) % 11>'."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.release = threading.Event()
        self.flaky_seen = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                prompt = body["messages"][-1]["content"]
                response = prompt.split("Response to grade:\n", 1)[1].split("\n\n", 1)[0]
                if response == "hang":
                    outer.release.wait(30)
                if response == "flaky" and outer.flaky_seen == 0:
                    outer.flaky_seen += 1
                    self.send_response(503)
                    self.end_headers()
                    return
                if response == "notjson":
                    payload = b"<html>oops</html>"
                elif body.get("logprobs"):
                    tops = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in
                            SCRIPTED_TOPS.get(response, [])]
                    logprobs = {"content": [{**tops[0], "top_logprobs": tops}]} if tops else None
                    payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": "x"},
                                                       "logprobs": logprobs}]}).encode()
                else:
                    text = "I cannot tell." if response == "garbage" else f"Fine.\nSCORE: {len(response) % 11}"
                    payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def judge_server():
    server = JudgeServer()
    yield server
    server.close()


def test_parse_verdict():
    assert parse_verdict("reasoning...\nSCORE: 7") == 0.7
    assert parse_verdict("Score: 3/4") == 0.75
    assert parse_verdict("SCORE: 2\nafter review SCORE: 9") == 0.9  # the last one
    assert parse_verdict("Verdict: **Correct**") == 1.0 and parse_verdict("VERDICT: incorrect") == 0.0
    with pytest.raises(ValueError, match="no 'SCORE"):
        parse_verdict("no idea")
    with pytest.raises(ValueError, match="outside 0..10"):
        parse_verdict("SCORE: 12")


def test_judge_fills_the_template_and_reads_the_score(judge_server):
    judge = OpenAIJudge(judge_server.url, "judge-model")
    verdict = asyncio.run(judge.judge("What is 2+2?", "four!", ground_truth="4"))
    assert verdict.score == 0.5 and verdict.text.endswith("SCORE: 5")
    body = judge_server.requests[-1]
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    assert "What is 2+2?" in body["messages"][0]["content"] and "Reference answer:\n4" in body["messages"][0]["content"]


def test_a_5xx_is_retried(judge_server):
    judge = OpenAIJudge(judge_server.url, "m", backoff_s=0.01)
    assert asyncio.run(judge.judge("q", "flaky")).score == 0.5
    assert len(judge_server.requests) == 2


def test_a_judge_that_is_down_is_named():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = OpenAIJudge(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, backoff_s=0.01)
    with pytest.raises(JudgeUnavailableError, match=rf"127.0.0.1:{port}/v1/chat/completions.*3 attempts.*Is the "):
        asyncio.run(judge.judge("q", "r"))


def test_garbage_and_non_json_answers_are_named(judge_server):
    judge = OpenAIJudge(judge_server.url, "m")
    with pytest.raises(JudgeResponseError, match=r"127.0.0.1.*no 'SCORE.*I cannot tell"):
        asyncio.run(judge.judge("q", "garbage"))
    with pytest.raises(JudgeResponseError, match="not JSON"):
        asyncio.run(judge.judge("q", "notjson"))


def _judge_manager(tokenizer, url, **limits):
    def kwargs_bound(data_source, solution_str, ground_truth, extra_info=None):
        return judge_compute_score(data_source, solution_str, ground_truth, extra_info, base_url=url, model="m",
                                   request_timeout=5.0, max_retries=0)

    async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return await kwargs_bound(data_source, solution_str, ground_truth, extra_info)

    return RewardLoopManager(RateLimitedRewardManager(None, tokenizer, compute_score, **limits), num_workers=4)


SAMPLES = [("Compute 1 + 1", "two", "2"), ("Compute 3 * 4", "twelve", "12"), ("Compute 2 + 2", "hang", "4"),
           ("Compute 5 - 1", "four", "4")]


def test_the_loop_scores_through_the_judge_and_a_hanging_call_gets_its_deadline(judge_server, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    manager = _judge_manager(tokenizer, judge_server.url, timeout=1.0, max_concurrent=4)
    tensor, extra = compute_reward(data, manager)
    judge_server.release.set()
    assert tensor.sum(-1).tolist() == pytest.approx([0.3, 0.6, 0.0, 0.4])
    assert extra["reward_timeout"] == [False, False, True, False]
    assert extra["score"][2] == 0.0


def test_a_garbage_verdict_stops_the_run_naming_the_sample_and_the_endpoint(judge_server, tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES[:1] + [("Compute 9 - 1", "garbage", "8")])
    manager = _judge_manager(tokenizer, judge_server.url, timeout=5.0)
    with pytest.raises(RewardLoopError, match=r"1 of 2 samples[\s\S]*row 1: RewardScoreError.*JudgeResponseError"
                                              r".*127.0.0.1"):
        compute_reward(data, manager)


def test_verdict_probability_sums_matching_tokens():
    tops = [{"token": t, "logprob": lp} for t, lp in SCRIPTED_TOPS["plain"]]
    assert verdict_probability(tops, "Yes", "No") == pytest.approx(0.8, abs=1e-4)  # e^-0.2231 = 0.8, e^-1.6094 = 0.2
    spread = [{"token": t, "logprob": lp} for t, lp in SCRIPTED_TOPS["spread"]]
    assert verdict_probability(spread, "Yes", "No") == pytest.approx(0.6 / 0.9, abs=1e-4)  # (0.5 + 0.1) / 0.9
    only_yes = [{"token": "yes", "logprob": -3.0}]
    assert verdict_probability(only_yes, "Yes", "No") == 1.0
    with pytest.raises(ValueError, match="neither verdict token 'Yes' nor 'No'.*'Maybe'"):
        verdict_probability([{"token": "Maybe", "logprob": -0.1}], "Yes", "No")


def test_the_judge_scores_from_the_verdict_token_probability(judge_server):
    judge = OpenAIJudge(judge_server.url, "m", verdict_tokens=("Yes", "No"))
    assert asyncio.run(judge.judge("What is 2+2?", "plain", "4")).score == pytest.approx(0.8, abs=1e-4)
    body = judge_server.requests[-1]
    assert body["max_tokens"] == 1 and body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["messages"][0]["content"].endswith("Answer with one word, Yes or No.")
    assert asyncio.run(judge.judge("q", "spread")).score == pytest.approx(2 / 3, abs=1e-4)
    with pytest.raises(JudgeResponseError, match=r"127.0.0.1.*neither verdict token 'Yes' nor 'No'"):
        asyncio.run(judge.judge("q", "neither"))
    with pytest.raises(JudgeResponseError, match="without choices.0..logprobs.*does it serve logprobs"):
        asyncio.run(judge.judge("q", "no-logprobs-scripted"))
    with pytest.raises(ValueError, match="two different non-blank words"):
        OpenAIJudge(judge_server.url, verdict_tokens=["Yes", " yes"])


def test_verdict_tokens_come_through_the_reward_kwargs(judge_server):
    """As ``+custom_reward_function.reward_kwargs.verdict_tokens=[Yes,No]`` passes them (an OmegaConf list)."""
    from omegaconf import OmegaConf

    result = asyncio.run(judge_compute_score("t", "plain", "4", {"question": "2+2?"}, base_url=judge_server.url,
                                             verdict_tokens=OmegaConf.create(["Yes", "No"])))
    assert result["score"] == pytest.approx(0.8, abs=1e-4)
    assert judge_server.requests[-1]["top_logprobs"] == 20
