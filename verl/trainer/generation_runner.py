"""The work behind `python -m verl.trainer.main_generation` (see that module): prompts in, responses out."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from verl.data.prompt_ids import truncate_ids
from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.config.generation import GenerationConfig
from verl.utils.torch_functional import compute_position_id_with_mask

RESPONSES_COLUMN = "responses"


def _messages(prompt: Any, row: int, key: str) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list | tuple | np.ndarray) and all(isinstance(m, dict) for m in prompt):
        return [dict(m) for m in prompt]
    raise ValueError(f"row {row}: column {key!r} (data.prompt_key) must hold chat messages or a string, "
                     f"got {prompt!r:.200}")


def encode_prompts(prompts: list[Any], tokenizer: Any, prompt_length: int, truncation: str, key: str,
                   first_row: int = 0) -> DataProto:
    """Chat-templated prompts, left-padded to the longest one in the batch (at most rollout.prompt_length)."""
    ids = []
    for offset, prompt in enumerate(prompts):
        text = tokenizer.apply_chat_template(_messages(prompt, first_row + offset, key), add_generation_prompt=True,
                                             tokenize=False)
        ids.append(truncate_ids(tokenizer.encode(text, add_special_tokens=False), prompt_length, truncation,
                                row=first_row + offset))
    width = max(len(row) for row in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.full((len(ids), width), int(pad), dtype=torch.long)
    attention_mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        if row:
            input_ids[i, width - len(row):] = torch.tensor(row)
            attention_mask[i, width - len(row):] = 1
    return DataProto.from_dict({"input_ids": input_ids, "attention_mask": attention_mask,
                                "position_ids": compute_position_id_with_mask(attention_mask)})


def decode_responses(output: DataProto, tokenizer: Any) -> list[str]:
    responses, mask = output.batch["responses"], output.batch["response_mask"].bool()
    return [tokenizer.decode(responses[i][mask[i]].tolist(), skip_special_tokens=True) for i in range(len(output))]


class _LocalWorkers:
    """One rollout worker in this process (no Ray)."""

    world_size = 1

    def __init__(self, config: GenerationConfig, model_path: str) -> None:
        from verl.workers.fsdp_workers import ActorRolloutRefWorker

        self.worker = ActorRolloutRefWorker(config.worker_config(model_path), role="rollout")
        self.worker.init_model()

    def generate_sequences(self, data: DataProto) -> DataProto:
        return self.worker.generate_sequences(data)


class _RayWorkers:
    def __init__(self, config: GenerationConfig, model_path: str) -> None:
        from verl.single_controller.base.deadlines import WorkerDeadlines
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.utils.device import is_cuda_available
        from verl.utils.ray_utils import init_ray
        from verl.workers.fsdp_workers import ActorRolloutRefWorker

        per_node, nnodes = config.trainer.n_gpus_per_node, config.trainer.nnodes
        out_dir = os.path.dirname(os.path.abspath(os.path.expanduser(config.data.output_path)))
        init_ray({"ray_init": config.ray_init}, run_dir=out_dir,
                 num_cpus=max(per_node * nnodes + 1, os.cpu_count() or 1))
        pool = RayResourcePool(process_on_nodes=[per_node] * nnodes, use_gpu=is_cuda_available(), max_colocate_count=1)
        cls = RayClassWithInitArgs(ActorRolloutRefWorker, config=config.worker_config(model_path), role="rollout")
        self.group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, name_prefix="gen",
                                    deadlines=WorkerDeadlines.from_trainer(config.trainer))
        self.world_size = self.group.world_size
        self.group.init_model()

    def generate_sequences(self, data: DataProto) -> DataProto:
        return self.group.generate_sequences(data)


def worker_class(config: GenerationConfig) -> type:
    """In this process for one worker; Ray workers for trainer.nnodes x trainer.n_gpus_per_node > 1."""
    return _LocalWorkers if config.trainer.nnodes * config.trainer.n_gpus_per_node == 1 else _RayWorkers


def _absolute_model_path(config: GenerationConfig) -> str:
    from verl.models.loader import resolve_model_path

    path = resolve_model_path(config.model.path, "model.path")
    return path if not os.path.exists(path) else os.path.abspath(path)


def generate_responses(config: GenerationConfig, prompts: list[Any], tokenizer: Any, workers) -> list[list[str]]:
    """n_samples responses for each prompt, in rounds of data.batch_size prompts, with a progress bar."""
    from tqdm import tqdm

    n, batch_size = config.data.n_samples, config.data.batch_size
    out: list[list[str]] = []
    with tqdm(total=len(prompts), desc="generating", unit="prompt", file=sys.stderr) as bar:
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            batch = encode_prompts(chunk, tokenizer, config.rollout.prompt_length, config.data.truncation,
                                   config.data.prompt_key, start)
            batch = batch.repeat(n, interleave=True)
            padded, pad_size = pad_dataproto_to_divisor(batch, workers.world_size)
            texts = decode_responses(unpad_dataproto(workers.generate_sequences(padded), pad_size), tokenizer)
            out.extend(texts[i * n : (i + 1) * n] for i in range(len(chunk)))
            bar.update(len(chunk))
    return out


def write_with_responses(table: pa.Table, responses: list[list[str]], output_path: str) -> str:
    column = pa.array(responses, type=pa.list_(pa.string()))
    if RESPONSES_COLUMN in table.column_names:
        table = table.set_column(table.column_names.index(RESPONSES_COLUMN), RESPONSES_COLUMN, column)
    else:
        table = table.append_column(RESPONSES_COLUMN, column)
    path = os.path.abspath(os.path.expanduser(output_path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp_{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def run_generation(config: GenerationConfig) -> str:
    """Generate and write data.output_path; returns its absolute path."""
    import importlib

    import torch.distributed as dist

    from verl.models.loader import load_tokenizer
    from verl.trainer.resolved_defaults import log_defaults, resolve_generation_defaults
    from verl.utils.device import set_device_preference

    set_device_preference(config.trainer.device)
    log_defaults(resolve_generation_defaults(config))  # before any worker starts, so they all get the same dtype
    if config.model.external_lib:
        importlib.import_module(config.model.external_lib)  # registers custom model classes before loading
    model_path = _absolute_model_path(config)
    table = pq.read_table(os.path.expanduser(config.data.path))
    key = config.data.prompt_key
    if key not in table.column_names:
        raise ValueError(f"{config.data.path}: no column {key!r} (data.prompt_key); columns: {table.column_names}")
    tokenizer = load_tokenizer(model_path, "model.path", trust_remote_code=config.model.trust_remote_code,
                               custom_chat_template=config.model.custom_chat_template)
    local = worker_class(config) is _LocalWorkers
    started_group = not dist.is_initialized()
    workers = worker_class(config)(config, model_path)
    try:
        responses = generate_responses(config, table.column(key).to_pylist(), tokenizer, workers)
    finally:
        if local and started_group and dist.is_initialized():
            dist.destroy_process_group()
    path = write_with_responses(table, responses, config.data.output_path)
    print(f"wrote {len(responses)} prompts x {config.data.n_samples} responses to {path}")
    return path
