"""Scoring functions for the reward-loop tests, in a module that imports nothing heavy, so the scoring processes
that load them start fast."""


def dict_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """A dict result: score plus extra fields (a number, a bool and a string)."""
    hit = solution_str.strip().endswith(str(ground_truth))
    return {"score": 1.0 if hit else -0.5, "acc": hit, "length": len(solution_str),
            "row": extra_info.get("index") if extra_info else None}


def slow_on_row_one(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if extra_info and extra_info.get("index") == 1:
        import time

        time.sleep(30)
    return float(len(solution_str))
