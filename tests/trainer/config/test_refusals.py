"""Refused keys and values: the default is accepted, anything else stops validation naming the key (in process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import PPOTrainerConfig, validate_config
from verl.utils.config_schema import BaseConfig, build_config, iter_refusals, refusal_table, refused


def test_all_problems_are_reported_at_once(cfg):
    set_keys(
        cfg,
        reward_model__ulysses_sequence_parallel_size=2,
        actor_rollout_ref__rollout__name="sglang",
        actor_rollout_ref__model__use_liger=True,
        trainer__logger=["console", "clearml"],
    )
    keys = [p.split("=", 1)[0] for p in problems_of(cfg)]
    assert keys == [
        "actor_rollout_ref.model.use_liger",
        "actor_rollout_ref.rollout.name",
        "reward_model.ulysses_sequence_parallel_size",
        "trainer.logger",
    ]


def test_refused_value_of_a_list_names_the_entry(cfg):
    set_keys(cfg, trainer__logger=["console", "clearml"])
    (message,) = problems_of(cfg)
    assert message.startswith("trainer.logger='clearml' is refused: the clearml backend is not built")


def test_a_key_that_follows_another_accepts_the_followed_value(cfg):
    set_keys(cfg, data__train_batch_size=16, actor_rollout_ref__model__path="/some/model")
    typed = validate_config(cfg, check_files=False)
    assert typed.reward_model.model.input_tokenizer == "/some/model"
    # critic.model.external_lib is ${actor_rollout_ref.model.external_lib}: its refusal names the followed key
    set_keys(cfg, critic__model__external_lib="my.lib")
    (message,) = problems_of(cfg)
    assert message.startswith("critic.model.external_lib='my.lib' is refused")
    assert "(${actor_rollout_ref.model.external_lib} is fine)" in message


@dataclass
class _Inner(BaseConfig):
    param_offload: bool = False
    size: int = 1


@dataclass
class _Outer(BaseConfig):
    inner: _Inner = refused(field(default_factory=_Inner), "not built", "Remove it.")


def test_a_refused_section_names_each_changed_leaf():
    # ppo_trainer.yaml has no refused section left (reward_model.model.fsdp_config was one until the reward-model
    # worker), so a section of a small schema shows the rule
    (message,) = build_config(_Outer, {"inner": {"param_offload": True}}).problems
    assert message.startswith("inner.param_offload=True under inner refused")


def test_fsdp_size_is_a_plain_key_for_every_fsdp_role():
    """HSDP in RL and SFT: no refusal marker (the divisibility check is tests/workers/test_hsdp_workers.py)."""
    from verl.trainer.config.sft import SFTFSDPConfig

    for config_class in (PPOTrainerConfig, SFTFSDPConfig):
        assert "fsdp_size" not in {key.rsplit(".", 1)[-1] for key, _, _ in iter_refusals(config_class)}


def test_every_refusal_says_why_and_what_to_do():
    rows = refusal_table(PPOTrainerConfig)
    assert len(rows) == len(list(iter_refusals(PPOTrainerConfig)))
    for row in rows:
        assert row.why and not row.why.endswith("."), row
        assert row.todo.endswith("."), row
    by_key = {(r.key, r.refused): r for r in rows}
    assert by_key[("actor_rollout_ref.rollout.name", "sglang")].accepted == "other values"
    assert by_key[("critic.model.external_lib", "any other value")].accepted == \
        "${actor_rollout_ref.model.external_lib} (its default)"


def test_ignore_eos_is_refused_with_the_hf_rollout_only(cfg):
    set_keys(cfg, actor_rollout_ref__rollout__ignore_eos=True)
    (message,) = problems_of(cfg)
    assert message.startswith("actor_rollout_ref.rollout.ignore_eos=true is refused with actor_rollout_ref.rollout.name=hf")
    set_keys(cfg, actor_rollout_ref__rollout__name="vllm")
    assert validate_config(cfg, check_files=False).actor_rollout_ref.rollout.ignore_eos is True


def test_docs_config_md_is_up_to_date():
    from verl.trainer.config.docs import DOC, render

    text = DOC.read_text()
    assert render(text) == text, "run: python -m verl.trainer.config.docs --write"
    for key, _, _ in iter_refusals(PPOTrainerConfig):
        assert f"`{key}`" in text


def test_megatron_is_refused_with_what_to_use_instead(cfg):
    set_keys(cfg, actor_rollout_ref__actor__strategy="megatron", critic__strategy="megatron")
    found = problems_of(cfg)
    # the ref follows the actor's strategy in ppo_trainer.yaml
    keys = ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")
    assert [p.split("=", 1)[0] for p in found] == list(keys)
    for message in found:
        assert "='megatron' is refused: the Megatron-LM backend" in message
        assert "Use strategy=fsdp2" in message and "docs/scaling.md" in message
