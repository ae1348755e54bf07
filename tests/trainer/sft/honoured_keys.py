"""Honoured keys of sft_trainer.yaml, generation.yaml and evaluation.yaml -> the test that shows each one's effect.

Read by the YAML-leaf audit: every leaf is either listed here or carries a refused()/refused_values() marker in
its dataclass. Free-form sections (model.override_config's entries, apply_chat_template_kwargs, ray_init,
engine_kwargs, reward_kwargs) are exempt there; the section itself is listed when a test shows it is passed on.
"""

_SFT = "tests/trainer/sft/test_sft_trainer.py::"
_DS = "tests/trainer/sft/test_sft_datasets.py::"
_CK = "tests/trainer/sft/test_sft_checkpoint.py::"
_KEYS = "tests/trainer/sft/test_sft_gen_eval_keys.py::"
_GEN = "tests/trainer/test_main_generation_eval.py::"
_MR = "tests/trainer/sft/test_sft_multirank.py::"
_SK = "tests/trainer/sft/test_sft_keys.py::"
_DL = "tests/trainer/test_worker_deadline_keys.py::"
# Keys main_generation shares with main_ppo go through the same code (apply_fsdp2, build_rollout, the worker), so
# they cite the PPO tests of tests/trainer/config/honoured_keys.py; _KEYS tests show they reach that code.
_FSDP2 = "tests/workers/actor/test_fsdp2_two_ranks.py::test_actor_and_rollout_under_fsdp2_on_two_ranks"
_MIXED = "tests/workers/actor/test_memory_knobs.py::test_bf16_mixed_precision_is_close_to_fp32"
_VLLM = "tests/workers/rollout/test_vllm_parts.py::"
_VLM = "tests/trainer/sft/test_sft_vlm.py::"

