"""ppo_trainer.yaml as upstream lays it out: config groups composed through `defaults:`, a generated flat copy kept
equal to the composition, `_target_` naming each typed section's class, and a user's yaml (or a group override)
composing on top, through the real `python -m verl.trainer.main_ppo` entry."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from verl.trainer.config import PPOTrainerConfig, load_config, validate_config
from verl.trainer.config.generate import compose_tree, render
from verl.trainer.config.generate import main as generate_main
from verl.trainer.config.yaml_files import CONFIG_DIR, GENERATED
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.config_errors import ConfigError
from verl.utils.config_schema import import_target
from verl.workers.config import FSDPActorConfig, FSDPOptimizerConfig, RolloutConfig

# upstream's group files, each a section of the composed tree
GROUP_FILES = ("actor/actor.yaml", "actor/dp_actor.yaml", "ref/ref.yaml", "ref/dp_ref.yaml", "rollout/rollout.yaml",
               "model/hf_model.yaml", "critic/critic.yaml", "critic/dp_critic.yaml", "data/legacy_data.yaml",
               "reward_model/reward_model.yaml", "reward_model/dp_reward_model.yaml", "engine/fsdp.yaml",
               "optim/fsdp.yaml", "algorithm/rollout_correction.yaml", "reward/reward.yaml",
               "distillation/distillation.yaml")


def test_the_groups_are_laid_out_as_upstream_and_ppo_trainer_composes_them():
    for name in GROUP_FILES:
        assert (CONFIG_DIR / name).is_file(), name
    defaults = OmegaConf.load(CONFIG_DIR / "ppo_trainer.yaml").defaults
    assert "actor@actor_rollout_ref.actor: dp_actor" in [f"{k}: {v}" for d in defaults if not isinstance(d, str)
                                                         for k, v in d.items()]
    assert defaults[-1] == "_self_"
    tree = compose_tree()
    assert set(tree) == {"data", "actor_rollout_ref", "critic", "reward_model", "custom_reward_function", "algorithm",
                         "trainer", "ray_kwargs", "global_profiler", "transfer_queue", "distillation",
                         "reward", "sandbox_fusion",  # upstream v0.7's reward section and its legacy sandbox block
                         "skip"}  # upstream main's SkipManager section (verl.utils.skip)
    assert tree["reward"]["reward_manager"]["_target_"] == "verl.workers.config.reward_model.RewardManagerConfig"
    assert tree["actor_rollout_ref"]["actor"]["optim"]["lr"] == 1e-6  # optim/fsdp.yaml
    assert tree["critic"]["optim"]["lr"] == 1e-5  # dp_critic.yaml over optim/fsdp.yaml
    assert tree["critic"]["model"]["fsdp_config"]["_target_"] == "verl.workers.config.FSDPEngineConfig"


def test_the_generated_file_equals_the_composed_tree():
    assert GENERATED.read_text() == render(), "run `python -m verl.trainer.config.generate`"
    assert generate_main(["--check"]) == 0


def test_generate_check_fails_on_a_stale_file(tmp_path, monkeypatch, capsys):
    import verl.trainer.config.generate as generate

    stale = tmp_path / GENERATED.name
    stale.write_text(GENERATED.read_text().replace("clip_ratio: 0.2", "clip_ratio: 0.3", 1))
    monkeypatch.setattr(generate, "GENERATED", stale)
    assert generate.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert generate.main([]) == 0 and stale.read_text() == render()


def _targets(node, path=""):
    for key, value in node.items():
        if key == "_target_":
            yield path, value
        elif isinstance(value, dict):
            yield from _targets(value, f"{path}.{key}" if path else key)


def _section(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_target_names_the_class_the_section_is_built_as():
    typed = PPOTrainerConfig()
    targets = dict(_targets(compose_tree()))
    assert targets["actor_rollout_ref.actor"] == "verl.workers.config.FSDPActorConfig"
    assert targets["actor_rollout_ref.model"] == "verl.workers.config.HFModelConfig"
    assert targets["critic"] == "verl.workers.config.FSDPCriticConfig"
    assert targets["actor_rollout_ref.actor.checkpoint"] == "verl.trainer.config.CheckpointConfig"
    assert targets["algorithm"] == "verl.trainer.config.AlgoConfig"
    for path, target in targets.items():
        built = type(_section(typed, path))
        # upstream's yaml names ProfilerConfig / NsightToolConfig for global_profiler's differently shaped sections
        assert built is import_target(target) or target in getattr(built, "_target_aliases", ()), path


def test_omega_conf_to_dataclass_builds_the_targets_class_as_the_check_does():
    cfg = load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4",
                       "actor_rollout_ref.actor.clip_ratio_high=0.28"])
    typed = validate_config(cfg, check_files=False)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert type(actor) is FSDPActorConfig and actor == typed.actor_rollout_ref.actor
    assert actor.clip_ratio_high == 0.28 and actor["clip_ratio_high"] == 0.28 and actor.rollout_n == 4
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout, RolloutConfig)
    assert rollout == typed.actor_rollout_ref.rollout
    optim = omega_conf_to_dataclass({"lr": 3e-6}, FSDPOptimizerConfig)
    assert optim.lr == 3e-6 and optim.lr_scheduler_type == "constant"  # the rest: the defaults
    from verl.utils import omega_conf_to_dataclass as from_utils

    assert from_utils is omega_conf_to_dataclass


def test_omega_conf_to_dataclass_names_the_key_on_bad_input():
    with pytest.raises(ConfigError) as info:
        omega_conf_to_dataclass({"lr": "fast", "no_such": 1}, FSDPOptimizerConfig, key="actor_rollout_ref.actor.optim")
    assert any(p.startswith("actor_rollout_ref.actor.optim.lr must be a number") for p in info.value.problems)
    assert any("actor_rollout_ref.actor.optim.no_such" in p for p in info.value.problems)
    with pytest.raises(ConfigError, match=r"critic\._target_ is not set"):
        omega_conf_to_dataclass({"lr": 1.0}, key="critic")


def test_a_wrong_target_is_refused_with_its_dotted_key():
    cfg = load_config(["actor_rollout_ref.actor._target_=verl.workers.config.RolloutConfig"])
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, check_files=False)
    (problem,) = info.value.problems
    assert problem.startswith("actor_rollout_ref.actor._target_='verl.workers.config.RolloutConfig' is not that "
                              "class")


def test_a_target_may_name_a_users_subclass():
    cfg = load_config([f"actor_rollout_ref.actor._target_={__name__}.MyActorConfig"])
    assert type(validate_config(cfg, check_files=False).actor_rollout_ref.actor) is MyActorConfig


@dataclasses.dataclass
class MyActorConfig(FSDPActorConfig):
    """A user's own actor config, chosen through `_target_`."""


