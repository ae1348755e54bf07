"""Moving weights from the trainer's sharded model into the rollout engine, in process (the hybrid engine)."""
