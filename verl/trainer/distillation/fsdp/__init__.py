"""Distillation helpers for FSDP-trained models (upstream's `verl.trainer.distillation.fsdp`)."""
