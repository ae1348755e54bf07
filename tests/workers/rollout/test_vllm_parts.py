"""The vLLM rollout's pure parts — sampling keys, batch layout, KV-cache sizing and release, weight streaming,
the log-prob gap metric — which need no vLLM install (the engine itself: test_vllm_engine.py)."""

import mmap
import os

import pytest
import torch
from transformers import LlamaConfig

from tests.helpers.tiny_model import tiny_llama
from tests.helpers.typed_config import with_values
from verl.trainer.config import FSDPEngineConfig, RolloutConfig
from verl.workers.rollout.metrics import rollout_probs_diff_metrics
from verl.workers.rollout.vllm import engine as engine_mod
from verl.workers.rollout.vllm.batching import prompt_token_lists, response_log_prob_rows, responses_to_batch
from verl.workers.rollout.vllm.kv_cache import KVCacheSleeper, release_pages
from verl.workers.rollout.vllm.sampling import sampling_kwargs
from verl.workers.sharding_manager.fsdp_vllm import _hf_name, full_named_weights

META = {"eos_token_id": 2, "pad_token_id": 0}


def cfg(**overrides) -> RolloutConfig:
    base = RolloutConfig(temperature=1.0, top_k=-1, top_p=1.0, do_sample=True, response_length=8, prompt_length=24,
                         ignore_eos=False, calculate_log_probs=False, dtype="bfloat16", gpu_memory_utilization=0.5,
                         max_num_seqs=8, max_num_batched_tokens=8192, enable_chunked_prefill=True, enforce_eager=True,
                         load_format="dummy_dtensor", tensor_model_parallel_size=1, free_cache_engine=True,
                         engine_kwargs={"vllm": {}})
    return with_values(base, **overrides)


# -- sampling ---------------------------------------------------------------------------------------------------------

def test_sampling_follows_the_rollout_keys():
    kw = sampling_kwargs(cfg(temperature=0.7, top_k=20, top_p=0.9), META)
    assert (kw["temperature"], kw["top_k"], kw["top_p"]) == (0.7, 20, 0.9)
    assert kw["max_tokens"] == 8 and kw["n"] == 1
    assert kw["stop_token_ids"] == [2] and kw["ignore_eos"] is False
    assert "logprobs" not in kw and kw["detokenize"] is False


@pytest.mark.parametrize("meta,expected", [
    ({"do_sample": False}, 0.0),                      # greedy on request
    ({"validate": True}, 0.0),                        # val_kwargs: greedy by default
    ({"temperature": 0.3}, 0.3),                      # the trainer's meta wins over the config
])
def test_greedy_validation_and_meta_temperature(meta, expected):
    kw = sampling_kwargs(cfg(temperature=1.5, top_k=50), {**META, **meta})
    assert kw["temperature"] == expected
    if expected == 0.0:
        assert (kw["top_k"], kw["top_p"]) == (-1, 1.0)


def test_validation_sampling_uses_val_kwargs():
    c = cfg(temperature=1.5, **{"val_kwargs.do_sample": True, "val_kwargs.temperature": 0.5, "val_kwargs.top_p": 0.8})
    kw = sampling_kwargs(c, {**META, "validate": True})
    assert (kw["temperature"], kw["top_p"], kw["top_k"]) == (0.5, 0.8, -1)


def test_log_probs_eos_lists_and_ignore_eos():
    assert sampling_kwargs(cfg(calculate_log_probs=True), META)["logprobs"] == 0
    assert sampling_kwargs(cfg(), {**META, "eos_token_id": [2, 7]})["stop_token_ids"] == [2, 7]
    kw = sampling_kwargs(cfg(ignore_eos=True), META)
    assert kw["ignore_eos"] is True and kw["stop_token_ids"] == []
    assert sampling_kwargs(cfg(top_k=0), META)["top_k"] == -1


def test_sampling_errors_name_the_key():
    with pytest.raises(KeyError, match="eos_token_id"):
        sampling_kwargs(cfg(), {"pad_token_id": 0})
    with pytest.raises(ValueError, match="top_p"):
        sampling_kwargs(cfg(top_p=0.0), META)
    with pytest.raises(ValueError, match="response_length"):
        sampling_kwargs(cfg(response_length=0), META)


# -- batch layout -----------------------------------------------------------------------------------------------------

def test_prompt_rows_drop_left_padding():
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 4]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert prompt_token_lists(ids, mask) == [[5, 6], [7, 8, 9, 4]]
    with pytest.raises(ValueError, match="row 1"):
        prompt_token_lists(ids, torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]]))


