"""MoE router replay on one CUDA device (tiny Qwen3-MoE, fp32, one process): the recorded experts are forced after
the router changed, the R2 update's ratio is exactly 1 (padded and packed), the hf rollout's R3 record is what
the actor replays, and the vllm rollout's R3 record (vLLM's routed_experts) names the experts the model routes to. The same checks as tests/models/test_router_replay.py and
tests/workers/actor/test_router_replay_actor.py, with the model and the records on the GPU.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_moe import ExpertsSpy, perturb_unused_experts, tiny_qwen3_moe
from tests.workers.actor.test_router_replay_actor import _actor, _batch
from tests.workers.rollout.test_hf_rollout import prompts, rollout_config
from verl.models.router_replay import ROUTED_EXPERTS_KEY, RouterReplay
from verl.workers.rollout import HFRollout

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def _cuda_moe():
    return tiny_qwen3_moe().cuda()


def test_replay_forces_the_recorded_experts_on_cuda():
    model = _cuda_moe()
    replay = RouterReplay.of(model)
    ids = torch.randint(3, 128, (2, 7), device="cuda")
    with torch.no_grad(), replay.record():
        before = model(input_ids=ids).logits
    record = replay.take_record()
    assert record.is_cuda and perturb_unused_experts(model, record.cpu()) > 0
    spy = ExpertsSpy(model)
    with torch.no_grad():
        model(input_ids=ids)
        native = spy.stacked()
        replay.set_replay(record)
        after = model(input_ids=ids).logits
        replayed = spy.stacked()
        replay.clear()
    assert not torch.equal(native.long(), record.long()) and torch.equal(replayed.long(), record.long())
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rmpad", [False, True])
def test_r2_update_replays_on_cuda(rmpad):
    model = _cuda_moe()
    data = _batch()
    recorder = _actor(model, "R2", rmpad)
    old, _ = recorder.compute_log_prob(data)
    routed = recorder.last_routed_experts
    assert not routed.is_cuda and routed.shape[:2] == data.batch["input_ids"].shape
    data.batch["old_log_probs"] = old
    data.batch["advantages"] = torch.randn(old.shape, generator=torch.Generator().manual_seed(3))
    data.batch[ROUTED_EXPERTS_KEY] = routed
    assert perturb_unused_experts(model, routed) > 0
    metrics = _actor(model, "R2", rmpad, optimizer=True).update_policy(data)
    assert metrics["actor/ppo_kl"][0] == pytest.approx(0.0, abs=1e-6)


def test_r3_hf_rollout_record_is_replayed_on_cuda():
    model = _cuda_moe()
    out = HFRollout(model, rollout_config(enable_rollout_routing_replay=True)).generate_sequences(
        prompts(do_sample=False))
    out.meta_info.update({"temperature": 1.0, "micro_batch_size": 2})
    expected, _ = _actor(model, "disabled", rmpad=True).compute_log_prob(out)
    perturb_unused_experts(model, out.batch[ROUTED_EXPERTS_KEY])
    replayed, _ = _actor(model, "R3", rmpad=True).compute_log_prob(out)
    mask = out.batch["response_mask"].bool()
    torch.testing.assert_close(replayed[mask], expected[mask], rtol=1e-4, atol=1e-4)


def _vllm_r3(rank: int, port: int, folder: str, results) -> None:
    """A vLLM engine on the tiny MoE (bf16, loaded from the folder) with R3: generate, and return the batch."""
    import dataclasses

    from tests.helpers.tiny_model import PAD_ID, left_padded_prompts
    from verl.protocol import DataProto
    from verl.trainer.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    torch.cuda.set_device(0)
    config = RolloutConfig(name="vllm", temperature=1.0, top_k=-1, top_p=1.0, do_sample=True, prompt_length=8,
                           response_length=6, dtype="bfloat16", gpu_memory_utilization=0.3, enforce_eager=True,
                           free_cache_engine=False, load_format="auto", max_num_batched_tokens=512, max_num_seqs=8,
                           enable_prefix_caching=True, enable_rollout_routing_replay=True, engine_kwargs={"vllm": {}})
    rollout = vLLMRollout(folder, dataclasses.replace(config), seed=0)
    ids, mask, pos = left_padded_prompts([8, 3, 5, 1], 8, seed=7)
    out = rollout.generate_sequences(DataProto.from_dict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": pos},
        meta_info={"eos_token_id": -1, "pad_token_id": PAD_ID}))
    results[rank] = {key: out.batch[key].cpu() for key in ("input_ids", "attention_mask", ROUTED_EXPERTS_KEY)}


def test_vllm_rollout_records_the_experts_the_actor_routes_to(tmp_path):
    """R3 with rollout.name=vllm: vLLM's routed_experts, laid out as the HF rollout's, name the experts the HF model
    itself routes the same tokens to (a bf16 engine against the fp32 model: near ties may flip, so most tokens)."""
    pytest.importorskip("vllm")
    from tests.helpers.ranks import free_port, run_ranks
    from tests.helpers.tiny_moe import LAYERS, NUM_EXPERTS, TOP_K
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from verl.models.router_replay import NOT_ROUTED

    model = tiny_qwen3_moe(hidden_size=128, head_dim=32)  # a head size vLLM's GPU attention backends take
    model.save_pretrained(tmp_path)
    build_tiny_tokenizer().save_pretrained(tmp_path)
    out = run_ranks(_vllm_r3, free_port(), str(tmp_path), nprocs=1, timeout_s=280)[0]
    routed, mask = out[ROUTED_EXPERTS_KEY], out["attention_mask"].bool()
    assert routed.shape == (*mask.shape, LAYERS, TOP_K)
    assert (routed[~mask] == NOT_ROUTED).all()  # left padding and response padding
    last = mask.long().cumsum(-1).argmax(-1)  # each row's last real token: generated, never fed
    assert (routed[torch.arange(len(last)), last] == NOT_ROUTED).all()
    fed = mask.clone()
    fed[torch.arange(len(last)), last] = False
    assert ((routed[fed] >= 0) & (routed[fed] < NUM_EXPERTS)).all()
    # the HF model's own routing of the same tokens
    replay = RouterReplay.of(model)
    positions = (out["attention_mask"].cumsum(-1) - 1).clamp(min=0)  # from 0 at each row's first real token
    with torch.no_grad(), replay.record():
        model(input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=positions)
    own = replay.take_record().reshape(routed.shape)
    same = (routed.sort(-1).values == own.sort(-1).values.to(routed.dtype)).all(-1)[fed]
    assert same.float().mean() > 0.8, same.float().mean()
