#!/usr/bin/env bash
# Full fine-tuning of the default model (SmolLM2-135M-Instruct) on worked arithmetic solutions, one process.
#   bash examples/sft/arithmetic/run_smollm2_135m.sh [save_path] [key=value overrides...]
# The last checkpoint (<save_path>/global_step_N) is a HF folder: pass it to main_ppo as
# actor_rollout_ref.model.path, or to main_generation as model.path.
set -euo pipefail
set -x
save_path=${1:-checkpoints/arithmetic-sft/smollm2-135m}
shift $(( $# > 0 ? 1 : 0 ))
data=${DATA_DIR:-$HOME/data}

python examples/data_preprocess/arithmetic.py --local_save_dir "$data/arithmetic" --difficulty 1
python examples/data_preprocess/arithmetic_sft.py --local_save_dir "$data/arithmetic_sft" --difficulty 1 \
    --exclude_questions_from "$data/arithmetic/test.parquet"

python -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$data/arithmetic_sft/train.parquet" \
    data.val_files="$data/arithmetic_sft/test.parquet" \
    data.prompt_key=prompt \
    data.response_key=response \
    data.max_length=320 \
    data.train_batch_size=16 \
    data.micro_batch_size_per_gpu=8 \
    use_remove_padding=true \
    model.partial_pretrain=null \
    model.enable_gradient_checkpointing=false \
    optim.lr=2e-5 \
    trainer.default_local_dir="$save_path" \
    trainer.project_name=arithmetic-sft \
    trainer.experiment_name=smollm2-135m \
    trainer.total_training_steps=32 \
    trainer.save_freq=16 \
    trainer.test_freq=16 \
    trainer.logger='[console]' "$@"
