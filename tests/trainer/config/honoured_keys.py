"""The honoured half of the key audit: each ppo_trainer.yaml key the runtime uses -> a test showing its effect.

The refused half is machine-readable from the dataclasses (`verl.utils.config_schema.iter_refusals`);
test_yaml_leaves.py checks that every leaf of every shipped yaml is in exactly one of the two.

Sections with the same type share a test where the same code reads them: actor, reference and critic
fsdp_config all go through verl.workers.fsdp_utils.apply_fsdp2 (test_key_effects.py's
test_ref_and_critic_fsdp_sections_reach_apply_fsdp2 shows each worker hands it its own section), the actor's and
critic's optim through build_optimizer / build_lr_scheduler.
"""

from __future__ import annotations

ARR = "actor_rollout_ref"

_DATASET = "tests/data/test_rl_dataset.py"
_ACTOR = "tests/workers/actor/test_dp_actor.py"
_CRITIC = "tests/workers/critic/test_dp_critic.py"
_RMPAD = "tests/workers/actor/test_remove_padding.py"
_KNOBS = "tests/workers/actor/test_memory_knobs.py"
_LOSSES = "tests/algos/test_policy_losses.py"
_KL = "tests/algos/test_kl_value_agg.py"
_ADV = "tests/algos/test_advantage_estimators.py"
_ALGOS = "tests/algos/test_algos_dataproto.py"
_VLLM = "tests/workers/rollout/test_vllm_parts.py"
_HF = "tests/workers/rollout/test_hf_rollout.py"
_CKPT = "tests/checkpoint/test_trainer_checkpointing.py"
_CKPT_POLICY = "tests/models/test_checkpoint_policy.py"
_FSDP_CKPT = "tests/checkpoint/test_fsdp_checkpoint_manager.py"
_REWARD = "tests/workers/reward_manager/test_reward_managers.py"
_LOAD_REWARD = "tests/workers/reward_manager/test_load_reward_manager.py"
_FIT = "tests/trainer/ppo/test_fit_loop.py"
_LORA = "tests/models/test_lora.py"
_LORA_W = "tests/workers/test_lora_workers.py"
_ULYSSES_W = "tests/workers/test_ulysses_workers.py"
_TRAINER_KEYS = "tests/trainer/ppo/test_trainer_keys.py"  # helper H1's runtime-key tests
_BATCHES = "tests/trainer/config/test_config_batch_sizes.py"
_DEPRECATED = "tests/trainer/config/test_deprecated_keys.py"
_UPSTREAM = "tests/trainer/config/test_upstream_keys.py"
_PATHS = "tests/trainer/config/test_model_paths_and_datagen.py"  # model.hf_config_path/tokenizer_path, ref.model, datagen
_FSDP1_NOTES = "test_fsdp1_options_and_worker_impl_are_accepted_with_a_note"
_EFFECTS = "tests/trainer/config/test_honoured_effects.py"
_KEYS = "tests/trainer/config/test_key_effects.py"
_UPDATE = "tests/trainer/config/test_key_effects_update.py"
_DATA = "tests/trainer/config/test_key_effects_data.py"
_FILES = "test_data_files_and_max_samples_build_the_datasets_the_trainer_gets"
_TRACKER = "test_logger_and_names_choose_the_trackers_backends"
_AGENT_E2E = "tests/e2e/test_agent_loop_e2e.py"
_RC = "tests/trainer/ppo/test_rollout_correction_stage.py"
_DYN = "tests/trainer/ppo/test_dynamic_sampling.py"  # DAPO's dynamic sampling
_TOOL_AGENT = "tests/workers/rollout/agent_loop/test_tool_agent.py"
_AGENT_KEYS = "tests/workers/rollout/agent_loop/test_agent_keys.py"
_SKIP = "tests/trainer/ppo/test_rollout_skip_trainer.py"
_PROM = "tests/workers/rollout/test_prometheus_metrics.py"
_CKPT_ENGINE = "tests/workers/rollout/test_checkpoint_engine_buckets.py"
_AGENT_HF = "tests/workers/rollout/agent_loop/test_single_turn_hf.py"
_SANDBOX = "tests/trainer/ppo/test_sandbox_service.py"
_RM = "tests/workers/reward_model/test_reward_model_worker.py"
_LOOP = "tests/workers/reward_manager/test_reward_loop_keys.py"
_GENRM = "tests/workers/reward_manager/test_genrm_engine.py"
_RM_CFG = "tests/workers/reward_model/test_reward_model_config.py"
_RM_E2E = "tests/workers/reward_model/test_reward_model_e2e.py"
_LOAD_CONTENTS = "test_checkpoint_load_contents_picks_what_a_resume_restores"
_DTYPE_RESHARD = "test_model_dtype_and_reshard_after_forward_shape_each_workers_module"
_KL_LOSS = "test_use_kl_loss_adds_kl_loss_coef_times_the_kl_to_the_ref_policy"
_AGG = "test_loss_agg_mode_aggregates_the_actor_and_the_critic_loss"
_STRATEGY = "test_strategy_fsdp_and_fsdp2_both_shard_with_fsdp2_and_others_are_refused"
_SEED_KEYS = "tests/workers/test_engine_seed_keys.py"  # fsdp_config.seed/full_determinism/dtype, data_loader_seed, ...


def _fsdp(prefix: str) -> dict[str, str]:
    return {
        f"{prefix}.param_offload": f"{_KNOBS}::test_offload_on_cpu_warns_and_changes_nothing",
        f"{prefix}.optimizer_offload": f"{_KNOBS}::test_offload_on_cpu_warns_and_changes_nothing",
        f"{prefix}.reshard_after_forward": f"{_DATA}::{_DTYPE_RESHARD}",
        f"{prefix}.model_dtype": f"{_DATA}::{_DTYPE_RESHARD}",
        f"{prefix}.mixed_precision.param_dtype": f"{_KNOBS}::test_bf16_mixed_precision_is_close_to_fp32",
        f"{prefix}.mixed_precision.reduce_dtype": f"{_KNOBS}::test_bf16_mixed_precision_is_close_to_fp32",
        f"{prefix}.strategy": f"{_UPSTREAM}::test_fsdp_config_strategy_accepts_fsdp_and_fsdp2_and_refuses_megatron",
        f"{prefix}.use_orig_params": f"{_UPSTREAM}::{_FSDP1_NOTES}",
        f"{prefix}.forward_prefetch": f"{_UPSTREAM}::{_FSDP1_NOTES}",
        # one worker builds every role's mesh the same way (fsdp_workers._init_distributed)
        f"{prefix}.fsdp_size": "tests/workers/test_hsdp_workers.py::test_hsdp_replicates_the_weights_and_trains_as_full_sharding",
        f"{prefix}.seed": f"{_SEED_KEYS}::test_seed_full_determinism_and_dtype_act_in_each_roles_worker",
        f"{prefix}.full_determinism": f"{_SEED_KEYS}::test_seed_full_determinism_and_dtype_act_in_each_roles_worker",
        f"{prefix}.dtype": f"{_SEED_KEYS}::test_dtype_is_the_mixed_precision_param_dtype",
    }


