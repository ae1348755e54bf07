#!/usr/bin/env bash
# The same SFT on several ranks with torchrun (gloo on CPU, nccl on GPUs); the weights are sharded with FSDP2.
#   bash examples/sft/arithmetic/run_smollm2_135m_torchrun.sh <nproc_per_node> [save_path] [overrides...]
# Without torchrun, trainer.n_gpus_per_node=N starts the N ranks as Ray workers instead.
set -euo pipefail
set -x
nproc_per_node=${1:-2}
save_path=${2:-checkpoints/arithmetic-sft/smollm2-135m-ranks$nproc_per_node}
shift $(( $# > 1 ? 2 : $# ))
data=${DATA_DIR:-$HOME/data}

torchrun --standalone --nnodes=1 --nproc_per_node="$nproc_per_node" -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$data/arithmetic_sft/train.parquet" \
    data.val_files="$data/arithmetic_sft/test.parquet" \
    data.max_length=320 \
    data.train_batch_size=16 \
    data.micro_batch_size_per_gpu=4 \
    use_remove_padding=true \
    model.enable_gradient_checkpointing=false \
    optim.lr=2e-5 \
    trainer.default_local_dir="$save_path" \
    trainer.total_training_steps=32 \
    trainer.logger='[console]' "$@"
