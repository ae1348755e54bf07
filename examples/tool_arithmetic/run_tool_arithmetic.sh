#!/usr/bin/env bash
# The bundled tool task end to end: data, an SFT cold start on tool-use traces, then GRPO with the code interpreter
# through the agent loop (the trainer starts the local sandbox). benchmarks/agent_learning.py runs the same commands
# and prints the figures; docs/agent_learning.md explains them. Extra main_ppo overrides go after the script's name.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${VERL_VENV:-.venv}/bin/python
OUT=${TOOL_ARITH_DIR:-outputs/tool_arithmetic}
SFT_STEPS=${SFT_STEPS:-4}
GRPO_STEPS=${GRPO_STEPS:-5}
PRECISION=$("$PY" -m verl.utils.device)  # bf16 where the CPU has it natively, else fp32

"$PY" examples/data_preprocess/tool_arithmetic.py --local_dir "$OUT/data/rl" --train_size 512 --test_size 64
"$PY" examples/data_preprocess/tool_arithmetic_sft.py --local_dir "$OUT/data/sft" --train_size $((16 * SFT_STEPS)) \
  --test_size 8 --exclude_questions_from "$OUT/data/rl/test.parquet"

"$PY" -m verl.trainer.fsdp_sft_trainer \
  data.multiturn.enable=true data.multiturn.messages_key=messages data.multiturn.tools_key=tools \
  data.chat_template=verl_hermes \
  data.train_files="$OUT/data/sft/train.parquet" data.val_files=null data.max_length=448 \
  data.train_batch_size=16 data.micro_batch_size_per_gpu=16 use_remove_padding=true \
  model.enable_gradient_checkpointing=false model.fsdp_config.mixed_precision.param_dtype="$PRECISION" \
  optim.lr=2e-5 optim.warmup_steps_ratio=0 optim.lr_scheduler=constant \
  trainer.total_training_steps="$SFT_STEPS" trainer.total_epochs=100 trainer.checkpoint.save_contents=[model] \
  trainer.default_local_dir="$OUT/sft" trainer.resume_mode=disable trainer.logger=[console]

"$PY" -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \
  data.train_files="$OUT/data/rl/train.parquet" data.val_files="$OUT/data/rl/test.parquet" \
  data.return_raw_chat=True data.train_batch_size=8 data.max_prompt_length=320 data.max_response_length=128 \
  actor_rollout_ref.model.path="$OUT/sft/global_step_$SFT_STEPS" \
  actor_rollout_ref.model.use_remove_padding=true actor_rollout_ref.model.enable_gradient_checkpointing=false \
  actor_rollout_ref.actor.optim.lr=2e-5 actor_rollout_ref.actor.use_kl_loss=false \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.actor.use_dynamic_bsz=true actor_rollout_ref.actor.ppo_max_token_len_per_gpu=3584 \
  actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype="$PRECISION" \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
  actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=14336 \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.dtype="$PRECISION" \
  actor_rollout_ref.rollout.max_num_seqs=64 actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.temperature=0.7 \
  actor_rollout_ref.rollout.mode=async actor_rollout_ref.rollout.multi_turn.enable=True \
  actor_rollout_ref.rollout.multi_turn.tool_config_path=examples/tool_arithmetic/code_interpreter_tool_config.yaml \
  actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3 \
  actor_rollout_ref.rollout.multi_turn.chat_template=verl_hermes \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps="$GRPO_STEPS" \
  trainer.test_freq="$GRPO_STEPS" trainer.val_before_train=True trainer.save_freq=-1 trainer.logger=[console] \
  trainer.project_name=agent_learning trainer.experiment_name=grpo_tool_arithmetic \
  trainer.default_local_dir="$OUT/grpo" "$@"
