#!/usr/bin/env bash
# Upstream's run_qwen2.5-3b_gsm8k_multiturn.sh with the keys unchanged, on this machine: vLLM instead of SGLang,
# the default model (SmolLM2-135M-Instruct), one CPU worker, sizes scaled down (max_num_seqs sizes the CPU KV
# cache to this batch). Extra overrides go at the end.
#   python examples/data_preprocess/gsm8k_multiturn_w_tool.py --local_dataset_path <GSM8K copy> \
#       --local_save_dir ~/data/gsm8k_multiturn     (no copy? examples/data_preprocess/gsm8k_layout_sample.py)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${VERL_VENV:-.venv}/bin/python
PROJECT_DIR="$(pwd)"
CONFIG_PATH="$PROJECT_DIR/examples/sglang_multiturn/config"
DATA=${DATA:-$HOME/data/gsm8k_multiturn}

"$PY" -m verl.trainer.main_ppo \
    --config-path="$CONFIG_PATH" \
    --config-name='gsm8k_multiturn_grpo' \
    algorithm.adv_estimator=grpo \
    data.train_batch_size=4 \
    data.max_prompt_length=1024 \
    data.max_response_length=256 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$("$PY" -m verl.utils.default_model --quiet)" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.max_num_seqs=64 \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger=['console'] \
    trainer.project_name='gsm8k_async_rl' \
    trainer.experiment_name='smollm2_function_rm-gsm8k-async-vllm-multi-w-tool' \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=2 \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$PROJECT_DIR/examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml" \
    trainer.total_epochs=15 trainer.total_training_steps=2 "$@"
