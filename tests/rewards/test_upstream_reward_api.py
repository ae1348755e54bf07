"""Upstream's reward names (issue 34): sandbox_fusion's call_sandbox_api against a loopback HTTP server, the
numina_* data sources, prime.parallel_compute_score_async and the AsyncTokenBucket rate limiter."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl.experimental.reward_loop.reward_manager.limited import AsyncTokenBucket
from verl.utils.reward_score import default_compute_score
from verl.workers.reward_manager.prime import parallel_compute_score_async

OK_ANSWER = {"status": "Success", "run_result": {"status": "Finished", "stdout": "3\n", "return_code": 0}}


class _Sandbox(BaseHTTPRequestHandler):
    """Answers /run_code with the next scripted (status, body); records every request body."""

    script: list[tuple[int, dict]] = []
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802
        type(self).requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        status, body = type(self).script.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def sandbox(monkeypatch):
    import verl.rewards.sandbox_fusion.utils as utils

    monkeypatch.setattr(utils, "API_FIRST_RETRY_DELAY", 0.01)
    _Sandbox.script, _Sandbox.requests = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sandbox)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()
    server.server_close()


def test_sandbox_fusion_is_importable_at_upstreams_path_as_the_same_modules():
    from verl.utils.reward_score.sandbox_fusion.utils import call_sandbox_api, check_correctness

    import verl.rewards.sandbox_fusion as ours
    import verl.rewards.sandbox_fusion.utils as ours_utils
    import verl.utils.reward_score.sandbox_fusion as theirs

    assert theirs is ours and theirs.compute_score is ours.compute_score
    assert call_sandbox_api is ours_utils.call_sandbox_api and check_correctness is ours_utils.check_correctness


def test_call_sandbox_api_returns_the_response_and_sends_the_request(sandbox):
    from verl.utils.reward_score.sandbox_fusion.utils import call_sandbox_api

    _Sandbox.script = [(200, OK_ANSWER)]
    response, error = call_sandbox_api(sandbox, "print(1 + 2)", "in", compile_timeout=3, run_timeout=4,
                                       memory_limit_mb=256, language="python")
    assert (response, error) == (OK_ANSWER, None)
    sent = _Sandbox.requests[0]
    assert (sent["code"], sent["stdin"], sent["run_timeout"], sent["compile_timeout"], sent["memory_limit_MB"]) == (
        "print(1 + 2)", "in", 4, 3, 256)  # fmt: skip


def test_call_sandbox_api_retries_a_gateway_timeout_then_gives_up(sandbox):
    from verl.utils.reward_score.sandbox_fusion.utils import call_sandbox_api

    _Sandbox.script = [(504, {}), (200, OK_ANSWER)]
    assert call_sandbox_api(sandbox, "x", None, 1, 1, 64) == (OK_ANSWER, None)
    assert len(_Sandbox.requests) == 2
    _Sandbox.script, _Sandbox.requests = [(504, {})] * 3, []
    response, error = call_sandbox_api(sandbox, "x", None, 1, 1, 64)
    assert response is None and "after 3 attempt" in error and len(_Sandbox.requests) == 3


def test_call_sandbox_api_returns_errors_instead_of_raising(sandbox):
    from verl.utils.reward_score.sandbox_fusion.utils import call_sandbox_api

    _Sandbox.script = [(500, {"detail": "boom"})]
    response, error = call_sandbox_api(sandbox, "x", None, 1, 1, 64)
    assert response is None and "500" in error and len(_Sandbox.requests) == 1  # no retry on other statuses
    response, error = call_sandbox_api("http://127.0.0.1:9/run_code", "x", None, 1, 1, 64)  # nothing listens
    assert response is None and "cannot reach" in error


@pytest.mark.parametrize("source", ["numina_aops_forum", "numina_synthetic_math", "numina_amc_aime",
                                    "numina_synthetic_amc", "numina_cn_k12", "numina_olympiads"])
def test_numina_data_sources_score_the_final_answer_as_prime_math(source):
    assert default_compute_score(source, "so the answer is \\boxed{\\frac{1}{2}}", "\\frac{1}{2}") == 1.0
    assert default_compute_score(source, "so the answer is \\boxed{3}", "4") == 0.0
    # as upstream's prime_math: the answer need not be boxed
    assert default_compute_score(source, "no boxed answer: 4", "4") == 1.0
    assert default_compute_score(source, "no boxed answer: 5", "4") == 0.0


def _judge(task, completion, reference, extra_info):
    if completion == "hang":
        time.sleep(60)
    if completion == "raise":
        raise ValueError("verifier crashed")
    if completion == "none":
        return None
    if completion == "tuple":
        return (completion == "tuple", {"detail": 1})
    assert task == "t" and extra_info in (None, {"i": 1})
    return float(completion == reference)


def test_parallel_compute_score_async_scores_positionally_and_zeroes_failures():
    completions = ["1", "2", "hang", "raise", "none", "tuple"]
    scores = asyncio.run(parallel_compute_score_async(
        _judge, completions, ["1"] * 6, ["t"] * 6, extra_info=[{"i": 1}] + [None] * 5, num_processes=3, timeout=2.0,
    ))  # fmt: skip
    assert scores == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]  # returning at all means the hung verifier was killed
    assert asyncio.run(parallel_compute_score_async(_judge, [], [], [])) == []
    with pytest.raises(ValueError, match="one of each"):
        asyncio.run(parallel_compute_score_async(_judge, ["1"], [], ["t"]))


def test_async_token_bucket_paces_requests_by_its_rate():
    async def run():
        loop = asyncio.get_running_loop()
        bucket = AsyncTokenBucket(rate_limit=20.0, max_tokens=2.0)
        assert (bucket.rate_limit, bucket.max_tokens, bucket.tokens) == (20.0, 2.0, 2.0)
        start = loop.time()
        stamps: list[float] = []

        async def one():
            await bucket.acquire(1.0)
            stamps.append(loop.time() - start)

        await asyncio.gather(*[one() for _ in range(6)])
        # 2 at once from the full bucket, then one per 1/20 s: the 6th no earlier than 4 * 0.05 = 0.2 s
        assert stamps[1] < 0.04 and stamps[-1] >= 0.2 - 1e-3
        # larger than the bucket: waits for its shortfall (5 tokens at 20/s from an empty bucket = 0.25 s), then
        # the balance is negative, so the next single token waits for the debt as well
        before = loop.time()
        await bucket.acquire(5.0)
        assert loop.time() - before >= 0.25 - 0.02 and bucket.tokens < -4
        return True

    assert asyncio.run(run())
    assert AsyncTokenBucket(rate_limit=3.0).max_tokens == 3.0
    with pytest.raises(ValueError):
        AsyncTokenBucket(rate_limit=0)
