"""actor.use_prefix_grouper (verl.models.prefix_grouper): the same log-probs, entropies, gradients and updates as the
padded path on tiny Qwen2 / Qwen3 models (fp32), from fewer tokens through the model; and the refusals."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from tests.helpers.tiny_model import EOS_ID, PAD_ID, rollout_batch
from tests.workers.actor.test_dp_actor import actor_config, max_param_diff
from verl.models.prefix_grouper import PREFIX_GROUPER_IMPL_PREFIX, group_rows
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.workers.actor import DataParallelPPOActor

ARR = "actor_rollout_ref"
PROMPT_LEN, RESPONSE_LEN = 6, 5
# three prompts: 4, 3 and 1 responses (a group of one too), of different lengths; rows of a group are not adjacent
GROUP_OF_ROW = [0, 0, 1, 0, 1, 2, 0, 1]
PROMPT_LENGTHS = [6, 3, 4]  # per group
RESPONSE_LENGTHS = [5, 2, 4, 1, 3, 5, 4, 2]


def tiny_qwen(kind: str, attn: str = "sdpa", seed: int = 0) -> torch.nn.Module:
    """A random 2-layer Qwen2 / Qwen3 (GQA: 4 query heads, 2 kv heads) in fp32."""
    torch.manual_seed(seed)
    common = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=PAD_ID,
                  eos_token_id=EOS_ID, bos_token_id=1, attention_dropout=0.0)
    if kind == "qwen2":
        config, cls = Qwen2Config(**common), Qwen2ForCausalLM
    else:
        config, cls = Qwen3Config(head_dim=8, **common), Qwen3ForCausalLM
    config._attn_implementation = attn
    return cls(config).float()


def grouped_batch(seed: int = 0, **meta):
    """A rollout-shaped batch whose rows share prompts as GROUP_OF_ROW says (same ids, mask and positions)."""
    data = rollout_batch([PROMPT_LENGTHS[g] for g in GROUP_OF_ROW], RESPONSE_LENGTHS, PROMPT_LEN, RESPONSE_LEN,
                         seed=seed, meta_info={"temperature": 0.7, **meta})
    b = data.batch
    first = {}
    for row, g in enumerate(GROUP_OF_ROW):
        src = first.setdefault(g, row)
        b["prompts"][row] = b["prompts"][src]
        b["input_ids"][row, :PROMPT_LEN] = b["prompts"][src]
    return data


def training_batch(model, seed: int = 0):
    data = grouped_batch(seed)
    old, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(model)).compute_log_prob(
        _meta(data, micro_batch_size=8))
    gen = torch.Generator().manual_seed(seed + 7)
    data.batch["old_log_probs"] = old + 0.05 * torch.randn(old.shape, generator=gen)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    data.batch["ref_log_prob"] = old + 0.02 * torch.randn(old.shape, generator=gen)
    return data


def _meta(data, **meta):
    data.meta_info.update(meta)
    return data


def _log_probs(model, grouped: bool, data):
    actor = DataParallelPPOActor(actor_config(use_prefix_grouper=grouped), model)
    return actor.compute_log_prob(data, calculate_entropy=True)


@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("micro_batch_size", [8, 3, 1])  # one micro-batch; groups split across three; no sharing
def test_log_probs_and_entropy_match_padded(kind, attn, micro_batch_size):
    model = tiny_qwen(kind, attn)
    data = _meta(grouped_batch(), micro_batch_size=micro_batch_size)
    want, want_entropy = _log_probs(copy.deepcopy(model), False, data)
    got, got_entropy = _log_probs(model, True, data)
    assert model.config._attn_implementation == PREFIX_GROUPER_IMPL_PREFIX + attn  # the grouped path really ran
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_entropy[mask], want_entropy[mask], rtol=1e-5, atol=1e-5)
    assert (got[~mask] == 0).all() and (got_entropy[~mask] == 0).all()  # zeros on padding, as the packed path


def _count_tokens(model, grouped: bool, data) -> int:
    """Token positions that enter the model (its embedding's input elements) during one log-prob pass."""
    seen = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda _m, args: seen.append(args[0].numel()))
    try:
        _log_probs(model, grouped, data)
    finally:
        hook.remove()
    return sum(seen)


