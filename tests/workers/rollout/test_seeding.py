"""Per-request sampling seeds (verl.workers.rollout.seeding) and their wiring: the vLLM sync rollout and the agent
loop's vLLM backend give every sampled request the seed of its (step, call, row, turn), so a resumed run samples what
the uninterrupted one did; the trainer sends the step with every generate call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from verl.protocol import DataProto
from verl.workers.rollout.seeding import CallSeeds, SamplingSeeds, derive_seed, seeded

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


# -- derive_seed --------------------------------------------------------------------------------------------------


@given(st.lists(INT64, min_size=1, max_size=7))
def test_derive_seed_is_a_deterministic_non_negative_int64(parts):
    seed = derive_seed(*parts)
    assert seed == derive_seed(*parts)
    assert 0 <= seed < 2**63  # what torch.Generator.manual_seed (vLLM's per-request generator) takes


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=2, max_size=7), st.data())
def test_changing_any_one_part_changes_the_seed(parts, data):
    i = data.draw(st.integers(min_value=0, max_value=len(parts) - 1))
    other = list(parts)
    other[i] += data.draw(st.integers(min_value=1, max_value=3))
    assert derive_seed(*parts) != derive_seed(*other)


def test_order_and_length_of_the_parts_matter():
    assert derive_seed(1, 2) != derive_seed(2, 1)
    assert derive_seed(0) != derive_seed(0, 0)
    # neighbouring rows of one call: 1000 distinct seeds (a hash, not base + row)
    assert len({CallSeeds(7).seed(row) for row in range(1000)}) == 1000


# -- SamplingSeeds: the same request gets the same seed in a fresh process (a resumed run) -----------------------


def _seeds_of(source: SamplingSeeds, calls: list[dict], rows: int = 3) -> list[list[int]]:
    return [[c.seed(r) for r in range(rows)] for c in (source.next_call(m) for m in calls)]


def test_a_resumed_engine_gives_step_3_the_seeds_of_the_uninterrupted_one():
    uninterrupted = SamplingSeeds(seed=0, dp_rank=1)
    steps = [{"global_steps": s} for s in (1, 2, 3, 4)]
    before = _seeds_of(uninterrupted, steps)
    resumed = SamplingSeeds(seed=0, dp_rank=1)  # a new process: counters start from nothing
    assert _seeds_of(resumed, steps[2:]) == before[2:]


def test_calls_within_a_step_differ_and_restart_at_the_next_step():
    source = SamplingSeeds(seed=0, dp_rank=0)
    a, b = _seeds_of(source, [{"global_steps": 5}, {"global_steps": 5}])  # e.g. ReMax's greedy baseline call
    assert a != b
    (c,) = _seeds_of(source, [{"global_steps": 6}])
    assert c == [derive_seed(derive_seed(0, 0, 6, 0, 0), row, 0) for row in range(3)]  # call 0 of step 6


def test_validation_training_ranks_and_rollout_seed_draw_apart():
    def first(seed=0, dp_rank=0, **meta):
        return SamplingSeeds(seed, dp_rank).next_call({"global_steps": 2, **meta}).seed(0)

    base = first()
    assert first(validate=True) != base
    assert first(dp_rank=1) != base
    assert first(seed=1) != base
    assert first() == base


def test_validation_between_training_calls_does_not_renumber_them():
    source = SamplingSeeds(0, 0)
    train0 = source.next_call({"global_steps": 3}).base
    source.next_call({"global_steps": 3, "validate": True})
    train1 = source.next_call({"global_steps": 3}).base
    assert train1 == derive_seed(0, 0, 3, 0, 1) and train0 == derive_seed(0, 0, 3, 0, 0)


def test_calls_without_a_step_are_numbered_from_the_start():
    source = SamplingSeeds(0, 0)
    assert [source.next_call(None).base for _ in range(2)] == [derive_seed(0, 0, -1, 0, k) for k in range(2)]


def test_seeded_leaves_greedy_and_explicit_seeds_alone():
    assert seeded({"temperature": 1.0}, 11) == {"temperature": 1.0, "seed": 11}
    assert seeded({"temperature": 0.0}, 11) == {"temperature": 0.0}  # draws nothing: no per-request generator
    assert seeded({"temperature": 0.7, "seed": 5}, 11)["seed"] == 5  # an agent loop's own seed wins


# -- the wiring ---------------------------------------------------------------------------------------------------


class _FakeLLM:
    """Records what vLLMRollout hands vllm.LLM.generate; answers one token per request."""

    def __init__(self) -> None:
        self.params = []

    def generate(self, requests, params, use_tqdm=False):
        self.params.append(params)
        token = SimpleNamespace(token_ids=[5], logprobs=None)
        return [SimpleNamespace(outputs=[token]) for _ in requests]


def _fake_vllm_rollout(rank: int, tp: int = 1):
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    config = SimpleNamespace(val_kwargs=SimpleNamespace(do_sample=True, temperature=0.0, top_k=-1, top_p=1.0),
                             do_sample=True, temperature=1.0, top_k=-1, top_p=1.0, response_length=4,
                             ignore_eos=False, calculate_log_probs=False, tensor_model_parallel_size=tp)
    rollout = object.__new__(vLLMRollout)  # everything but the engine, which a fake stands in for
    rollout.config, rollout.core, rollout.threads, rollout.needs_weights = config, None, None, False
    rollout.llm = _FakeLLM()
    rollout.seeds = SamplingSeeds(0, dp_rank=rank // tp)
    return rollout


def _prompts(meta: dict) -> DataProto:
    ids = torch.tensor([[0, 3, 4], [6, 7, 8]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": mask.cumsum(-1)},
                               meta_info={"eos_token_id": 2, "pad_token_id": 0, **meta})


def test_the_vllm_rollout_gives_each_row_its_seed():
    pytest.importorskip("vllm")
    rollout = _fake_vllm_rollout(rank=3, tp=2)
    rollout.generate_sequences(_prompts({"global_steps": 4}))
    rollout.generate_sequences(_prompts({"global_steps": 4, "validate": True}))  # greedy val_kwargs
    sampled, greedy = rollout.llm.params
    expected = SamplingSeeds(0, dp_rank=1).next_call({"global_steps": 4})
    assert [p.seed for p in sampled] == [expected.seed(0), expected.seed(1)]
    assert [p.seed for p in greedy] == [None, None]


def test_the_agent_loop_backend_seeds_by_row_and_turn_and_forwards_the_seed():
    pytest.importorskip("vllm")
    from verl.workers.rollout.agent_loop.backends import VLLMBackend
    from verl.workers.rollout.agent_loop.server import EngineRequest

    added = []
    rollout = SimpleNamespace(_require_weights=lambda: None, seeds=SamplingSeeds(0, 0),
                              llm=SimpleNamespace(llm_engine=SimpleNamespace(
                                  add_request=lambda rid, prompt, params: added.append((rid, params.seed)))))
    backend = VLLMBackend(rollout, {"global_steps": 2})
    call = SamplingSeeds(0, 0).next_call({"global_steps": 2})
    requests = [EngineRequest("a", [1], {"temperature": 1.0, "max_tokens": 2}, order=(1, 2)),
                EngineRequest("b", [1], {"temperature": 1.0, "max_tokens": 2}, order=(0, 1)),
                EngineRequest("c", [1], {"temperature": 1.0, "max_tokens": 2, "seed": 9}, order=(0, 2))]
    for request in requests:
        backend.add(request)
    assert added == [("a", call.seed(1, 2)), ("b", call.seed(0, 1)), ("c", 9)]
    # the params themselves carry the seed: a tensor-parallel leader forwards them to its followers as they are
    assert requests[0].sampling_params["seed"] == call.seed(1, 2)


def test_the_trainer_sends_the_step_with_every_generate_call():
    from verl.trainer.config import PPOTrainerConfig
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = object.__new__(RayPPOTrainer)
    trainer.tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    trainer.global_steps = 7
    trainer.config = PPOTrainerConfig()
    assert trainer._gen_meta(do_sample=True)["global_steps"] == 7
    assert trainer._gen_meta(do_sample=False)["global_steps"] == 7  # ReMax's greedy baseline
    assert "apply_chat_template_kwargs" not in trainer._gen_meta(do_sample=True)  # none set: nothing sent
    trainer.config.data.apply_chat_template_kwargs = {"enable_thinking": False}
    assert trainer._gen_meta(do_sample=True)["apply_chat_template_kwargs"] == {"enable_thinking": False}


def test_validation_sends_its_step():
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from tests.trainer.ppo.test_trainer_keys import _validator, make_trainer

    tokenizer = build_tiny_tokenizer()
    trainer = make_trainer(tokenizer=tokenizer)
    validator = _validator(tokenizer, trainer.config)
    seen = []
    generate = validator.wg.generate_sequences

    def recording(gen):
        seen.append(dict(gen.meta_info))
        return generate(gen)

    validator.wg.generate_sequences = recording
    validator.run(step=9)
    assert seen and all(m["global_steps"] == 9 and m["validate"] is True for m in seen)


def test_rollout_seed_reaches_the_vllm_engine_and_the_agent_loop(monkeypatch):
    """actor_rollout_ref.rollout.seed (upstream after v0.7): the vLLM rollout's seed (engine seed + rank, and every
    sampled request's); the worker hands the same seed to its agent-loop manager. 42 by default, as upstream."""
    import verl.workers.rollout.vllm_rollout as vllm_rollout
    import verl.workers.sharding_manager.fsdp_vllm as fsdp_vllm
    from tests.helpers.typed_config import typed_section
    from verl.trainer.config import ActorRolloutRefConfig
    from verl.workers.rollout.registry import build_rollout

    built = {}

    class FakeRollout:
        def __init__(self, *args, seed, **kwargs):
            built["seed"] = seed

    monkeypatch.setattr(vllm_rollout, "vLLMRollout", FakeRollout)
    monkeypatch.setattr(fsdp_vllm, "FSDPVLLMShardingManager", lambda *args, **kwargs: None)
    section = typed_section(ActorRolloutRefConfig, {"model.path": "unused", "rollout.name": "vllm"})
    assert section.rollout.seed == 42
    build_rollout(section.rollout, None, None, "unused", None)
    assert built["seed"] == 42
    seven = typed_section(ActorRolloutRefConfig, {"model.path": "unused", "rollout.name": "vllm", "rollout.seed": 7})
    build_rollout(seven.rollout, None, None, "unused", None)
    assert built["seed"] == 7
