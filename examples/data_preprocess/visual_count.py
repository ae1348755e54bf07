"""Generate the bundled visual counting task as verl parquet files with images (no downloads).

    python examples/data_preprocess/visual_count.py --local_save_dir ~/data/visual_count --max_count 5

Each image shows 1..max_count filled shapes (squares and circles, a few colours) on a white background, placed
without overlap; the question asks how many shapes there are (`--question sum`: draws digits instead and asks
for their sum). The answer goes in \\boxed{}, scored by verl.rewards.geo3k.count_score (data_source
"visual_count"). Rows use upstream's geo3k layout: an `<image>` placeholder in the prompt, an `images` column of
{"bytes": PNG, "path": None}. Train it with a vision-language model (docs/vlm.md).

`--sft` adds a `messages` column to every row (the question, then an assistant answer ending in the boxed count), so
the same files serve `python -m verl.trainer.fsdp_sft_trainer data.multiturn.enable=true` before RL.
"""

from __future__ import annotations

import argparse
import io
import random
from collections.abc import Sequence

from verl.data.parquet_files import add_save_dir_args, write_splits

DATA_SOURCE = "visual_count"
COLOURS = {"red": (220, 30, 30), "green": (30, 160, 60), "blue": (40, 70, 220), "orange": (240, 150, 20)}
QUESTIONS = {
    "count": "<image>How many shapes are in the picture? Put the final answer in \\boxed{}.",
    "sum": "<image>What is the sum of the digits in the picture? Put the final answer in \\boxed{}.",
}


def _free_cells(rng: random.Random, size: int, cell: int, count: int) -> list[tuple[int, int]]:
    cells = [(x, y) for x in range(0, size - cell + 1, cell) for y in range(0, size - cell + 1, cell)]
    return rng.sample(cells, count)


def draw(rng: random.Random, question: str, max_count: int, size: int) -> tuple[bytes, int]:
    """One PNG and its answer."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    cell = size // 3
    count = rng.randint(1, min(max_count, 9))
    answer = 0
    for x, y in _free_cells(rng, size, cell, count):
        colour = COLOURS[rng.choice(sorted(COLOURS))]
        box = (x + 2, y + 2, x + cell - 3, y + cell - 3)
        if question == "sum":
            digit = rng.randint(0, 9)
            answer += digit
            pen.text((x + cell // 3, y + cell // 4), str(digit), fill=colour)
        elif rng.random() < 0.5:
            pen.rectangle(box, fill=colour)
        else:
            pen.ellipse(box, fill=colour)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue(), (count if question == "count" else answer)


def sft_messages(question: str, answer: int) -> list[dict]:
    """The conversation an SFT run trains on: the RL prompt and a short worked answer."""
    what = "shapes" if question == "count" else "the digits add up to"
    reply = f"I count {answer} shapes. \\boxed{{{answer}}}" if question == "count" else \
        f"In the picture {what} {answer}. \\boxed{{{answer}}}"
    return [{"role": "user", "content": QUESTIONS[question]}, {"role": "assistant", "content": reply}]


def make_rows(split: str, n: int, seed: int, question: str, max_count: int, size: int, sft: bool = False,
              ) -> list[dict]:
    rng = random.Random(f"{seed}-{split}")
    rows = []
    for index in range(n):
        png, answer = draw(rng, question, max_count, size)
        if sft:
            rows.append({"messages": sft_messages(question, answer)})
        else:
            rows.append({})
        rows[-1].update({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": QUESTIONS[question]}],
            "images": [{"bytes": png, "path": None}],
            "ability": "visual",
            "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": index, "question": question},
        })
    return rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_save_dir_args(parser, "~/data/visual_count")
    parser.add_argument("--train_size", type=int, default=512)
    parser.add_argument("--test_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--question", choices=sorted(QUESTIONS), default="count")
    parser.add_argument("--max_count", type=int, default=5, help="shapes per image, 1..9")
    parser.add_argument("--image_size", type=int, default=84, help="pixels per side (a 3x3 grid of cells)")
    parser.add_argument("--sft", action="store_true", help="also write a `messages` column (question + answer)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    return write_splits(args, ((split, make_rows(split, n, args.seed, args.question, args.max_count, args.image_size,
                                                 args.sft))
                               for split, n in (("train", args.train_size), ("test", args.test_size))))


if __name__ == "__main__":
    main()