def test_responses_are_padded_and_masked_to_what_the_engine_produced():
    prompts = torch.tensor([[0, 5, 6], [7, 8, 9]])
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    out = responses_to_batch(prompts, prompt_mask, [[11, 2], [12, 13, 14, 15]], [[-0.5, -1.0], [-1, -2, -3, -4]],
                             response_length=4, pad_token_id=0).batch
    assert out["responses"].tolist() == [[11, 2, 0, 0], [12, 13, 14, 15]]
    assert out["response_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert out["input_ids"].tolist() == [[0, 5, 6, 11, 2, 0, 0], [7, 8, 9, 12, 13, 14, 15]]
    assert out["attention_mask"].tolist() == [[0, 1, 1, 1, 1, 0, 0], [1] * 7]
    assert out["position_ids"].tolist() == [[0, 0, 1, 2, 3, 3, 3], [0, 1, 2, 3, 4, 5, 6]]
    assert out["rollout_log_probs"].tolist() == [[-0.5, -1.0, 0.0, 0.0], [-1, -2, -3, -4]]
    assert torch.equal(out["prompts"], prompts)
    assert "rollout_log_probs" not in responses_to_batch(prompts, prompt_mask, [[1], [1]], None, 4, 0).batch.keys()


def test_scoring_rows_join_prompt_and_masked_response():
    prompts = torch.tensor([[0, 5, 6], [7, 8, 9]])
    data = responses_to_batch(prompts, torch.tensor([[0, 1, 1], [1, 1, 1]]), [[11, 2], [12, 13, 14]], None, 4, 0)
    assert response_log_prob_rows(data) == ([[5, 6, 11, 2], [7, 8, 9, 12, 13, 14]], [2, 3])


# -- engine settings --------------------------------------------------------------------------------------------------

SMOL = LlamaConfig(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576, head_dim=64)


def test_kv_bytes_per_token_of_smollm2():
    assert engine_mod.kv_bytes_per_token(SMOL, torch.bfloat16) == 2 * 30 * 3 * 64 * 2 == 23040


def test_cpu_kv_cache_is_the_smaller_of_budget_and_need(monkeypatch):
    monkeypatch.setattr(engine_mod, "_total_memory_bytes", lambda: 16 * 2**30)
    # need: 8 sequences x 1000 tokens x 23040 B = 184,320,000 B < budget 0.5 x 16 GiB / 2 engines = 4 GiB
    assert engine_mod.cpu_kv_cache_bytes(cfg(max_num_seqs=8), SMOL, 1000, torch.bfloat16, 2) == 184_320_000
    assert engine_mod.cpu_kv_cache_bytes(cfg(max_num_seqs=1024), SMOL, 1000, torch.bfloat16, 2) == 4 * 2**30
    # never below 16 MiB, never below one full-length sequence
    assert engine_mod.cpu_kv_cache_bytes(cfg(max_num_seqs=1), SMOL, 10, torch.bfloat16, 1) == 16 * 2**20
    explicit = cfg(**{"engine_kwargs.vllm.kv_cache_memory_bytes": 123456789})
    assert engine_mod.cpu_kv_cache_bytes(explicit, SMOL, 1000, torch.bfloat16, 2) == 123456789
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        engine_mod.cpu_kv_cache_bytes(cfg(gpu_memory_utilization=0.0), SMOL, 1000, torch.bfloat16, 2)


def test_engine_kwargs_map_verl_keys(monkeypatch):
    monkeypatch.setattr(engine_mod, "_total_memory_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(engine_mod, "has_fast_bf16", lambda: True)
    kw = engine_mod.engine_kwargs(cfg(**{"engine_kwargs.vllm.swap_space": 2}), "/m", SMOL, seed=3, engines_per_node=2)
    assert kw["model"] == "/m" and kw["dtype"] == "bfloat16" and kw["load_format"] == "dummy"
    assert kw["max_model_len"] == 24 + 8 + 1 and kw["max_num_seqs"] == 8 and kw["seed"] == 3
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["generation_config"] == "vllm"
    assert kw["kv_cache_memory_bytes"] == 16 * 2**20  # 8 x 33 x 23040 B is below the floor
    assert kw["swap_space"] == 2 and kw["enforce_eager"] is True and kw["tensor_parallel_size"] == 1
    assert kw["skip_tokenizer_init"] is True  # upstream's default: token ids in and out
    assert engine_mod.engine_kwargs(cfg(skip_tokenizer_init=False), "/m", SMOL, 0, 1)["skip_tokenizer_init"] is False
    assert engine_mod.engine_kwargs(cfg(load_format="safetensors", dtype="fp32"), "/m", SMOL, 0, 1)["load_format"] \
        == "safetensors"
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        engine_mod.engine_kwargs(cfg(enable_chunked_prefill=False, max_num_batched_tokens=16), "/m", SMOL, 0, 1)
    with pytest.raises(ValueError, match="rollout.dtype"):
        engine_mod.engine_kwargs(cfg(dtype="int3"), "/m", SMOL, 0, 1)


@pytest.mark.parametrize("asked", ["bfloat16", "bf16", "fp16"])
def test_explicit_bf16_on_a_cpu_without_it_is_kept_and_flagged(monkeypatch, caplog, asked):
    """An explicit rollout.dtype wins, as an explicit param_dtype does; only unset (null) follows the hardware
    (tests/trainer/test_resolved_defaults.py)."""
    monkeypatch.setattr(engine_mod, "_total_memory_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(engine_mod, "get_device_name", lambda: "cpu")
    monkeypatch.setattr(engine_mod, "has_fast_bf16", lambda: False)
    with caplog.at_level("WARNING"):
        kw = engine_mod.engine_kwargs(cfg(dtype=asked), "/m", SMOL, 0, 1)
    assert kw["dtype"] in ("bfloat16", "float16")
    assert f"rollout.dtype={asked}" in caplog.text and "emulated" in caplog.text
    monkeypatch.setattr(engine_mod, "has_fast_bf16", lambda: True)
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert engine_mod.engine_kwargs(cfg(dtype=asked), "/m", SMOL, 0, 1)["dtype"] in ("bfloat16", "float16")
    assert caplog.text == ""


def test_rollout_core_gives_each_local_rank_its_own(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5})
    assert engine_mod.rollout_core(0, 2) == 4 and engine_mod.rollout_core(1, 2) == 5
    assert engine_mod.rollout_core(0, 1) is None  # one rank: no pinning
    assert engine_mod.rollout_core(2, 3) is None  # fewer cores than ranks: no pinning


def test_engine_placement_restores_the_trainers_threads():
    before = torch.get_num_threads()
    with engine_mod.engine_placement(None, 1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


# -- KV cache release -------------------------------------------------------------------------------------------------

def test_release_pages_zeroes_whole_pages_only():
    page = mmap.PAGESIZE
    t = torch.ones(8 * page, dtype=torch.uint8)
    start = t.data_ptr()
    first = (start + page - 1) // page * page - start  # offset of the first whole page inside the tensor
    released = release_pages(t.untyped_storage())
    last = (start + t.numel()) // page * page - start
    assert released == last - first and released >= 6 * page
    assert int(t[first:last].sum()) == 0  # dropped pages read back as zeros
    assert int(t[:first].sum()) == first and int(t[last:].sum()) == t.numel() - last  # partial pages untouched


class _FakeLLM:
    def __init__(self):
        self.calls = []

    def reset_prefix_cache(self):
        self.calls.append("reset")

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake", tags))


class _FakeWorker:
    def __init__(self, tensor):
        self.model_runner = type("R", (), {"kv_caches": [tensor[: tensor.numel() // 2], tensor[tensor.numel() // 2:]]})


def test_cpu_sleep_resets_the_prefix_cache_and_releases_the_one_buffer():
    buf = torch.ones(16 * mmap.PAGESIZE, dtype=torch.uint8)
    llm = _FakeLLM()
    sleeper = KVCacheSleeper(llm, _FakeWorker(buf), on_cpu=True, enabled=True)
    sleeper.sleep()
    sleeper.sleep()  # idempotent
    assert llm.calls == ["reset"] and sleeper.released_bytes >= 14 * mmap.PAGESIZE
    sleeper.wake_up()
    assert not sleeper.asleep and llm.calls == ["reset"]
    off = KVCacheSleeper(llm, _FakeWorker(buf), on_cpu=True, enabled=False)
    off.sleep()
    assert not off.asleep and llm.calls == ["reset"]


def test_gpu_sleep_uses_the_engines_sleep_mode():
    llm = _FakeLLM()
    sleeper = KVCacheSleeper(llm, None, on_cpu=False, enabled=True)
    sleeper.sleep()
    sleeper.wake_up_weights()
    sleeper.wake_up()
    assert llm.calls == [("sleep", 1), ("wake", ["weights"]), ("wake", ["kv_cache"])]


# -- weight streaming -------------------------------------------------------------------------------------------------

def test_full_named_weights_streams_hf_names_in_the_engine_dtype():
    model = tiny_llama()
    pushed = list(full_named_weights(model, torch.bfloat16, tied_lm_head=True))
    names = [n for n, _ in pushed]
    assert names[0] == "model.embed_tokens.weight" and names[-1] == "lm_head.weight"
    assert len(names) == len(set(names)) == len(list(model.named_parameters())) + 1  # + the tied lm_head
    assert all(t.dtype == torch.bfloat16 for _, t in pushed)
    state = dict(pushed)
    assert torch.equal(state["lm_head.weight"], model.model.embed_tokens.weight.detach().bfloat16())
    assert torch.equal(state["model.norm.weight"], model.model.norm.weight.detach().bfloat16())
    assert _hf_name("_orig_mod.model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight") == \
        "model.layers.0.mlp.up_proj.weight"


# -- the rollout/actor gap metric -------------------------------------------------------------------------------------

def test_probs_diff_metrics_by_hand():
    rollout = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))
    actor = torch.log(torch.tensor([[0.4, 0.25, 0.1]]))
    m = rollout_probs_diff_metrics(rollout, actor, torch.tensor([[1, 1, 0]]))
    # masked diffs |0.5-0.4| = 0.1 and 0: max 0.1, mean 0.05, population std 0.05
    assert m["training/rollout_probs_diff_max"] == pytest.approx(0.1, abs=1e-6)
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(0.05, abs=1e-6)
    assert m["training/rollout_probs_diff_std"] == pytest.approx(0.05, abs=1e-6)
    assert m["training/rollout_actor_probs_pearson_corr"] == pytest.approx(1.0, abs=1e-5)  # two points: a line
    with pytest.raises(ValueError, match="response_mask"):
        rollout_probs_diff_metrics(rollout, actor, torch.zeros(1, 3))


def _gather_on_two_ranks(rank: int, port: int, results) -> None:
    import torch.distributed as dist

    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # odd sizes everywhere: rank 1's dim-0 shards are shorter than rank 0's (FSDP2 pads them)
        plain = tiny_llama(vocab_size=127, intermediate_size=63, num_key_value_heads=1)
        expected = {n: p.detach().clone() for n, p in plain.named_parameters(remove_duplicate=False)}
        module = apply_fsdp2(plain, FSDPEngineConfig(), create_device_mesh(2))
        for dtype in (torch.float32, torch.bfloat16):
            got = list(full_named_weights(module, dtype, tied_lm_head=True))
            results[(rank, str(dtype))] = ([n for n, _ in got] == list(expected)
                                           and all(torch.equal(t, expected[n].to(dtype)) for n, t in got))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_full_named_weights_gathers_fsdp2_shards_exactly_on_two_ranks():
    from tests.helpers.ranks import free_port, run_ranks

    results = run_ranks(_gather_on_two_ranks, free_port(), nprocs=2, timeout_s=100)
    assert results == {(r, str(d)): True for r in range(2) for d in (torch.float32, torch.bfloat16)}


# -- model.trust_remote_code reaches the engine -----------------------------------------------------------------------

class _EngineStarted(Exception):
    pass


@pytest.mark.parametrize("trust", [True, False])
def test_model_trust_remote_code_reaches_the_vllm_engine(monkeypatch, trust):
    """build_rollout(..., trust_remote_code=model.trust_remote_code) -> vLLMRollout -> vllm.LLM(trust_remote_code=...);
    the spy stands where vllm.LLM(**kwargs) is called, so no engine starts."""
    from verl.workers.rollout import registry, vllm_rollout

    started = []

    def spy_build_llm(kwargs):
        started.append(kwargs)
        raise _EngineStarted

    monkeypatch.setattr(vllm_rollout, "build_llm", spy_build_llm)
    monkeypatch.setattr(engine_mod, "_total_memory_bytes", lambda: 16 * 2**30)
    with pytest.raises(_EngineStarted):
        registry.build_rollout(cfg(name="vllm"), tiny_llama(), None, "/m", None, trust_remote_code=trust)
    (kwargs,) = started
    assert kwargs["trust_remote_code"] is trust and kwargs["model"] == "/m"
    # engine_kwargs.vllm is the user's last word, as for every other engine argument
    override = cfg(**{"engine_kwargs.vllm.trust_remote_code": not trust})
    assert engine_mod.engine_kwargs(override, "/m", SMOL, 0, 1, trust_remote_code=trust)["trust_remote_code"] is not trust
