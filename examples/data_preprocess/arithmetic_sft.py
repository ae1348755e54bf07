"""SFT data for the bundled arithmetic task: the same prompts as the RL data, answered with worked solutions.

    python examples/data_preprocess/arithmetic_sft.py --local_save_dir ~/data/arithmetic_sft --difficulty 1 \
        --exclude_questions_from ~/data/arithmetic/test.parquet

Each row has the RL columns (data_source, prompt, ability, reward_model, extra_info), so the file also works
for main_ppo, main_generation and main_eval, plus:
  response   the worked solution, e.g. "6 + 8 = 14. #### 14"  (single-turn SFT: data.response_key=response)
  messages   [user prompt, assistant solution]              (multi-turn SFT: data.multiturn.enable=true)

Problems come from examples/data_preprocess/arithmetic.py (same levels, same prompt with its worked example,
`--no_fewshot` to drop it). `--exclude_questions_from` drops every question found in another parquet file
(e.g. the RL test split), so SFT never trains on the problems used to measure it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _load_arithmetic():
    """The sibling arithmetic.py (examples/ is not a package)."""
    path = Path(__file__).resolve().with_name("arithmetic.py")
    spec = importlib.util.spec_from_file_location("verl_examples_arithmetic", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


arithmetic = _load_arithmetic()


def questions_in(path: str) -> set[str]:
    """Questions of an arithmetic parquet file (extra_info.question)."""
    local = os.path.expanduser(path)
    if not os.path.exists(local):
        raise FileNotFoundError(f"--exclude_questions_from {path!r}: no such file")
    rows = pq.read_table(local, columns=["extra_info"]).column("extra_info").to_pylist()
    questions = {row.get("question") for row in rows if isinstance(row, dict) and row.get("question")}
    if not questions:
        raise ValueError(f"--exclude_questions_from {path!r}: no extra_info.question values; is it arithmetic data?")
    return questions


def sft_row(problem, split: str, index: int, level: int, fewshot: bool) -> dict:
    row = arithmetic.to_row(problem, split, index, level, fewshot)
    row["response"] = problem.solution
    row["messages"] = [*row["prompt"], {"role": "assistant", "content": problem.solution}]
    return row


def make_problems(count: int, level: int, seed: int, excluded: set[str]) -> list:
    """`count` distinct problems avoiding `excluded`; asks the generator for a little more to make up for drops."""
    extra = 0
    while True:
        problems = [p for p in arithmetic.generate_problems(count + extra, level, seed) if p.question not in excluded]
        if len(problems) >= count:
            return problems[:count]
        extra += max(16, count - len(problems))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_save_dir", default="~/data/arithmetic_sft", help="writes train.parquet and test.parquet")
    parser.add_argument("--train_size", type=int, default=2000)
    parser.add_argument("--test_size", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1000, help="differs from arithmetic.py's default seed 0")
    parser.add_argument("--difficulty", type=int, default=1, help="level 1.. (see arithmetic.py)")
    parser.add_argument("--no_fewshot", action="store_true", help="drop the worked example from the prompt")
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
    problems = make_problems(args.train_size + args.test_size, args.difficulty, args.seed, excluded)
    save_dir = os.path.expanduser(args.local_save_dir)
    os.makedirs(save_dir, exist_ok=True)
    fewshot = not args.no_fewshot
    paths = []
    for split, chunk in (("train", problems[: args.train_size]), ("test", problems[args.train_size :])):
        rows = [sft_row(problem, split, i, args.difficulty, fewshot) for i, problem in enumerate(chunk)]
        path = os.path.join(save_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        paths.append(path)
        print(f"wrote {len(rows)} {split} SFT rows (level {args.difficulty}) to {path}")
    return paths[0], paths[1]


if __name__ == "__main__":
    main()
