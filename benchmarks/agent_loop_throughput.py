"""Agent-loop throughput: 32 tool-calling trajectories at once against the same 32 one after another.

Each trajectory is three model turns with a real tool call between them: the in-process vLLM engine generates
(--turn-tokens tokens per turn, EOS ignored so every run does the same work), the code-interpreter tool
(SandboxFusionTool) runs `print(a * b)` in the local sandbox service over HTTP, and its answer is rendered into
the conversation as tokens (the verl_hermes template) before the next turn. The model itself is not asked to
write the calls (the base model does not), so the work per trajectory is fixed; what is measured is how the agent
loop overlaps engine batches and tool calls.

    python benchmarks/agent_loop_throughput.py                 # default model, 32 trajectories

On a machine where other processes keep the cores busy, run with VERL_VLLM_THREADS=1 (two OpenMP threads then
spin-wait on each other; see verl/workers/rollout/vllm/engine.py).

It also times single-turn rollout both ways on the demo's shape (32 responses x 48 tokens): the sync path
(`vLLMRollout.generate_sequences`) against `single_turn_agent` through the agent loop, best of --rounds rounds
each, alternating, and checks that greedy responses are identical.

Prints, last:
    single_turn_sync_s: A  single_turn_agent_loop_s: B  single_turn_agent_over_sync: B/A   (async default if <= 1.10)
    single_turn_greedy_identical: True/False
    agent_loop_sequential_s: S      (one trajectory per generate_sequences call, 32 calls)
    agent_loop_concurrent_s: C      (one call, 32 trajectories, rollout.agent.num_workers workers)
    agent_loop_speedup: S/C         (target >= 3)
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register  # noqa: E402

TOOL_SCHEMA = {"type": "function", "function": {
    "name": "code_interpreter", "description": "Run Python code and return what it prints.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "the code"}},
                   "required": ["code"]}}}


@register("bench_fixed_tool_agent")
class FixedToolAgentLoop(AgentLoopBase):
    """Generate, call the sandbox tool, repeat: ``turns`` model turns, ``turns - 1`` tool calls."""

    tool = None
    renderer = None
    turns = 3
    turn_tokens = 32

    @classmethod
    def init_class(cls, config, tokenizer, processor=None, **kwargs):
        from verl.tools.sandbox_fusion_tools import SandboxFusionTool
        from verl.workers.rollout.agent_loop.rendering import ChatRenderer

        cls.tool = SandboxFusionTool({"sandbox_fusion_url": os.environ["VERL_SANDBOX_FUSION_URL"], "num_workers": 32,
                                      "rate_limit": 32}, TOOL_SCHEMA)
        cls.renderer = ChatRenderer(tokenizer, "verl_hermes", "bench")

    async def run(self, sampling_params, **kwargs):
        a, b = kwargs["a"], kwargs["b"]
        messages = [{"role": "user", "content": f"Compute {a} * {b} with the tool."}]
        tools = [TOOL_SCHEMA]
        prompt = self.renderer.prompt_ids(messages, tools)
        ids, mask = [], []
        instance, _ = await self.tool.create()
        for turn in range(self.turns):
            out = await self.server_manager.generate(f"bench-{a}-{b}", prompt_ids=prompt + ids,
                                                     sampling_params={**sampling_params,
                                                                      "max_tokens": self.turn_tokens,
                                                                      "ignore_eos": True, "stop_token_ids": []})
            ids += out.token_ids
            mask += [1] * len(out.token_ids)
            messages.append({"role": "assistant", "content": self.tokenizer.decode(out.token_ids,
                                                                                    skip_special_tokens=True)})
            if turn == self.turns - 1:
                break
            response, _, _ = await self.tool.execute(instance, {"code": f"print({a} * {b})"})
            tool_message = [{"role": "tool", "content": response.text}]
            delta = self.renderer.delta_ids(messages, tool_message, tools, out.token_ids)
            messages += tool_message
            ids += delta
            mask += [0] * len(delta)
        await self.tool.release(instance)
        return AgentLoopOutput(prompt_ids=prompt, response_ids=ids, response_mask=mask, num_turns=len(messages),
                               extra_fields={"__tool_calls__": self.turns - 1})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(count: int, tokenizer):
    import numpy as np
    import torch

    from verl.protocol import DataProto

    ids = torch.full((count, 1), tokenizer.eos_token_id, dtype=torch.long)  # unused by the loop
    mask = torch.ones_like(ids)
    columns = {"agent_name": ["bench_fixed_tool_agent"] * count, "a": [101 + 7 * i for i in range(count)],
               "b": [23 + 3 * i for i in range(count)]}
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": mask - 1},
                               non_tensors={k: np.array(v, dtype=object) for k, v in columns.items()},
                               meta_info={"eos_token_id": tokenizer.eos_token_id,
                                          "pad_token_id": tokenizer.pad_token_id})


def _single_turn_rows(count: int, tokenizer, prompt_length: int, do_sample: bool):
    import torch

    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask

    ids = torch.full((count, prompt_length), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i in range(count):
        text = f"Compute {3 + 7 * i} + {2 + (5 * i) % 11}. Put the final answer after ####."
        row = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                             add_generation_prompt=True, tokenize=False))
        ids[i, prompt_length - len(row):] = torch.tensor(row)
        mask[i, prompt_length - len(row):] = 1
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask,
                                "position_ids": compute_position_id_with_mask(mask)},
                               meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
                                          "do_sample": do_sample, "validate": not do_sample, "response_length": 48})


def single_turn(rollout, manager, tokenizer, config, rounds: int) -> None:
    import torch

    from verl.workers.rollout.vllm.sampling import sampling_kwargs

    best = {"sync": float("inf"), "async": float("inf")}
    for _ in range(rounds):
        for name in ("sync", "async"):
            batch = _single_turn_rows(32, tokenizer, 128, do_sample=True)
            start = time.perf_counter()
            if name == "sync":
                rollout.generate_sequences(batch)
            else:
                params = sampling_kwargs(config.rollout, batch.meta_info)
                params.pop("n")
                manager.generate_sequences(batch, params)
            best[name] = min(best[name], time.perf_counter() - start)
    greedy = _single_turn_rows(32, tokenizer, 128, do_sample=False)
    sync_out = rollout.generate_sequences(greedy)
    params = sampling_kwargs(config.rollout, greedy.meta_info)
    params.pop("n")
    async_out = manager.generate_sequences(greedy, params)
    same = torch.equal(sync_out.batch["responses"], async_out.batch["responses"])
    print(f"single_turn_sync_s: {best['sync']:.2f}  single_turn_agent_loop_s: {best['async']:.2f}  "
          f"single_turn_agent_over_sync: {best['async'] / best['sync']:.3f}")
    print(f"single_turn_greedy_identical: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF folder (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--turn-tokens", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=8, help="rollout.agent.num_workers")
    parser.add_argument("--rounds", type=int, default=3, help="single-turn timing rounds (best counts)")
    args = parser.parse_args()

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", LOCAL_RANK="0",
                      WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.sandbox.local import LocalSandbox
    from verl.trainer.config import ActorRolloutRefConfig
    from verl.utils.config_schema import build_config
    from verl.utils.default_model import default_model_path
    from verl.utils.device import preferred_low_precision
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.rollout.agent_loop.backends import VLLMBackend
    from verl.workers.rollout.agent_loop.manager import AgentLoopManager
    from verl.workers.rollout.registry import build_rollout

    FixedToolAgentLoop.turn_tokens = args.turn_tokens
    dist.init_process_group("gloo", rank=0, world_size=1)
    path = args.model or default_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt_len, response_len = 512, 3 * args.turn_tokens + 128
    config = build_config(ActorRolloutRefConfig, {
        "model": {"path": path},
        "rollout": {"name": "vllm", "mode": "async", "prompt_length": prompt_len, "response_length": response_len,
                    "val_kwargs": {"temperature": 0.0, "do_sample": False},
                    "dtype": preferred_low_precision(), "max_num_seqs": args.trajectories, "free_cache_engine": False,
                    "agent": {"num_workers": args.num_workers}}}).config
    module = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    module = apply_fsdp2(module, config.actor.fsdp_config, create_device_mesh(1))
    rollout, sharding = build_rollout(config.rollout, module, tokenizer, path, None)
    with LocalSandbox(max_concurrency=os.cpu_count() or 1) as url:
        os.environ["VERL_SANDBOX_FUSION_URL"] = url
        manager = AgentLoopManager(config, tokenizer, lambda meta: VLLMBackend(rollout))
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
        rows = _rows(args.trajectories, tokenizer)
        with sharding:  # weights into the engine, as before every rollout
            manager.generate_sequences(rows.slice(0, 1), params)  # warm-up: engine, sandbox, tool pool
            start = time.perf_counter()
            for i in range(args.trajectories):
                manager.generate_sequences(rows.slice(i, i + 1), params)
                if i % 8 == 7:
                    print(f"  sequential: {i + 1} trajectories in {time.perf_counter() - start:.1f}s", flush=True)
            sequential = time.perf_counter() - start
            start = time.perf_counter()
            out = manager.generate_sequences(rows, params)
            concurrent = time.perf_counter() - start
            single_config = build_config(ActorRolloutRefConfig, {
                "model": {"path": path}, "rollout": {"name": "vllm", "mode": "async", "prompt_length": 128,
                                                     "response_length": 48}}).config
            single_turn(rollout, AgentLoopManager(single_config, tokenizer, lambda meta: VLLMBackend(rollout)),
                        tokenizer, single_config, args.rounds)
    model_tokens = int(out.batch["response_mask"].sum())
    print(f"trajectories: {args.trajectories} x 3 turns x {args.turn_tokens} tokens, 2 sandbox calls each; "
          f"{model_tokens} model tokens per run; engine steps (concurrent): {manager.last_stats['agent/engine_steps']}, "
          f"most requests in flight: {manager.last_stats['agent/max_in_flight']}")
    print(f"agent_loop_sequential_s: {sequential:.1f}")
    print(f"agent_loop_concurrent_s: {concurrent:.1f}")
    print(f"agent_loop_speedup: {sequential / concurrent:.2f}  (target >= 3)")
    rollout.shutdown()


if __name__ == "__main__":
    main()
