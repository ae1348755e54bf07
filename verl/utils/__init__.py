"""What several layers share: device and thread setup, torch helpers, Ray start-up, metrics and timing.

Domain code lives in its own package (verl.rewards, verl.data, verl.checkpoint, verl.algos); the old paths
under verl.utils (reward_score, dataset, checkpoint, tracking) stay importable as aliases of the new modules.
"""

# Upstream's `from verl.utils import as_torch_index, group_mean_std, hf_tokenizer, omega_conf_to_dataclass`; loaded
# on first use, so importing any verl.utils module stays as light as the module itself.
_LAZY = {"as_torch_index": "verl.utils.groupwise", "group_mean_std": "verl.utils.groupwise",
         "hf_tokenizer": "verl.utils.tokenizer", "omega_conf_to_dataclass": "verl.utils.config"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'verl.utils' has no attribute {name!r}")
