#!/usr/bin/env bash
# Score a model (an SFT checkpoint folder, or the default model with "null") on the arithmetic test split:
# main_generation writes n responses per prompt, main_eval prints test_score / pass@1 / pass@k per data source.
#   bash examples/sft/eval_checkpoint.sh <model_path|null> [n_samples] [out_dir]
set -euo pipefail
set -x
model=${1:-null}
n=${2:-1}
out=${3:-outputs/eval}
data=${DATA_DIR:-$HOME/data}
if [ "$n" -gt 1 ]; then sampling="rollout.do_sample=true rollout.temperature=1.0 rollout.top_p=1.0 rollout.top_k=-1";
else sampling="rollout.do_sample=false rollout.temperature=0"; fi

python -m verl.trainer.main_generation \
    model.path="$model" \
    data.path="$data/arithmetic/test.parquet" \
    data.output_path="$out/generations.parquet" \
    data.n_samples="$n" \
    data.batch_size=32 \
    rollout.name=hf \
    rollout.prompt_length=256 \
    rollout.response_length=64 \
    $sampling

python -m verl.trainer.main_eval \
    data.path="$out/generations.parquet" \
    data.output_path="$out/eval.json"
