"""Upstream verl's import paths for what it still calls experimental (the agent loop); the code lives in verl.workers."""
