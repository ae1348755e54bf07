"""The Python API: `verl.train(...)` and `verl.config(...)` on the same engine as `python -m verl.trainer.main_ppo`.

    import verl
    cfg = verl.config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4"])
    cfg.trainer.total_training_steps = 5
    result = verl.train(cfg, reward_fn=lambda data_source, solution_str, ground_truth, extra_info: 1.0,
                        train_data=rows, val_data=val_rows)

See docs/python_api.md. Names resolve lazily: the CLI imports the builder to check a config before torch loads.
"""

from importlib import import_module

_WHERE = {
    "Callback": "verl.trainer.api.callbacks",
    "TrainResult": "verl.trainer.api.result",
    "compose": "verl.trainer.api.builder",
    "config": "verl.trainer.api.builder",
    "run_typed": "verl.trainer.api.training",
    "train": "verl.trainer.api.training",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'verl.trainer.api' has no attribute {name!r}")
