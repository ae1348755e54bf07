"""verl.config / verl.train's config forms, and errors raised as exceptions (the CLI's messages, no sys.exit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import verl
from tests.helpers.e2e import REPO
from verl.data.data_check import DataCheckError
from verl.trainer.config import ConfigError, PPOTrainerConfig, load_config, validate_config

GRPO = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "trainer.logger=[console]"]


def test_dict_dotted_list_and_typed_give_the_same_config() -> None:
    from_list = verl.config(GRPO)
    nested = verl.config({"algorithm": {"adv_estimator": "grpo"}, "actor_rollout_ref": {"rollout": {"n": 4}},
                          "trainer": {"logger": ["console"]}})
    dotted = verl.config({"algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": 4,
                          "trainer.logger": "console"})  # a bare string where a list is declared, as on the CLI
    assert isinstance(from_list, PPOTrainerConfig)
    assert from_list == nested == dotted == verl.config(from_list)
    assert from_list == validate_config(load_config(GRPO), check_files=False)
    assert from_list.algorithm.adv_estimator == "grpo" and from_list.trainer.logger == ["console"]


def test_edited_typed_config_is_checked_again() -> None:
    import dataclasses

    cfg = verl.config(GRPO)
    cfg.trainer.total_training_steps = 5  # the trainer section stays writable, as upstream's
    assert verl.config(cfg).trainer.total_training_steps == 5
    # the worker sections are frozen, as upstream's: an edit is a new section, checked again like the yaml
    with pytest.raises(dataclasses.FrozenInstanceError, match="RolloutConfig.n is frozen"):
        cfg.actor_rollout_ref.rollout.n = 1
    arr = cfg.actor_rollout_ref
    cfg.actor_rollout_ref = dataclasses.replace(arr, actor=dataclasses.replace(arr.actor, ppo_mini_batch_size=64))
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.ppo_mini_batch_size"):
        verl.config(cfg)  # 64 prompts per optimizer step in a batch of 8


@pytest.mark.parametrize("form", [["algorithm.adv_estimatr=grpo"], {"algorithm.adv_estimatr": "grpo"},
                                  {"algorithm": {"adv_estimatr": "grpo"}}])
def test_unknown_key_raises_the_cli_message(form) -> None:
    with pytest.raises(ConfigError) as err:
        verl.config(form)
    assert str(err.value) == "Unknown config key 'algorithm.adv_estimatr'. Did you mean 'algorithm.adv_estimator'?"


def test_bad_forms_are_refused() -> None:
    with pytest.raises(ConfigError, match="a list of 'key=value' strings"):
        verl.config("algorithm.adv_estimator=grpo")
    with pytest.raises(ConfigError, match="'key=value' strings"):
        verl.config([("algorithm.adv_estimator", "grpo")])


def test_train_raises_config_errors_instead_of_exiting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data.train_files"):  # files are checked by train, not by config
        verl.train(GRPO + [f"data.train_files={tmp_path / 'missing.parquet'}",
                           f"data.val_files={tmp_path / 'missing.parquet'}",
                           f"trainer.default_local_dir={tmp_path / 'run'}"])


def test_train_raises_data_check_errors(tmp_path: Path) -> None:
    from tests.helpers.e2e import default_tokenizer_dir

    model = default_tokenizer_dir()
    rows = [{"data_source": "mine", "question": f"q{i}", "reward_model": {"ground_truth": "1"}} for i in range(8)]
    with pytest.raises(DataCheckError, match="prompt"):
        verl.train(GRPO + [f"trainer.default_local_dir={tmp_path / 'run'}", f"actor_rollout_ref.model.path={model}",
                           "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4"],
                   reward_fn=lambda data_source, solution_str, ground_truth, extra_info: 0.0,
                   train_data=rows, val_data=rows)


def test_cli_keeps_exit_2_and_plain_lines() -> None:
    out = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Invalid config:" in out.stderr and "Traceback" not in out.stderr


def test_import_verl_stays_light() -> None:
    code = ("import sys, verl; heavy = [m for m in ('torch', 'ray', 'omegaconf', 'verl.trainer') if m in sys.modules];"
            "assert not heavy, heavy; assert callable(verl.train) and callable(verl.config);"
            "assert verl.PPOTrainerConfig.__name__ == 'PPOTrainerConfig'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)
