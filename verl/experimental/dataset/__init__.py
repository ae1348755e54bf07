"""Upstream's ``verl.experimental.dataset`` path; the code lives in ``verl.data``."""