def _optim(prefix: str) -> dict[str, str]:
    test = f"{_KEYS}::test_optim_keys_build_the_optimizer_and_its_schedule"
    keys = ("lr", "lr_warmup_steps", "lr_warmup_steps_ratio", "min_lr_ratio", "num_cycles", "warmup_style",
            "lr_scheduler_type", "total_training_steps", "weight_decay", "betas")
    optimizer_keys = "tests/workers/test_optimizer_keys.py"
    return {f"{prefix}.{key}": test for key in keys} | {
        f"{prefix}.clip_grad": f"{_UPSTREAM}::test_optim_clip_grad_is_the_roles_grad_clip",
        f"{prefix}.optimizer": f"{optimizer_keys}::test_optimizer_and_optimizer_impl_pick_the_class",
        f"{prefix}.optimizer_impl": f"{optimizer_keys}::test_optimizer_and_optimizer_impl_pick_the_class",
        f"{prefix}.override_optimizer_config": f"{optimizer_keys}::test_override_optimizer_config_reaches_the_constructor",
        f"{prefix}.zero_indexed_step": f"{optimizer_keys}::test_zero_indexed_step_counts_the_schedule_from_0_or_1"}


HONOURED: dict[str, str] = {
    f"{ARR}.model.use_shm": f"{_UPSTREAM}::test_use_shm_loads_the_model_from_a_dev_shm_copy",
    f"{ARR}.actor.entropy_from_logits_with_chunking": "tests/workers/actor/test_entropy_keys.py::test_the_actor_update_with_entropy_in_the_loss_is_unchanged",
    f"{ARR}.actor.entropy_checkpointing": "tests/workers/actor/test_entropy_keys.py::test_entropy_checkpointing_keeps_less_and_gives_the_same_gradient",
    f"{ARR}.actor.use_prefix_grouper": "tests/workers/actor/test_prefix_grouper.py::test_fewer_tokens_through_the_model",
    f"{ARR}.actor.calculate_sum_pi_squared": "tests/algos/test_otb.py::test_the_actor_log_prob_pass_returns_sum_pi_squared_at_the_temperature",
    f"{ARR}.actor.sum_pi_squared_checkpointing": "tests/algos/test_otb.py::test_sum_pi_squared_checkpointing_keeps_less_and_gives_the_same_gradient",
    f"{ARR}.ref.entropy_from_logits_with_chunking": "tests/workers/actor/test_entropy_keys.py::test_the_reference_section_carries_the_same_keys",
    f"{ARR}.ref.entropy_checkpointing": "tests/workers/actor/test_entropy_keys.py::test_the_reference_section_carries_the_same_keys",
    f"{ARR}.actor.entropy_from_logits_chunk_size": "tests/workers/actor/test_entropy_keys.py::test_the_chunk_size_is_"
                                                   "the_rows_per_chunk",
    f"{ARR}.ref.entropy_from_logits_chunk_size": "tests/workers/actor/test_entropy_keys.py::test_the_chunk_size_is_"
                                                 "the_rows_per_chunk",
    f"{ARR}.actor.tau_pos": f"{_UPSTREAM}::test_actor_tau_spelling_sets_the_sapo_temperatures",
    f"{ARR}.actor.tau_neg": f"{_UPSTREAM}::test_actor_tau_spelling_sets_the_sapo_temperatures",
    f"{ARR}.actor.use_torch_compile": "tests/workers/actor/test_entropy_compile.py::test_the_actor_update_with_a_"
                                      "compiled_entropy_is_the_eager_one",
    f"{ARR}.ref.use_torch_compile": "tests/workers/actor/test_entropy_compile.py::test_the_reference_section_follows_"
                                    "the_actors_key",
    "trainer.use_legacy_worker_impl": f"{_UPSTREAM}::{_FSDP1_NOTES}",
    # ------------------------------------------------------------ data
    "data.tokenizer": "tests/data/test_rl_dataset_real_tokenizer.py::test_arithmetic_prompts_with_smollm2_tokenizer",
    "data.train_files": f"{_DATA}::{_FILES}",
    "data.val_files": f"{_DATA}::{_FILES}",
    "data.prompt_key": f"{_DATASET}::test_missing_prompt_column_names_column_file_and_key",
    "data.reward_fn_key": f"{_REWARD}::test_missing_reward_fn_key_names_the_config_key",
    "data.max_prompt_length": f"{_DATASET}::test_truncation_modes_keep_max_prompt_length",
    "data.max_response_length": f"{_DATA}::test_max_response_length_is_the_rollout_length_and_dapos_limit",
    "data.train_batch_size": f"{_UPDATE}::test_train_batch_size_is_the_prompts_per_step",
    "data.val_batch_size": f"{_DEPRECATED}::test_val_batch_size_is_the_validation_generation_batch",
    "data.gen_batch_size": f"{_DYN}::test_trainer_generates_gen_batch_size_prompts_per_round_and_trains_on_train_batch_size",
    "data.return_raw_input_ids": f"{_TRAINER_KEYS}::test_return_raw_input_ids",
    "data.return_raw_chat": f"{_DATASET}::test_raw_chat_only_when_asked",
    "data.apply_chat_template_kwargs": "tests/data/test_chat_template_kwargs.py::test_the_dataset_renders_with_the_kwargs",
    "data.sampler.class_path": "tests/data/test_curriculum_sampler.py::test_the_command_line_keys_reach_the_sampler_and_are_checked_before_ray",
    "data.sampler.class_name": "tests/data/test_curriculum_sampler.py::test_the_command_line_keys_reach_the_sampler_and_are_checked_before_ray",
    "data.return_full_prompt": f"{_DATA}::test_return_full_prompt_adds_the_templated_text_to_the_trainers_items",
    "data.shuffle": f"{_DATASET}::test_sampler_is_seeded_random_or_sequential",
    "data.seed": f"{_DATASET}::test_sampler_is_seeded_random_or_sequential",
    "data.validation_shuffle": "tests/trainer/ppo/test_validation_shuffle.py::test_validation_shuffle_changes_the_"
                               "order_deterministically_and_not_the_metrics",
    "data.dataloader_num_workers": f"{_UPDATE}::test_dataloader_num_workers_reaches_the_training_dataloader",
    "data.filter_overlong_prompts": f"{_DATASET}::test_filter_overlong_prompts_drops_and_reports",
    "data.filter_overlong_prompts_workers": f"{_TRAINER_KEYS}::test_filter_overlong_prompts_workers",
    "data.truncation": f"{_DATASET}::test_truncation_modes_keep_max_prompt_length",
    "data.trust_remote_code": f"{_KEYS}::test_data_trust_remote_code_reaches_the_drivers_tokenizer",
    "data.train_max_samples": f"{_DATA}::{_FILES}",
    "data.val_max_samples": f"{_DATA}::{_FILES}",
    "data.custom_cls.path": f"{_DATASET}::test_custom_dataset_class_from_file",
    "data.custom_cls.name": f"{_DATASET}::test_custom_dataset_class_from_file",
    "data.datagen.path": f"{_PATHS}::test_datagen_adds_the_generators_rows_when_built_and_after_every_step",
    "data.datagen.name": f"{_PATHS}::test_datagen_adds_the_generators_rows_when_built_and_after_every_step",
    f"{ARR}.model.hf_config_path": f"{_PATHS}::test_hf_config_path_builds_the_model_from_that_config_with_the_weights_of_path",
    f"{ARR}.model.tokenizer_path": f"{_PATHS}::test_tokenizer_path_is_the_drivers_tokenizer",
    f"{ARR}.ref.model": f"{_PATHS}::test_workers_honour_hf_config_path_tokenizer_path_and_ref_model",
    f"{ARR}.actor.freeze_vision_tower": "tests/workers/actor/test_vlm_actor.py::test_update_reaches_the_vision_tower_unless_frozen",
    "data.image_key": "tests/data/test_rl_dataset_vision.py::test_items_carry_expanded_prompts_mrope_positions_and_multi_modal_inputs",
    "data.video_key": "tests/data/test_rl_dataset_video.py::test_video_key_names_the_column_and_mixed_images_and_videos_work",
    "data.return_multi_modal_inputs": "tests/data/test_rl_dataset_vision.py::test_items_carry_expanded_prompts_mrope_positions_and_multi_modal_inputs",
    # ------------------------------------------------------------ actor_rollout_ref.model
    f"{ARR}.model.path": "tests/trainer/sft/test_sft_trainer.py::test_checkpoint_is_a_plain_hf_folder_main_ppo_can_load",
    f"{ARR}.model.custom_chat_template": f"{_EFFECTS}::test_custom_chat_template_replaces_the_tokenizers_template",
    f"{ARR}.model.override_config": f"{_UPDATE}::test_model_override_config_sets_hf_config_attributes",
    f"{ARR}.model.enable_gradient_checkpointing": f"{_KNOBS}::test_gradient_checkpointing_from_model_config",
    f"{ARR}.model.gradient_checkpointing_policy": f"{_CKPT_POLICY}::test_the_loader_applies_the_policy",
    f"{ARR}.model.enable_activation_offload": f"{_KEYS}::test_enable_activation_offload_reaches_the_trained_modules_only",
    f"{ARR}.model.use_remove_padding": f"{_RMPAD}::test_update_matches_padded",
    f"{ARR}.model.lora_rank": f"{_LORA_W}::test_lora_actor_trains_only_the_adapter_and_its_reference_is_the_base_model",
    f"{ARR}.model.lora_alpha": f"{_LORA}::test_lora_alpha_scales_the_update_and_the_merge_equals_peft_forward",
    f"{ARR}.model.target_modules": f"{_LORA}::test_target_and_exclude_modules_pick_the_adapted_layers",
    f"{ARR}.model.exclude_modules": f"{_LORA}::test_target_and_exclude_modules_pick_the_adapted_layers",
    f"{ARR}.model.lora_adapter_path": f"{_LORA_W}::test_lora_checkpoint_resumes_exactly_and_its_adapter_starts_a_run",
    # Ulysses: the ref follows the actor's size (one SP group per worker; a different one is refused)
    f"{ARR}.actor.ulysses_sequence_parallel_size": f"{_ULYSSES_W}::test_workers_with_sp2_answer_their_own_rows",
    f"{ARR}.ref.ulysses_sequence_parallel_size": f"{_ULYSSES_W}::test_workers_with_sp2_answer_their_own_rows",
    "critic.ulysses_sequence_parallel_size": f"{_ULYSSES_W}::test_workers_with_sp2_answer_their_own_rows",
    f"{ARR}.model.trust_remote_code": f"{_KEYS}::test_model_trust_remote_code_reaches_every_load_of_the_worker",
    # ------------------------------------------------------------ actor
    f"{ARR}.actor.strategy": f"{_KEYS}::{_STRATEGY}",
    f"{ARR}.actor.rollout_n": f"{_KEYS}::test_rollout_n_scales_the_mini_batch_and_must_equal_rollout_n",
    f"{ARR}.actor.use_remove_padding": f"{_RMPAD}::test_update_matches_padded",
    f"{ARR}.actor.ppo_mini_batch_size": f"{_ACTOR}::test_metrics_names_and_counts",
    f"{ARR}.actor.ppo_micro_batch_size": f"{_DEPRECATED}::test_global_micro_batch_sizes_are_divided_by_the_world_size",
    f"{ARR}.actor.ppo_micro_batch_size_per_gpu": f"{_ACTOR}::test_row_weighting_would_differ",
    f"{ARR}.actor.use_dynamic_bsz": f"{_ACTOR}::test_micro_batch_size_does_not_change_update",
    f"{ARR}.actor.ppo_max_token_len_per_gpu": f"{_ACTOR}::test_micro_batch_size_does_not_change_update",
    f"{ARR}.actor.grad_clip": f"{_UPDATE}::test_grad_clip_bounds_the_applied_step",
    f"{ARR}.actor.max_consecutive_nonfinite_grad_skips":
        "tests/workers/test_nonfinite_grads.py::test_role_stops_after_n_consecutive_nonfinite_grad_norms",
    f"{ARR}.actor.clip_ratio": f"{_LOSSES}::test_vanilla_reads_the_typed_actor_config",
    f"{ARR}.actor.clip_ratio_low": f"{_LOSSES}::test_vanilla_clip_higher_is_asymmetric",
    f"{ARR}.actor.clip_ratio_high": f"{_LOSSES}::test_vanilla_clip_higher_is_asymmetric",
    f"{ARR}.actor.clip_ratio_c": f"{_LOSSES}::test_vanilla_dual_clip_hand_computed",
    f"{ARR}.actor.loss_agg_mode": f"{_UPDATE}::{_AGG}",
    f"{ARR}.actor.entropy_coeff": f"{_UPDATE}::test_entropy_coeff_subtracts_coeff_times_entropy_from_the_loss",
    f"{ARR}.actor.use_kl_loss": f"{_UPDATE}::{_KL_LOSS}",
    f"{ARR}.actor.kl_loss_coef": f"{_UPDATE}::{_KL_LOSS}",
    f"{ARR}.actor.kl_loss_type": f"{_UPDATE}::{_KL_LOSS}",
    f"{ARR}.actor.ppo_epochs": f"{_UPDATE}::test_ppo_epochs_repeats_the_optimizer_steps",
    f"{ARR}.actor.shuffle": f"{_UPDATE}::test_shuffle_draws_a_seeded_permutation_per_epoch",
    f"{ARR}.actor.policy_loss.loss_mode": f"{_KEYS}::test_loss_mode_picks_the_policy_loss_the_actor_uses",
    f"{ARR}.actor.policy_loss.clip_cov_ratio": f"{_LOSSES}::test_clip_cov_drops_gradient_of_high_covariance_tokens",
    f"{ARR}.actor.policy_loss.clip_cov_lb": f"{_LOSSES}::test_clip_cov_drops_gradient_of_high_covariance_tokens",
    f"{ARR}.actor.policy_loss.clip_cov_ub": f"{_LOSSES}::test_clip_cov_drops_gradient_of_high_covariance_tokens",
    f"{ARR}.actor.policy_loss.kl_cov_ratio": f"{_LOSSES}::test_kl_cov_penalises_top_covariance_tokens",
    f"{ARR}.actor.policy_loss.ppo_kl_coef": f"{_LOSSES}::test_kl_cov_penalises_top_covariance_tokens",
    f"{ARR}.actor.policy_loss.tau_pos": f"{_DATA}::test_sapo_temperatures_set_the_soft_gate",
    f"{ARR}.actor.policy_loss.tau_neg": f"{_DATA}::test_sapo_temperatures_set_the_soft_gate",
    f"{ARR}.actor.checkpoint.save_contents": f"{_FSDP_CKPT}::test_hf_model_content_and_merger_test_command",
    f"{ARR}.actor.checkpoint.load_contents": f"{_DATA}::{_LOAD_CONTENTS}",
    **_optim(f"{ARR}.actor.optim"),
    **_fsdp(f"{ARR}.actor.fsdp_config"),
    # ------------------------------------------------------------ ref
    f"{ARR}.ref.strategy": f"{_KEYS}::{_STRATEGY}",
    f"{ARR}.ref.use_remove_padding": f"{_RMPAD}::test_log_probs_and_entropy_match_padded",
    **_fsdp(f"{ARR}.ref.fsdp_config"),
    f"{ARR}.ref.log_prob_micro_batch_size": f"{_DEPRECATED}::test_global_micro_batch_sizes_are_divided_by_the_world_size",
    f"{ARR}.ref.log_prob_micro_batch_size_per_gpu": f"{_UPDATE}::test_log_prob_batching_follows_its_own_section",
    f"{ARR}.ref.log_prob_use_dynamic_bsz": f"{_UPDATE}::test_log_prob_batching_follows_its_own_section",
    f"{ARR}.ref.log_prob_max_token_len_per_gpu": f"{_UPDATE}::test_log_prob_batching_follows_its_own_section",
    # ------------------------------------------------------------ rollout
    f"{ARR}.rollout.name": "tests/e2e/test_vllm_sync.py::test_engines_follow_the_actor_only_through_the_sync",
    f"{ARR}.rollout.mode": f"{_AGENT_E2E}::test_async_multi_turn_run_logs_turn_metrics",
    f"{ARR}.rollout.temperature": f"{_VLLM}::test_sampling_follows_the_rollout_keys",
    f"{ARR}.rollout.top_k": f"{_VLLM}::test_sampling_follows_the_rollout_keys",
    f"{ARR}.rollout.top_p": f"{_VLLM}::test_sampling_follows_the_rollout_keys",
    f"{ARR}.rollout.do_sample": f"{_HF}::test_sampling_uses_the_seed_and_differs_from_greedy",
    f"{ARR}.rollout.prompt_length": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.response_length": f"{_HF}::test_output_keys_shapes_and_layout",
    f"{ARR}.rollout.dtype": f"{_VLLM}::test_explicit_bf16_on_a_cpu_without_it_is_kept_and_flagged",
    f"{ARR}.rollout.gpu_memory_utilization": f"{_VLLM}::test_cpu_kv_cache_is_the_smaller_of_budget_and_need",
    f"{ARR}.rollout.ignore_eos": f"{_VLLM}::test_log_probs_eos_lists_and_ignore_eos",
    f"{ARR}.rollout.enforce_eager": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.over_sample_rate": "tests/workers/rollout/agent_loop/test_over_sample_rate.py::test_the_slowest_rows_are_aborted_with_empty_responses",
    f"{ARR}.rollout.update_weights_bucket_megabytes": f"{_UPSTREAM}::test_sglang_only_rollout_keys_are_noted_or_refused",
    f"{ARR}.rollout.multi_stage_wake_up": f"{_UPSTREAM}::test_sglang_only_rollout_keys_are_noted_or_refused",
    f"{ARR}.nccl_timeout": "tests/workers/test_nccl_timeout.py::test_nccl_timeout_is_the_process_groups_timeout",
    f"{ARR}.rollout.layered_summon": f"{_UPSTREAM}::test_layered_summon_is_accepted_with_a_note_saying_the_sync_already_streams",
    f"{ARR}.rollout.skip_tokenizer_init": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.multi_turn.function_tool_path": "tests/workers/rollout/agent_loop/test_function_tool_agent.py::"
                                                    "test_a_model_call_runs_the_function",
    "data.audio_key": "tests/data/test_data_check.py::test_rows_with_audio_are_refused_naming_the_column",
    "data.function_tool_path": "tests/tools/test_function_tools.py::test_the_dataset_counts_the_function_tools_in_"
                               "the_prompt_it_measures",
    f"{ARR}.rollout.seed": "tests/workers/rollout/test_seeding.py::test_rollout_seed_reaches_the_vllm_engine_and_the_"
                           "agent_loop",
    f"{ARR}.rollout.trace.backend": "tests/utils/test_rollout_trace.py::test_agent_loop_trajectories_become_mlflow_traces",
    f"{ARR}.rollout.trace.max_samples_per_step_per_worker": "tests/utils/test_rollout_trace.py::test_agent_loop_trajectories_become_mlflow_traces",
    f"{ARR}.rollout.trace.token2text": "tests/utils/test_rollout_trace.py::test_token2text_adds_the_decoded_text",
    **{f"{ARR}.rollout.trace.{name}": "tests/utils/test_rollout_trace.py::test_trace_project_and_experiment_follow_"
       "the_trainer_unless_set" for name in ("project_name", "experiment_name")},
    # issue 33: vLLM's metrics for Prometheus, the checkpoint engine's buckets (refused values: the field markers)
    f"{ARR}.rollout.prometheus.enable": f"{_PROM}::test_vllm_metrics_are_scraped_over_http_after_a_generation",
    f"{ARR}.rollout.prometheus.served_model_name": f"{_PROM}::test_vllm_metrics_are_scraped_over_http_after_a_generation",
    f"{ARR}.rollout.prometheus.port": f"{_PROM}::test_scrape_config_is_written_and_the_server_asked_to_reload",
    f"{ARR}.rollout.prometheus.file": f"{_PROM}::test_scrape_config_is_written_and_the_server_asked_to_reload",
    f"{ARR}.rollout.checkpoint_engine.backend": f"{_CKPT_ENGINE}::test_bucket_size_sets_how_many_buckets_the_sync_sends",
    f"{ARR}.rollout.checkpoint_engine.update_weights_bucket_megabytes":
        f"{_CKPT_ENGINE}::test_bucket_size_sets_how_many_buckets_the_sync_sends",
    f"{ARR}.rollout.checkpoint_engine.engine_kwargs":
        "tests/trainer/config/test_rollout_services_config.py::test_checkpoint_engine_options_are_checked",
    f"{ARR}.rollout.free_cache_engine": f"{_VLLM}::test_cpu_sleep_resets_the_prefix_cache_and_releases_the_one_buffer",
    f"{ARR}.rollout.load_format": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.tensor_model_parallel_size": "tests/workers/rollout/test_vllm_engine.py::"
    "test_tensor_parallel_engine_spans_two_ranks_and_returns_each_its_rows",
    f"{ARR}.rollout.max_num_batched_tokens": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.max_model_len": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.max_num_seqs": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.log_prob_micro_batch_size": f"{_DEPRECATED}::test_global_micro_batch_sizes_are_divided_by_the_world_size",
    f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu": f"{_UPDATE}::test_log_prob_batching_follows_its_own_section",
    f"{ARR}.rollout.log_prob_use_dynamic_bsz": f"{_UPDATE}::test_log_prob_batching_follows_its_own_section",
    f"{ARR}.rollout.log_prob_max_token_len_per_gpu": f"{_UPDATE}::test_log_prob_batching_follows_its_own_section",
    f"{ARR}.rollout.disable_log_stats": f"{_DATA}::test_disable_log_stats_reaches_the_vllm_engine",
    f"{ARR}.rollout.enable_chunked_prefill": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    f"{ARR}.rollout.n": f"{_UPDATE}::test_rollout_n_repeats_each_prompt_n_times_interleaved_under_one_uid",
    f"{ARR}.rollout.calculate_log_probs": f"{_HF}::test_rollout_log_probs_match_the_actor",
    f"{ARR}.rollout.enable_rollout_routing_replay": "tests/workers/actor/test_router_replay_actor.py::test_r3_hf_rollout_records_and_the_actor_replays_it",
    f"{ARR}.actor.router_replay.mode": "tests/workers/actor/test_router_replay_actor.py::test_r2_update_replays_the_recorded_experts",
    f"{ARR}.rollout.val_kwargs.top_k": f"{_VLLM}::test_validation_sampling_uses_val_kwargs",
    f"{ARR}.rollout.val_kwargs.top_p": f"{_VLLM}::test_validation_sampling_uses_val_kwargs",
    f"{ARR}.rollout.val_kwargs.temperature": f"{_VLLM}::test_validation_sampling_uses_val_kwargs",
    f"{ARR}.rollout.val_kwargs.n": f"{_VLLM}::test_validation_sampling_uses_val_kwargs",
    f"{ARR}.rollout.val_kwargs.do_sample": f"{_HF}::test_validate_uses_val_kwargs_greedy",
    f"{ARR}.rollout.engine_kwargs": f"{_VLLM}::test_engine_kwargs_map_verl_keys",
    # ------------------------------------------------------------ the agent loop (rollout.mode=async)
    f"{ARR}.rollout.multi_turn.enable": f"{_KEYS}::test_rollout_mode_async_is_the_default_and_multi_turn_needs_it",
    f"{ARR}.rollout.multi_turn.max_assistant_turns": f"{_TOOL_AGENT}::test_max_assistant_turns_ends_the_trajectory",
    f"{ARR}.rollout.multi_turn.tool_config_path": f"{_TOOL_AGENT}::test_a_tool_call_round_trip_trains_only_the_"
                                                  "models_tokens",
    f"{ARR}.rollout.multi_turn.max_user_turns": f"{_TOOL_AGENT}::test_max_user_turns_limits_the_interaction",
    f"{ARR}.rollout.multi_turn.max_parallel_calls": f"{_TOOL_AGENT}::test_bad_calls_become_error_messages_and_are_"
                                                    "counted",
    f"{ARR}.rollout.multi_turn.max_tool_response_length": f"{_TOOL_AGENT}::test_tool_responses_are_truncated_to_max_"
                                                          "tool_response_length",
    f"{ARR}.rollout.multi_turn.tool_response_truncate_side": f"{_AGENT_KEYS}::test_tool_response_truncate_side",
    f"{ARR}.rollout.multi_turn.interaction_config_path": f"{_TOOL_AGENT}::test_interaction_answers_between_turns_"
                                                         "and_its_tokens_are_masked",
    f"{ARR}.rollout.multi_turn.tokenization_sanity_check_mode": f"{_AGENT_KEYS}::test_tokenization_check_mode_"
                                                                "reaches_the_trajectory",
    f"{ARR}.rollout.multi_turn.chat_template": f"{_TOOL_AGENT}::test_model_chat_template_that_cannot_render_tools_is_"
                                               "refused",
    # false (the model's own token ids kept) and hermes are what the round trip shows; other values are refused
    f"{ARR}.rollout.multi_turn.use_inference_chat_template": f"{_TOOL_AGENT}::test_a_tool_call_round_trip_trains_"
                                                             "only_the_models_tokens",
    f"{ARR}.rollout.multi_turn.format": "tests/workers/rollout/agent_loop/test_tool_formats.py::test_a_qwen3_coder_call_runs_the_tool",
    f"{ARR}.rollout.agent.num_workers": f"{_AGENT_HF}::test_multi_turn_masks_rm_scores_extra_fields_and_batching",
    f"{ARR}.rollout.agent.default_agent_loop": f"{_AGENT_KEYS}::test_default_agent_loop_serves_rows_without_agent_name",
    f"{ARR}.rollout.agent.agent_loop_config_path": f"{_AGENT_KEYS}::test_agent_loop_config_path_adds_loops_with_"
                                                   "their_yaml_kwargs",
    f"{ARR}.rollout.skip.enable": f"{_SKIP}::test_first_run_dumps_and_a_second_run_replays_without_generating",
    f"{ARR}.rollout.skip.dump_dir": f"{_SKIP}::test_first_run_dumps_and_a_second_run_replays_without_generating",
    f"{ARR}.rollout.skip.dump_step": f"{_SKIP}::test_after_dump_step_repeat_cycles_and_rollout_with_dump_generates",
    f"{ARR}.rollout.skip.post_dump_action": f"{_SKIP}::test_after_dump_step_repeat_cycles_and_rollout_with_dump_"
                                            "generates",
    f"{ARR}.rollout.skip.compress": "tests/trainer/ppo/test_rollout_skip.py::test_compress_round_trip_and_dump_files_"
                                    "need_no_pickle",
    # ------------------------------------------------------------ critic
    "critic.rollout_n": f"{_KEYS}::test_rollout_n_scales_the_mini_batch_and_must_equal_rollout_n",
    "critic.strategy": f"{_KEYS}::{_STRATEGY}",
    **_optim("critic.optim"),
    "critic.model.path": f"{_CRITIC}::test_load_value_model_from_causal_lm_folder",
    "critic.model.tokenizer_path": "tests/trainer/config/test_key_effects.py::"
    "test_critic_tokenizer_path_is_saved_with_the_critic_checkpoint",
    "critic.model.override_config": f"{_UPDATE}::test_critic_override_config_sets_hf_config_attributes",
    "critic.model.enable_activation_offload": f"{_KEYS}::test_enable_activation_offload_reaches_the_trained_modules_"
                                              "only",
    "critic.model.enable_gradient_checkpointing": f"{_KNOBS}::test_gradient_checkpointing_from_model_config",
    "critic.model.gradient_checkpointing_policy": f"{_CKPT_POLICY}::test_the_critic_loader_applies_its_policy",
    "critic.model.use_remove_padding": f"{_RMPAD}::test_critic_values_and_update_match_padded",
    "critic.model.lora_rank": f"{_LORA_W}::test_lora_critic_trains_adapter_and_value_head_only",
    "critic.model.lora_alpha": f"{_LORA_W}::test_lora_critic_trains_adapter_and_value_head_only",
    "critic.model.target_modules": f"{_LORA_W}::test_lora_critic_trains_adapter_and_value_head_only",
    "critic.model.exclude_modules": "tests/models/test_lora.py::test_a_critic_adapter_restarts_the_critic_with_its_"
                                    "value_head",
    "critic.model.lora_adapter_path": "tests/models/test_lora.py::test_a_critic_adapter_restarts_the_critic_with_its_"
                                      "value_head",
    "critic.model.hf_config_path": f"{_PATHS}::test_critic_hf_config_path_builds_the_value_model_from_that_config",
    **_fsdp("critic.model.fsdp_config"),
    "critic.model.trust_remote_code": f"{_KEYS}::test_critic_trust_remote_code_reaches_the_value_model_load",
    "critic.ppo_mini_batch_size": f"{_CRITIC}::test_update_reduces_value_error_and_reports_metrics",
    "critic.ppo_micro_batch_size": f"{_DEPRECATED}::test_critic_global_size_sets_the_update_and_value_pass",
    "critic.ppo_micro_batch_size_per_gpu": f"{_CRITIC}::test_micro_batch_size_does_not_change_critic_update",
    "critic.forward_micro_batch_size_per_gpu": f"{_CRITIC}::test_values_independent_of_micro_batching",
    "critic.forward_micro_batch_size": f"{_DEPRECATED}::test_critic_forward_global_size_is_divided_by_the_world_size",
    "critic.use_dynamic_bsz": f"{_CRITIC}::test_micro_batch_size_does_not_change_critic_update",
    "critic.ppo_max_token_len_per_gpu": f"{_CRITIC}::test_micro_batch_size_does_not_change_critic_update",
    "critic.forward_max_token_len_per_gpu": f"{_CRITIC}::test_values_independent_of_micro_batching",
    "critic.ppo_epochs": f"{_UPDATE}::test_ppo_epochs_repeats_the_optimizer_steps",
    "critic.shuffle": f"{_UPDATE}::test_shuffle_draws_a_seeded_permutation_per_epoch",
    "critic.grad_clip": f"{_UPDATE}::test_grad_clip_bounds_the_applied_step",
    "critic.max_consecutive_nonfinite_grad_skips":
        "tests/workers/test_nonfinite_grads.py::test_role_stops_after_n_consecutive_nonfinite_grad_norms",
    "critic.cliprange_value": f"{_KL}::test_value_loss_clipped",
    "critic.loss_agg_mode": f"{_UPDATE}::{_AGG}",
    "critic.checkpoint.save_contents": f"{_FSDP_CKPT}::test_critic_checkpoint_merges_to_a_token_classification_model",
    "critic.checkpoint.load_contents": f"{_DATA}::{_LOAD_CONTENTS}",
    # ------------------------------------------------------------ rewards
    "reward_model.enable": f"{_RM_E2E}::test_grpo_reward_comes_from_the_colocated_reward_model",
    "reward_model.enable_resource_pool": f"{_RM_E2E}::test_grpo_with_the_reward_model_in_its_own_resource_pool",
    "reward_model.n_gpus_per_node": f"{_RM_CFG}::test_resource_pool_places_the_reward_model",
    "reward_model.nnodes": f"{_RM_CFG}::test_resource_pool_places_the_reward_model",
    "reward_model.strategy": f"{_RM}::test_model_keys_reach_the_worker",
    "reward_model.model.path": f"{_RM}::test_score_is_the_output_at_the_last_valid_token",
    "reward_model.model.input_tokenizer": f"{_RM}::test_retemplating_renders_the_chat_in_the_reward_models_template",
    "reward_model.model.external_lib": f"{_RM}::test_model_keys_reach_the_worker",
    "reward_model.model.use_remove_padding": f"{_RM}::test_model_keys_reach_the_worker",
    "reward_model.model.trust_remote_code": f"{_RM}::test_model_keys_reach_the_worker",
    **_fsdp("reward_model.model.fsdp_config"),
    "reward_model.micro_batch_size": f"{_RM}::test_micro_batch_dynamic_bsz_and_whole_batch_agree",
    "reward_model.micro_batch_size_per_gpu": f"{_RM}::test_micro_batch_dynamic_bsz_and_whole_batch_agree",
    "reward_model.use_dynamic_bsz": f"{_RM}::test_micro_batch_dynamic_bsz_and_whole_batch_agree",
    "reward_model.forward_max_token_len_per_gpu": f"{_RM}::test_micro_batch_dynamic_bsz_and_whole_batch_agree",
    "reward_model.max_length": f"{_RM}::test_retemplating_renders_the_chat_in_the_reward_models_template",
    "reward_model.reward_manager": f"{_LOAD_REWARD}::test_batch_manager_expects_plural_arguments",
    "reward_model.use_reward_loop": f"{_LOOP}::test_use_reward_loop_scores_through_the_loop_like_the_batch_path",
    "reward_model.num_workers": f"{_LOOP}::test_num_workers_is_how_many_samples_are_scored_at_once",
    "reward_model.max_concurrency_per_worker": "tests/trainer/config/test_reward_section.py::"
    "test_max_concurrency_per_worker_times_num_workers_samples_are_scored_at_once",
    "reward_model.reward_loop_source": f"{_LOOP}::test_reward_loop_source_importlib_loads_the_named_class",
    "reward_model.reward_loop_module_path": f"{_LOOP}::test_reward_loop_source_importlib_loads_the_named_class",
    "reward_model.reward_loop_class_name": f"{_LOOP}::test_reward_loop_source_importlib_loads_the_named_class",
    "reward_model.max_concurrent": f"{_LOOP}::test_max_concurrent_caps_calls_below_num_workers",
    "reward_model.max_rpm": f"{_LOOP}::test_max_rpm_and_max_tpm_take_tokens_per_request",
    "reward_model.max_tpm": f"{_LOOP}::test_max_rpm_and_max_tpm_take_tokens_per_request",
    "reward_model.estimated_tokens_per_request": f"{_LOOP}::test_max_rpm_and_max_tpm_take_tokens_per_request",
    "reward_model.timeout": f"{_LOOP}::test_timeout_scores_a_hanging_sample_zero_and_counts_it",
    # the generative reward model's judge engine (verl/workers/genrm_engine.py)
    "reward_model.rollout.name": "tests/e2e/test_genrm_e2e.py::test_grpo_scores_come_from_the_judge_engine",
    "reward_model.rollout.dtype": f"{_GENRM}::test_dtype_sets_the_judge_model_dtype",
    "reward_model.rollout.gpu_memory_utilization": f"{_GENRM}::test_vllm_judge_engine_takes_the_rollout_keys",
    "reward_model.rollout.prompt_length": f"{_GENRM}::test_prompt_and_response_length_bound_each_request",
    "reward_model.rollout.response_length": f"{_GENRM}::test_prompt_and_response_length_bound_each_request",
    "reward_model.rollout.enable_prefix_caching": f"{_GENRM}::test_vllm_judge_engine_takes_the_rollout_keys",
    "reward_model.rollout.engine_kwargs": f"{_GENRM}::test_vllm_judge_engine_takes_the_rollout_keys",
    "reward_model.reward_kwargs": f"{_LOAD_REWARD}::test_dapo_reads_overlong_buffer_from_config",
    "reward_model.launch_reward_fn_async": f"{_TRAINER_KEYS}::test_launch_reward_fn_async_matches_sync",
    "reward_model.sandbox_fusion.url": f"{_SANDBOX}::test_sandbox_fusion_keys_reach_the_code_reward",
    "reward_model.sandbox_fusion.max_concurrent": f"{_SANDBOX}::test_sandbox_fusion_keys_reach_the_code_reward",
    "reward_model.sandbox_fusion.memory_limit_mb": f"{_SANDBOX}::test_sandbox_fusion_keys_reach_the_code_reward",
    "reward_model.overlong_buffer.enable": f"{_LOAD_REWARD}::test_dapo_reads_overlong_buffer_from_config",
    "reward_model.overlong_buffer.len": f"{_REWARD}::test_overlong_penalty_formula",
    "reward_model.overlong_buffer.penalty_factor": f"{_REWARD}::test_overlong_penalty_formula",
    "reward_model.overlong_buffer.log": f"{_REWARD}::test_dapo_adds_overlong_penalty",
    "reward_model.scoring.timeout": f"{_LOAD_REWARD}::test_scoring_section_reaches_every_builtin_manager",
    "reward_model.scoring.on_timeout": f"{_LOAD_REWARD}::test_scoring_section_reaches_every_builtin_manager",
    "reward_model.scoring.num_processes": f"{_LOAD_REWARD}::test_scoring_section_reaches_every_builtin_manager",
    "custom_reward_function.path": f"{_LOAD_REWARD}::test_custom_function_is_loaded_with_kwargs",
    "custom_reward_function.name": f"{_LOAD_REWARD}::test_default_function_name_is_compute_score",
    "custom_reward_function.reward_kwargs": f"{_LOAD_REWARD}::test_custom_function_is_loaded_with_kwargs",
    # ------------------------------------------------------------ algorithm
    "algorithm.gamma": f"{_ALGOS}::test_compute_advantage_gae_uses_values_gamma_and_lam",
    "algorithm.lam": f"{_ALGOS}::test_compute_advantage_gae_uses_values_gamma_and_lam",
    "algorithm.adv_estimator": f"{_ALGOS}::test_compute_advantage_grpo_writes_advantages_and_returns",
    "algorithm.norm_adv_by_std_in_grpo": f"{_ADV}::test_dr_grpo_does_not_divide_by_std",
    "algorithm.use_kl_in_reward": f"{_UPDATE}::test_use_kl_in_reward_subtracts_the_kl_penalty_from_the_scores",
    "algorithm.kl_penalty": f"{_UPDATE}::test_use_kl_in_reward_subtracts_the_kl_penalty_from_the_scores",
    "algorithm.kl_ctrl.type": f"{_ALGOS}::test_apply_kl_penalty_updates_the_adaptive_controller_after_using_it",
    "algorithm.kl_ctrl.kl_coef": f"{_UPDATE}::test_use_kl_in_reward_subtracts_the_kl_penalty_from_the_scores",
    "algorithm.kl_ctrl.horizon": f"{_KL}::test_adaptive_kl_controller",
    "algorithm.kl_ctrl.target_kl": f"{_KL}::test_adaptive_kl_controller",
    "algorithm.use_pf_ppo": f"{_ALGOS}::test_pf_ppo_resamples_rows_by_score",
    "algorithm.pf_ppo.reweight_method": f"{_ALGOS}::test_pf_ppo_resamples_rows_by_score",
    "algorithm.pf_ppo.weight_pow": f"{_ALGOS}::test_pf_ppo_resamples_rows_by_score",
    "algorithm.rollout_correction.rollout_is": f"{_RC}::test_stage_writes_is_weights_and_rejection_before_the_advantages",
    "algorithm.rollout_correction.rollout_is_threshold": f"{_RC}::test_stage_sequence_is_and_batch_normalize",
    "algorithm.rollout_correction.rollout_is_batch_normalize": f"{_RC}::test_stage_sequence_is_and_batch_normalize",
    "algorithm.rollout_correction.rollout_rs": f"{_RC}::test_stage_sequence_and_geometric_rejection",
    "algorithm.rollout_correction.rollout_rs_threshold": f"{_RC}::test_stage_sequence_and_geometric_rejection",
    "algorithm.rollout_correction.rollout_rs_threshold_lower": f"{_RC}::test_stage_rejection_lower_bound",
    "algorithm.rollout_correction.rollout_token_veto_threshold": f"{_RC}::test_stage_veto_rejects_sequences",
    "algorithm.rollout_correction.bypass_mode": f"{_RC}::test_bypass_mode_skips_the_old_log_prob_pass",
    "algorithm.rollout_correction.loss_type": f"{_RC}::test_actor_loss_in_bypass_mode_reinforce_with_is_weights",
    "algorithm.filter_groups.enable": f"{_DYN}::test_rounds_continue_until_enough_prompts_then_cut_to_train_batch_times_n",
    "algorithm.filter_groups.metric": f"{_DYN}::test_metric_values_seq_reward_sums_the_scores_acc_comes_from_extra_info",
    "algorithm.filter_groups.max_num_gen_batches": f"{_DYN}::test_max_num_gen_batches_stops_with_what_to_change",
    # ------------------------------------------------------------ trainer
    "trainer.balance_batch": "tests/trainer/ppo/test_throughput_metrics.py::"
    "test_balance_batch_metrics_by_hand_and_keeps_every_row",
    "trainer.total_epochs": f"{_DATA}::test_total_epochs_sets_how_many_passes_fit_makes",
    "trainer.total_training_steps": f"{_FIT}::test_nan_loss_stops_fit_with_the_step_and_no_checkpoint_from_it",
    "trainer.project_name": f"{_DATA}::{_TRACKER}",
    "trainer.experiment_name": f"{_DATA}::{_TRACKER}",
    "trainer.logger": f"{_DATA}::{_TRACKER}",
    "trainer.console_format": f"{_DATA}::{_TRACKER}",
    "trainer.log_val_generations": f"{_TRAINER_KEYS}::test_log_val_generations_logs_samples",
    "trainer.rollout_data_dir": f"{_TRAINER_KEYS}::test_rollout_data_dir_dumps_jsonl",
    "trainer.validation_data_dir": f"{_TRAINER_KEYS}::test_validation_data_dir_dumps_jsonl",
    "trainer.nnodes": f"{_KEYS}::test_gpus_per_node_and_nnodes_size_the_pool_and_the_batch_checks",
    "trainer.n_gpus_per_node": f"{_KEYS}::test_gpus_per_node_and_nnodes_size_the_pool_and_the_batch_checks",
    "trainer.save_freq": f"{_FIT}::test_nan_loss_stops_fit_with_the_step_and_no_checkpoint_from_it",
    "trainer.resume_mode": f"{_CKPT}::test_resume_modes",
    "trainer.resume_from_path": f"{_CKPT}::test_resume_modes",
    "trainer.val_before_train": f"{_FIT}::test_validation_before_training_is_logged_at_the_step_a_resumed_run_starts_from",
    "trainer.val_only": f"{_EFFECTS}::test_val_only_validates_and_trains_no_step",
    "trainer.test_freq": f"{_FIT}::test_validation_before_training_is_logged_at_the_step_a_resumed_run_starts_from",
    "trainer.critic_warmup": f"{_KEYS}::test_critic_warmup_trains_only_the_critic_for_its_steps",
    "trainer.default_local_dir": f"{_CKPT}::test_resume_mid_epoch_replays_the_rest_of_that_epoch",
    "trainer.ray_wait_register_center_timeout":
        "tests/trainer/ppo/test_worker_failures.py::test_init_workers_passes_the_deadlines_and_notes_the_checkpoint",
    "trainer.worker_call_timeout_s": "tests/trainer/ppo/test_worker_failures.py::test_trainer_keys_become_the_groups_deadlines",
    "trainer.worker_call_timeout_per_sample_s":
        "tests/trainer/ppo/test_worker_failures.py::test_trainer_keys_become_the_groups_deadlines",
    "trainer.max_actor_ckpt_to_keep": f"{_CKPT}::test_retention_keeps_the_newest_and_never_the_current",
    "trainer.max_critic_ckpt_to_keep": f"{_CKPT}::test_retention_keeps_the_newest_and_never_the_current",
    "trainer.device": f"{_TRAINER_KEYS}::test_trainer_device_cpu_forces_cpu",
    "trainer.report_dir": f"{_KEYS}::test_report_dir_is_where_the_run_report_goes",
    "ray_kwargs.ray_init": "tests/single_controller/test_ray_utils.py::test_overrides_from_config_win_and_nulls_are_ignored",
}


