import pytest
import torch

from tests.helpers.tiny_model import EOS_ID, PAD_ID, left_padded_prompts, tiny_llama
from tests.helpers.typed_config import typed_section
from verl.protocol import DataProto
from verl.trainer.config import FSDPActorConfig, RolloutConfig
from verl.workers.rollout import BaseRollout, HFRollout

PROMPT_LEN = 6
RESPONSE_LEN = 8


def rollout_config(**overrides) -> RolloutConfig:
    return typed_section(RolloutConfig, {
        "temperature": 1.0, "top_k": -1, "top_p": 1.0, "do_sample": True, "response_length": RESPONSE_LEN,
        "val_kwargs": {"temperature": 0.0, "top_k": -1, "top_p": 1.0, "do_sample": False, "n": 1},
    }, **overrides)


def greedy_with(model, micro_batch_size=None, eos=EOS_ID):
    rollout = HFRollout(model, rollout_config(), micro_batch_size=micro_batch_size)
    return rollout.generate_sequences(prompts(eos, do_sample=False))


def prompts(eos=EOS_ID, **meta):
    ids, mask, pos = left_padded_prompts([6, 3, 5, 1], PROMPT_LEN, seed=4)
    info = {"eos_token_id": eos, "pad_token_id": PAD_ID}
    info.update(meta)
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info=info)


def greedy(model, eos=EOS_ID, **cfg):
    return HFRollout(model, rollout_config(**cfg)).generate_sequences(prompts(eos, do_sample=False))


def test_output_keys_shapes_and_layout():
    model = tiny_llama()
    out = HFRollout(model, rollout_config()).generate_sequences(prompts())
    b = out.batch
    assert isinstance(HFRollout(model, rollout_config()), BaseRollout)
    assert set(b.keys()) == {"prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"}
    assert b["responses"].shape == (4, RESPONSE_LEN) and b["input_ids"].shape == (4, PROMPT_LEN + RESPONSE_LEN)
    src = prompts().batch
    assert torch.equal(b["prompts"], src["input_ids"])
    assert torch.equal(b["input_ids"], torch.cat([src["input_ids"], b["responses"]], dim=1))
    assert torch.equal(b["attention_mask"], torch.cat([src["attention_mask"], b["response_mask"]], dim=1))
    expected_pos = torch.clamp(b["attention_mask"].cumsum(-1) - 1, min=0)
    assert torch.equal(b["position_ids"], expected_pos)


def test_response_mask_stops_after_eos():
    model = tiny_llama()
    first = greedy(model, eos=[127]).batch["responses"]  # an id the tiny model may or may not emit
    # Declare the token greedy emits at step 2 of row 0 to be EOS: the same greedy run now stops there.
    stop = int(first[0, 2])
    out = greedy(model, eos=stop).batch
    row = out["responses"][0].tolist()
    cut = row.index(stop) + 1
    assert cut <= 3
    assert out["response_mask"][0].tolist() == [1] * cut + [0] * (RESPONSE_LEN - cut)
    assert row[cut:] == [PAD_ID] * (RESPONSE_LEN - cut)
    assert row[:cut] == first[0, :cut].tolist()


def test_greedy_is_deterministic_and_matches_argmax_of_forward():
    model = tiny_llama()
    a, b = greedy(model), greedy(model)
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    # every greedy token is the argmax of a full forward on prompt+response (positions P-1 .. P+R-2)
    batch = a.batch
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits[:, PROMPT_LEN - 1 : -1]
    mask = batch["response_mask"].bool()
    assert torch.equal(logits.argmax(-1)[mask], batch["responses"][mask])


def test_validate_uses_val_kwargs_greedy():
    model = tiny_llama()
    rollout = HFRollout(model, rollout_config(temperature=5.0))
    val = rollout.generate_sequences(prompts(validate=True))
    assert torch.equal(val.batch["responses"], greedy(model).batch["responses"])


def test_micro_batches_give_the_same_greedy_output():
    model = tiny_llama()
    assert torch.equal(greedy_with(model, micro_batch_size=1).batch["responses"], greedy(model).batch["responses"])


def test_sampling_uses_the_seed_and_differs_from_greedy():
    model = tiny_llama()
    rollout = HFRollout(model, rollout_config(temperature=1.5, top_k=50, top_p=0.9))
    torch.manual_seed(0)
    a = rollout.generate_sequences(prompts()).batch["responses"]
    torch.manual_seed(0)
    b = rollout.generate_sequences(prompts()).batch["responses"]
    assert torch.equal(a, b)
    assert not torch.equal(a, greedy(model).batch["responses"])


def test_generation_follows_the_current_weights():
    model = tiny_llama()
    rollout = HFRollout(model, rollout_config())
    before = rollout.generate_sequences(prompts(do_sample=False)).batch["responses"]
    with torch.no_grad():
        for p in model.model.layers[-1].parameters():
            p.add_(torch.randn_like(p) * 0.5)
    after = rollout.generate_sequences(prompts(do_sample=False)).batch["responses"]
    assert not torch.equal(before, after)
    assert model.training  # the training mode is restored after generate


def test_missing_eos_meta_is_named():
    data = prompts()
    del data.meta_info["eos_token_id"]
    with pytest.raises(KeyError, match="eos_token_id"):
        HFRollout(tiny_llama(), rollout_config()).generate_sequences(data)


@pytest.mark.parametrize("temperature,do_sample,top_k", [(0.7, True, -1), (1.3, True, -1), (1.0, False, -1)])
def test_rollout_log_probs_match_the_actor(temperature, do_sample, top_k):
    """Without top-k/top-p truncation, rollout_log_probs (logprobs_mode=processed_logprobs, upstream's default) are
    the actor's log_softmax(logits / T); with truncation they are vLLM's renormalised ones
    (tests/workers/rollout/test_rollout_v07_keys.py)."""
    from verl.workers.actor import DataParallelPPOActor

    model = tiny_llama()
    rollout = HFRollout(model, rollout_config(temperature=temperature, top_k=top_k, calculate_log_probs=True))
    torch.manual_seed(1)
    out = rollout.generate_sequences(prompts(eos=[EOS_ID, 7, 9], do_sample=do_sample))
    out.meta_info.update({"temperature": temperature, "micro_batch_size": 4})
    actor_log_probs, _ = DataParallelPPOActor(FSDPActorConfig(), model).compute_log_prob(out)
    mask = out.batch["response_mask"].bool()
    got = out.batch["rollout_log_probs"]
    assert got.shape == (4, RESPONSE_LEN)
    assert torch.allclose(got[mask], actor_log_probs[mask], atol=1e-4)
    assert (got[~mask] == 0).all()


def test_ignore_eos_is_refused_with_the_key():
    with pytest.raises(ValueError, match="ignore_eos"):
        HFRollout(tiny_llama(), rollout_config(ignore_eos=True))
