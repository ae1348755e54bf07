"""reward.sandbox_fusion.* (upstream v0.9) and reward_model.sandbox_fusion.* (v0.7) are one setting."""

import subprocess
import sys

import pytest

from verl.trainer.config import ConfigError, load_config, validate_config
from verl.trainer.config.aliases import rewrite_aliases


def test_both_spellings_set_the_same_key():
    assert rewrite_aliases(["reward.sandbox_fusion.url=http://a/run_code", "+reward.sandbox_fusion.max_concurrent=3",
                            "trainer.logger=[]"]) == [
        "reward_model.sandbox_fusion.url=http://a/run_code", "reward_model.sandbox_fusion.max_concurrent=3",
        "trainer.logger=[]"]
    typed = validate_config(load_config(["+reward.sandbox_fusion.url=http://a/run_code"]), check_files=False)
    assert typed.reward_model.sandbox_fusion.url == "http://a/run_code"
    # the same value twice is fine; two different values are an error naming both
    assert rewrite_aliases(["reward.sandbox_fusion.url=x", "reward_model.sandbox_fusion.url=x"])
    with pytest.raises(ConfigError, match="set the same key"):
        rewrite_aliases(["reward.sandbox_fusion.url=x", "reward_model.sandbox_fusion.url=y"])


def test_the_command_line_accepts_the_new_spelling_and_refuses_a_conflict(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", "reward.sandbox_fusion.url=x",
                           "reward_model.sandbox_fusion.url=y"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "set the same key (reward_model.sandbox_fusion.url)" in proc.stderr
