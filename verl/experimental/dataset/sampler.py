"""Upstream's import path for the curriculum sampler interface; the code lives in ``verl.data.curriculum``."""

from verl.data.curriculum import AbstractCurriculumSampler, AbstractSampler

__all__ = ["AbstractCurriculumSampler", "AbstractSampler"]
