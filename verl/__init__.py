"""verl: reinforcement-learning post-training of LLMs on the HybridFlow design."""

__version__ = "0.1.0"

__all__ = ["DataProto"]


def __getattr__(name):
    # Lazy so that `import verl.utils.<light module>` (config checks, CLIs) does not pay for torch.
    if name == "DataProto":
        from verl.protocol import DataProto

        return DataProto
    raise AttributeError(f"module 'verl' has no attribute {name!r}")
