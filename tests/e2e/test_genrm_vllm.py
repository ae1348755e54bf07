"""The judge engine on vLLM (reward_model.rollout.name=vllm): a real in-process vLLM engine serving the judge
model behind the OpenAI-compatible chat endpoint, against the HF judge engine on the same folder (fp32).

- greedy answers are the HF engine's, token for token, and concurrent requests are answered as they are alone;
- ``logprobs`` / ``top_logprobs`` come from vLLM (raw log-softmax, as the chat server promises) and equal the HF
  engine's to float precision;
- the judge scores through it from the probability of a verdict token, as through the HF engine.

Each test runs in a spawned child (vLLM's teardown is process-wide), with one vLLM engine in it. Needs vLLM (skipped
without it)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm")

from tests.helpers.ranks import run_ranks  # noqa: E402
from tests.workers.reward_manager.test_genrm_engine import _ask, _post, _rm  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

# vLLM's CPU attention needs head_dim >= 32
SHAPE = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2}
QUESTIONS = ("Is 2 + 2 = 4?", "hello there", "x")


def _start(folder: str, engine: str):
    from verl.workers.genrm_engine import GenRMServer

    rm = _rm(folder)
    rm.rollout.name, rm.rollout.prompt_length = engine, 200  # the tiny models have 256 positions
    return GenRMServer(rm)


def _answers(rank: int, port: int, folder: str, results) -> None:
    """Both engines on the random model: alone with log-probs, then all questions at once."""
    out = {}
    for engine in ("vllm", "hf"):
        server = _start(folder, engine)
        try:
            address = server.address()
            alone = [_post(address, _ask(q, logprobs=True, top_logprobs=3)) for q in QUESTIONS]
            with ThreadPoolExecutor(len(QUESTIONS)) as pool:  # all at once: one batch in the engine
                together = list(pool.map(lambda q, a=address: _post(a, _ask(q)), QUESTIONS))
        finally:
            stats = server.shutdown()
        out[engine] = {"alone": alone, "together": together, "stats": stats}
    results[rank] = out


def _verdict_scores(rank: int, port: int, folder: str, results) -> None:
    """The judge's verdict-token probability through each engine."""
    from verl.workers.genrm_engine import GenRMEndpoint, bind_reward_router
    from verl.workers.reward_loop.judge import judge_compute_score

    out = {}
    for engine in ("vllm", "hf"):
        server = _start(folder, engine)
        try:
            endpoint = GenRMEndpoint(folder)
            endpoint.address = server.address()
            score = bind_reward_router(judge_compute_score, endpoint)
            out[engine] = asyncio.run(score(data_source="t", solution_str="four", ground_truth="4",
                                            extra_info={"question": "2 + 2?"}, verdict_tokens=["Y", "N"]))["score"]
        finally:
            server.shutdown()
    results[rank] = out


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    from tests.helpers.scripted_judge import build_scripted_judge_dir
    from tests.helpers.tiny_model import tiny_llama
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    root = tmp_path_factory.mktemp("vllm_judge")
    tokenizer = build_tiny_tokenizer()
    tiny_llama(seed=3, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
               eos_token_id=tokenizer.eos_token_id, **SHAPE).save_pretrained(root / "random")
    tokenizer.save_pretrained(root / "random")
    return {"random": str(root / "random"),
            "yn": build_scripted_judge_dir(root / "yn", "Y", runner_up={"N": 9.9}, **SHAPE)}


def _child(fn, folder: str) -> dict:
    from tests.helpers.ranks import free_port

    return run_ranks(fn, free_port(), folder, nprocs=1, timeout_s=400)[0]


def test_the_vllm_judge_engine_answers_as_the_hf_one(folders):
    out = _child(_answers, folders["random"])
    vllm, hf = out["vllm"], out["hf"]
    for got, want in zip(vllm["alone"], hf["alone"]):
        assert got[0] == want[0] == 200, (got, want)
        g, w = got[1]["choices"][0], want[1]["choices"][0]
        assert g["message"]["content"] == w["message"]["content"]
        g_steps, w_steps = g["logprobs"]["content"], w["logprobs"]["content"]
        assert [s["token"] for s in g_steps] == [s["token"] for s in w_steps]
        for gs, ws in zip(g_steps, w_steps):
            assert gs["logprob"] == pytest.approx(ws["logprob"], abs=1e-4)
            assert len(gs["top_logprobs"]) == 3
            assert [t["logprob"] for t in gs["top_logprobs"]] == \
                pytest.approx([t["logprob"] for t in ws["top_logprobs"]], abs=1e-4)
    # answered in one batch, the same as alone
    assert [r[1]["choices"][0]["message"]["content"] for r in vllm["together"]] == \
        [r[1]["choices"][0]["message"]["content"] for r in vllm["alone"]]
    assert vllm["stats"]["completed"] == 2 * len(QUESTIONS) and vllm["stats"]["failed"] == 0


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_the_judge_scores_verdict_token_probabilities_through_vllm(folders):
    out = _child(_verdict_scores, folders["yn"])
    assert 0.5 < out["vllm"] < 0.99  # 'Y' at logit 10 with 'N' at 9.9 close behind
    assert out["vllm"] == pytest.approx(out["hf"], abs=1e-4)
