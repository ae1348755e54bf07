"""TrainingProgress: off does nothing, forced on without a terminal prints plain lines to stderr only."""

from __future__ import annotations

import io
import sys

import pytest

from verl.trainer.progress import TrainingProgress, progress_enabled_by_default, summarize_metrics


def test_disabled_prints_nothing(capsys):
    with TrainingProgress(total_steps=3, enabled=False) as bar:
        bar.advance("score 1")
    assert bar.completed == 1
    assert capsys.readouterr() == ("", "")


def test_forced_on_without_terminal_prints_plain_lines_to_stderr(capsys):
    bar = TrainingProgress(total_steps=4, initial=1, enabled=True)  # pytest's stderr is not a terminal
    bar.advance("score 0.5")
    bar.advance()
    bar.close()
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[training] step 2/4 (50%) elapsed 0:00:00 eta ")
    assert lines[0].endswith(" | score 0.5")
    assert lines[1].startswith("[training] step 3/4 (75%)")


@pytest.mark.parametrize("flag, expected", [("1", True), ("true", True), ("0", False), ("off", False)])
def test_env_flag(monkeypatch, flag, expected):
    monkeypatch.setenv("VERL_PROGRESS", flag)
    assert progress_enabled_by_default() is expected


def test_summarize_metrics():
    text = summarize_metrics({"critic/score/mean": 0.41234, "response_length/mean": 87.25, "other": 1.0})
    assert text == "score 0.4123 | len 87.25"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_rows_go_through_the_bar_and_the_eta_averages_the_whole_run(monkeypatch):
    from verl.trainer.console_table import ConsoleTable

    screen_out, screen_err = _Terminal(), _Terminal()
    monkeypatch.setattr(sys, "stdout", screen_out)
    monkeypatch.setattr(sys, "stderr", screen_err)
    bar = TrainingProgress(total_steps=10, enabled=True)
    assert bar._progress is not None  # the rich bar, not the plain lines
    clock = iter([0.0, 100.0, 200.0])
    bar._progress.get_time = lambda: next(clock)  # three steps of 100 s: longer than rich's default 30 s window
    table = ConsoleTable()
    for step in (1, 2, 3):
        table.log({"critic/score/mean": 0.5}, step)
        bar.advance()
    (task,) = bar._progress.tasks
    assert task.time_remaining == pytest.approx(700.0)  # 2 steps in 200 s -> 0.01 steps/s, 7 steps left
    bar.close()
    # stdout was redirected through the bar's console (on stderr), so its redraws never overwrite a row
    assert screen_out.getvalue() == ""
    assert "    3        0.5000" in screen_err.getvalue()
