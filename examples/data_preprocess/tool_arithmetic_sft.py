"""SFT cold-start traces for the bundled tool task: the model calls the Python tool, reads the result, answers.

    python examples/data_preprocess/tool_arithmetic_sft.py --local_dir ~/data/tool_arithmetic_sft \
        --exclude_questions_from ~/data/tool_arithmetic/test.parquet

Each row is one finished tool-use conversation, in the prompt of tool_arithmetic.py:
  messages  system, user "Compute 437 * 86.",
            assistant (content "", tool_calls [{type: function, function: {name: code_interpreter,
                       arguments: '{"code": "print(437 * 86)"}'}}]),
            tool "37582" (what the code printed, as the code interpreter returns it),
            assistant "#### 37582"
  tools     [the code_interpreter schema]  (the template renders it into the system turn)
plus the RL columns (data_source, prompt, ability, reward_model, extra_info, agent_name).

Train with the multi-turn SFT dataset and the template the rollout renders with (only assistant turns are trained):
    python -m verl.trainer.fsdp_sft_trainer data.multiturn.enable=true data.multiturn.messages_key=messages \
        data.multiturn.tools_key=tools data.chat_template=verl_hermes ...

Tool-call arguments are stored as a JSON string, not a dict: parquet would turn a dict into a struct shared by all
rows, and the template prints a string unchanged.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq


def _load_tool_arithmetic():
    """The sibling tool_arithmetic.py (examples/ is not a package)."""
    path = Path(__file__).resolve().with_name("tool_arithmetic.py")
    spec = importlib.util.spec_from_file_location("verl_examples_tool_arithmetic", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


tool_arithmetic = _load_tool_arithmetic()


def tool_output(problem) -> str:
    """What the code interpreter answers for `print(<expression>)`: stdout without its trailing newline."""
    return str(problem.answer)


def trace(problem) -> list[dict]:
    """The conversation of one correct tool-use episode."""
    arguments = json.dumps({"code": f"print({problem.expression})"})
    call = {"type": "function", "function": {"name": tool_arithmetic.TOOL_NAME, "arguments": arguments}}
    return [
        *tool_arithmetic.build_prompt(problem, tool=True),
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": tool_output(problem)},
        {"role": "assistant", "content": f"#### {problem.answer}"},
    ]


def sft_row(problem, split: str, index: int) -> dict:
    row = tool_arithmetic.to_row(problem, split, index, tool=True)
    row["messages"] = trace(problem)
    row["tools"] = [tool_arithmetic.TOOL_SCHEMA]
    return row


def questions_in(path: str) -> set[str]:
    """Questions of a tool_arithmetic parquet file (extra_info.question)."""
    local = os.path.expanduser(path)
    if not os.path.exists(local):
        raise FileNotFoundError(f"--exclude_questions_from {path!r}: no such file")
    rows = pq.read_table(local, columns=["extra_info"]).column("extra_info").to_pylist()
    questions = {row.get("question") for row in rows if isinstance(row, dict) and row.get("question")}
    if not questions:
        raise ValueError(f"--exclude_questions_from {path!r}: no extra_info.question values; "
                         "is it tool_arithmetic data?")
    return questions


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", default="~/data/tool_arithmetic_sft", help="writes train.parquet and test.parquet")
    parser.add_argument("--local_save_dir", default=None, help="alias of --local_dir")
    tool_arithmetic.add_size_args(parser, train=512, test=32, seed=1000)
    parser.add_argument("--exclude_questions_from", action="append", default=[],
                        help="a parquet file whose questions must not appear here (repeatable)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    if args.train_size < 1 or args.test_size < 1:
        raise ValueError(f"--train_size and --test_size must be >= 1, got {args.train_size}, {args.test_size}")
    excluded: set[str] = set()
    for path in args.exclude_questions_from:
        excluded |= questions_in(path)
    problems = tool_arithmetic.generate_problems(
        args.train_size + args.test_size, args.seed, tool_arithmetic.parse_digits(args.a_digits),
        tool_arithmetic.parse_digits(args.b_digits), exclude=excluded)
    save_dir = os.path.expanduser(args.local_save_dir or args.local_dir)
    return tool_arithmetic.write_splits(save_dir, problems, args.train_size, sft_row, "SFT traces")


if __name__ == "__main__":
    main()
