"""The HF rollout's static-KV-cache decoder (rollout.enforce_eager=false on a GPU) against eager decoding.

On this CPU the decoder runs without compiling (transformers compiles the step only on an accelerator), so these
tests pin what the GPU path relies on: the replica decodes exactly what the module itself decodes, follows its
weights after every change, pads smaller batches to the compiled shape without changing the real rows' output,
and models it cannot serve fall back to eager decoding with the reason.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_model import EOS_ID, PAD_ID, left_padded_prompts, tiny_llama
from tests.workers.rollout.test_hf_rollout import PROMPT_LEN, rollout_config
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.hf_static import StaticCacheDecoder, unsupported_reason


def _prompts(lengths, **meta) -> DataProto:
    ids, mask, pos = left_padded_prompts(lengths, PROMPT_LEN, seed=4)
    info = {"eos_token_id": [127], "pad_token_id": PAD_ID, "do_sample": False}  # 127: rows run the full length
    info.update(meta)
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info=info)


def _pair(model, **cfg):
    config = rollout_config(calculate_log_probs=True, **cfg)
    return HFRollout(model, config, static_cache=True), HFRollout(model, config, static_cache=False)


def _same(a: DataProto, b: DataProto) -> None:
    for key in ("responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert torch.equal(a.batch[key], b.batch[key]), key
    torch.testing.assert_close(a.batch["rollout_log_probs"], b.batch["rollout_log_probs"], atol=1e-5, rtol=1e-5)


def test_static_cache_decodes_what_the_module_decodes():
    model = tiny_llama(attn_implementation="sdpa")
    static, eager = _pair(model)
    out = static.generate_sequences(_prompts([6, 3, 5, 1]))
    assert static.static_cache_off is None and static._decoder is not None
    _same(out, eager.generate_sequences(_prompts([6, 3, 5, 1])))
    assert out.batch["response_mask"].all()  # the whole response was decoded through the static cache


def test_smaller_batches_pad_to_the_compiled_shape_and_keep_their_rows():
    model = tiny_llama(attn_implementation="sdpa")
    static, eager = _pair(model)
    static.generate_sequences(_prompts([6, 3, 5, 1]))
    assert static._decoder.rows == 4
    for lengths in ([2, 6, 4], [5]):  # 3 rows and 1 row: decoded as 4, the padding rows dropped
        out = static.generate_sequences(_prompts(lengths))
        assert static._decoder.rows == 4 and len(out) == len(lengths)
        _same(out, eager.generate_sequences(_prompts(lengths)))
    static.generate_sequences(_prompts([6, 3, 5, 1, 2]))
    assert static._decoder.rows == 8  # a larger batch grows the shape to the next power of two


def test_the_replica_follows_the_modules_weights():
    model = tiny_llama(attn_implementation="sdpa")
    static, eager = _pair(model)
    before = static.generate_sequences(_prompts([6, 3, 5, 1]))
    replica = static._decoder.model
    with torch.no_grad():  # an optimizer step, in place as AdamW does it
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    after = static.generate_sequences(_prompts([6, 3, 5, 1]))
    assert static._decoder.model is replica  # the same replica, weights copied in place
    assert not torch.equal(before.batch["responses"], after.batch["responses"])
    _same(after, eager.generate_sequences(_prompts([6, 3, 5, 1])))


def test_sampling_runs_through_the_static_cache():
    model = tiny_llama(attn_implementation="sdpa")
    static, _ = _pair(model)
    torch.manual_seed(3)
    out = static.generate_sequences(_prompts([6, 3, 5, 1], do_sample=True))
    assert static.static_cache_off is None
    logp = out.batch["rollout_log_probs"]
    assert torch.isfinite(logp).all() and (logp <= 0).all() and logp.ne(0).any()


def test_replica_keeps_tied_weights_and_buffers():
    model = tiny_llama(attn_implementation="sdpa")
    decoder = StaticCacheDecoder(model, torch.device("cpu"), compile=False)
    replica = decoder.model
    assert replica.lm_head.weight is replica.model.embed_tokens.weight
    assert replica.lm_head.weight.data_ptr() != model.lm_head.weight.data_ptr()  # a copy, not the actor's storage
    torch.testing.assert_close(replica.model.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq, atol=0, rtol=0)
    assert replica.config._attn_implementation == "sdpa"
    assert not decoder.compiled  # compile=False (and transformers compiles only on an accelerator)


def test_a_lora_actor_decodes_eagerly_and_says_why():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny_llama(attn_implementation="sdpa"),
                                peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    assert "LoRA" in unsupported_reason(model)
    static, eager = _pair(model)
    out = static.generate_sequences(_prompts([6, 3, 5, 1]))
    assert static._decoder is None and "LoRA" in static.static_cache_off
    _same(out, eager.generate_sequences(_prompts([6, 3, 5, 1])))


def test_the_worker_choice_is_off_on_cpu_and_with_enforce_eager():
    model = tiny_llama(attn_implementation="sdpa")
    assert HFRollout(model, rollout_config(enforce_eager=False)).static_cache is False  # no CUDA here
    assert HFRollout(model, rollout_config(enforce_eager=True)).static_cache is False


def test_eos_stops_rows_the_same_way():
    model = tiny_llama(attn_implementation="sdpa")
    static, eager = _pair(model)
    first = eager.generate_sequences(_prompts([6, 3, 5, 1])).batch["responses"]
    stop = int(first[0, 2])  # the token row 0 emits third becomes EOS: rows stop at different steps
    a = static.generate_sequences(_prompts([6, 3, 5, 1], eos_token_id=[stop, EOS_ID]))
    b = eager.generate_sequences(_prompts([6, 3, 5, 1], eos_token_id=[stop, EOS_ID]))
    _same(a, b)
    assert not a.batch["response_mask"][0].all()


def _fsdp_scenario(rank: int, port: int, model_dir: str, results) -> None:
    from tests.gpu.ranks import actor_worker, join_one_rank, leave
    from tests.workers.test_lora_workers import ARR, _batch, _train_batch

    join_one_rank(port)
    try:
        worker = actor_worker(model_dir, f"{ARR}.rollout.calculate_log_probs=true")
        rollout = worker.rollout
        out = {"auto_choice_on_cpu": rollout.static_cache}

        def both():
            rollout.static_cache = True
            static = worker.generate_sequences(_prompts([6, 3, 5, 1]))
            rollout.static_cache = False
            eager = worker.generate_sequences(_prompts([6, 3, 5, 1]))
            return static, eager

        out["before"] = both()
        rollout.static_cache = True
        out["decoder_built"] = (rollout._decoder is not None, rollout.static_cache_off)
        worker.update_actor(_train_batch(worker, _batch()))
        out["after"] = both()
        results[rank] = out
    finally:
        leave()


def test_under_fsdp2_the_replica_copies_the_gathered_weights_and_follows_updates(tmp_path):
    """The worker's path: FSDP2 actor, the sharding manager's gathered weights, an optimizer step in between."""
    from tests.helpers.ranks import free_port, run_ranks
    from tests.helpers.tiny_model import save_tiny_model_dir

    model_dir = save_tiny_model_dir(tmp_path / "model")
    out = run_ranks(_fsdp_scenario, free_port(), model_dir, nprocs=1, timeout_s=220)[0]
    assert out["auto_choice_on_cpu"] is False and out["decoder_built"] == (True, None), out["decoder_built"]
    for stage in ("before", "after"):
        _same(*out[stage])
    assert not torch.equal(out["before"][0].batch["responses"], out["after"][0].batch["responses"])