def test_fewer_tokens_through_the_model():
    # two prompts of 6 tokens with 4 responses each: 8 padded rows of 6 + 5 = 88 positions. Grouped: one row per
    # prompt, [prompt][r1][r2][r3][r4]: 6 + (5 + 2 + 4 + 1) = 18 and 6 + (3 + 5 + 4 + 2) = 20, padded to 20 -> 40.
    data = rollout_batch([6] * 8, [5, 2, 4, 1, 3, 5, 4, 2], PROMPT_LEN, RESPONSE_LEN,
                         meta_info={"micro_batch_size": 8})
    b = data.batch
    for row in range(8):
        b["input_ids"][row, :PROMPT_LEN] = b["input_ids"][0 if row < 4 else 4, :PROMPT_LEN]
    model = tiny_qwen("qwen3")
    assert _count_tokens(copy.deepcopy(model), False, data) == 88
    assert _count_tokens(model, True, data) == 40
    rows = group_rows(b["input_ids"], b["attention_mask"], b["position_ids"], RESPONSE_LEN)
    assert rows.group_sizes == [4, 4] and rows.model_tokens == 40
    # the real tokens: 2 x 6 + 26 grouped against 8 x 6 + 26 padded
    assert int((rows.input_ids != 0).sum()) == 12 + 26


def test_groups_follow_the_prompt_not_the_row_order():
    data = grouped_batch()
    b = data.batch
    rows = group_rows(b["input_ids"], b["attention_mask"], b["position_ids"], RESPONSE_LEN)
    assert rows.group_sizes == [4, 3, 1]
    # each grouped row: its prompt's real tokens once, then its responses' real tokens, in row order
    group0 = [r for r, g in enumerate(GROUP_OF_ROW) if g == 0]
    expected = [b["input_ids"][0, PROMPT_LEN - PROMPT_LENGTHS[0]:PROMPT_LEN]]
    expected += [b["responses"][r, :RESPONSE_LENGTHS[r]] for r in group0]
    expected = torch.cat(expected)
    assert torch.equal(rows.input_ids[0, :expected.numel()], expected)
    # positions: the prompt from 0, every response continuing after the prompt
    positions = torch.cat([torch.arange(6)] + [torch.arange(6, 6 + RESPONSE_LENGTHS[r]) for r in group0])
    assert torch.equal(rows.position_ids[0, :positions.numel()], positions)


def _grads(model, grouped: bool, data):
    model = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(use_prefix_grouper=grouped, entropy_coeff=0.01), model)
    batch = data.batch.select("responses", "input_ids", "attention_mask", "position_ids")
    log_probs, entropy = actor._forward_micro_batch(batch, 0.7, calculate_entropy=True)
    mask = data.batch["response_mask"].bool()
    weights = torch.linspace(-1.0, 1.0, int(mask.sum()))  # a loss that weighs every token differently
    ((log_probs[mask] * weights).sum() + 0.3 * entropy[mask].sum()).backward()
    return {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("kind,checkpointing", [("qwen2", False), ("qwen3", False), ("qwen3", True)])
def test_gradients_match_padded(kind, checkpointing):
    model = tiny_qwen(kind)
    data = grouped_batch()
    padded = _grads(model, False, data)
    if checkpointing:  # the grouper travels in the forward's kwargs, so the recompute in backward sees it too
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    grouped = _grads(model, True, data)
    assert max(g.abs().max().item() for g in padded.values()) > 1e-3
    assert max((padded[k] - grouped[k]).abs().max().item() for k in padded) < 1e-5


def _update(model, data, **cfg):
    model = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(**cfg), model, torch.optim.SGD(model.parameters(), lr=0.5))
    return dict(model.named_parameters()), actor.update_policy(data)


@pytest.mark.parametrize("micro", [8, 3])  # 3: every group split across micro-batches
def test_update_matches_padded(micro):
    model = tiny_qwen("qwen3", seed=3)
    data = training_batch(model)
    cfg = {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": micro, "entropy_coeff": 0.01,
           "use_kl_loss": True}
    padded, padded_metrics = _update(model, data, **cfg)
    grouped, grouped_metrics = _update(model, data, use_prefix_grouper=True, **cfg)
    assert max_param_diff(padded, dict(model.named_parameters())) > 1e-3  # the step really moved the weights
    assert max_param_diff(padded, grouped) < 1e-5
    for key in ("actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/grad_norm"):
        assert grouped_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-4, abs=1e-6), key