HONOURED_SFT = {
    "data.train_batch_size": _SFT + "test_resume_continues_exactly_where_it_stopped",
    "data.micro_batch_size": _KEYS + "test_deprecated_micro_batch_size_is_divided_over_ranks",
    "data.micro_batch_size_per_gpu": _SFT + "test_loss_is_a_global_token_mean_whatever_the_micro_batching",
    "data.train_files": _SFT + "test_resume_continues_exactly_where_it_stopped",
    "data.val_files": _SFT + "test_resume_continues_exactly_where_it_stopped",
    "data.prompt_key": _DS + "test_missing_columns_name_the_key",
    "data.response_key": _DS + "test_chat_prompt_and_dict_keys",
    "data.prompt_dict_keys": _DS + "test_chat_prompt_and_dict_keys",
    "data.response_dict_keys": _DS + "test_chat_prompt_and_dict_keys",
    "data.multiturn.enable": _DS + "test_multi_turn_only_assistant_turns_by_hand",
    "data.multiturn.messages_key": _DS + "test_multi_turn_only_assistant_turns_by_hand",
    "data.max_length": _DS + "test_truncation_modes",
    "data.truncation": _DS + "test_truncation_modes",
    "model.partial_pretrain": _SFT + "test_checkpoint_is_a_plain_hf_folder_main_ppo_can_load",
    "model.fsdp_config.cpu_offload": _KEYS + "test_fsdp_keys_reach_the_shared_fsdp_config",
    "model.fsdp_config.offload_params": _KEYS + "test_fsdp_keys_reach_the_shared_fsdp_config",
    "model.fsdp_config.reshard_after_forward": _KEYS + "test_fsdp_keys_reach_the_shared_fsdp_config",
    "model.fsdp_config.fsdp_size": _KEYS + "test_fsdp_keys_reach_the_shared_fsdp_config",
    "model.fsdp_config.model_dtype": _KEYS + "test_fsdp_keys_reach_the_shared_fsdp_config",
    "model.lora_rank": _SFT + "test_lora_trains_only_the_adapter",
    "model.lora_alpha": _SFT + "test_lora_trains_only_the_adapter",
    "optim.lr": _KEYS + "test_optim_keys_reach_optimizer_and_schedule",
    "optim.betas": _KEYS + "test_optim_keys_reach_optimizer_and_schedule",
    "optim.weight_decay": _KEYS + "test_optim_keys_reach_optimizer_and_schedule",
    "optim.warmup_steps_ratio": _KEYS + "test_optim_keys_reach_optimizer_and_schedule",
    "optim.lr_scheduler": _KEYS + "test_optim_keys_reach_optimizer_and_schedule",
    "optim.min_lr_ratio": _KEYS + "test_optim_keys_reach_optimizer_and_schedule",
    "use_remove_padding": _SFT + "test_loss_is_a_global_token_mean_whatever_the_micro_batching",
    "ulysses_sequence_parallel_size": "tests/trainer/sft/test_sft_ulysses.py::test_sp2_matches_sp1_in_loss_and_gradients",
    "trainer.default_local_dir": _SFT + "test_resume_continues_exactly_where_it_stopped",
    "trainer.total_training_steps": _SFT + "test_resume_continues_exactly_where_it_stopped",
    "trainer.save_freq": _SFT + "test_resume_continues_exactly_where_it_stopped",
    "trainer.test_freq": _SFT + "test_resume_continues_exactly_where_it_stopped",
    "trainer.resume_mode": _CK + "test_latest_checkpoint_and_resume_modes",
    "trainer.resume_from_path": _CK + "test_latest_checkpoint_and_resume_modes",
    "trainer.n_gpus_per_node": _MR + "test_ray_workers_match_one_rank",
    "trainer.device": _KEYS + "test_device_cuda_without_gpu_is_refused",
    "data.multiturn.tools_key": _DS + "test_multi_turn_tools_and_thinking_columns",
    "data.multiturn.enable_thinking_key": _DS + "test_multi_turn_tools_and_thinking_columns",
    "data.chat_template": _DS + "test_chat_template_and_its_kwargs",
    "data.apply_chat_template_kwargs": _DS + "test_chat_template_and_its_kwargs",
    "data.train_max_samples": _SK + "test_max_samples_limit_the_datasets_and_the_epoch",
    "data.val_max_samples": _SK + "test_max_samples_limit_the_datasets_and_the_epoch",
    "data.custom_cls.path": _DS + "test_custom_dataset_class",
    "data.custom_cls.name": _DS + "test_custom_dataset_class",
    "data.image_key": _VLM + "test_image_key_names_the_column_and_text_models_are_refused",
    "data.video_key": "tests/trainer/sft/test_sft_video.py::test_items_expand_videos_and_train_only_assistant_text",
    # SFTFSDPConfig.to_engine hands mixed_precision to apply_fsdp2 (test_fsdp_keys_reach_the_shared_fsdp_config)
    "model.fsdp_config.mixed_precision.param_dtype": _MIXED,
    "model.fsdp_config.mixed_precision.reduce_dtype": _MIXED,
    "model.external_lib": _SK + "test_external_lib_is_imported_before_the_model_loads",
    "model.override_config": _SK + "test_model_keys_shape_the_module",
    "model.enable_gradient_checkpointing": _SK + "test_model_keys_shape_the_module",
    "model.gradient_checkpointing_policy": _SK + "test_model_keys_shape_the_module",
    "model.trust_remote_code": _SK + "test_model_keys_shape_the_module",
    "model.target_modules": _SK + "test_target_modules_choose_the_adapted_layers",
    # fsdp and fsdp2 both name FSDP2's fully_shard here (other values fail validation)
    "model.strategy": _MR + "test_two_torchrun_ranks_match_one_and_resume_on_one",
    "optim.clip_grad": _SFT + "test_clip_grad_limits_the_gradient_norm",
    "trainer.project_name": _SK + "test_tracker_gets_loggers_and_run_names",
    "trainer.experiment_name": _SK + "test_tracker_gets_loggers_and_run_names",
    "trainer.logger": _SK + "test_tracker_gets_loggers_and_run_names",
    "trainer.console_format": "tests/trainer/test_console_table.py::test_sft_runs_get_sft_columns_and_the_key",
    "trainer.total_epochs": _SK + "test_run_length_checkpoints_and_report",
    "trainer.seed": _SK + "test_seed_sets_the_shuffle_order",
    "trainer.nnodes": _SK + "test_nnodes_multiplies_the_ranks",
    "trainer.ray_wait_register_center_timeout": _DL + "test_sft_ray_workers_get_the_start_up_deadline_and_no_call_deadline",
    "trainer.max_ckpt_to_keep": _SK + "test_run_length_checkpoints_and_report",
    "trainer.checkpoint.save_contents": _SK + "test_run_length_checkpoints_and_report",
    "trainer.checkpoint.load_contents": _SK + "test_load_contents_chooses_what_a_resume_restores",
    "trainer.report_dir": _SK + "test_run_length_checkpoints_and_report",
    "ray_kwargs.ray_init": _SK + "test_ray_init_reaches_ray",
}