def test_worker_sections_are_frozen_but_for_their_mutable_fields():
    actor = PPOTrainerConfig().actor_rollout_ref.actor
    with pytest.raises(dataclasses.FrozenInstanceError, match="clip_ratio"):
        actor.clip_ratio = 0.3
    actor.ppo_micro_batch_size_per_gpu = 4  # filled in after the check (deprecated global sizes)
    assert actor.ppo_micro_batch_size_per_gpu == 4
    assert dict(actor.policy_loss)["loss_mode"] == "vanilla" and len(actor.policy_loss) == len(list(actor.policy_loss))


# ---------------------------------------------------------------- a user's yaml, through main_ppo

USER_YAML = """\
hydra:
  searchpath:
    - pkg://verl.trainer.config
defaults:
  - ppo_trainer
  - override rollout@actor_rollout_ref.rollout: my_rollout
  - _self_
algorithm:
  adv_estimator: grpo
data:
  train_batch_size: 4
"""
MY_ROLLOUT = """\
defaults:
  - rollout
  - _self_
n: 4
temperature: 0.7
"""


def _main_ppo(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def user_config(tmp_path):
    folder = tmp_path / "my_config"
    (folder / "rollout").mkdir(parents=True)
    (folder / "mine.yaml").write_text(USER_YAML)
    (folder / "rollout" / "my_rollout.yaml").write_text(MY_ROLLOUT)
    return folder


def test_a_user_yaml_with_defaults_and_a_group_override_composes(user_config, tmp_path):
    proc = _main_ppo(f"--config-path={user_config}", "--config-name=mine", "actor_rollout_ref.actor.clip_ratio=0.25",
                     "--cfg", "job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = OmegaConf.create(proc.stdout)
    assert job.actor_rollout_ref.rollout.n == 4 and job.actor_rollout_ref.rollout.temperature == 0.7
    assert job.actor_rollout_ref.rollout.top_p == 1.0  # the rest from rollout/rollout.yaml
    assert job.algorithm.adv_estimator == "grpo" and job.data.train_batch_size == 4
    assert job.actor_rollout_ref.actor.clip_ratio == 0.25


def test_a_user_yaml_runs_to_the_end_of_the_pre_ray_check(user_config, tmp_path):
    """Every key checked: the one problem left is the data file pointed away on purpose (exit 2, before Ray)."""
    missing = tmp_path / "missing.parquet"
    proc = _main_ppo(f"--config-path={user_config}", "--config-name=mine", f"data.train_files={missing}",
                     "data.val_files=null",
                     "actor_rollout_ref.actor.ppo_mini_batch_size=2", f"hydra.run.dir={tmp_path / 'h'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    problems = proc.stderr.split("Invalid config:", 1)[1].strip().splitlines()
    assert len(problems) == 1 and problems[0].startswith("data.train_files: data file not found"), proc.stderr


def test_a_group_override_on_the_command_line_composes(user_config, tmp_path):
    proc = _main_ppo(f"hydra.searchpath=[file://{user_config}]", "rollout@actor_rollout_ref.rollout=my_rollout",
                     "--cfg", "job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert OmegaConf.create(proc.stdout).actor_rollout_ref.rollout.n == 4
