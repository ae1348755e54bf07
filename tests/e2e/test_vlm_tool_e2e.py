"""A whole GRPO run with images through the tool agent loop: visual_count rows on a tiny random Qwen2-VL, the HF
rollout, one worker, main_ppo's builder and Ray, `multi_turn.enable=true` with a tool that returns an image.

A random model never writes a tool call, so the loop used here (`scripted_zoom_agent`, the tool agent with its
first model turn replaced by a fixed `zoom` call) makes every trajectory call the tool once; the model's later
turn is the HF engine's, with the row's image and the tool's. Checked: two steps finish, each trajectory made one
call without error, and the batch the actor scores carries both images of every row (multi_modal_inputs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.e2e.test_vlm_e2e import _overrides
from tests.helpers.e2e import fit_run
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse
from verl.workers.rollout.agent_loop.server import TokenOutput
from verl.workers.rollout.agent_loop.tool_agent_loop import ToolAgentLoop

pytestmark = pytest.mark.e2e

CALL = '<tool_call>\n{"name": "zoom", "arguments": {"factor": 2}}\n</tool_call>'
ZOOM_SCHEMA = {"type": "function", "function": {
    "name": "zoom", "description": "Zoom in.",
    "parameters": {"type": "object", "properties": {"factor": {"type": "integer", "description": "zoom factor"}},
                   "required": ["factor"]}}}


class ZoomTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text="zoomed", image=[Image.new("RGB", (24, 16), (10, 200, 30))]), 0.0, {}


class _FirstTurnScripted:
    """The engine, except that a trajectory's first request is answered with ``ids`` (a tool call) without it."""

    def __init__(self, inner, ids: list[int]) -> None:
        self.inner, self.ids, self.first = inner, ids, True

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        if self.first:
            self.first = False
            log_probs = [0.0] * len(self.ids) if sampling_params.get("logprobs") is not None else None
            return TokenOutput(list(self.ids), log_probs, "stop")
        return await self.inner.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)


class ScriptedZoomAgent(ToolAgentLoop):
    async def run(self, sampling_params, **kwargs):
        ids = self.tokenizer.encode(CALL, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.server_manager = _FirstTurnScripted(self.server_manager, ids)
        return await super().run(sampling_params, **kwargs)


def _with_vllm(tmp_path: Path, overrides: list[str]) -> list[str]:
    """The same run on the vLLM rollout: its tiny model (a head size vLLM's CPU attention takes), fp32 engine."""
    from tests.helpers.tiny_vlm_vllm import save_tiny_vllm_vlm_dir

    model = save_tiny_vllm_vlm_dir(tmp_path / "vllm_model", "qwen2_vl")
    kept = [o for o in overrides if not o.startswith(("actor_rollout_ref.model.path=", "actor_rollout_ref.rollout.name="))]
    return kept + [f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=vllm",
                   "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.rollout.max_num_seqs=16",
                   "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"]


@pytest.mark.parametrize("rollout", ["hf", pytest.param("vllm", marks=pytest.mark.slow)])
def test_tool_images_reach_the_actor_in_a_whole_run(tmp_path: Path, rollout: str) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text(yaml.safe_dump({"tools": [{"class_name": f"{__name__}.ZoomTool", "config": {"type": "native"},
                                                "tool_schema": ZOOM_SCHEMA}]}))
    loops = tmp_path / "loops.yaml"
    loops.write_text(yaml.safe_dump([{"name": "scripted_zoom_agent", "_target_": f"{__name__}.ScriptedZoomAgent"}]))
    overrides = _overrides(
        tmp_path, "actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=true",
        "data.max_prompt_length=1024", "data.max_response_length=160",
        "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=scripted_zoom_agent")
    if rollout == "vllm":
        overrides = _with_vllm(tmp_path, overrides)
    seen: list[list[int]] = []

    def body(trainer) -> None:
        compute_advantage = trainer._compute_advantage

        def recording(batch, *args):  # the batch the actor updates on: images per row
            seen.append([len(inputs.get("image_grid_thw", [])) for inputs in batch.non_tensor_batch["multi_modal_inputs"]])
            return compute_advantage(batch, *args)

        trainer._compute_advantage = recording
        trainer.fit()

    rows = fit_run(overrides, body)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["agent/tool_calls/mean"] == 1.0 and row["agent/tool_errors/mean"] == 0.0
        assert row["agent/response_tool_tokens/mean"] > 0 and "critic/score/mean" in row
    assert len(seen) == 2 and all(counts == [2] * len(counts) for counts in seen)  # the row's image + the tool's