HONOURED_GENERATION = {
    "trainer.nnodes": _KEYS + "test_generation_workers_follow_nnodes_and_gpus_per_node",
    "trainer.n_gpus_per_node": _KEYS + "test_generation_workers_follow_nnodes_and_gpus_per_node",
    "data.path": _GEN + "test_greedy_generation_matches_hf_generate",
    "data.prompt_key": _GEN + "test_greedy_generation_matches_hf_generate",
    "data.n_samples": _GEN + "test_sampled_generation_then_eval_round_trip",
    "data.output_path": _GEN + "test_greedy_generation_matches_hf_generate",
    "data.batch_size": _GEN + "test_greedy_generation_matches_hf_generate",
    "data.truncation": _KEYS + "test_generation_truncation_and_prompt_length",
    "model.path": _GEN + "test_greedy_generation_matches_hf_generate",
    "model.trust_remote_code": _KEYS + "test_generation_sections_reach_the_worker_config",
    "model.custom_chat_template": _KEYS + "test_generation_sections_reach_the_worker_config",
    "model.override_config": _KEYS + "test_generation_sections_reach_the_worker_config",
    "rollout.name": _KEYS + "test_generation_sections_reach_the_worker_config",
    "rollout.temperature": _GEN + "test_greedy_generation_matches_hf_generate",
    "rollout.top_k": _KEYS + "test_generation_sections_reach_the_worker_config",
    "rollout.top_p": _KEYS + "test_generation_sections_reach_the_worker_config",
    "rollout.do_sample": _GEN + "test_greedy_generation_matches_hf_generate",
    "rollout.prompt_length": _KEYS + "test_generation_truncation_and_prompt_length",
    "rollout.response_length": _GEN + "test_greedy_generation_matches_hf_generate",
    "rollout.ignore_eos": "tests/workers/rollout/test_hf_rollout.py::test_ignore_eos_is_refused_with_the_key",
    "rollout.engine_kwargs": _KEYS + "test_generation_sections_reach_the_worker_config",
    "actor.fsdp_config.param_offload": _KEYS + "test_generation_sections_reach_the_worker_config",
    "actor.fsdp_config.reshard_after_forward": _KEYS + "test_generation_sections_reach_the_worker_config",
    "actor.fsdp_config.model_dtype": _KEYS + "test_generation_sections_reach_the_worker_config",
    "actor.fsdp_config.mixed_precision.param_dtype": _KEYS + "test_generation_sections_reach_the_worker_config",
    "actor.strategy": _FSDP2,  # fsdp and fsdp2 both name FSDP2's fully_shard here
    "trainer.device": _KEYS + "test_generation_device_cuda_without_gpu_is_refused",
    "trainer.ray_wait_register_center_timeout": _DL + "test_generation_workers_get_the_trainer_sections_deadlines",
    "trainer.worker_call_timeout_s": _DL + "test_generation_workers_get_the_trainer_sections_deadlines",
    "trainer.worker_call_timeout_per_sample_s": _DL + "test_generation_workers_get_the_trainer_sections_deadlines",
    "model.external_lib": _KEYS + "test_generation_imports_external_lib_before_loading",
    "ray_init": _KEYS + "test_generation_ray_init_reaches_ray",
    # engine keys: GenRolloutConfig.to_rollout carries them (test_generation_engine_keys_reach_the_rollout) into
    # the RolloutConfig that build_rollout reads, as main_ppo's rollout does
    "rollout.dtype": _VLLM + "test_explicit_bf16_on_a_cpu_without_it_is_kept_and_flagged",
    "rollout.gpu_memory_utilization": _VLLM + "test_cpu_kv_cache_is_the_smaller_of_budget_and_need",
    "rollout.enforce_eager": _VLLM + "test_engine_kwargs_map_verl_keys",
    "rollout.free_cache_engine": _VLLM + "test_cpu_sleep_resets_the_prefix_cache_and_releases_the_one_buffer",
    "rollout.load_format": _VLLM + "test_engine_kwargs_map_verl_keys",
    "rollout.tensor_model_parallel_size": "tests/workers/rollout/test_vllm_engine.py::"
    "test_tensor_parallel_engine_spans_two_ranks_and_returns_each_its_rows",
    "rollout.max_num_batched_tokens": _VLLM + "test_engine_kwargs_map_verl_keys",
    "rollout.max_model_len": _VLLM + "test_engine_kwargs_map_verl_keys",
    "rollout.max_num_seqs": _VLLM + "test_engine_kwargs_map_verl_keys",
    "rollout.disable_log_stats": _VLLM + "test_engine_kwargs_map_verl_keys",
    "rollout.enable_chunked_prefill": _VLLM + "test_engine_kwargs_map_verl_keys",
}

HONOURED_EVALUATION = {
    "data.path": _GEN + "test_pass_at_k_by_hand",
    "data.response_key": _KEYS + "test_eval_column_keys_and_custom_function_name_and_kwargs",
    "data.data_source_key": _KEYS + "test_eval_column_keys_and_custom_function_name_and_kwargs",
    "data.reward_model_key": _KEYS + "test_eval_column_keys_and_custom_function_name_and_kwargs",
    "data.output_path": _KEYS + "test_eval_column_keys_and_custom_function_name_and_kwargs",
    "custom_reward_function.path": _GEN + "test_sampled_generation_then_eval_round_trip",
    "custom_reward_function.name": _KEYS + "test_eval_column_keys_and_custom_function_name_and_kwargs",
    "custom_reward_function.reward_kwargs": _KEYS + "test_eval_column_keys_and_custom_function_name_and_kwargs",
}
