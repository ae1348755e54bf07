"""trainer.console_format: the compact per-step row (default) and upstream's full line, and that the console
choice changes nothing in metrics.jsonl or the trackers."""

from __future__ import annotations

import io
import json

import pytest

from verl.trainer.config import ConfigError, load_config, validate_config
from verl.trainer.console_table import (
    CONSOLE_FORMATS,
    PPO_COLUMNS,
    SFT_COLUMNS,
    ConsoleTable,
    columns_for_config,
    format_cell,
)
from verl.trainer.tracking import Tracking

HEADER = " step  train reward  val score  resp len          KL   entropy  step time  tokens/s"

# a training step: what a PPO step logs, plus metrics the row does not show
STEP_1 = {
    "critic/score/mean": 0.3125, "critic/rewards/mean": 0.25, "response_length/mean": 31.4,
    "actor/ppo_kl": 0.0002134, "actor/entropy": 0.8125, "timing_s/step": 71.3, "timing_s/gen": 20.0,
    "perf/total_num_tokens": 6784, "perf/throughput": 95.15, "actor/pg_loss": -0.01, "note": "text",
}
# written out by hand: "0.3125" in 12, blank val score (9), "31.4" in 8 (3 digits), KL "2.13e-04" in 10 (below
# 1e-3: exponent form), "0.8125" in 8, "71.3s" in 9, 6784 tokens / 71.3 s = 95.147 -> "95.1" in 8 (3 digits)
ROW_1 = ("    1" + "        0.3125" + "  " + " " * 9 + "      31.4" + "    2.13e-04" + "    0.8125" + "      71.3s"
         + "      95.1")


def test_row_of_a_training_step_written_out():
    table = ConsoleTable(PPO_COLUMNS)
    assert table.header() == HEADER
    assert table.row(STEP_1, step=1) == ROW_1
    # each value ends where its header ends (the val score, blank here, is the second column)
    ends = [i for i, char in enumerate(HEADER) if char != " " and (i + 1 == len(HEADER) or HEADER[i + 1] == " ")]
    column_ends = [end for end in ends if end + 1 == len(HEADER) or HEADER[end + 1:end + 3] == "  "]
    assert len(column_ends) == 8
    assert [ROW_1[end] != " " for end in column_ends] == [True, True, False, True, True, True, True, True]


def test_val_score_only_on_validation_steps_and_missing_metrics_blank():
    table = ConsoleTable(PPO_COLUMNS)
    # validation before training: only the val-core headline; every other column blank, trailing blanks dropped
    assert table.row({"val-core/arithmetic/reward/mean@1": 0.203125, "val-aux/arithmetic/reward/std@1": 0.4},
                     step=0) == "    0" + " " * 16 + "   0.2031"
    # two data sources: their mean; val-aux keys and non-mean@ keys never count
    two = {"val-core/a/reward/mean@1": 0.25, "val-core/b/acc/mean@4": 0.75, "val-aux/a/reward/mean@1": 9.0}
    assert table.row(two, step=2).endswith("   0.5000")
    assert "0.5000" not in table.row(STEP_1, step=1)


def test_kl_column_is_the_kl_loss_when_the_actor_uses_it():
    table = ConsoleTable(PPO_COLUMNS)
    row = table.row({"actor/ppo_kl": 0.0002, "actor/kl_loss": 0.0125}, step=3)
    assert "0.01250" in row and "2.00e-04" not in row


def test_tokens_per_s_falls_back_to_perf_throughput():
    table = ConsoleTable(PPO_COLUMNS)
    assert table.row({"perf/throughput": 12.25}, step=1).endswith("    12.2")


@pytest.mark.parametrize(("value", "text"), [
    (None, "      "), (0.0, "     0"), (1234.7, "  1235"), (0.5, "0.5000"), (2e-5, "2.00e-05"), (123456.0, "1.23e+05"),
])
def test_format_cell(value, text):
    assert format_cell(value, 6) == text


def test_format_cell_digits_and_unit():
    assert format_cell(71.34, 7, unit="s", digits=3) == "  71.3s"
    assert format_cell(2345.6, 6, digits=3) == "  2346"  # the integer part is never cut


