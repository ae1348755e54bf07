"""docs/migration.md's table "Upstream-style command lines, run to the end of the pre-Ray check", kept true.

The table is parsed out of the page (so the page and this test cannot drift apart) and every row is run:

- the command cell is split as a shell splits it and run after the page's base set (batch sizes that pass the
  batch checks, so that a row's outcome is its own keys');
- `~/...` values are swapped for local stand-ins (a peft adapter folder for `lora_adapter_path`);
- rows with `--config-name` / `--config-path`, and `exit 1` rows (Hydra's own errors), run
  `python -m verl.trainer.main_ppo` in a subprocess and check the exit code and stderr; the others compose the
  config as the command line does (`load_config`, which also refuses unknown keys) and run `validate_config`
  without the file checks, the whole pre-Ray config check;
- `runs`: no ConfigError; with "note" / "warning" in the outcome at least one ConfigWarning, naming every
  backticked dotted key of the outcome, and none otherwise. `exit 2`: a ConfigError whose problems hold every
  backticked text of the outcome ("unknown key" rows: the unknown-key refusal).

The table must also keep covering the upstream keys in REQUIRED, with at least MIN_ROWS rows.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from verl.trainer.config import ConfigError, ConfigWarning, load_config, validate_config

DOC = Path(__file__).resolve().parents[3] / "docs" / "migration.md"
SECTION = "## Upstream-style command lines, run to the end of the pre-Ray check"
ARR = "actor_rollout_ref"

MIN_ROWS = 50

# Each entry: substrings that must all occur in one row's command cell.
REQUIRED: list[tuple[str, ...]] = [
    ("data.image_key=", "data.return_multi_modal_inputs=", f"{ARR}.actor.freeze_vision_tower="),
    ("reward_model.use_reward_loop=",),
    ("reward_model.num_workers=",),
    ("reward_model.rollout.name=", "reward_model.rollout.tensor_model_parallel_size=",
     "reward_model.rollout.gpu_memory_utilization=", "reward_model.rollout.prompt_length=",
     "reward_model.rollout.response_length="),
    (f"{ARR}.rollout.layered_summon=",),
    ("data.val_batch_size=",),
    (f"{ARR}.rollout.log_prob_micro_batch_size=",),
    (f"{ARR}.ref.log_prob_micro_batch_size=",),
    (f"{ARR}.actor.ppo_micro_batch_size=", f"{ARR}.actor.ppo_micro_batch_size_per_gpu="),
    (f"{ARR}.model.use_shm=",),
    (f"{ARR}.actor.optim.clip_grad=",),
    (f"{ARR}.rollout.data_parallel_size=",),
    (f"{ARR}.rollout.expert_parallel_size=",),
    ("trainer.use_legacy_worker_impl=",),
    ("algorithm.adv_estimator=optimal_token_baseline",),
    ("algorithm.adv_estimator=grpo", f"{ARR}.rollout.n=1"),
    ("algorithm.adv_estimator=rloo", f"{ARR}.rollout.n=1"),
    (f"{ARR}.rollout.over_sample_rate=",),
    (f"{ARR}.actor.entropy_checkpointing=",),
    ("entropy_from_logits_with_chunking=",),
    (f"{ARR}.actor.fsdp_config.fsdp_size=",),
    ("data.sampler.class_name=", "data.sampler.class_path="),
    (f"{ARR}.rollout.trace.token2text=", f"{ARR}.rollout.trace.backend="),
    (f"{ARR}.actor.router_replay.mode=",),
    (f"{ARR}.rollout.checkpoint_engine.update_weights_bucket_megabytes=",),
    ("fsdp_config.forward_prefetch=",),
    (f"{ARR}.model.enable_activation_offload=",),
    (f"{ARR}.ref.use_torch_compile=",),
    (f"{ARR}.model.mtp.",),
    (f"{ARR}.actor.use_prefix_grouper=",),
    (f"{ARR}.actor.calculate_sum_pi_squared=",),
    (f"{ARR}.actor.tau_pos=", f"{ARR}.actor.tau_neg="),
    ("fsdp_config.strategy=",),
    ("fsdp_config.use_orig_params=",),
    ("algorithm.rollout_correction.rollout_rs='token_k1,seq_max_k2'",),
    ("algorithm.rollout_correction.rollout_is=", "bypass_mode=true", "loss_type=ppo_clip"),
    (f"{ARR}.rollout.multi_turn.format=hermes",),
    (f"{ARR}.rollout.multi_turn.format=qwen3_coder",),
    (f"{ARR}.rollout.multi_turn.format=gpt-oss",),
    (f"{ARR}.rollout.multi_turn.format=llama3_json",),
    (f"{ARR}.rollout.prometheus.",),
    (f"{ARR}.rollout.skip_tokenizer_init=",),
    (f"{ARR}.rollout.enable_rollout_routing_replay=",),
    (f"{ARR}.model.lora_adapter_path=",),
    ("+data.apply_chat_template_kwargs.",),
    (f"+{ARR}.actor.fsdp_config.mixed_precision.reduce_dtype=bf16",),
    ("--config-name=ppo_megatron_trainer",),
]

ROW = re.compile(r"^\| `(?P<command>[^`]+)` \| (?P<outcome>.+?) \|$")
BACKTICKED = re.compile(r"`([^`]+)`")
DOTTED_KEY = re.compile(r"^\+*[A-Za-z_][\w-]*(\.[\w-]+)+(=\S*)?$")
NOTE_WORDS = re.compile(r"\b(note|notes|warning|warnings)\b")
YAML_PLACEHOLDER = re.compile(r"<yaml with defaults: \[(\w+)\]>")
USER_YAML = "user_run"


@dataclass(frozen=True)
class Row:
    command: str
    outcome: str

    @property
    def backticked(self) -> list[str]:
        return BACKTICKED.findall(self.outcome)

    @property
    def exit_code(self) -> int | None:
        """None for `runs`, else the code after `exit`."""
        if self.outcome.startswith("runs"):
            return None
        match = re.match(r"exit (\d+)", self.outcome)
        assert match, f"outcome must start with 'runs' or 'exit N': {self.outcome!r}"
        return int(match.group(1))

    @property
    def in_subprocess(self) -> bool:
        return "--config-name" in self.command or "--config-path" in self.command or self.exit_code == 1


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOC} lost its section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


def _base_set() -> list[str]:
    match = re.search(r"base set\s+`([^`]+)`", _section())
    assert match, "the section must name its base set: 'the base set `key=value ...`'"
    return match.group(1).split()


def _rows() -> list[Row]:
    rows = []
    for line in _section().splitlines():
        match = ROW.match(line.strip())
        if match:
            rows.append(Row(match.group("command"), match.group("outcome")))
    return rows


ROWS = _rows()


def _swap_paths(args: list[str], root: Path) -> list[str]:
    """`key=~/...` values replaced by local stand-ins under ``root``."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and value.startswith("~/"):
            local = root / "swapped" / value[2:]
            if key.endswith("lora_adapter_path"):
                local.mkdir(parents=True, exist_ok=True)
                (local / "adapter_config.json").write_text(json.dumps(
                    {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]}))
                (local / "adapter_model.safetensors").write_bytes(b"")
            elif local.suffix:
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text("")
            else:
                local.mkdir(parents=True, exist_ok=True)
            value = str(local)
        out.append(f"{key}{sep}{value}")
    return out


