"""`python -m verl.trainer.main_ppo` refuses a bad config quickly, clearly and before Ray starts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from verl.trainer import main_ppo
from verl.trainer.config.overrides import precheck_argv, split_argv, unknown_override_problems


def _run(*args: str, cwd) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "verl.trainer.main_ppo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, time.monotonic() - start


def _imported(stderr: str) -> set[str]:
    """Module names from `-X importtime` lines: `import time: self | cumulative |   name`."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def _message(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("import time:"))


def test_unknown_key_exits_fast_with_a_suggestion_before_ray(tmp_path):
    proc, seconds = _run("data.train_batch_sizee=4", cwd=tmp_path)
    message = _message(proc.stderr)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Unknown config key 'data.train_batch_sizee'. Did you mean 'data.train_batch_size'?" in message
    assert seconds < 15
    assert not {m for m in _imported(proc.stderr) if m == "ray" or m.startswith("ray.")}
    assert "Traceback" not in message and "ray" not in (message + proc.stdout).lower()


def test_invalid_value_is_reported_without_traceback(tmp_path):
    proc, _ = _run(
        f"hydra.run.dir={tmp_path / 'hydra'}",
        "algorithm.adv_estimator=opo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=3",
        cwd=tmp_path,
    )
    message = _message(proc.stderr)
    assert proc.returncode == 2, message
    assert "Traceback" not in message
    assert "algorithm.adv_estimator=opo compares the responses" in message
    assert "3 * 1 = 3" in message  # the mini-batch arithmetic, with its numbers
    assert not {m for m in _imported(proc.stderr) if m == "ray" or m.startswith("ray.")}


def test_split_argv_separates_hydra_flags():
    flags, overrides = split_argv(
        ["--config-name", "my_cfg", "-cp=/x", "data.seed=3", "--multirun", "--info", "config", "+a.b=1", "~c"]
    )
    assert flags == ["--config-name", "my_cfg", "-cp=/x", "--multirun", "--info", "config"]
    assert overrides == ["data.seed=3", "+a.b=1", "~c"]


def test_override_kinds():
    assert unknown_override_problems(["hydra.run.dir=/tmp/x", "~data.seed", "trainer.logger.0=console"]) == []
    assert unknown_override_problems(["+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4"]) == []
    (free_form_hint,) = unknown_override_problems(["actor_rollout_ref.model.override_config.rope_theta=1"])
    assert "add it with '+actor_rollout_ref.model.override_config.rope_theta=1'" in free_form_hint
    assert unknown_override_problems(["+data.train_batch_sizee=4", "trainer.train_batch_size=4"]) == [
        "Unknown config key 'data.train_batch_sizee'. Did you mean 'data.train_batch_size'?",
        "Unknown config key 'trainer.train_batch_size'. Did you mean 'data.train_batch_size'?",
    ]


def test_precheck_exits_2_and_skips_help(capsys):
    with pytest.raises(SystemExit) as info:
        precheck_argv(["actor_rollout_ref.actr.ppo_mini_batch_size=4"])
    assert info.value.code == 2
    assert "Did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?" in capsys.readouterr().err
    precheck_argv(["--help", "data.nope=1"])  # help is Hydra's to print


def test_check_prints_warnings_as_plain_lines(cfg, local_run_files, capsys):
    cfg.data.train_files, cfg.data.val_files = local_run_files["train"], local_run_files["val"]
    cfg.actor_rollout_ref.model.path = local_run_files["model"]
    cfg.algorithm.use_kl_in_reward = True
    cfg.actor_rollout_ref.actor.use_kl_loss = True
    main_ppo.check(cfg)
    err = capsys.readouterr().err
    assert err.startswith("Config warning: algorithm.use_kl_in_reward=true") and "Traceback" not in err


def test_a_reward_file_without_its_function_is_a_plain_config_error_before_ray(tmp_path):
    from tests.helpers.e2e import default_tokenizer_dir, make_arithmetic_data, tiny_run_overrides

    data = make_arithmetic_data(tmp_path / "data")
    reward_file = tmp_path / "my_reward.py"
    reward_file.write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    proc, _ = _run(*tiny_run_overrides(default_tokenizer_dir(), data, tmp_path / "run"),
                   f"custom_reward_function.path={reward_file}", f"hydra.run.dir={tmp_path / 'hydra'}", cwd=tmp_path)
    message = _message(proc.stderr)
    assert proc.returncode == 2, message[-2000:]
    assert "Invalid config:" in message and "Traceback" not in message
    assert "custom_reward_function.name='compute_score' is not defined in" in message and "['score']" in message
    assert "[data check]" in message  # found after the config and data checks, before build_trainer starts Ray
    assert not list((tmp_path / "run").glob("global_step_*"))
