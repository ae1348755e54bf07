#!/usr/bin/env bash
# Multi-turn SFT: a column of chat messages; only the assistant turns are trained.
# arithmetic_sft.py writes such a column (`messages`: the user prompt and the worked solution); any parquet with
# [{'role', 'content'}, ...] conversations works.
#   bash examples/sft/multiturn/run_smollm2_135m_multiturn.sh [save_path] [overrides...]
set -euo pipefail
set -x
save_path=${1:-checkpoints/multiturn-sft/smollm2-135m}
shift $(( $# > 0 ? 1 : 0 ))
data=${DATA_DIR:-$HOME/data}

python -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$data/arithmetic_sft/train.parquet" \
    data.val_files="$data/arithmetic_sft/test.parquet" \
    data.multiturn.enable=true \
    data.multiturn.messages_key=messages \
    data.max_length=320 \
    data.train_batch_size=16 \
    data.micro_batch_size_per_gpu=8 \
    use_remove_padding=true \
    model.enable_gradient_checkpointing=false \
    optim.lr=2e-5 \
    trainer.default_local_dir="$save_path" \
    trainer.experiment_name=smollm2-135m-multiturn \
    trainer.total_training_steps=32 \
    trainer.logger='[console]' "$@"