def _profiler_keys() -> dict[str, str]:
    """global_profiler and the roles' profiler sections (verl.utils.profiler; docs/profiling.md)."""
    torch_t, mem_t, cfg_t = ("tests/utils/test_profiler_torch.py", "tests/utils/test_profiler_torch_memory.py",
                             "tests/utils/test_profiler_config.py")
    contents_t = "tests/utils/test_profiler_torch_contents.py"
    ranks = f"{torch_t}::test_enable_all_ranks_and_ranks_choose_the_ranks_that_record"
    wiring = f"{cfg_t}::test_each_worker_builds_its_roles_profiler"
    follows = f"{cfg_t}::test_the_rollout_and_reward_model_sections_follow_the_actors"
    memory = f"{mem_t}::test_the_roles_and_the_global_keys_reach_the_allocator_history"
    out: dict[str, str] = {}
    for role in (f"{ARR}.actor", f"{ARR}.ref", "critic"):
        out |= {f"{role}.profiler.{key}": ranks for key in ("tool", "enable", "all_ranks", "ranks")}
        out[f"{role}.profiler.save_path"] = wiring
        out[f"{role}.profiler.tool_config.torch.step_start"] = (
            f"{torch_t}::test_step_start_and_step_end_keep_only_those_optimizer_steps_of_the_update")
        out[f"{role}.profiler.tool_config.torch.step_end"] = (
            f"{torch_t}::test_step_start_and_step_end_keep_only_those_optimizer_steps_of_the_update")
        out[f"{role}.profiler.tool_config.torch_memory.trace_alloc_max_entries"] = memory
        # upstream v0.7's torch options (tests/utils/test_profiler_torch_contents.py)
        out[f"{role}.profiler.tool_config.torch.contents"] = f"{contents_t}::test_contents_choose_what_the_trace_holds"
        out[f"{role}.profiler.tool_config.torch.discrete"] = (
            f"{contents_t}::test_discrete_writes_one_trace_per_stage_instead_of_one_per_step")
    rollout = f"{cfg_t}::test_the_rollout_section_adds_its_own_copy_where_it_asks_for_more"
    out |= {f"{ARR}.rollout.profiler.{key}": rollout for key in ("tool", "enable", "all_ranks", "ranks", "save_path")}
    out |= {f"{ARR}.rollout.profiler.tool_config.{key}": follows
            for key in ("nsys", "torch.step_start", "torch.step_end", "torch_memory")}
    out |= {f"{ARR}.rollout.profiler.tool_config.torch.{key}":
            f"{contents_t}::test_the_rollout_follows_the_actors_torch_options_and_mismatches_are_refused"
            for key in ("contents", "discrete")}
    out |= {f"reward_model.profiler.{key}": follows
            for key in ("tool", "enable", "all_ranks", "ranks", "save_path", "tool_config")}
    out |= {
        "trainer.profile_steps": f"{cfg_t}::test_trainer_profile_steps_runs_as_global_profiler_steps_with_nsys",
        "global_profiler.tool": f"{cfg_t}::test_each_step_in_steps_is_its_own_trace",
        "global_profiler.steps": f"{cfg_t}::test_each_step_in_steps_is_its_own_trace",
        "global_profiler.profile_continuous_steps":
            f"{cfg_t}::test_profile_continuous_steps_makes_consecutive_steps_one_trace",
        "global_profiler.save_path": wiring,
        "global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries": follows,
    }
    out |= {f"global_profiler.global_tool_config.torch_memory.{key}": memory for key in ("context", "stacks", "kw_args")}
    return out


