"""Pieces of the vLLM rollout (engine construction, sampling, batching, KV-cache sleep).

Importing this package does not import vLLM; only building an engine does.
"""
