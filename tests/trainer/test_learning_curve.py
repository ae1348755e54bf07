from verl.trainer.learning_curve import format_learning_curve


def test_curve_rows_and_validation_summary():
    rows = [
        {"step": 0, "val-core/arithmetic/reward/mean@1": 0.25},
        {"step": 1, "critic/score/mean": 0.5},
        {"step": 2, "critic/score/mean": 1.0, "val-core/arithmetic/reward/mean@1": 0.75},
    ]
    text = format_learning_curve(rows, width=10).splitlines()
    assert text[1].split() == ["0", "0.250"]
    assert text[2].split() == ["1", "0.500", "#####"]  # half of the 10-wide bar
    assert text[3].split() == ["2", "1.000", "0.750", "##########"]
    assert text[-1] == "validation (val-core/arithmetic/reward/mean@1): step 0 0.250 -> step 2 0.750"


def test_curve_without_validation():
    text = format_learning_curve([{"step": 1, "critic/score/mean": 0.0}])
    assert "validation" not in text.splitlines()[-1]