def test_plain_text_header_once_when_not_a_terminal(capsys):
    table = ConsoleTable(PPO_COLUMNS)
    for step in range(1, 26):
        table.log(STEP_1, step)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == HEADER and lines[1] == ROW_1 and len(lines) == 26 and out.count("step time") == 1
    assert "\x1b" not in out and "\r" not in out  # no colour or cursor codes in a file or a pipe


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_header_comes_back_every_20_rows_on_a_terminal():
    screen = _Terminal()
    table = ConsoleTable(PPO_COLUMNS, stream=screen)
    for step in range(1, 42):
        table.log(STEP_1, step)
    lines = screen.getvalue().splitlines()
    assert [i for i, line in enumerate(lines) if line == HEADER] == [0, 21, 42]
    assert "\x1b" not in screen.getvalue()


def test_tracking_console_compact_by_default_and_full_gives_upstreams_line(capsys, tmp_path):
    compact = Tracking("p", "e", default_backend="console", log_dir=str(tmp_path))
    compact.log(STEP_1, step=1)
    compact.finish()
    assert capsys.readouterr().out == HEADER + "\n" + ROW_1 + "\n"

    full = Tracking("p", "e", default_backend="console", log_dir=str(tmp_path),
                    config={"trainer": {"console_format": "full"}})
    full.log({"b": 2.5, "a": 1.0, "note": "text"}, step=3)
    full.finish()
    assert capsys.readouterr().out == "step:3 - a:1.0 - b:2.5\n"


def test_metrics_jsonl_and_trackers_get_every_metric_whatever_the_console_shows(monkeypatch, capsys, tmp_path):
    logged = []

    class Recorder:  # stands in for a tracker backend (wandb here): it must see every metric
        def log(self, data, step):
            logged.append((step, dict(data)))

        def finish(self):
            pass

    real_make = Tracking._make_backend
    monkeypatch.setattr(Tracking, "_make_backend",
                        lambda self, name, config: Recorder() if name == "wandb" else real_make(self, name, config))
    tracker = Tracking("p", "e", default_backend=["console", "wandb", "jsonl"], log_dir=str(tmp_path),
                       config={"trainer": {"console_format": "compact"}})
    tracker.log(STEP_1, step=1)
    tracker.finish()
    assert capsys.readouterr().out.splitlines()[1] == ROW_1
    assert logged == [(1, STEP_1)]
    (record,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert record == {"step": 1, **STEP_1}


def test_console_format_is_validated_before_ray():
    assert validate_config(load_config(["trainer.console_format=full"]), check_files=False).trainer.console_format \
        == "full"
    with pytest.raises(ConfigError) as info:
        validate_config(load_config(["trainer.console_format=wide"]), check_files=False)
    (problem,) = info.value.problems
    assert problem.startswith("trainer.console_format") and "compact" in problem and "full" in problem
    with pytest.raises(ValueError, match="trainer.console_format='wide'"):
        Tracking("p", "e", default_backend="console", config={"trainer": {"console_format": "wide"}})


def test_config_and_table_know_the_same_formats():
    from verl.trainer.config.trainer import CONSOLE_FORMATS as CONFIG_FORMATS

    assert CONFIG_FORMATS == CONSOLE_FORMATS == ("compact", "full")


def test_sft_runs_get_sft_columns_and_the_key(capsys, tmp_path):
    from verl.trainer.sft.config import validate_sft_config
    from verl.trainer.sft.trainer import _tracker

    config = validate_sft_config({"trainer": {"logger": ["console"]}}, world_size=1, check_files=False)
    assert columns_for_config(config.to_dict()) is SFT_COLUMNS
    tracker = _tracker(config, str(tmp_path))
    tracker.log({"train/loss": 1.25, "train/lr": 1e-5, "train/grad_norm": 0.75, "train/tokens": 512,
                 "timing_s/step": 2.0}, step=4)
    tracker.finish()
    header, row = capsys.readouterr().out.splitlines()
    assert header == " step      loss  val loss         lr  grad norm  step time  tokens/s"
    # 1.25 -> "1.250", lr 1e-5 -> "1.00e-05", 0.75 -> "0.7500", 2.0 s -> "2.00s", 512 / 2 = 256 tokens/s -> "256"
    assert row == "    4     1.250" + " " * 10 + "   1.00e-05     0.7500      2.00s       256"

    config = validate_sft_config({"trainer": {"console_format": "full"}}, world_size=1, check_files=False)
    assert config.trainer.console_format == "full"
    with pytest.raises(ConfigError, match="trainer.console_format"):
        validate_sft_config({"trainer": {"console_format": "wide"}}, world_size=1, check_files=False)
