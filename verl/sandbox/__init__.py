"""The sandbox for model-written code: an isolated runner, a SandboxFusion-compatible HTTP service and its client."""
