"""The generative reward model's judge engine (reward_model.rollout.*): an OpenAI-compatible chat server on HF
generate, the judge scoring through it, requests batched by the engine loop, and the pre-Ray config check."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import urllib.error
import urllib.request

import pytest

from verl.trainer.config import ConfigError, validate_config
from verl.trainer.config.reward import RewardModelConfig, RewardModelRolloutConfig
from verl.trainer.config.validate import load_config
from verl.workers.genrm_engine import GenRMEndpoint, GenRMServer, bind_reward_router
from verl.workers.reward_loop.judge import judge_compute_score


def _rm(path: str, **rollout) -> RewardModelConfig:
    judge = RewardModelRolloutConfig(**{"name": "hf", "dtype": "float32", "prompt_length": 256, "response_length": 16,
                                        **rollout})
    rm = RewardModelConfig(enable=True, use_reward_loop=True, rollout=judge)
    rm.model.path = path
    return rm


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    from tests.helpers.scripted_judge import build_scripted_judge_dir

    return build_scripted_judge_dir(tmp_path_factory.mktemp("judge"), "SCORE: 7")


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    from tests.helpers.tiny_model import tiny_llama
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("random_judge")
    tokenizer = build_tiny_tokenizer()
    tiny_llama(seed=3, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
               eos_token_id=tokenizer.eos_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _post(address: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{address}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _ask(text: str, **extra) -> dict:
    return {"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 8, **extra}


def test_the_server_answers_chat_completions_greedily_and_deterministically(random_dir):
    server = GenRMServer(_rm(random_dir))
    try:
        status, first = _post(server.address(), _ask("Is 2 + 2 = 4?"))
        _, again = _post(server.address(), _ask("Is 2 + 2 = 4?", model=random_dir))
        assert status == 200 and first["object"] == "chat.completion"
        answer = first["choices"][0]["message"]["content"]
        assert answer == again["choices"][0]["message"]["content"]
        assert first["usage"]["completion_tokens"] >= 1
        # the same tokens as HF greedy generate on the chat-templated prompt
        import torch
        from transformers import AutoModelForCausalLM

        tokenizer = server.tokenizer
        text = tokenizer.apply_chat_template([{"role": "user", "content": "Is 2 + 2 = 4?"}],
                                             add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        model = AutoModelForCausalLM.from_pretrained(random_dir, dtype=torch.float32)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        assert answer == tokenizer.decode(out[0, ids.size(1):], skip_special_tokens=True)
        # refused fields and models are named, never ignored
        status, error = _post(server.address(), _ask("x", stop=["\n"]))
        assert status == 400 and "'stop'" in error["error"]["message"]
        status, error = _post(server.address(), _ask("x", model="gpt-4o"))
        assert status == 404 and "not served" in error["error"]["message"]
    finally:
        stats = server.shutdown()
    assert stats["completed"] == 2


def test_concurrent_requests_are_batched_by_the_engine_loop(random_dir):
    """Requests waiting together form one HF generate batch (the agent loop's EngineLoop); each answer equals the
    one the request gets alone."""
    server = GenRMServer(_rm(random_dir), start_engine=False)
    questions = [f"Question {i}: what is {i} + {i}?" for i in range(4)]
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        answers[i] = _post(server.address(), _ask(questions[i]))[1]["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        while server.server.engine_loop._waiting < 4:  # all four queued before the engine takes any
            threading.Event().wait(0.01)
        server.start_engine()
        for thread in threads:
            thread.join()
        batched = server.stats()
        alone = {i: _post(server.address(), _ask(q))[1]["choices"][0]["message"]["content"]
                 for i, q in enumerate(questions)}
    finally:
        server.shutdown()
    assert batched["engine_steps"] == 1 and batched["max_in_flight"] == 4
    assert answers == alone


def test_the_judge_scores_through_the_engine(judge_dir):
    server = GenRMServer(_rm(judge_dir))
    try:
        endpoint = GenRMEndpoint(judge_dir)
        endpoint.address = server.address()
        score = bind_reward_router(judge_compute_score, endpoint)

        async def many():
            return await asyncio.gather(*[score(data_source="t", solution_str=f"answer {i}", ground_truth="4",
                                                extra_info={"question": "2 + 2?"}) for i in range(6)])

        results = asyncio.run(many())
    finally:
        stats = server.shutdown()
    assert [r["score"] for r in results] == [pytest.approx(0.7)] * 6
    assert stats["completed"] == 6


def test_an_unbound_endpoint_is_named():
    with pytest.raises(RuntimeError, match="reward_model.rollout.name"):
        GenRMEndpoint("x").kwargs()


UPSTREAM_STYLE = ["reward_model.enable=true", "reward_model.use_reward_loop=true", "reward_model.num_workers=2",
                  "reward_model.model.path=/models/judge", "reward_model.rollout.name=hf",
                  "reward_model.rollout.tensor_model_parallel_size=1", "reward_model.rollout.gpu_memory_utilization=0.4",
                  "reward_model.rollout.prompt_length=1024", "reward_model.rollout.response_length=256",
                  "reward_model.rollout.enable_prefix_caching=false",
                  "custom_reward_function.path=examples/reward_loop/llm_judge.py"]


def _check(overrides: list[str]):
    return validate_config(load_config(overrides), check_files=False)


def _problems(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        _check(overrides)
    return str(info.value)


def test_upstream_style_command_lines_pass_the_check():
    cfg = _check(UPSTREAM_STYLE)
    # keys that follow the critic's follow it here too, and are not counted as set
    assert _check([*UPSTREAM_STYLE, "critic.use_dynamic_bsz=true"]).reward_model.use_dynamic_bsz is True
    assert cfg.reward_model.rollout.name == "hf" and cfg.reward_model.rollout.prompt_length == 1024
    assert _check([*UPSTREAM_STYLE, "reward_model.rollout.name=vllm",
                   "+reward_model.rollout.engine_kwargs.vllm.served_model_name=judge"]).reward_model.rollout.name == "vllm"


@pytest.mark.parametrize("change, named", [
    (["reward_model.enable=false"], "reward_model.enable=true"),
    (["reward_model.use_reward_loop=false"], "reward_model.use_reward_loop=true"),
    (["reward_model.model.path=null"], "reward_model.model.path"),
    (["reward_model.rollout.name=sglang"], "reward_model.rollout.name"),
    (["reward_model.rollout.tensor_model_parallel_size=2"], "reward_model.rollout.tensor_model_parallel_size"),
    (["reward_model.max_length=512"], "reward_model.max_length"),
    (["+reward_model.rollout.engine_kwargs.sglang.mem_fraction_static=0.5"], "reward_model.rollout.engine_kwargs"),
    # the discriminative worker's keys, set away from their yaml defaults (which follow other sections)
    (["reward_model.micro_batch_size_per_gpu=8"], "reward_model.micro_batch_size_per_gpu"),
    (["reward_model.use_dynamic_bsz=true"], "reward_model.use_dynamic_bsz"),
    (["reward_model.forward_max_token_len_per_gpu=4096"], "reward_model.forward_max_token_len_per_gpu"),
    (["reward_model.model.fsdp_config.param_offload=true"], "reward_model.model.fsdp_config"),
    (["reward_model.model.input_tokenizer=/models/other"], "reward_model.model.input_tokenizer"),
])
def test_bad_genrm_settings_are_refused_naming_the_key(change, named):
    assert named in _problems([*UPSTREAM_STYLE, *change])


def test_rollout_keys_without_an_engine_are_refused():
    message = _problems(["reward_model.rollout.prompt_length=512"])
    assert "reward_model.rollout.prompt_length" in message and "reward_model.rollout.name" in message


def test_prompt_and_response_length_bound_each_request(random_dir):
    server = GenRMServer(_short_rm(random_dir))
    try:
        status, reply = _post(server.address(), _ask("hi", max_tokens=50))
        long_status, error = _post(server.address(), _ask("word " * 80))
    finally:
        server.shutdown()
    assert status == 200 and reply["usage"]["completion_tokens"] <= 4  # max_tokens clipped to response_length
    assert long_status == 400 and "reward_model.rollout.prompt_length" in error["error"]["message"]


def _short_rm(path: str) -> RewardModelConfig:
    return _rm(path, prompt_length=40, response_length=4)


def test_dtype_sets_the_judge_model_dtype(random_dir):
    import torch

    rm = _rm(random_dir, dtype="bfloat16", prompt_length=64, response_length=4)
    server = GenRMServer(rm)
    try:
        assert server.server.backend.rollout.module.dtype == torch.bfloat16
    finally:
        server.shutdown()


def test_vllm_judge_engine_takes_the_rollout_keys(random_dir):
    """What vllm.LLM gets for rollout.name=vllm (the engine itself is not started here): weights from model.path,
    the prefix-cache switch, engine_kwargs.vllm, and gpu_memory_utilization sizing the KV cache on CPU."""
    from transformers import AutoConfig

    from verl.workers.genrm_engine import vllm_judge_config
    from verl.workers.rollout.vllm.engine import engine_kwargs

    hf_config = AutoConfig.from_pretrained(random_dir)

    def kwargs(**rollout):
        rm = _rm(random_dir)
        judge = RewardModelRolloutConfig(name="vllm", dtype="float32", prompt_length=64, response_length=8, **rollout)
        rm = dataclasses.replace(rm, rollout=judge)
        return engine_kwargs(vllm_judge_config(rm), random_dir, hf_config, seed=0, engines_per_node=1)

    base = kwargs()
    assert base["model"] == random_dir and base["load_format"] == "auto" and base["max_model_len"] == 64 + 8 + 1
    assert base["enable_prefix_caching"] is True
    assert base["logprobs_mode"] == "raw_logprobs"  # what the chat server promises (the rollout's is processed)
    assert kwargs(engine_kwargs={"vllm": {"logprobs_mode": "processed_logprobs"}, "sglang": {}})["logprobs_mode"] \
        == "processed_logprobs"
    assert kwargs(enable_prefix_caching=False)["enable_prefix_caching"] is False
    assert kwargs(engine_kwargs={"vllm": {"served_model_name": "judge"}, "sglang": {}})["served_model_name"] == "judge"
    small, large = kwargs(gpu_memory_utilization=1e-9), kwargs(gpu_memory_utilization=0.9)
    assert small.get("kv_cache_memory_bytes", 0) < large.get("kv_cache_memory_bytes", 1) or \
        small.get("gpu_memory_utilization") != large.get("gpu_memory_utilization")


def test_the_reward_function_must_ask_the_judge():
    from verl.trainer.ppo.genrm import bind_genrm
    from verl.utils.config_errors import RewardFunctionError

    cfg = _check(UPSTREAM_STYLE)
    with pytest.raises(RewardFunctionError, match="discriminative reward model"):  # no function: not a judge
        bind_genrm(cfg, lambda **kw: 0.0, custom=False)

    def no_router(data_source, solution_str, ground_truth, extra_info=None):
        return 0.0

    with pytest.raises(RewardFunctionError, match="reward_router_address"):
        bind_genrm(cfg, no_router, custom=True)



def test_logprobs_are_the_raw_log_softmax_at_each_generated_position(random_dir):
    import torch
    from transformers import AutoModelForCausalLM

    server = GenRMServer(_rm(random_dir))
    try:
        status, reply = _post(server.address(), _ask("Is 2 + 2 = 4?", logprobs=True, top_logprobs=5))
        # sampled at temperature 0.7: the reported values are still the raw model distribution (vLLM's default)
        _, sampled = _post(server.address(), _ask("Is 2 + 2 = 4?", logprobs=True, top_logprobs=5,
                                                  temperature=0.7, seed=1))
        _, plain = _post(server.address(), _ask("Is 2 + 2 = 4?"))
        statuses = {top: _post(server.address(), _ask("x", logprobs=True, top_logprobs=top))[0]
                    for top in (-1, 21, 0, 20)}
        status_no_flag, error = _post(server.address(), _ask("x", top_logprobs=3))
        _, bad_type = _post(server.address(), _ask("x", logprobs=True, top_logprobs=2.5))
    finally:
        server.shutdown()
    assert status == 200 and plain["choices"][0]["logprobs"] is None
    content = reply["choices"][0]["logprobs"]["content"]
    tokenizer = server.tokenizer
    # the greedy answer's ids: HF generate on the same prompt
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Is 2 + 2 = 4?"}], add_generation_prompt=True,
                                         tokenize=False)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(random_dir, dtype=torch.float32)
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    answer = out[0, len(prompt):].tolist()
    with torch.no_grad():  # a plain forward over prompt + answer, no padding
        logits = model(torch.tensor([prompt + answer])).logits[0]
    expected = torch.log_softmax(logits[len(prompt) - 1: len(prompt) - 1 + len(answer)], dim=-1)
    assert len(content) == len(answer) == reply["usage"]["completion_tokens"]
    for step, entry in enumerate(content):
        assert entry["token"] == tokenizer.decode([answer[step]])
        assert entry["logprob"] == pytest.approx(float(expected[step, answer[step]]), abs=1e-4)
        assert entry["bytes"] == list(entry["token"].encode())
        values, indices = expected[step].topk(5)
        assert [t["token"] for t in entry["top_logprobs"]] == [tokenizer.decode([i]) for i in indices.tolist()]
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(values.tolist(), abs=1e-4)
    first = sampled["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert [t["logprob"] for t in first] == pytest.approx([t["logprob"] for t in content[0]["top_logprobs"]])
    assert statuses == {-1: 400, 21: 400, 0: 200, 20: 200}
    assert status_no_flag == 400 and "'logprobs': true" in error["error"]["message"]
    assert "from 0 to 20" in bad_type["error"]["message"]


def test_logprobs_of_a_padded_batch_equal_each_request_alone(random_dir):
    """Prompts of different lengths batched together (left-padded for generate and for the scoring forward)."""
    server = GenRMServer(_rm(random_dir), start_engine=False)
    questions = ["Hi?", "What is 12 + 5 - 3, step by step?", "Compute 3 * 4."]
    batched: dict[int, dict] = {}

    def ask(i: int) -> None:
        batched[i] = _post(server.address(), _ask(questions[i], logprobs=True, top_logprobs=3))[1]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    try:
        for thread in threads:
            thread.start()
        while server.server.engine_loop._waiting < 3:
            threading.Event().wait(0.01)
        server.start_engine()
        for thread in threads:
            thread.join()
        steps = server.stats()["engine_steps"]
        alone = {i: _post(server.address(), _ask(q, logprobs=True, top_logprobs=3))[1]
                 for i, q in enumerate(questions)}
    finally:
        server.shutdown()
    assert steps == 1
    for i in range(3):
        got, want = (r["choices"][0]["logprobs"]["content"] for r in (batched[i], alone[i]))
        assert [e["token"] for e in got] == [e["token"] for e in want]
        assert [e["logprob"] for e in got] == pytest.approx([e["logprob"] for e in want], abs=1e-4)
        assert [[t["logprob"] for t in e["top_logprobs"]] for e in got] == \
            [pytest.approx([t["logprob"] for t in e["top_logprobs"]], abs=1e-4) for e in want]


def test_logprobs_are_refused_on_an_engine_that_does_not_report_them():
    """The agent loop's vLLM backend keeps only the sampled token's log-prob: a logprobs request is a 400 naming the
    engine. The judge engines (HF and vLLM) report them."""
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from verl.workers.genrm_engine import JudgeHFBackend, JudgeVLLMBackend
    from verl.workers.rollout.agent_loop.backends import VLLMBackend
    from verl.workers.rollout.chat_server import ChatCompletionServer, ChatRequestError

    assert JudgeHFBackend.reports_top_logprobs and JudgeVLLMBackend.reports_top_logprobs
    assert not getattr(VLLMBackend, "reports_top_logprobs", False)
    bare = ChatCompletionServer(object(), build_tiny_tokenizer(), ["judge"], 64, 4)
    with pytest.raises(ChatRequestError, match="'logprobs' is not supported.*rollout.name=hf or vllm"):
        bare._prepare(_ask("x", logprobs=True, top_logprobs=2))
    assert "logprobs" not in bare._prepare(_ask("x", logprobs=False))[1]


def test_the_judge_scores_from_verdict_token_probabilities_through_the_engine(tmp_path):
    """A scripted judge whose first answer token is 'Y' (weight 10) with 'N' close behind (9.9): the score is
    softmax over the two tokens' logits from a plain HF forward on the rendered prompt."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.helpers.scripted_judge import build_scripted_judge_dir
    from verl.workers.reward_loop.judge import OpenAIJudge

    folder = build_scripted_judge_dir(tmp_path / "yn", "Y", runner_up={"N": 9.9})
    server = GenRMServer(_rm(folder))
    try:
        result = asyncio.run(judge_compute_score("t", "four", "4", {"question": "2 + 2?"},
                                                 reward_router_address=server.address(), verdict_tokens=["Y", "N"]))
    finally:
        server.shutdown()
    tokenizer = server.tokenizer
    prompt = OpenAIJudge("http://x", verdict_tokens=("Y", "N")).prompt("2 + 2?", "four", "4")
    assert prompt.endswith("Answer with one word, Y or N.")
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)(torch.tensor([ids])).logits[0, -1]
    yes, no = (tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in ("Y", "N"))
    by_hand = torch.softmax(logits[[yes, no]], dim=-1)[0].item()
    assert 0.5 < by_hand < 0.99  # the runner-up keeps it away from 1
    assert 0.0 <= result["score"] <= 1.0 and result["score"] == pytest.approx(by_hand, abs=1e-5)
