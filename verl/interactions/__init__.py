"""Simulated users that answer between turns (upstream's verl.interactions API)."""
