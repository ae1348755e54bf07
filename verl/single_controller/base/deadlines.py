"""How long the driver waits for a worker-group call before it declares the workers hung.

A deadline is a base per call plus a term per sample of the call's batch (the rows of the DataProto arguments), so
a step's rollout of 1024 responses gets more time than a save of the same run. Start-up (the workers' ``__init__``
and ``init_model``, which load weights) has its own, flat deadline. ``None`` means no deadline.

The key names are the trainer's (verl.trainer.config.TrainerConfig); they are only carried here for messages.
"""

from __future__ import annotations

from dataclasses import dataclass

STARTUP_METHODS = frozenset({"__init__", "init_model"})

# Worker method -> the driver's stage, as the timing_s/<stage> metrics name it.
STAGE_OF_METHOD = {
    "generate_sequences": "gen",
    "compute_log_prob": "old_log_prob",
    "compute_ref_log_prob": "ref",
    "compute_values": "values",
    "compute_rm_score": "reward_model",
    "update_critic": "update_critic",
    "update_actor": "update_actor",
    "save_checkpoint": "save_checkpoint",
    "load_checkpoint": "load_checkpoint",
    "__init__": "worker start-up",
    "init_model": "worker start-up",
}


def stage_of(method: str) -> str:
    return STAGE_OF_METHOD.get(method, method)


def count_samples(args: tuple, kwargs: dict) -> int:
    """Rows of the DataProto arguments of a call (what the call's work scales with)."""
    from verl.protocol import DataProto  # lazily, as dispatch.py: `import verl` stays light

    return sum(len(v) for v in (*args, *kwargs.values()) if isinstance(v, DataProto) and v.batch is not None)


@dataclass(frozen=True)
class WorkerDeadlines:
    startup_s: float | None = None
    call_s: float | None = None
    per_sample_s: float = 0.0
    startup_key: str = "trainer.ray_wait_register_center_timeout"
    call_key: str = "trainer.worker_call_timeout_s"
    per_sample_key: str = "trainer.worker_call_timeout_per_sample_s"

    def __post_init__(self) -> None:
        for name in ("startup_s", "call_s", "per_sample_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"WorkerDeadlines.{name} must be >= 0 seconds or None, got {value}")

    @classmethod
    def from_trainer(cls, trainer: object) -> WorkerDeadlines:
        """From a config's trainer section (main_ppo, main_generation, the SFT trainer): its
        ray_wait_register_center_timeout for start-up, worker_call_timeout_s (+ per sample) for calls; a section
        without the call keys (SFT: one fit() call is the whole run) has no call deadline."""
        startup = getattr(trainer, "ray_wait_register_center_timeout", None)
        return cls(startup_s=float(startup) if startup is not None else None,
                   call_s=getattr(trainer, "worker_call_timeout_s", None),
                   per_sample_s=getattr(trainer, "worker_call_timeout_per_sample_s", 0.0))

    def for_call(self, method: str, samples: int = 0) -> float | None:
        """Seconds the driver waits for every rank of a call to `method` over `samples` rows; None: forever."""
        if method in STARTUP_METHODS:
            return self.startup_s
        if self.call_s is None:
            return None
        return self.call_s + (self.per_sample_s or 0.0) * samples

    def explain(self, method: str, samples: int = 0) -> str:
        """Where the figure came from, in config keys, for the overrun message."""
        if method in STARTUP_METHODS:
            return f"{self.startup_key}={self.startup_s:g}"
        text = f"{self.call_key}={self.call_s:g}"
        if samples and self.per_sample_s:
            text += f" + {samples} samples x {self.per_sample_key}={self.per_sample_s:g}"
        return text

    def which_key(self, method: str) -> str:
        return self.startup_key if method in STARTUP_METHODS else f"{self.call_key} / {self.per_sample_key}"

