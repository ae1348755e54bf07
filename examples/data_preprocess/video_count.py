"""Generate a bundled video counting task as verl parquet files with videos (no downloads).

    python examples/data_preprocess/video_count.py --local_save_dir ~/data/video_count --max_count 4

Each clip (an mp4 written with OpenCV next to the parquet files, under `videos/`) shows a white canvas on which
1..max_count coloured squares appear one after another, one every `--frames_per_shape` frames; the question asks how
many squares appear. The answer goes in \\boxed{}, scored like the bundled image task (data_source "visual_count",
verl.rewards.geo3k.count_score). Rows use upstream's video layout: a `<video>` placeholder in the prompt and a
`videos` column of {"video": "/abs/clip.mp4", "fps": 2.0} entries (train with `data.video_key=videos`, the default,
and a Qwen2-VL / Qwen2.5-VL model: docs/vlm.md).
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence

from verl.data.parquet_files import add_save_dir_args, write_splits

DATA_SOURCE = "visual_count"
QUESTION = "<video>How many squares appear in the video? Put the final answer in \\boxed{}."
COLOURS = [(220, 30, 30), (30, 160, 60), (40, 70, 220), (240, 150, 20)]


def write_clip(path: str, rng: random.Random, max_count: int, size: int, frames_per_shape: int,
               fps: float) -> int:
    """One mp4 clip and its answer (the number of squares)."""
    import cv2
    import numpy as np

    count = rng.randint(1, min(max_count, 9))
    cell = size // 3
    cells = rng.sample([(x, y) for x in range(3) for y in range(3)], count)
    canvas = np.full((size, size, 3), 255, dtype=np.uint8)
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, (size, size))
    try:
        for x, y in cells:
            colour = COLOURS[rng.randrange(len(COLOURS))]
            canvas[y * cell + 2:(y + 1) * cell - 2, x * cell + 2:(x + 1) * cell - 2] = colour
            for _ in range(frames_per_shape):
                writer.write(cv2.cvtColor(canvas, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    if not os.path.isfile(path):
        raise RuntimeError(f"OpenCV wrote no file at {path} (is its mp4v encoder available?)")
    return count


def make_rows(split: str, n: int, seed: int, video_dir: str, max_count: int, size: int, frames_per_shape: int,
              fps: float, sample_fps: float) -> list[dict]:
    rng = random.Random(f"{seed}-{split}")
    os.makedirs(video_dir, exist_ok=True)
    rows = []
    for index in range(n):
        path = os.path.abspath(os.path.join(video_dir, f"{split}_{index}.mp4"))
        answer = write_clip(path, rng, max_count, size, frames_per_shape, fps)
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": QUESTION}],
            "videos": [{"video": path, "fps": sample_fps}],
            "ability": "visual",
            "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": index, "question": "video_count"},
        })
    return rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_save_dir_args(parser, "~/data/video_count")
    parser.add_argument("--train_size", type=int, default=256)
    parser.add_argument("--test_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_count", type=int, default=4, help="squares per clip, 1..9")
    parser.add_argument("--video_size", type=int, default=84, help="pixels per side (a 3x3 grid of cells)")
    parser.add_argument("--frames_per_shape", type=int, default=4, help="frames between two squares appearing")
    parser.add_argument("--fps", type=float, default=4.0, help="the clips' frame rate")
    parser.add_argument("--sample_fps", type=float, default=2.0, help="frames per second the model sees (entry fps)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, ...]:
    args = parse_args(argv)
    video_dir = os.path.join(os.path.expanduser(args.local_dir or args.local_save_dir), "videos")
    return write_splits(args, ((split, make_rows(split, n, args.seed, video_dir, args.max_count, args.video_size,
                                                 args.frames_per_shape, args.fps, args.sample_fps))
                               for split, n in (("train", args.train_size), ("test", args.test_size))))


if __name__ == "__main__":
    main()
