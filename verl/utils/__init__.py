"""What several layers share: device and thread setup, torch helpers, Ray start-up, metrics and timing.

Domain code lives in its own package (verl.rewards, verl.data, verl.checkpoint, verl.algos); the old paths
under verl.utils (reward_score, dataset, checkpoint, tracking) stay importable as aliases of the new modules.
"""
