"""Upstream's divergence rejection options (rollout_correction.rollout_rs=token_k1 ... seq_max_k3, comma-combined)
against hand-computed cases, their threshold parsing, and the config check before Ray."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algos.rollout_correction import compute_rollout_correction_and_rejection_mask
from verl.algos.rollout_rs import divergence_rejection_mask, parse_rs_options, parse_rs_thresholds

# two sequences; row 0 has 3 valid tokens, row 1 has 2 (the third is padding)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
# log pi_train - log pi_rollout
LR = torch.tensor([[0.0, math.log(2.0), -0.1], [0.05, -0.05, 9.0]])


def _keep(option: str, threshold) -> list[list[float]]:
    return divergence_rejection_mask(LR, MASK, option, threshold)[0].tolist()


def test_token_options_by_hand():
    # k1 = -lr = (0, -0.693, 0.1 | -0.05, 0.05); ratio bounds 0.6_1.6 -> log bounds (-0.511, 0.470): the
    # -0.693 token (ratio 2, i.e. -lr = log 0.5) is out
    assert _keep("token_k1", "0.6_1.6") == [[1, 0, 1], [1, 1, 0]]
    # k2 = lr^2 / 2 = (0, 0.240, 0.005 | 0.00125, 0.00125): bound 0.1 drops the 0.240 token
    assert _keep("token_k2", 0.1) == [[1, 0, 1], [1, 1, 0]]
    # k3 = e^lr - 1 - lr = (0, 2 - 1 - 0.693 = 0.307, 0.00484 | 0.00127, 0.00123): bound 0.004 drops 0.307, 0.00484
    assert _keep("token_k3", 0.004) == [[1, 0, 0], [1, 1, 0]]
    # a single k1 value is the upper ratio, the lower its reciprocal: 2.01 -> [log 0.4975, log 2.01] keeps -0.693,
    # 1.9 -> [log 0.526, log 1.9] does not
    assert _keep("token_k1", 2.01) == [[1, 1, 1], [1, 1, 0]]
    assert _keep("token_k1", 1.9) == [[1, 0, 1], [1, 1, 0]]


def test_sequence_options_by_hand():
    # row sums of k1: 0 - 0.693 + 0.1 = -0.593, and 0; means -0.198 and 0. The padding's 9.0 never counts.
    assert _keep("seq_sum_k1", "0.6_1.6") == [[0, 0, 0], [1, 1, 0]]  # -0.593 < log 0.6 = -0.511
    assert _keep("seq_mean_k1", "0.6_1.6") == [[1, 1, 1], [1, 1, 0]]
    # max k2: 0.240 and 0.00125; sum k2: 0.245 and 0.0025; mean k3: 0.1040 and 0.00125
    assert _keep("seq_max_k2", 0.2) == [[0, 0, 0], [1, 1, 0]]
    assert _keep("seq_sum_k2", 0.25) == [[1, 1, 1], [1, 1, 0]]
    assert _keep("seq_mean_k3", 0.1) == [[0, 0, 0], [1, 1, 0]]


def test_options_combine_with_and_and_report_each():
    mask, metrics = divergence_rejection_mask(LR, MASK, "token_k3,seq_max_k2", "0.004,0.3")
    assert mask.tolist() == [[1, 0, 0], [1, 1, 0]]  # seq_max_k2 (0.240 <= 0.3) keeps both rows; k3 drops 2 tokens
    assert metrics["rollout_rs_token_k3_masked_fraction"] == pytest.approx(2 / 5)
    assert metrics["rollout_rs_seq_max_k2_masked_fraction"] == 0
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
    assert metrics["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)


def test_threshold_parsing_follows_upstream():
    assert parse_rs_options("token_k1, seq_max_k2,token_k1") == ["token_k1", "seq_max_k2"]
    got = parse_rs_thresholds(["token_k1", "seq_max_k2"], "0.6_1.6,2.5")
    assert got == {"token_k1": (0.6, 1.6), "seq_max_k2": (None, 2.5)}
    assert parse_rs_thresholds(["seq_mean_k1", "token_k2"], 4.0) == {"seq_mean_k1": (0.25, 4.0), "token_k2": (None, 4.0)}
    for options, threshold, named in ((["token_k2"], "0.5_2", "one upper bound"), (["token_k1"], None, "needs"),
                                      (["token_k1", "token_k2"], "1,2,3", "3 values for 2"),
                                      (["token_k1"], "2_0.5", "lower <= upper"), (["token_k3"], "-1", "positive")):
        with pytest.raises(ValueError, match=named):
            parse_rs_thresholds(options, threshold)
    with pytest.raises(ValueError, match="unknown"):
        parse_rs_options("token_k4")


def test_the_correction_runs_them_with_the_veto():
    old = torch.zeros(2, 3)
    rollout = old - LR  # so that log pi_old - log pi_rollout = LR
    _, mask, metrics = compute_rollout_correction_and_rejection_mask(
        old, rollout, MASK, rollout_rs="token_k2", rollout_rs_threshold=0.1, rollout_token_veto_threshold=0.9)
    # k2 drops (0, 1); the veto (a token with ratio e^-0.1 = 0.905 > 0.9 passes, e^-0.05 = 0.951 passes) drops none
    assert mask.tolist() == [[1, 0, 1], [1, 1, 0]]
    assert metrics["rollout_corr/rollout_rs_token_k2_masked_fraction"] == pytest.approx(1 / 5)
    _, vetoed, _ = compute_rollout_correction_and_rejection_mask(
        old, rollout, MASK, rollout_rs="token_k2", rollout_rs_threshold=0.1, rollout_token_veto_threshold=0.93)
    assert vetoed.tolist() == [[0, 0, 0], [1, 1, 0]]  # e^-0.1 < 0.93 vetoes row 0


def test_upstream_command_line_passes_the_check_and_bad_ones_are_refused():
    from verl.trainer.config import ConfigError, validate_config
    from verl.trainer.config.validate import load_config

    base = ["actor_rollout_ref.rollout.calculate_log_probs=true"]
    rc = "algorithm.rollout_correction"
    cfg = validate_config(load_config([*base, f"{rc}.rollout_rs='token_k1,seq_max_k2'",
                                       f"{rc}.rollout_rs_threshold='0.6_1.6,2.5'"]), check_files=False)
    assert cfg.algorithm.rollout_correction.rollout_rs == "token_k1,seq_max_k2"
    for overrides, named in (([f"{rc}.rollout_rs=token_k2"], "needs rollout_rs_threshold"),
                             ([f"{rc}.rollout_rs=token_k9"], "use one of token, sequence, geometric"),
                             ([f"{rc}.rollout_rs=token_k1", f"{rc}.rollout_rs_threshold=2",
                               f"{rc}.rollout_rs_threshold_lower=0.5"], "lower_upper"),
                             ([f"{rc}.rollout_rs=token", f"{rc}.rollout_rs_threshold='0.5_2'"], "must be a number")):
        with pytest.raises(ConfigError, match=named):
            validate_config(load_config([*base, *overrides]), check_files=False)


def test_the_ratio_levels_still_take_a_number_or_a_numeric_string():
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config

    rc = "algorithm.rollout_correction"
    for value in ("1.5", "'1.5'"):
        cfg = validate_config(load_config(["actor_rollout_ref.rollout.calculate_log_probs=true",
                                           f"{rc}.rollout_rs=token", f"{rc}.rollout_rs_threshold={value}"]),
                              check_files=False)
        old = torch.zeros(2, 3)
        _, mask, _ = compute_rollout_correction_and_rejection_mask(
            old, old - LR, MASK, rollout_rs="token", rollout_rs_threshold=cfg.algorithm.rollout_correction.rollout_rs_threshold)
        # ratio bounds [1/1.5, 1.5]: the ratio-2 token is out
        assert mask.tolist() == [[1, 0, 1], [1, 1, 0]]
