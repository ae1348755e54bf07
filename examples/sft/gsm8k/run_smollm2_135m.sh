#!/usr/bin/env bash
# Upstream's GSM8K SFT recipe: question and worked answer come from the extra_info column of the RL parquet.
#   python examples/data_preprocess/gsm8k.py --local_dataset_path <local copy of openai/gsm8k> --local_save_dir ~/data/gsm8k
#   bash examples/sft/gsm8k/run_smollm2_135m.sh [save_path] [overrides...]
set -euo pipefail
set -x
save_path=${1:-checkpoints/gsm8k-sft/smollm2-135m}
shift $(( $# > 0 ? 1 : 0 ))
data=${DATA_DIR:-$HOME/data}

python -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$data/gsm8k/train.parquet" \
    data.val_files="$data/gsm8k/test.parquet" \
    data.prompt_key=extra_info \
    data.response_key=extra_info \
    +data.prompt_dict_keys=['question'] \
    +data.response_dict_keys=['answer'] \
    data.max_length=512 \
    data.truncation=left \
    data.train_batch_size=16 \
    data.micro_batch_size_per_gpu=4 \
    use_remove_padding=true \
    model.partial_pretrain=null \
    trainer.default_local_dir="$save_path" \
    trainer.project_name=gsm8k-sft \
    trainer.experiment_name=gsm8k-sft-smollm2-135m \
    trainer.total_epochs=1 \
    trainer.logger='[console]' "$@"
