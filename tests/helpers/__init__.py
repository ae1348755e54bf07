"""Shared test helpers (tiny tokenizers, fixtures builders) that need no downloads."""
