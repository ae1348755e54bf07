"""Upstream's ``verl.experimental.reward_loop.reward_manager`` path."""