HONOURED |= _profiler_keys()

# upstream v0.7's remaining small keys (tiled MLP, the reference's actor-config keys, the dataset's tool schemas and
# image patch size)
_TILED = "tests/models/test_tiled_mlp.py"
_V07 = "tests/trainer/config/test_v07_small_keys.py"
_DATA07 = "tests/data/test_v07_data_keys.py"
HONOURED |= {
    f"{ARR}.model.tiled_mlp.enabled": f"{_TILED}::test_the_model_sections_tiled_mlp_reaches_the_loaded_actor_and_critic",
    f"{ARR}.model.tiled_mlp.num_shards": f"{_TILED}::test_tiled_outputs_and_gradients_equal_the_untiled_models",
    "critic.model.tiled_mlp.enabled": f"{_TILED}::test_the_model_sections_tiled_mlp_reaches_the_loaded_actor_and_critic",
    "critic.model.tiled_mlp.num_shards": f"{_TILED}::test_the_model_sections_tiled_mlp_reaches_the_loaded_actor_and_critic",
    f"{ARR}.ref.rollout_n": f"{_V07}::test_ref_rollout_n_follows_rollout_n_and_must_equal_it",
    f"{ARR}.ref.router_replay.mode":
        "tests/workers/actor/test_ref_router_replay.py::test_the_reference_pass_replays_the_batchs_routing",
    "data.tool_config_path": f"{_DATA07}::test_tool_config_path_counts_the_tool_schemas_in_the_overlong_filter",
    "data.image_patch_size": f"{_DATA07}::test_image_patch_size_resizes_the_images_before_the_processor",
}


