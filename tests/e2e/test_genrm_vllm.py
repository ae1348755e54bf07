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


def _rm_folder(out, kind: str):
    """A one-label Llama reward model vLLM's CPU attention takes (head_dim 32), with a non-zero head bias."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification, LlamaForTokenClassification

    from tests.helpers.e2e import default_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    config = LlamaConfig(vocab_size=len(tokenizer), intermediate_size=64, num_hidden_layers=2, num_labels=1,
                         max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, initializer_range=0.5, **SHAPE)
    torch.manual_seed(0)
    model = (LlamaForTokenClassification if kind == "token" else LlamaForSequenceClassification)(config)
    if kind == "token":
        with torch.no_grad():
            model.score.bias.fill_(0.3)  # the converted sequence classifier must load the bias too
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def _classify_scores(rank: int, port: int, folders: dict, results) -> None:
    """/classify on both engines for each reward-model folder: the same texts one request at a time, then all in
    one request (one batch)."""
    from tests.workers.reward_manager.test_disrm_loop import _post as post_classify
    from verl.trainer.config.reward import RewardModelConfig, RewardModelRolloutConfig
    from verl.workers.genrm_engine import GenRMServer

    texts = ["<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n", "hello there", "x"]
    out = {}
    for kind, folder in folders.items():
        for engine in ("vllm", "hf"):
            rm = RewardModelConfig(enable=True, use_reward_loop=True, rollout=RewardModelRolloutConfig(
                name=engine, dtype="float32", prompt_length=96, response_length=32))
            rm.model.path = folder
            server = GenRMServer(rm, discriminative=True)
            try:
                body = {"model": folder, "use_activation": False, "add_special_tokens": False}
                alone = [post_classify(server.address(), {**body, "input": t})[1]["data"][0]["probs"][0]
                         for t in texts]
                together = [d["probs"][0] for d in post_classify(server.address(), {**body, "input": texts})[1]["data"]]
                activated = post_classify(server.address(), {"input": texts[0], "add_special_tokens": False})[1]
            finally:
                stats = server.shutdown()
            out[(kind, engine)] = {"alone": alone, "together": together, "stats": stats,
                                   "activated": activated["data"][0]["probs"][0]}
    results[rank] = out


def test_a_discriminative_reward_model_on_vllms_pooling_runner_scores_as_the_hf_engine(tmp_path):
    """reward_model.rollout.name=vllm without a reward function: vLLM's pooling runner behind /classify. Our
    token-classification format is served as the sequence classifier of the same trunk (same weights, bias
    included); a sequence-classification checkpoint as is. Scores equal the HF engine's in fp32."""
    import math

    folders = {kind: _rm_folder(tmp_path / kind, kind) for kind in ("token", "sequence")}
    from tests.helpers.ranks import free_port

    out = run_ranks(_classify_scores, free_port(), folders, nprocs=1, timeout_s=500)[0]
    for kind in folders:
        vllm, hf = out[(kind, "vllm")], out[(kind, "hf")]
        assert vllm["alone"] == pytest.approx(hf["alone"], abs=1e-4), kind
        assert vllm["together"] == pytest.approx(vllm["alone"], abs=1e-5), kind
        assert vllm["activated"] == pytest.approx(1 / (1 + math.exp(-vllm["alone"][0])), abs=1e-6)
        assert vllm["stats"]["completed"] == len(vllm["alone"]) + 2 and vllm["stats"]["failed"] == 0
        assert len(set(vllm["alone"])) == len(vllm["alone"])  # real, different scores


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_grpo_scores_come_from_a_discriminative_reward_model_on_vllm(tmp_path):
    """Two GRPO steps whose reward is a discriminative reward model on vLLM's pooling runner in its Ray actor
    (reward_model.rollout.name=vllm, no reward function): its head scores every input 0.25."""
    import torch
    from transformers import AutoModelForTokenClassification

    from tests.helpers.e2e import fit_run, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides

    rm_dir = _rm_folder(tmp_path / "rm", "token")
    rm = AutoModelForTokenClassification.from_pretrained(rm_dir, num_labels=1)
    with torch.no_grad():
        rm.score.weight.zero_()
        rm.score.bias.fill_(0.25)
    rm.save_pretrained(rm_dir)
    overrides = tiny_run_overrides(make_tiny_model_dir(tmp_path / "model"),
                                   make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4),
                                   tmp_path / "run", n_workers=1) + [
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.mode=async",
        "reward_model.enable=true", "reward_model.use_reward_loop=true", "reward_model.num_workers=2",
        f"reward_model.model.path={rm_dir}", "reward_model.rollout.name=vllm", "reward_model.rollout.dtype=float32",
        "reward_model.rollout.prompt_length=256", "reward_model.rollout.response_length=64",
    ]
    seen = {}

    def body(trainer) -> None:
        trainer.fit()
        seen.update(trainer.genrm_stats)

    rows = fit_run(overrides, body)
    assert len(rows) == 2
    for row in rows:
        assert row["critic/score/mean"] == pytest.approx(0.25, abs=1e-5)
    assert seen["completed"] == 16 and seen["failed"] == 0 and seen["batches"] >= 1
