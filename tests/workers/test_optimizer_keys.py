"""Upstream's optimizer keys of actor.optim / critic.optim: `optimizer` + `optimizer_impl` name the class,
`override_optimizer_config` adds constructor arguments, `zero_indexed_step` shifts the schedule's step count.
Each test sets the key in the config the trainer builds, builds what the workers build from it, and checks it."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from tests.trainer.config.test_key_effects import problems, typed
from tests.utils.test_torch_functional import _lrs
from verl.workers.config import FSDPOptimizerConfig
from verl.workers.fsdp_utils import build_lr_scheduler, build_optimizer

ARR = "actor_rollout_ref"
SECTIONS = [f"{ARR}.actor.optim", "critic.optim"]


def _optim(section: str, *overrides: str) -> FSDPOptimizerConfig:
    config = typed(*(f"{section}.{o}" for o in overrides))
    return config.actor_rollout_ref.actor.optim if section.startswith(ARR) else config.critic.optim


def _built(section: str, *overrides: str) -> torch.optim.Optimizer:
    return build_optimizer(torch.nn.Linear(2, 2), _optim(section, *overrides), section)


@pytest.mark.parametrize("section", SECTIONS)
def test_optimizer_and_optimizer_impl_pick_the_class(section, tmp_path, monkeypatch):
    default = _built(section, "lr=0.1")
    assert type(default) is torch.optim.AdamW and default.param_groups[0]["betas"] == (0.9, 0.999)
    sgd = _built(section, "optimizer=SGD", "lr=0.1", "weight_decay=0.3")
    assert type(sgd) is torch.optim.SGD
    (group,) = sgd.param_groups
    assert (group["lr"], group["weight_decay"]) == (0.1, 0.3) and "betas" not in group  # no "adam" in its name
    adam = _built(section, "optimizer=Adam", "betas=[0.5,0.6]")
    assert type(adam) is torch.optim.Adam and adam.param_groups[0]["betas"] == (0.5, 0.6)
    # any importable module: a user's own optimizer
    (tmp_path / "my_optims.py").write_text(
        "import torch\n\nclass Halving(torch.optim.SGD):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_optims", raising=False)
    mine = _built(section, "optimizer_impl=my_optims", "optimizer=Halving", "lr=0.2")
    assert type(mine).__module__ == "my_optims" and type(mine).__name__ == "Halving"
    assert mine.param_groups[0]["lr"] == 0.2


@pytest.mark.parametrize("section", SECTIONS)
def test_an_unknown_optimizer_is_refused_before_ray(section):
    (problem,) = problems(f"{section}.optimizer=NoSuchOptimizer")
    assert problem.startswith(section) and "NoSuchOptimizer" in problem and "AdamW" in problem
    (problem,) = problems(f"{section}.optimizer_impl=no_such_module_here")
    assert "no_such_module_here" in problem and "cannot be imported" in problem
    (problem,) = problems(f"{section}.optimizer=Tensor", f"{section}.optimizer_impl=torch")
    assert "not a torch.optim.Optimizer" in problem


@pytest.mark.parametrize("section", SECTIONS)
def test_override_optimizer_config_reaches_the_constructor(section):
    built = _built(section, "lr=0.1", "override_optimizer_config={eps: 0.001, amsgrad: true}")
    (group,) = built.param_groups
    assert (group["eps"], group["amsgrad"], group["lr"]) == (0.001, True, 0.1)
    # it replaces the arguments built from the other keys too
    assert _built(section, "lr=0.1", "override_optimizer_config={lr: 0.5}").param_groups[0]["lr"] == 0.5
    sgd = _built(section, "optimizer=SGD", "override_optimizer_config={momentum: 0.9, nesterov: true}")
    assert (sgd.param_groups[0]["momentum"], sgd.param_groups[0]["nesterov"]) == (0.9, True)
    # an argument the class does not take: refused before Ray, naming it and the class's arguments
    (problem,) = problems(f"{section}.optimizer=SGD", f"{section}.override_optimizer_config={{betas: [0.1, 0.2]}}")
    assert "override_optimizer_config" in problem and "betas" in problem and "momentum" in problem


def test_override_optimizer_config_changes_the_step():
    """eps is in AdamW's first step: p - lr * m_hat / (sqrt(v_hat) + eps) with m_hat = g, sqrt(v_hat) = |g|."""
    for eps in (1e-8, 1.0):
        weight = torch.nn.Parameter(torch.tensor([1.0]))
        optim = FSDPOptimizerConfig(lr=0.1, weight_decay=0.0, override_optimizer_config={"eps": eps})
        optimizer = build_optimizer(torch.nn.ParameterList([weight]), optim, "actor_rollout_ref.actor.optim")
        weight.grad = torch.tensor([0.5])
        optimizer.step()
        assert weight.item() == pytest.approx(1.0 - 0.1 * 0.5 / (0.5 + eps), abs=1e-6)


@pytest.mark.parametrize("section", SECTIONS)
def test_zero_indexed_step_counts_the_schedule_from_0_or_1(section):
    def lrs(*overrides: str) -> list[float]:
        optim = _optim(section, "lr=0.1", *overrides)
        return _lrs(build_lr_scheduler(build_optimizer(torch.nn.Linear(2, 2), optim, section), optim, section), 5)

    warmup = ["lr_scheduler_type=constant", "lr_warmup_steps=4"]
    assert lrs(*warmup) == pytest.approx([0.0, 0.025, 0.05, 0.075, 0.1])
    assert lrs(*warmup, "zero_indexed_step=false") == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1])
    # cosine over 4 steps, no warmup: lr * (1 + cos(pi s / 4)) / 2 at s = 0..4, or s = 1..5 (the floor after 4)
    cosine = ["lr_scheduler_type=cosine", "lr_warmup_steps=0", "total_training_steps=4"]
    by_hand = [0.1 * (1 + math.cos(math.pi * min(s, 4) / 4)) / 2 for s in range(6)]
    assert lrs(*cosine) == pytest.approx(by_hand[:5], abs=1e-9)
    assert lrs(*cosine, "zero_indexed_step=false") == pytest.approx(by_hand[1:], abs=1e-9)
