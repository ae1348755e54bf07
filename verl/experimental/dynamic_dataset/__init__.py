"""Upstream's ``verl.experimental.dynamic_dataset`` path; the code lives in ``verl.data.dynamic_gen``."""
