#!/usr/bin/env bash
# DAPO on the bundled arithmetic task with the default model (SmolLM2-135M-Instruct), on this machine's CPU.
#
# The keys and values of upstream verl's DAPO recipe (recipe/dapo/test_dapo_7b_math.sh), scaled down in sizes
# (batch sizes, lengths, steps, workers) and run through the main trainer:
#   clip-higher (clip_ratio_low 0.2 / clip_ratio_high 0.28, dual-clip c 10), token-mean loss aggregation, no KL,
#   the overlong buffer in the recipe's spelling (+reward_model.reward_kwargs.overlong_buffer_cfg.*), and dynamic
#   sampling (algorithm.filter_groups, metric acc, gen batch = 3 x train batch, at most 10 rounds per step).
# Where it departs from the recipe, and why:
#   - lr 1e-5 (recipe 1e-6) with no warm-up (recipe 10 steps): a 12-step run of a 135M model moves nothing at 1e-6,
#     and 10 warm-up steps would be most of the run. 1e-5 is what the GRPO demo (scripts/demo.sh) learns with.
#   - validation greedy (the recipe samples at top_p 0.7): 64 prompts sampled once are too noisy to read a change.
#   - no checkpoints (trainer.save_freq=-1): each would be ~1.5 GB with the optimizer state.
# Sizes change through the environment (DAPO_STEPS=20 ...); extra main_ppo overrides go after the script's name.
# docs/dapo.md has the figures this printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${VERL_VENV:-.venv}/bin/python
OUT=${DAPO_DIR:-outputs/dapo}
DATA=$OUT/data
STEPS=${DAPO_STEPS:-12}
LEVEL=${DAPO_LEVEL:-1}

# the recipe's knobs, as named there
adv_estimator=grpo
use_kl_in_reward=False
kl_coef=0.0
use_kl_loss=False
kl_loss_coef=0.0
clip_ratio_low=0.2
clip_ratio_high=0.28
max_prompt_length=256            # recipe: 2048
max_response_length=48           # recipe: 8192 (20480 for the 32B run)
enable_overlong_buffer=True
overlong_buffer_len=16           # recipe: 4096 of 8192 (half); here a third: arithmetic answers are short
overlong_penalty_factor=1.0
loss_agg_mode="token-mean"
enable_filter_groups=True
filter_groups_metric=acc
max_num_gen_batches=10
train_prompt_bsz=8               # recipe: 512
gen_prompt_bsz=$((train_prompt_bsz * 3))
n_resp_per_prompt=4              # recipe: 16
train_prompt_mini_bsz=8          # recipe: 32
temperature=1.0
top_p=1.0
top_k=-1

ROLLOUT=${DAPO_ROLLOUT:-vllm}
if [ "$ROLLOUT" = vllm ] && ! "$PY" -c "import vllm" >/dev/null 2>&1; then
  echo "[dapo] vLLM is not installed: using the HF rollout"
  ROLLOUT=hf
fi
PRECISION=${DAPO_PRECISION:-$("$PY" -m verl.utils.device)}  # bf16 where the CPU has it natively, else fp32
ROLLOUT_ARGS=(actor_rollout_ref.rollout.name="$ROLLOUT" actor_rollout_ref.rollout.dtype="$PRECISION")
[ "$ROLLOUT" = vllm ] && ROLLOUT_ARGS+=(actor_rollout_ref.rollout.max_num_seqs=96)

if [ ! -f "$DATA/train.parquet" ] || [ ! -f "$DATA/test.parquet" ] || [ "$(cat "$DATA/.level" 2>/dev/null)" != "$LEVEL" ]; then
  "$PY" examples/data_preprocess/arithmetic.py --local_save_dir "$DATA" --difficulty "$LEVEL" \
    --train_size 2048 --test_size 64 --seed 0
  echo "$LEVEL" > "$DATA/.level"
fi
rm -rf "$OUT/run"
start=$(date +%s)
"$PY" -m verl.trainer.main_ppo \
  data.train_files="$DATA/train.parquet" data.val_files="$DATA/test.parquet" \
  data.prompt_key=prompt data.truncation=left \
  data.max_prompt_length=${max_prompt_length} data.max_response_length=${max_response_length} \
  data.gen_batch_size=${gen_prompt_bsz} data.train_batch_size=${train_prompt_bsz} \
  actor_rollout_ref.rollout.n=${n_resp_per_prompt} \
  algorithm.adv_estimator=${adv_estimator} algorithm.use_kl_in_reward=${use_kl_in_reward} \
  algorithm.kl_ctrl.kl_coef=${kl_coef} \
  actor_rollout_ref.actor.use_kl_loss=${use_kl_loss} actor_rollout_ref.actor.kl_loss_coef=${kl_loss_coef} \
  actor_rollout_ref.actor.clip_ratio_low=${clip_ratio_low} actor_rollout_ref.actor.clip_ratio_high=${clip_ratio_high} \
  actor_rollout_ref.actor.clip_ratio_c=10.0 \
  algorithm.filter_groups.enable=${enable_filter_groups} \
  algorithm.filter_groups.max_num_gen_batches=${max_num_gen_batches} \
  algorithm.filter_groups.metric=${filter_groups_metric} \
  actor_rollout_ref.model.use_remove_padding=True \
  actor_rollout_ref.actor.use_dynamic_bsz=True actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$(( 8 * (max_prompt_length + max_response_length) )) \
  actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$(( 32 * (max_prompt_length + max_response_length) )) \
  actor_rollout_ref.model.path="$("$PY" -m verl.utils.default_model --quiet)" \
  actor_rollout_ref.actor.optim.lr=1e-5 actor_rollout_ref.actor.optim.weight_decay=0.1 \
  actor_rollout_ref.actor.ppo_mini_batch_size=${train_prompt_mini_bsz} \
  actor_rollout_ref.actor.entropy_coeff=0 actor_rollout_ref.actor.grad_clip=1.0 \
  actor_rollout_ref.actor.loss_agg_mode=${loss_agg_mode} \
  actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype="$PRECISION" \
  actor_rollout_ref.rollout.temperature=${temperature} actor_rollout_ref.rollout.top_p=${top_p} \
  actor_rollout_ref.rollout.top_k=${top_k} "${ROLLOUT_ARGS[@]}" \
  reward_model.reward_manager=dapo \
  +reward_model.reward_kwargs.overlong_buffer_cfg.enable=${enable_overlong_buffer} \
  +reward_model.reward_kwargs.overlong_buffer_cfg.len=${overlong_buffer_len} \
  +reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=${overlong_penalty_factor} \
  +reward_model.reward_kwargs.overlong_buffer_cfg.log=False \
  +reward_model.reward_kwargs.max_resp_len=${max_response_length} \
  trainer.logger=[console] trainer.project_name=DAPO trainer.experiment_name=dapo_smollm2_arithmetic \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.val_before_train=True trainer.test_freq="$STEPS" \
  trainer.save_freq=-1 trainer.total_training_steps="$STEPS" \
  trainer.default_local_dir="$OUT/run" trainer.resume_mode=auto "$@"
echo "dapo wall time: $(( $(date +%s) - start ))s (report: $OUT/run/report)"
