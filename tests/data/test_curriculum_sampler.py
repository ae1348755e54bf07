"""data.sampler: a user's curriculum sampler is built by create_rl_sampler and told about every trained batch."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from torch.utils.data import SequentialSampler

from verl.experimental.dataset.sampler import AbstractCurriculumSampler
from verl.trainer.main_ppo import create_rl_sampler


class ReverseCurriculum(AbstractCurriculumSampler):
    def __init__(self, data_source, data_config):
        self.n = len(data_source)
        self.seen = []

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))

    def __len__(self):
        return self.n

    def update(self, batch) -> None:
        self.seen.append(batch)


class NotASampler:
    def __init__(self, data_source, data_config):
        pass


def _config(name, workers=0):
    return OmegaConf.create({
        "dataloader_num_workers": workers, "shuffle": True, "seed": 1,
        "sampler": {"class_path": f"pkg://{__name__}", "class_name": name},
    })  # fmt: skip


def test_curriculum_sampler_is_built_from_class_path():
    sampler = create_rl_sampler(_config("ReverseCurriculum"), list(range(4)))
    assert isinstance(sampler, ReverseCurriculum) and list(sampler) == [3, 2, 1, 0]


def test_a_class_that_is_not_a_sampler_is_refused_with_assertion_error():
    with pytest.raises(AssertionError, match="AbstractCurriculumSampler"):
        create_rl_sampler(_config("NotASampler"), list(range(4)))


def test_a_curriculum_needs_dataloader_num_workers_0():
    with pytest.raises(AssertionError, match="dataloader_num_workers=0"):
        create_rl_sampler(_config("ReverseCurriculum", workers=2), list(range(4)))


def test_without_class_path_shuffle_decides():
    plain = OmegaConf.create({"shuffle": False, "sampler": {"class_path": None, "class_name": None}})
    assert isinstance(create_rl_sampler(plain, list(range(4))), SequentialSampler)
    seeded = OmegaConf.create({"shuffle": True, "seed": 3})
    assert list(create_rl_sampler(seeded, list(range(8)))) == list(create_rl_sampler(seeded, list(range(8))))



def test_the_command_line_keys_reach_the_sampler_and_are_checked_before_ray(tmp_path):
    from verl.trainer.config import ConfigError, validate_config
    from verl.trainer.config.validate import load_config

    keys = [f"data.sampler.class_path=pkg://{__name__}", "data.sampler.class_name=ReverseCurriculum",
            "data.dataloader_num_workers=0"]
    cfg = validate_config(load_config(keys), check_files=False)
    sampler = create_rl_sampler(cfg.data, list(range(5)))  # the typed section, as the launcher passes it
    assert isinstance(sampler, ReverseCurriculum) and list(sampler) == [4, 3, 2, 1, 0]
    with pytest.raises(ConfigError, match="data.sampler.class_name is not"):
        validate_config(load_config(keys[:1]), check_files=True)
    with pytest.raises(ConfigError, match="data.sampler.class_path: sampler class file not found"):
        validate_config(load_config([f"data.sampler.class_path={tmp_path / 'nope.py'}", keys[1]]), check_files=True)
