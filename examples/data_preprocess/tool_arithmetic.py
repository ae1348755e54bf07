"""Generate the bundled tool task, multi-digit multiplication with a Python tool, as verl parquet files.

    python examples/data_preprocess/tool_arithmetic.py --local_dir ~/data/tool_arithmetic
    python examples/data_preprocess/tool_arithmetic.py --local_dir ~/data/tool_arithmetic_notool --no_tool

Each question is a product such as "Compute 437 * 86." (a 3-digit number times a 2- or 3-digit number by default).
SmolLM2-135M-Instruct cannot multiply such numbers in its head; with the `code_interpreter` tool it only has to
write `print(437 * 86)`, read the result and answer `#### 37582`. Rows are scored by verl.rewards.arithmetic
(data_source "arithmetic": the integer after the last "####", strict).

Rows (upstream's multi-turn layout):
  prompt        [system, user]: the system turn tells the model to use the tool and answer as "#### <n>"; the
                tool schemas themselves are added to the system turn by the chat template at rollout
  agent_name    "tool_agent" (the agent loop with tool calling)
  extra_info    split, index, question, tools_kwargs.code_interpreter.create_kwargs.ground_truth
`--no_tool` writes the same questions with a prompt asking for the answer directly and agent_name
"single_turn_agent": the base model's accuracy without the tool.

The tool config that goes with the rows is examples/tool_arithmetic/code_interpreter_tool_config.yaml; its schema
is TOOL_SCHEMA below (the SFT traces of tool_arithmetic_sft.py render it the same way).
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "arithmetic"
TOOL_NAME = "code_interpreter"
# Kept short: it is rendered into every prompt. Must match examples/tool_arithmetic/code_interpreter_tool_config.yaml.
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run Python code and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code; print() the result."}},
            "required": ["code"],
        },
    },
}
SYSTEM_PROMPT = ('You are a math assistant. Use the code_interpreter tool to compute with Python, then write the '
                 'final answer as "#### <number>".')
NO_TOOL_SYSTEM_PROMPT = 'You are a math assistant. Write the final answer as "#### <number>".'


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def answer(self) -> int:
        return self.a * self.b

    @property
    def expression(self) -> str:
        return f"{self.a} * {self.b}"

    @property
    def question(self) -> str:
        return f"Compute {self.expression}."


def parse_digits(text: str) -> tuple[int, ...]:
    try:
        digits = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"digit counts must be comma-separated integers such as 2,3; got {text!r}") from None
    if not digits or any(d < 1 or d > 9 for d in digits):
        raise ValueError(f"digit counts must be 1..9, got {text!r}")
    return digits


def _number(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def generate_problems(count: int, seed: int, a_digits: Sequence[int] = (3,), b_digits: Sequence[int] = (2, 3),
                      exclude: set[str] | frozenset[str] = frozenset()) -> list[Problem]:
    """`count` distinct problems (never a question in `exclude`), deterministic in seed."""
    rng = random.Random(seed)
    seen = set(exclude)
    problems: list[Problem] = []
    for _ in range(50 * count + 1000):
        if len(problems) == count:
            return problems
        problem = Problem(_number(rng, rng.choice(a_digits)), _number(rng, rng.choice(b_digits)))
        if problem.question not in seen:
            seen.add(problem.question)
            problems.append(problem)
    raise ValueError(f"could only make {len(problems)} distinct problems of {count}; ask for fewer or more digits")


def build_prompt(problem: Problem, tool: bool = True) -> list[dict[str, str]]:
    system = SYSTEM_PROMPT if tool else NO_TOOL_SYSTEM_PROMPT
    return [{"role": "system", "content": system}, {"role": "user", "content": problem.question}]


def to_row(problem: Problem, split: str, index: int, tool: bool = True) -> dict:
    answer = str(problem.answer)
    extra_info = {"split": split, "index": index, "question": problem.question, "expression": problem.expression}
    if tool:
        # upstream's per-sample tool arguments; the ground truth is harmless to the code interpreter and keeps the
        # struct non-empty (parquet cannot store an empty struct)
        extra_info["need_tools_kwargs"] = True
        extra_info["tools_kwargs"] = {TOOL_NAME: {"create_kwargs": {"ground_truth": answer}}}
    return {
        "data_source": DATA_SOURCE,
        "prompt": build_prompt(problem, tool),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": extra_info,
        "agent_name": "tool_agent" if tool else "single_turn_agent",
    }


def add_size_args(parser: argparse.ArgumentParser, train: int, test: int, seed: int) -> None:
    parser.add_argument("--train_size", type=int, default=train)
    parser.add_argument("--test_size", type=int, default=test)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--a_digits", default="3", help="digit counts of the first factor, e.g. 3 or 2,3")
    parser.add_argument("--b_digits", default="2,3", help="digit counts of the second factor")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", default="~/data/tool_arithmetic", help="writes train.parquet and test.parquet")
    parser.add_argument("--local_save_dir", default=None, help="alias of --local_dir")
    add_size_args(parser, train=2048, test=64, seed=0)
    parser.add_argument("--no_tool", action="store_true", help="prompts without the tool (the base-model baseline)")
    return parser.parse_args(argv)


def write_splits(save_dir: str, problems: Sequence[Problem], train_size: int, make_row, what: str) -> tuple[str, str]:
    """train.parquet (the first train_size problems) and test.parquet (the rest) of `make_row(problem, split, i)`."""
    os.makedirs(save_dir, exist_ok=True)
    paths = []
    for split, chunk in (("train", problems[:train_size]), ("test", problems[train_size:])):
        rows = [make_row(problem, split, i) for i, problem in enumerate(chunk)]
        path = os.path.join(save_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        paths.append(path)
        print(f"wrote {len(rows)} {split} {what} to {path}")
    return paths[0], paths[1]


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    if args.train_size < 1 or args.test_size < 1:
        raise ValueError(f"--train_size and --test_size must be >= 1, got {args.train_size}, {args.test_size}")
    problems = generate_problems(args.train_size + args.test_size, args.seed, parse_digits(args.a_digits),
                                 parse_digits(args.b_digits))
    tool = not args.no_tool
    save_dir = os.path.expanduser(args.local_save_dir or args.local_dir)
    return write_splits(save_dir, problems, args.train_size, lambda p, split, i: to_row(p, split, i, tool),
                        "tool rows" if tool else "no-tool rows")


if __name__ == "__main__":
    main()
