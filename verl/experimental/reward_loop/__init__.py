"""Upstream's ``verl.experimental.reward_loop`` path. Only the rate limiter is provided so far (see limited.py)."""
