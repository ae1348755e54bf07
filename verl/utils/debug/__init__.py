"""Upstream's debugging helpers: ``verl.utils.debug.metrics`` (rollout-vs-actor probability metrics)."""
