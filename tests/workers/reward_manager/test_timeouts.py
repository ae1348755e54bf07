"""Per-sample time limits in the reward managers (reward_model.scoring.*) and the scoring process pool."""

import os
import sys
import time

import cloudpickle
import pytest
import torch

from tests.workers.reward_manager.conftest import RESPONSE_LEN, make_batch
from verl.rewards.score_pool import ScorePool, ScorePoolError
from verl.workers.reward_manager import BatchRewardManager, DAPORewardManager, NaiveRewardManager, PrimeRewardManager
from verl.workers.reward_manager.scoring import RewardScoreError
from verl.workers.reward_manager.timed_scoring import RewardTimeoutError

SAMPLES = [
    ("Tom has 12", "12 + 2 = 14. #### 14", "14"),  # right
    ("Anna has 9", "#### 10", "11"),  # wrong
    ("Ben has 3", "3 apples", "3"),  # hangs in the scorers below
]
LIMIT = 1.0
HANG_S = 600  # how long a hanging score sleeps: far past any deadline, so a missed cut-off is plain

# Ship this file's scorers by value: a scoring process then need not import this module (and torch with it).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def expected_tensor(lengths, scores):
    tensor = torch.zeros(len(scores), RESPONSE_LEN)
    for row, (length, score) in enumerate(zip(lengths, scores)):
        tensor[row, length - 1] = score
    return tensor


def sleeps_on_apples(data_source, solution_str, ground_truth, extra_info):
    if "apples" in solution_str:
        time.sleep(HANG_S)
    return float(solution_str.endswith(ground_truth))


def spins_on_apples(data_source, solution_str, ground_truth, extra_info):
    while "apples" in solution_str:  # pure-Python busy loop: only killing the process stops it
        pass
    return {"score": 2.0 if solution_str.endswith(ground_truth) else -1.0, "acc": solution_str.endswith(ground_truth),
            "pred": solution_str[-2:]}


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
        return f.read().split()[2] != "Z"


@pytest.mark.parametrize("manager_cls", [NaiveRewardManager, DAPORewardManager, PrimeRewardManager])
def test_hanging_sample_scores_zero_and_is_counted(tokenizer, manager_cls, capsys):
    data, lengths = make_batch(tokenizer, SAMPLES, data_source=["a", "b", "slow_src"])
    manager = manager_cls(tokenizer, 0, compute_score=sleeps_on_apples, timeout=LIMIT, num_processes=2)
    start = time.monotonic()
    out = manager(data, return_dict=True)
    # The hanging sample sleeps HANG_S; returning in well under that shows it was cut off, whatever the load.
    assert time.monotonic() - start < HANG_S / 2
    assert torch.equal(out["reward_tensor"], expected_tensor(lengths, [1.0, 0.0, 0.0]))
    assert out["reward_extra_info"]["reward_timeout"] == [False, False, True]
    err = capsys.readouterr().err
    assert "sample 2 (data_source='slow_src')" in err and "timed out" in err and "scored 0" in err
    manager.close()


def test_timeout_error_names_index_and_data_source(tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES, data_source=["a", "b", "slow_src"])
    manager = NaiveRewardManager(tokenizer, 0, compute_score=sleeps_on_apples, timeout=LIMIT, on_timeout="error")
    with pytest.raises(RewardTimeoutError, match=r"sample 2 \(data_source='slow_src'\).*timeout=1 s.*on_timeout=err"):
        manager(data)
    manager.close()


def test_pool_lives_across_steps_replaces_the_hung_worker_and_closes_cleanly(tokenizer):
    data, lengths = make_batch(tokenizer, SAMPLES)
    manager = NaiveRewardManager(tokenizer, 0, compute_score=spins_on_apples, timeout=LIMIT, num_processes=2)
    manager(data)
    pool = manager.scorer._pool
    first = set(pool.pids)
    out = manager(data, return_dict=True)  # the same pool: one worker was replaced after each timeout
    assert manager.scorer._pool is pool and len(first & set(pool.pids)) == 1
    # dict scorer + a timeout: the timed-out row gets score 0, acc False, pred None; others keep theirs
    assert out["reward_extra_info"] == {"score": [2.0, -1.0, 0.0], "acc": [True, False, False],
                                        "pred": ["14", "10", None], "reward_timeout": [False, False, True]}
    pids = pool.pids
    manager.close()
    assert not any(alive(pid) for pid in [*pids, *first])  # the killed, the replaced and the last ones


