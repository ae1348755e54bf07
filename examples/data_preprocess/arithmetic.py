"""Generate the bundled arithmetic word-problem task as verl parquet files (no downloads).

    python examples/data_preprocess/arithmetic.py --local_save_dir ~/data/arithmetic --difficulty 1

Each problem is a short story over one running count ("Tom has 12 apples. He buys 5 more. He gives away 3.
How many apples does Tom have now?"); the answer is an integer written after `####`, scored by
verl.rewards.arithmetic (data_source "arithmetic").

Small instruct models rarely write `####` unprompted. By default the prompt is a short conversation that
shows the format once: the instruction with a worked example question, the example's answer as an assistant
turn ("9 + 6 = 15. 15 - 4 = 11.\n#### 11"), then the real question. `--no_fewshot` gives a single user
message with the question and the instruction instead.

Difficulty levels (steps, numbers up to, operations):
  1: 1 step, 10, +        2: 1 step, 10, + -      3: 2 steps, 10, + -     4: 2 steps, 20, + -
  5: 3 steps, 20, + -     6: 3 steps, 50, + - and "k boxes of n" (a product)
  L >= 7: L-3 steps, 100, + - and products
Choose the level whose step-0 accuracy at the rollout temperature is 10-50% for the model you train, so GRPO
gets a learning signal. Measured with SmolLM2-135M-Instruct (64 test prompts, 48 new tokens, sampled at T=1):
level 1: 23%, level 2: 17%, level 3: ~8%, level 4: ~2% (greedy: about 56%, 39%, 13%, 3%). The worked example
alone moves these by several points.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass

from verl.data.parquet_files import add_save_dir_args, write_splits

DATA_SOURCE = "arithmetic"
INSTRUCTION = 'Solve the math word problem. Write the calculation, then the final answer as a number after "####".'
NO_FEWSHOT_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
# The one-shot example comes from its own generator, independent of --seed, so every split shares one prompt.
_EXAMPLE_SEED = 20_250_101

_PEOPLE = [
    ("Tom", "He", "him"), ("Anna", "She", "her"), ("Ben", "He", "him"), ("Lily", "She", "her"),
    ("Sam", "He", "him"), ("Mia", "She", "her"), ("Jack", "He", "him"), ("Emma", "She", "her"),
    ("Leo", "He", "him"), ("Zoe", "She", "her"), ("Max", "He", "him"), ("Ella", "She", "her"),
    ("Noah", "He", "him"), ("Ava", "She", "her"), ("Liam", "He", "him"), ("Nora", "She", "her"),
]
_ITEMS = ["apples", "pencils", "marbles", "stickers", "cookies", "books", "coins", "cards", "shells", "stamps",
          "balloons", "candies", "toy cars", "seashells", "crayons", "buttons"]
_ADD_PHRASES = ["{He} buys {n} more.", "{He} finds {n} more.", "A friend gives {him} {n} more.", "{He} gets {n} more."]
_SUB_PHRASES = ["{He} gives away {n}.", "{He} loses {n}.", "{He} sells {n}.", "{He} gives {n} to a friend."]
_BOX_PHRASES = ["{He} buys {k} boxes with {n} {items} in each.", "{He} gets {k} bags with {n} {items} in each."]


@dataclass(frozen=True)
class Level:
    steps: int
    max_number: int
    ops: tuple[str, ...]


_LEVELS = {
    1: Level(steps=1, max_number=10, ops=("add",)),
    2: Level(steps=1, max_number=10, ops=("add", "sub")),
    3: Level(steps=2, max_number=10, ops=("add", "sub")),
    4: Level(steps=2, max_number=20, ops=("add", "sub")),
    5: Level(steps=3, max_number=20, ops=("add", "sub")),
    6: Level(steps=3, max_number=50, ops=("add", "sub", "box")),
}


def level_spec(level: int) -> Level:
    if level < 1:
        raise ValueError(f"--difficulty must be >= 1, got {level}")
    return _LEVELS.get(level) or Level(steps=level - 3, max_number=100, ops=("add", "sub", "box"))


@dataclass(frozen=True)
class Problem:
    question: str
    solution: str  # the worked calculation ending in "#### <answer>"
    answer: int


def format_answer(problem: Problem) -> str:
    """The answer as the model should write it: the calculation, then "#### N" on its own line."""
    calculation = problem.solution.rsplit(" ####", 1)[0]
    return f"{calculation}\n#### {problem.answer}"


def _step(rng: random.Random, op: str, value: int, spec: Level, words: dict) -> tuple[str, str, int]:
    """(sentence, calculation, new value) of one step on the running count."""
    if op == "sub" and value < 2:
        op = "add"  # nothing left to take away; keep counts positive
    if op == "add":
        n = rng.randint(1, spec.max_number)
        return rng.choice(_ADD_PHRASES).format(n=n, **words), f"{value} + {n} = {value + n}.", value + n
    if op == "sub":
        n = rng.randint(1, min(value - 1, spec.max_number))
        return rng.choice(_SUB_PHRASES).format(n=n, **words), f"{value} - {n} = {value - n}.", value - n
    k, n = rng.randint(2, 5), rng.randint(2, max(2, spec.max_number // 5))
    sentence = rng.choice(_BOX_PHRASES).format(k=k, n=n, **words)
    return sentence, f"{k} * {n} = {k * n}. {value} + {k * n} = {value + k * n}.", value + k * n


def generate_problem(rng: random.Random, level: int) -> Problem:
    spec = level_spec(level)
    name, he, him = rng.choice(_PEOPLE)
    items = rng.choice(_ITEMS)
    words = {"He": he, "him": him, "items": items}
    value = rng.randint(2, spec.max_number)
    sentences, calculations = [f"{name} has {value} {items}."], []
    for _ in range(spec.steps):
        sentence, calculation, value = _step(rng, rng.choice(spec.ops), value, spec, words)
        sentences.append(sentence)
        calculations.append(calculation)
    question = " ".join(sentences) + f" How many {items} does {name} have now?"
    return Problem(question=question, solution=" ".join(calculations) + f" #### {value}", answer=value)


def _is_clear_example(problem: Problem, level: int) -> bool:
    """An example that shows both + and - (from two steps on) and never repeats a sentence."""
    sentences = problem.question.split(". ")
    shows_ops = "+" in problem.solution and ("-" in problem.solution or level_spec(level).steps == 1)
    return shows_ops and len(set(sentences)) == len(sentences)


def example_problem(level: int) -> Problem:
    """The worked example shown in every prompt of this level (the first clear one from a fixed seed)."""
    rng = random.Random(_EXAMPLE_SEED + level)
    while True:
        problem = generate_problem(rng, level)
        if _is_clear_example(problem, level):
            return problem


def build_prompt(question: str, level: int, fewshot: bool = True) -> list[dict[str, str]]:
    """The chat messages of one prompt.

    With `fewshot`, the worked example is a finished exchange (user question, assistant answer ending in
    "\n#### N"): small chat models copy the format, and stop after it, far more reliably from an earlier
    assistant turn than from an example inside the user's text.
    """
    if not fewshot:
        return [{"role": "user", "content": f"{question} {NO_FEWSHOT_INSTRUCTION}"}]
    example = example_problem(level)
    return [
        {"role": "user", "content": f"{INSTRUCTION}\n\nQuestion: {example.question}"},
        {"role": "assistant", "content": format_answer(example)},
        {"role": "user", "content": f"Question: {question}"},
    ]


def generate_problems(count: int, level: int, seed: int) -> list[Problem]:
    """`count` problems with distinct questions (never the prompt's worked example), deterministic in seed."""
    rng = random.Random(seed)
    seen = {example_problem(level).question}
    problems: list[Problem] = []
    attempts = 0
    while len(problems) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ValueError(
                f"could only make {len(problems)} distinct level-{level} problems of {count}; "
                "ask for fewer (--train_size/--test_size) or a higher --difficulty"
            )
        problem = generate_problem(rng, level)
        if problem.question not in seen:
            seen.add(problem.question)
            problems.append(problem)
    return problems


def to_row(problem: Problem, split: str, index: int, level: int, fewshot: bool) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": build_prompt(problem.question, level, fewshot),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(problem.answer)},
        "extra_info": {
            "split": split,
            "index": index,
            "question": problem.question,
            "answer": format_answer(problem),
            "level": level,
        },
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_save_dir_args(parser, "~/data/arithmetic")
    parser.add_argument("--train_size", type=int, default=5000)
    parser.add_argument("--test_size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--difficulty", type=int, default=1, help="level 1.. (see the module docstring)")
    parser.add_argument("--no_fewshot", action="store_true", help="drop the worked example from the prompt")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    if args.train_size < 1 or args.test_size < 1:
        raise ValueError(f"--train_size and --test_size must be >= 1, got {args.train_size}, {args.test_size}")
    problems = generate_problems(args.train_size + args.test_size, args.difficulty, args.seed)
    fewshot = not args.no_fewshot
    paths = write_splits(args, ((split, [to_row(problem, split, i, args.difficulty, fewshot)
                                         for i, problem in enumerate(chunk)])
                                for split, chunk in (("train", problems[: args.train_size]),
                                                     ("test", problems[args.train_size :]))))
    return paths[0], paths[1]


if __name__ == "__main__":
    main()
