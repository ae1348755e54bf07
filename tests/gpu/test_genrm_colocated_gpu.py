"""A judge that shares the actor's GPU (upstream's colocated mode, reward_model.enable_resource_pool=false) on CUDA:
``sleep()`` frees its device memory (the weights go to host memory), ``wake_up()`` brings them back, and its greedy
answers are the same before and after. The engine is driven directly (no Ray): the Ray placement is covered on CPU
by tests/workers/reward_manager/test_genrm_sleep.py.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from tests.workers.reward_manager.test_genrm_engine import _ask, _post, _rm

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]

QUESTIONS = ("Is 2 + 2 = 4?", "Name a prime.", "What is 3 + 5?")


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory) -> str:
    from tests.helpers.tiny_model import tiny_llama
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("colocated_judge")
    tokenizer = build_tiny_tokenizer()
    tiny_llama(seed=3, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
               eos_token_id=tokenizer.eos_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _answers(address: str) -> list[str]:
    replies = [_post(address, _ask(q)) for q in QUESTIONS]
    assert all(status == 200 for status, _ in replies), replies
    return [body["choices"][0]["message"]["content"] for _, body in replies]


def test_the_judge_frees_its_gpu_memory_asleep_and_answers_the_same_awake(judge_dir):
    from verl.workers.genrm_engine import GenRMServer

    server = GenRMServer(_rm(judge_dir), colocated=True)
    module = server.server.backend.rollout.module
    try:
        assert next(module.parameters()).device.type == "cuda"
        weight_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
        before = _answers(server.address())
        torch.cuda.synchronize()
        awake = torch.cuda.memory_allocated()
        server.sleep()
        torch.cuda.synchronize()
        asleep = torch.cuda.memory_allocated()
        assert all(p.device.type == "cpu" for p in module.parameters())
        assert awake - asleep >= weight_bytes, (awake, asleep, weight_bytes)  # at least the weights are freed
        status, error = _post(server.address(), _ask(QUESTIONS[0]))
        assert status == 503 and "asleep" in error["error"]["message"]
        server.wake_up()
        torch.cuda.synchronize()
        assert all(p.device.type == "cuda" for p in module.parameters())
        assert torch.cuda.memory_allocated() - asleep >= weight_bytes  # the weights are back on the device
        after = _answers(server.address())
    finally:
        server.shutdown()
    assert after == before