def test_other_forwards_on_the_module_are_unchanged():
    """The rollout and the padded path share the module: without the grouper keyword the model's own attention runs."""
    model = tiny_qwen("qwen3")
    data = grouped_batch()
    b = data.batch
    with torch.no_grad():
        before = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits
        DataParallelPPOActor(actor_config(use_prefix_grouper=True), model)
        after = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                      position_ids=b["position_ids"]).logits
    assert torch.equal(before, after)


@pytest.mark.parametrize("extra,named", [
    ({"use_remove_padding": True}, "use_remove_padding"),
    ({"use_dynamic_bsz": True}, "use_dynamic_bsz"),
    ({"calculate_sum_pi_squared": True}, "calculate_sum_pi_squared"),
])
def test_the_actor_refuses_what_it_cannot_group(extra, named):
    with pytest.raises(ValueError, match=f"use_prefix_grouper.*{named}"):
        DataParallelPPOActor(actor_config(use_prefix_grouper=True, **extra), tiny_qwen("qwen2"))


def test_vision_position_ids_are_refused():
    data = grouped_batch()
    b = data.batch
    with pytest.raises(NotImplementedError, match="use_prefix_grouper=false"):
        group_rows(b["input_ids"], b["attention_mask"], b["position_ids"][:, None].expand(-1, 3, -1), RESPONSE_LEN)


# -- pre-Ray refusals ---------------------------------------------------------------------------------------------

_ON = [f"{ARR}.actor.use_prefix_grouper=true", "trainer.balance_batch=false", f"{ARR}.model.use_remove_padding=false"]


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(load_config(overrides), check_files=False)
    return [p for p in info.value.problems if "use_prefix_grouper" in p]


def test_the_documented_combination_passes_the_check():
    typed = validate_config(load_config(_ON), check_files=False)
    assert typed.actor_rollout_ref.actor.use_prefix_grouper is True


@pytest.mark.parametrize("change,fix", [
    ("trainer.balance_batch=true", "set trainer.balance_batch=false"),
    (f"{ARR}.model.use_remove_padding=true", f"set {ARR}.model.use_remove_padding=false"),
    (f"{ARR}.actor.use_dynamic_bsz=true", f"set {ARR}.actor.use_dynamic_bsz=false"),
    (f"{ARR}.rollout.log_prob_use_dynamic_bsz=true", f"set {ARR}.rollout.log_prob_use_dynamic_bsz=false"),
    (f"{ARR}.actor.calculate_sum_pi_squared=true", f"set {ARR}.actor.calculate_sum_pi_squared=false"),
])
def test_refused_before_ray(change, fix):
    problems = _problems(_ON + [change])
    assert len(problems) == 1 and fix in problems[0], problems


# -- a whole run ----------------------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_a_grouped_run_trains_as_the_padded_run(tmp_path):
    """main_ppo's trainer (2 FSDP2 workers, HF rollout, GRPO n=2, kl loss), one step with and without the key: the
    same rollout (the grouper leaves generation alone), and the same gradient, entropy and kl up to rounding."""
    import math

    from tests.helpers.e2e import REPO, fit_run, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")

    def run(grouped: bool) -> dict:
        rows = fit_run(tiny_run_overrides(model_dir, data_dir, tmp_path / f"run_{grouped}") + [
            "trainer.total_training_steps=1", "trainer.balance_batch=false", f"{ARR}.model.use_remove_padding=false",
            f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",  # uneven rewards: non-zero advantages
            f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
            f"{ARR}.ref.fsdp_config.mixed_precision.param_dtype=fp32",
            f"{ARR}.actor.use_kl_loss=true", f"{ARR}.actor.use_prefix_grouper={str(grouped).lower()}"])
        assert [r["step"] for r in rows] == [1]
        return rows[0]

    padded, grouped = run(False), run(True)
    assert math.isfinite(grouped["actor/pg_loss"]) and grouped["actor/grad_norm"] > 0
    assert grouped["response_length/mean"] == padded["response_length/mean"]
    keys = ("actor/grad_norm", "actor/entropy", "actor/kl_loss", "actor/pg_loss")
    differ = {k: (grouped[k], padded[k]) for k in keys if grouped[k] != pytest.approx(padded[k], rel=1e-3, abs=1e-6)}
    assert not differ, differ