def _engine_mirror_keys() -> dict[str, str]:
    """Upstream's fsdp_config copies of role keys (verl.trainer.config.engine_mirror), truncated IS, and the CUDA-graph
    capture sizes (issue 33)."""
    t = "tests/trainer/config/test_engine_mirror.py"
    actor = f"{t}::test_the_actor_fsdp_config_keys_reach_the_role_keys_the_workers_read"
    names = ("ulysses_sequence_parallel_size", "entropy_from_logits_with_chunking", "use_torch_compile",
             "entropy_checkpointing", "entropy_from_logits_chunk_size")
    out = {f"{ARR}.actor.fsdp_config.{name}": actor for name in names}
    out |= {f"{ARR}.ref.fsdp_config.{name}": f"{t}::test_ref_and_critic_engine_keys_apply" for name in names}
    out[f"{ARR}.ref.fsdp_config.forward_only"] = f"{t}::test_the_reference_is_forward_only_either_way"
    forward_only = f"{t}::test_forward_only_contradicting_the_role_is_refused"
    out[f"{ARR}.actor.fsdp_config.forward_only"] = forward_only
    out["critic.model.fsdp_config.forward_only"] = forward_only
    out["critic.model.fsdp_config.ulysses_sequence_parallel_size"] = f"{t}::test_ref_and_critic_engine_keys_apply"
    critic = f"{t}::test_critic_entropy_keys_are_refused_and_compile_noted"
    out |= {f"critic.model.fsdp_config.{name}": critic for name in names[1:]}
    out |= {f"reward_model.model.fsdp_config.{name}": f"{t}::test_reward_model_engine_keys" for name in names}
    out["reward_model.model.fsdp_config.forward_only"] = f"{t}::test_the_reference_is_forward_only_either_way"
    out[f"{ARR}.actor.tis_imp_ratio_cap"] = "tests/algos/test_tis.py::test_the_actor_update_uses_the_truncated_weights"
    out[f"{ARR}.rollout.cudagraph_capture_sizes"] = (
        "tests/workers/rollout/test_cudagraph_capture_sizes.py::test_vllm_gets_the_sizes_in_its_compilation_config")
    out[f"{ARR}.rollout.enable_prefix_caching"] = (
        "tests/workers/rollout/test_vllm_prefix_caching.py::test_enable_prefix_caching_reaches_the_engine")
    out["critic.enable"] = ("tests/trainer/config/test_small_upstream_keys.py::"
                            "test_critic_enable_null_follows_the_estimator_and_true_with_gae_is_the_same")
    return out


