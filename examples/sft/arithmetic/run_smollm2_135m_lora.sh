#!/usr/bin/env bash
# LoRA fine-tuning (peft) of the default model on worked arithmetic solutions: only the adapter trains.
#   bash examples/sft/arithmetic/run_smollm2_135m_lora.sh [save_path] [key=value overrides...]
# Each checkpoint holds the merged model (loadable by main_ppo directly) and the adapter in lora_adapter/.
set -euo pipefail
set -x
save_path=${1:-checkpoints/arithmetic-sft/smollm2-135m-lora}
shift $(( $# > 0 ? 1 : 0 ))
data=${DATA_DIR:-$HOME/data}

python -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$data/arithmetic_sft/train.parquet" \
    data.val_files="$data/arithmetic_sft/test.parquet" \
    data.max_length=320 \
    data.train_batch_size=16 \
    data.micro_batch_size_per_gpu=8 \
    use_remove_padding=true \
    model.lora_rank=32 \
    model.lora_alpha=16 \
    model.target_modules=all-linear \
    model.enable_gradient_checkpointing=false \
    optim.lr=2e-4 \
    trainer.default_local_dir="$save_path" \
    trainer.experiment_name=smollm2-135m-lora \
    trainer.total_training_steps=32 \
    trainer.logger='[console]' "$@"