def _args(row: Row, root: Path) -> list[str]:
    command = row.command
    placeholder = YAML_PLACEHOLDER.search(command)
    if placeholder:
        config_dir = root / "config"
        config_dir.mkdir(exist_ok=True)
        (config_dir / f"{USER_YAML}.yaml").write_text(
            f"defaults:\n  - {placeholder.group(1)}\n  - _self_\n", encoding="utf-8")
        command = YAML_PLACEHOLDER.sub(USER_YAML, command)
    return _swap_paths(shlex.split(command), root)


def _run_in_process(args: list[str]) -> tuple[list[str] | None, list[str]]:
    """(problems or None when the config passed, warning messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            validate_config(load_config([*_base_set(), *args]), check_files=False)
            problems = None
        except ConfigError as error:
            problems = list(error.problems)
    return problems, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def _check_in_process(row: Row, args: list[str]) -> None:
    problems, messages = _run_in_process(args)
    if row.exit_code is None:
        assert problems is None, f"{row.command}: refused:\n" + "\n".join(problems or [])
        if NOTE_WORDS.search(row.outcome):
            assert messages, f"{row.command}: the outcome promises a note, none was printed"
            for text in row.backticked:
                if DOTTED_KEY.match(text):
                    assert any(text in m for m in messages), f"{row.command}: no note names {text!r}: {messages}"
        else:
            assert not messages, f"{row.command}: unexpected notes (say so in the outcome): {messages}"
        return
    assert row.exit_code == 2, f"{row.command}: in-process rows are 'runs' or 'exit 2'"
    assert problems is not None, f"{row.command}: passed the check, the table says {row.outcome!r}"
    refusal = "\n".join(problems)
    if "unknown key" in row.outcome:
        assert "Unknown config key" in refusal, refusal
    assert row.backticked, f"exit 2 rows name (in backticks) what the refusal says: {row.outcome!r}"
    for text in row.backticked:
        assert text in refusal, f"{row.command}: the refusal does not say {text!r}:\n{refusal}"


def _check_in_subprocess(row: Row, args: list[str], root: Path) -> None:
    assert row.exit_code is not None, f"{row.command}: subprocess rows are refusals (they would start a run)"
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *_base_set(), *args,
                           f"hydra.run.dir={root / 'hydra'}"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == row.exit_code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for text in row.backticked:
        assert text in proc.stderr, f"{row.command}: stderr does not say {text!r}:\n{proc.stderr[-3000:]}"
    if YAML_PLACEHOLDER.search(row.command):
        assert f"--config-name={USER_YAML}" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("row", ROWS, ids=[f"row{i + 1:02d}" for i in range(len(ROWS))])
def test_row_outcome_is_what_the_table_says(row: Row, tmp_path: Path) -> None:
    args = _args(row, tmp_path)
    if row.in_subprocess:
        _check_in_subprocess(row, args, tmp_path)
    else:
        _check_in_process(row, args)


def test_table_is_there_with_its_base_set_and_enough_rows() -> None:
    assert _base_set(), "empty base set"
    assert len(ROWS) >= MIN_ROWS, f"the table has {len(ROWS)} rows, expected at least {MIN_ROWS}"
    assert "test_migration_table.py" in _section()
    assert "paths" in _section() and "swapped for local ones" in _section()
    assert len({row.command for row in ROWS}) == len(ROWS), "a command line appears twice"
    for row in ROWS:
        row.exit_code  # noqa: B018 - asserts the outcome's form


@pytest.mark.parametrize("needed", REQUIRED, ids=[" ".join(n)[:60] for n in REQUIRED])
def test_every_listed_upstream_key_has_a_row(needed: tuple[str, ...]) -> None:
    assert any(all(part in row.command for part in needed) for row in ROWS), (
        f"no row of docs/migration.md's command-line table sets {' together with '.join(needed)}")
