"""On-policy distillation helpers at upstream's import path (`verl.trainer.distillation`).

Only the engine-independent piece is built: `fsdp.utils.topk_logprobs_from_logits`, which turns a model's logits into
the top-k log-probabilities a student/teacher loss compares. The distillation trainer itself is not built.
"""