def test_lambdas_and_closures_run_in_the_spawned_pool(tokenizer):
    data, lengths = make_batch(tokenizer, SAMPLES)
    bonus = 0.25

    def closure(data_source, solution_str, ground_truth, extra_info):
        return bonus + extra_info["index"] + (os.getpid() != parent)  # 1 more when scored in another process

    parent = os.getpid()
    out = NaiveRewardManager(tokenizer, 0, compute_score=closure)(data)
    assert torch.equal(out, expected_tensor(lengths, [1.25, 2.25, 3.25]))
    out = NaiveRewardManager(tokenizer, 0, compute_score=lambda **kw: len(kw["ground_truth"]))(data)
    assert torch.equal(out, expected_tensor(lengths, [2.0, 2.0, 1.0]))


def test_errors_in_the_pool_name_the_sample_and_chain_the_cause(tokenizer):
    def broken(data_source, solution_str, ground_truth, extra_info):
        if extra_info["index"] == 1:
            raise ZeroDivisionError("oops")
        return 1.0

    data, _ = make_batch(tokenizer, SAMPLES)
    with pytest.raises(RewardScoreError, match="sample 1 .*broken.*ZeroDivisionError: oops") as info:
        NaiveRewardManager(tokenizer, 0, compute_score=broken)(data)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_prime_refuses_none_like_the_other_managers(tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    with pytest.raises(RewardScoreError, match="sample 0 .*returned score None of type NoneType"):
        PrimeRewardManager(tokenizer, 0, compute_score=lambda **kw: None)(data)
    with pytest.raises(ValueError, match="reward_model.scoring.timeout"):
        PrimeRewardManager(tokenizer, 0, timeout=None)


def test_prime_deadline_is_per_sample_not_per_batch(tokenizer):
    """Three 0.6 s samples on one process take 1.8 s in all: each is within its own 1 s limit."""

    def slowish(data_source, solution_str, ground_truth, extra_info):
        time.sleep(0.6)
        return 1.0

    data, lengths = make_batch(tokenizer, SAMPLES)
    out = PrimeRewardManager(tokenizer, 0, compute_score=slowish, timeout=LIMIT, num_processes=1)(data,
                                                                                                  return_dict=True)
    assert out["reward_extra_info"]["reward_timeout"] == [False, False, False]
    assert torch.equal(out["reward_tensor"], expected_tensor(lengths, [1.0, 1.0, 1.0]))


def test_batch_manager_deadline_covers_the_batched_call(tokenizer, capsys):
    def hangs(data_sources, solution_strs, ground_truths, extra_infos):
        time.sleep(60)

    data, _ = make_batch(tokenizer, SAMPLES)
    out = BatchRewardManager(tokenizer, 0, compute_score=hangs, timeout=LIMIT)(data, return_dict=True)
    assert out["reward_tensor"].abs().sum() == 0 and out["reward_extra_info"]["reward_timeout"] == [True] * 3
    assert "over 3 samples (data_sources ['arithmetic']; indices 0-2)" in capsys.readouterr().err


def test_bad_settings_are_refused(tokenizer):
    with pytest.raises(ValueError, match="on_timeout must be one of zero, error"):
        NaiveRewardManager(tokenizer, 0, on_timeout="skip")
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        NaiveRewardManager(tokenizer, 0, timeout=-1)


def test_unpicklable_scorer_says_how_to_opt_out():
    import threading

    lock = threading.Lock()
    with pytest.raises(ScorePoolError, match="reward_model.scoring.timeout=null"):
        ScorePool(lambda **kw: lock, 1, 1.0)


def test_a_scorer_that_kills_its_process_is_reported_and_replaced():
    pool = ScorePool(lambda code: os._exit(code) if code else 1.0, 1, 5.0)
    dead, fine = pool.run([{"code": 3}, {"code": 0}])
    assert dead.status == "error" and "died with exit code 3" in str(dead.error)
    assert fine.status == "ok" and fine.value == 1.0
    pool.close()