HONOURED |= _engine_mirror_keys()
HONOURED |= {
    f"{ARR}.actor.data_loader_seed": f"{_SEED_KEYS}::test_the_roles_update_shuffles_with_its_data_loader_seed",
    "critic.data_loader_seed": f"{_SEED_KEYS}::test_the_roles_update_shuffles_with_its_data_loader_seed",
    f"{ARR}.actor.calculate_entropy": f"{_SEED_KEYS}::test_calculate_entropy_reports_the_entropy_and_leaves_the_update_alone",
    f"{ARR}.actor.loss_scale_factor": f"{_SEED_KEYS}::test_loss_scale_factor_is_seq_mean_token_sum_norms_divisor",
    "critic.loss_scale_factor": f"{_CRITIC}::test_loss_scale_factor_divides_the_value_loss",
}

# upstream v0.7's rollout keys (tests/workers/rollout/test_rollout_v07_keys.py); the others of that set are refusals
_V07 = "tests/workers/rollout/test_rollout_v07_keys.py"
HONOURED |= {
    f"{ARR}.rollout.logprobs_mode": f"{_V07}::test_hf_rollout_log_probs_follow_logprobs_mode",
    f"{ARR}.rollout.scheduling_policy": f"{_V07}::test_vllm_engine_gets_logprobs_mode_and_scheduling_policy",
    f"{ARR}.rollout.multi_turn.num_repeat_rollouts": f"{_V07}::test_num_repeat_rollouts_reaches_user_agent_loops",
    # follows actor.qat (every key of which is refused unless at its default); null is upstream's no-QAT fallback
    f"{ARR}.rollout.qat": f"{_V07}::test_qat_is_refused_on_the_actor_and_its_rollout_mirror",
}

from tests.trainer.config.honoured_keys_upstream import add_later_upstream_keys  # noqa: E402

add_later_upstream_keys(HONOURED)
