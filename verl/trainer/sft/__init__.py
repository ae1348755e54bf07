"""Pieces of the SFT trainer (verl/trainer/fsdp_sft_trainer.py): config checks, data, model, loss, checkpoints."""
