"""Run report: csv / png / summary / README from a synthetic metrics.jsonl."""

from __future__ import annotations

import csv
import json
import math

import pytest

from verl.trainer.run_report import main, read_metrics_jsonl, write_run_report
from verl.trainer.tracking import Tracking

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_jsonl(path, records) -> str:
    with open(path, "w") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    return str(path)


def _synthetic_run(tmp_path) -> str:
    records = [{"step": 0, "val-core/gsm8k/acc/mean@1": 0.10}]  # validation before training, its own line
    scores = [0.2, 0.5, 0.4, 0.6]
    for step, score in enumerate(scores, start=1):
        records.append({
            "step": step, "critic/score/mean": score, "critic/rewards/mean": score - 0.01,
            "response_length/mean": 100.0 - step, "response_length/max": 128, "response_length/min": 10,
            "response_length/clip_ratio": 0.25 / step, "actor/ppo_kl": 0.001 * step, "actor/kl_loss": 0.002,
            "actor/entropy": 1.5 - 0.1 * step, "timing_s/gen": 2.0, "timing_s/update_actor": 1.0,
            "timing_s/step": 3.5,
        })
    # validation at step 2 and 4, logged separately from the train metrics of that step
    records.append({"step": 2, "val-core/gsm8k/acc/mean@1": 0.30, "val-core/gsm8k/acc/best@1/std": 0.0})
    records.append({"step": 4, "val-core/gsm8k/acc/mean@1": 0.25, "val-aux/gsm8k/reward/mean@1": 0.9})
    return _write_jsonl(tmp_path / "metrics.jsonl", records)


def test_full_report(tmp_path):
    out = tmp_path / "report"
    summary = write_run_report(_synthetic_run(tmp_path), str(out))

    pngs = ["reward.png", "response_length.png", "kl.png", "entropy.png", "timing.png"]
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
    assert summary["files"] == ["metrics.csv", *pngs, "summary.json", "README.md"]

    with open(out / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["step"] for r in rows] == ["0", "1", "2", "3", "4"]
    header = list(rows[0])
    assert header[0] == "step" and header[1:] == sorted(header[1:])
    assert "val-aux/gsm8k/reward/mean@1" in header  # the union over all steps
    assert rows[0]["critic/score/mean"] == ""  # step 0 had only validation
    assert float(rows[2]["critic/score/mean"]) == 0.5 and float(rows[2]["val-core/gsm8k/acc/mean@1"]) == 0.3

    # train score 0.2, 0.5, 0.4, 0.6 -> first 0.2 (step 1), last 0.6 (step 4), best 0.6 (step 4)
    assert summary["train_score"] == {"key": "critic/score/mean", "first": 0.2, "first_step": 1, "last": 0.6,
                                      "last_step": 4, "best": 0.6, "best_step": 4}
    # validation 0.10 (step 0), 0.30 (step 2), 0.25 (step 4); the "/std" key is not a score
    assert summary["validation"] == {"val-core/gsm8k/acc/mean@1": {
        "first": 0.1, "first_step": 0, "last": 0.25, "last_step": 4, "best": 0.3, "best_step": 2}}
    assert summary["total_wall_time_s"] == pytest.approx(4 * 3.5)
    assert (summary["num_steps"], summary["first_step"], summary["last_step"]) == (5, 0, 4)
    assert json.loads((out / "summary.json").read_text()) == summary

    readme = (out / "README.md").read_text()
    for name in ["metrics.csv", *pngs, "summary.json"]:
        assert f"`{name}`" in readme


def test_plots_only_for_present_metrics(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [{"step": 1, "critic/score/mean": 0.5, "critic/score/max": 1.0},
                                                {"step": 2, "critic/score/mean": float("nan")}])
    summary = write_run_report(path, str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == ["reward.png"]
    assert summary["validation"] == {} and summary["total_wall_time_s"] is None
    assert summary["train_score"]["last"] == 0.5  # the NaN step is skipped, not reported as a score


def test_sft_losses_get_a_plot_and_their_lowest_as_best(tmp_path):
    records = [{"step": 1, "train/loss": 2.0, "timing_s/step": 1.0}, {"step": 2, "train/loss": 1.2},
               {"step": 2, "val/loss": 1.5}, {"step": 3, "train/loss": 1.4}, {"step": 4, "train/loss": 0.9},
               {"step": 4, "val/loss": 1.6}]
    summary = write_run_report(_write_jsonl(tmp_path / "m.jsonl", records), str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == ["loss.png", "timing.png"]
    assert (tmp_path / "out" / "loss.png").read_bytes().startswith(PNG_MAGIC)
    train, val = summary["loss"]["train/loss"], summary["loss"]["val/loss"]
    assert (train["first"], train["last"], train["best"], train["best_step"]) == (2.0, 0.9, 0.9, 4)
    assert (val["best"], val["best_step"], val["last"]) == (1.5, 2, 1.6)  # lowest, not highest
    assert summary["validation"] == {}  # a loss is not a validation score
    assert "loss.png" in (tmp_path / "out" / "README.md").read_text()


def test_merges_repeated_steps_later_line_wins(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [{"step": 2, "a": 1.0}, {"step": 1, "a": 5.0},
                                                {"step": 2, "a": 2.0, "b": 3.0}])
    assert read_metrics_jsonl(path) == [{"step": 1, "a": 5.0}, {"step": 2, "a": 2.0, "b": 3.0}]


def test_truncated_last_line_is_skipped_with_warning(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "a": 1.0}\n{"step": 2, "a"')
    with pytest.warns(UserWarning, match="truncated"):
        assert read_metrics_jsonl(str(path)) == [{"step": 1, "a": 1.0}]


def test_bad_lines_name_file_and_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"m\.jsonl:2"):
        read_metrics_jsonl(str(path))
    path.write_text('{"a": 1}\n')
    with pytest.raises(ValueError, match="'step'"):
        read_metrics_jsonl(str(path))
    with pytest.raises(FileNotFoundError, match="trainer.logger"):
        read_metrics_jsonl(str(tmp_path / "missing.jsonl"))


def test_empty_run_still_writes_summary(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("")
    summary = write_run_report(str(path), str(tmp_path / "out"))
    assert summary["num_steps"] == 0 and summary["train_score"] is None
    assert (tmp_path / "out" / "metrics.csv").read_text().strip() == "step"


def test_tracking_file_backend_feeds_the_report(tmp_path, capsys):
    tracker = Tracking("proj", "exp", default_backend=["file"], log_dir=str(tmp_path))
    for step in (1, 2):
        tracker.log({"critic/score/mean": 0.25 * step, "timing_s/step": 1.5}, step=step)
    tracker.finish()
    summary = write_run_report(tracker.metrics_path, str(tmp_path / "report"))
    assert summary["train_score"]["best"] == 0.5 and summary["total_wall_time_s"] == 3.0


def test_cli(tmp_path, capsys):
    assert main([_synthetic_run(tmp_path), str(tmp_path / "cli")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["train_score"]["best"] == 0.6
    assert (tmp_path / "cli" / "summary.json").exists()
    assert not math.isnan(printed["total_wall_time_s"])
