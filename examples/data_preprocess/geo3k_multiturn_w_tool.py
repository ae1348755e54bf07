"""Geometry3K rows for the multi-turn tool agent, as upstream's geo3k_multiturn_w_tool preprocess writes them:

    python examples/data_preprocess/geo3k_multiturn_w_tool.py --local_dataset_path ~/datasets/geometry3k \
        --local_save_dir ~/data/geo3k_multiturn_w_tool

The rows of examples/data_preprocess/geo3k.py (prompt with its `<image>`, the `images` column) plus a system turn
asking for the `calc_geo3k_reward` tool, `agent_name: tool_agent`, and the tool's ground truth in
`extra_info.tools_kwargs.calc_geo3k_reward.create_kwargs` (the tool: verl.tools.geo3k_tool.Geo3kTool, configured by
examples/sglang_multiturn/config/tool_config/geo3k_tool_config.yaml). Train with
actor_rollout_ref.rollout.multi_turn.enable=true and that tool config (docs/vlm.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from geo3k import load_splits, to_row  # noqa: E402 - the sibling script's row format

from verl.data.parquet_files import add_save_dir_args, write_splits  # noqa: E402

SYSTEM = ("You are a math expert. You are given a question and you need to solve it step by step. Reasoning step by "
          "step before any tool call. You should use the `calc_geo3k_reward` tool after step by step solving the "
          "question, before generate final answer at least once and refine your answer if necessary. ")


def to_tool_row(example: dict, split: str, index: int) -> dict:
    row = to_row(example, split, index)
    row["prompt"] = [{"role": "system", "content": SYSTEM}, *row["prompt"]]
    row["agent_name"] = "tool_agent"
    row["extra_info"].update(need_tools_kwargs=True, tools_kwargs={
        "calc_geo3k_reward": {"create_kwargs": {"ground_truth": example["answer"]}}})
    return row


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dataset_path", default=None, help="local copy of hiyouga/geometry3k")
    add_save_dir_args(parser, "~/data/geo3k_multiturn_w_tool")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    return write_splits(args, ((split, [to_tool_row(example, split, i) for i, example in enumerate(source)])
                               for split, source in load_splits(args.local_dataset_path).items()))


if __name__ == "__main__":
    main()
