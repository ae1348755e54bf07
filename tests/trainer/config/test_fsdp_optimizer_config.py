"""FSDPOptimizerConfig as upstream builds it in Python: lr_scheduler_type, the deprecated warmup_style, min_lr_ratio."""

import warnings

import pytest
import torch

from verl.workers.config.optimizer import FSDPOptimizerConfig
from verl.workers.fsdp_utils import build_lr_scheduler


def test_defaults_match_upstream():
    config = FSDPOptimizerConfig(lr=0.1)
    assert config.min_lr_ratio is None and config.lr_scheduler_type == "constant" and config.warmup_style is None
    assert config.num_cycles == 0.5


@pytest.mark.parametrize("kind", ["constant", "cosine"])
def test_lr_scheduler_type_is_kept(kind):
    assert FSDPOptimizerConfig(lr=0.1, lr_scheduler_type=kind).lr_scheduler_type == kind


def test_unimplemented_schedules_are_refused():
    with pytest.raises(ValueError, match="lr_scheduler_type='linear' is not implemented"):
        FSDPOptimizerConfig(lr_scheduler_type="linear")
    with pytest.raises(ValueError, match="warmup_style='wsd' is not implemented"):
        FSDPOptimizerConfig(warmup_style="wsd")
    with pytest.raises(ValueError, match="disagree"):
        FSDPOptimizerConfig(warmup_style="constant", lr_scheduler_type="cosine")


def test_deprecated_warmup_style_becomes_the_schedule():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = FSDPOptimizerConfig(warmup_style="cosine")
    assert config.lr_scheduler_type == "cosine"
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_cosine_with_min_lr_ratio_none_decays_to_zero():
    # 4 steps, no warmup, half a cycle: lr * 0.5 * (1 + cos(pi * s / 4)) -> 0.1, 0.0854, 0.05, 0.0146, 0.0
    config = FSDPOptimizerConfig(lr=0.1, lr_scheduler_type="cosine", lr_warmup_steps=0, total_training_steps=4)
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    scheduler = build_lr_scheduler(optimizer, config, "actor.optim")
    lrs = []
    for _ in range(5):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.1, 0.0854, 0.05, 0.0146, 0.0], abs=1e-4)
