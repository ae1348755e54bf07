"""Build a small reward model for the bundled arithmetic task: SmolLM2-135M-Instruct with a one-output value head
(the critic's model class, ``verl.models.value_head``), trained briefly to score correct answers above wrong ones.

    python examples/reward_model/build_arithmetic_rm.py --out /tmp/rm_demo/arithmetic_rm

Data: the task's own parquet rows (examples/data_preprocess/arithmetic.py; made here when missing). Each row gives
a correct answer (``extra_info.answer``: the calculation, then "#### N") and the script derives wrong ones the way
a small policy goes wrong: a miscalculated sum carried to the end, a right calculation with a different final
number, a number misread from the question, and a correct calculation without the "####" line the rule reward
needs. A pair is (correct, wrong) for the same prompt; the loss is Bradley-Terry, -log sigmoid(r_correct - r_wrong),
on the score the head gives at the last token, which is where verl's RewardModelWorker reads it.

The sequences are built exactly as the rollout hands them to the reward model: the prompt rendered with the chat
template and the generation prompt, then the response tokens and EOS. The result is saved as an HF
token-classification folder (num_labels=1) with the tokenizer, for ``reward_model.model.path``.
Prints the held-out accuracy (pairs from the test split where the correct answer scores higher), overall and per
kind of wrong answer, before and after training.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]


def _ensure_data(data_dir: Path, level: int) -> None:
    if (data_dir / "train.parquet").exists() and (data_dir / "test.parquet").exists():
        return
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/arithmetic.py"), "--local_save_dir",
                    str(data_dir), "--difficulty", str(level), "--train_size", "2048", "--test_size", "64",
                    "--seed", "0"], check=True)


_STEP = re.compile(r"(\d+) ([+\-*]) (\d+) = (\d+)\.")


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _off_by(rng: random.Random, value: int) -> int:
    """A plausible wrong number near ``value`` (never equal, never negative)."""
    while True:
        wrong = value + rng.choice([-3, -2, -1, 1, 2, 3, 10, -10])
        if wrong >= 0 and wrong != value:
            return wrong


def wrong_answers(answer: str, rng: random.Random) -> list[str]:
    """Wrong variants of a correct ``"<calculation>\\n#### N"`` answer (see the module docstring)."""
    calculation, final = answer.rsplit("\n#### ", 1)
    steps = _STEP.findall(calculation)
    a, op, b, _ = steps[-1]
    # 1. the last step miscalculated, the wrong result carried to the final line
    bad = _off_by(rng, _apply(int(a), op, int(b)))
    miscalc = calculation[: calculation.rfind(f"{a} {op} {b} =")] + f"{a} {op} {b} = {bad}."
    variants = [f"{miscalc}\n#### {bad}"]
    # 2. the calculation is right but the final line says something else
    variants.append(f"{calculation}\n#### {_off_by(rng, int(final))}")
    # 3. an operand misread from the question, computed consistently
    b2 = _off_by(rng, int(b))
    misread = calculation[: calculation.rfind(f"{a} {op} {b} =")] + f"{a} {op} {b2} = {_apply(int(a), op, b2)}."
    variants.append(f"{misread}\n#### {_apply(int(a), op, b2)}")
    # 4. right, but without the "####" line the answer is read from
    variants.append(f"{calculation} The answer is {final}.")
    return variants


# How often each kind of wrong answer is drawn (miscalculated, wrong final line, misread, no "####"): the format
# errors are learned within a few steps, the arithmetic ones take most of the training, so they come up more.
VARIANT_WEIGHTS = (3, 1, 3, 1)


def make_pairs(frame: pd.DataFrame, count: int, seed: int) -> list[tuple[list, str, str]]:
    rng = random.Random(seed)
    pairs = []
    for row in frame.itertuples():
        answer = row.extra_info["answer"]
        wrong = rng.choices(wrong_answers(answer, rng), weights=VARIANT_WEIGHTS)[0]
        pairs.append((list(row.prompt), answer, wrong))
        if len(pairs) >= count:
            break
    return pairs


class Encoder:
    """prompt (chat template + generation prompt) ++ response ++ EOS, as the rollout produces them."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, messages: list, response: str) -> list[int]:
        tok = self.tokenizer
        prompt = tok.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True, tokenize=False)
        prompt_ids = tok.encode(prompt, add_special_tokens=False)
        return prompt_ids + tok.encode(response, add_special_tokens=False) + [tok.eos_token_id]


def scores(model, sequences: list[list[int]], pad_id: int) -> torch.Tensor:
    """The head's output at each sequence's last token (right-padded batch)."""
    from verl.models.value_head import values_from_output

    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, seq in enumerate(sequences):
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
    values = values_from_output(model(input_ids=ids, attention_mask=mask, use_cache=False))
    return values[torch.arange(len(sequences)), mask.sum(-1) - 1]


KINDS = ("miscalculated", "wrong_final_line", "misread_number", "no_####")


def held_out_pairs(frame: pd.DataFrame, rows: int, seed: int) -> list[tuple[str, list, str, str]]:
    """Every kind of wrong answer for each of the first ``rows`` test prompts: (kind, prompt, correct, wrong)."""
    rng = random.Random(seed)
    out = []
    for row in list(frame.itertuples())[:rows]:
        answer = row.extra_info["answer"]
        out += [(kind, list(row.prompt), answer, wrong) for kind, wrong in zip(KINDS, wrong_answers(answer, rng))]
    return out


@torch.no_grad()
def accuracy(model, encoded: list[tuple[str, list[int], list[int]]], pad_id: int, batch: int, autocast) -> dict:
    """The fraction of pairs where the correct answer scores higher: overall and per kind of wrong answer."""
    model.eval()
    wins: dict[str, list[int]] = {}
    for start in range(0, len(encoded), batch):
        chunk = encoded[start : start + batch]
        with autocast():
            r = scores(model, [c for _, c, _ in chunk] + [w for _, _, w in chunk], pad_id)
        for (kind, _, _), won in zip(chunk, (r[: len(chunk)] > r[len(chunk) :]).tolist()):
            wins.setdefault(kind, []).append(int(won))
    result = {kind: sum(v) / len(v) for kind, v in wins.items()}
    result["all"] = sum(sum(v) for v in wins.values()) / len(encoded)
    return result


def freeze_below(model, top_layers: int) -> None:
    """Only the score head, the final norm and the top ``top_layers`` decoder layers keep requires_grad."""
    trunk = model.base_model
    model.requires_grad_(False)
    for module in [model.score, trunk.norm, *trunk.layers[-top_layers:]]:
        module.requires_grad_(True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="the reward model's HF folder (required unless --eval_only)")
    parser.add_argument("--data_dir", default="/tmp/rm_demo/data", help="arithmetic parquet (made when missing)")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--model", default=None, help="the trunk; default: the bundled SmolLM2-135M-Instruct")
    parser.add_argument("--train_pairs", type=int, default=512)
    parser.add_argument("--test_rows", type=int, default=32, help="held-out prompts (x 4 kinds of wrong answer)")
    parser.add_argument("--batch_pairs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--train_layers", type=int, default=10,
                        help="train the head and the top N decoder layers only (0: all); the rest stay frozen, "
                             "which skips their backward and keeps the instruct model's reading of the prompt")
    parser.add_argument("--max_seconds", type=float, default=300.0, help="stop training after this long")
    parser.add_argument("--precision", default=None, help="bf16 | fp32 (default: what the CPU runs fast)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval_only", action="store_true",
                        help="only print the held-out accuracy of --model (a saved reward model) and exit")
    args = parser.parse_args()
    if not args.out and not args.eval_only:
        parser.error("--out is required to save the reward model")

    from verl.models.loader import load_tokenizer, resolve_model_path
    from verl.models.value_head import load_value_model
    from verl.utils.device import preferred_low_precision

    torch.manual_seed(args.seed)
    data_dir = Path(os.path.expanduser(args.data_dir))
    _ensure_data(data_dir, args.level)
    path = resolve_model_path(args.model, "--model")
    tokenizer = load_tokenizer(path, "--model")
    encode = Encoder(tokenizer)
    train = make_pairs(pd.read_parquet(data_dir / "train.parquet"), args.train_pairs, args.seed)
    test = held_out_pairs(pd.read_parquet(data_dir / "test.parquet"), args.test_rows, args.seed + 1)
    train_enc = [(encode(m, c), encode(m, w)) for m, c, w in train]
    test_enc = [(kind, encode(m, c), encode(m, w)) for kind, m, c, w in test]

    # the critic's loader: token classification, num_labels=1, a fresh near-zero head on the instruct trunk
    model = load_value_model(path, dtype=torch.float32)
    if args.train_layers:
        freeze_below(model, args.train_layers)
    precision = args.precision or preferred_low_precision()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def autocast():
        return torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32)

    pad = tokenizer.pad_token_id
    before = accuracy(model, test_enc, pad, 16, autocast)
    if args.eval_only:
        print(json.dumps({"model": path, "held_out_accuracy": before, "test_pairs": len(test_enc)}))
        return
    print(f"held-out pair accuracy before training: {before} ({len(test_enc)} pairs)", flush=True)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.0)
    start, step, seen = time.time(), 0, 0
    order = list(range(len(train_enc)))
    random.Random(args.seed).shuffle(order)
    model.train()
    for begin in range(0, len(order), args.batch_pairs):
        if time.time() - start > args.max_seconds:
            break
        chunk = [train_enc[i] for i in order[begin : begin + args.batch_pairs]]
        with autocast():
            r = scores(model, [c for c, _ in chunk] + [w for _, w in chunk], pad)
        loss = -F.logsigmoid(r[: len(chunk)] - r[len(chunk) :]).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        step, seen = step + 1, seen + len(chunk)
        if step % 5 == 0:
            print(f"step {step} pairs {seen} loss {loss.item():.4f} ({time.time() - start:.0f}s)", flush=True)
    train_s = time.time() - start
    after = accuracy(model, test_enc, pad, 16, autocast)
    print(f"held-out pair accuracy after training: {after} ({len(test_enc)} pairs; {seen} training pairs, "
          f"{step} steps, {train_s:.0f}s)", flush=True)
    out = Path(os.path.expanduser(args.out))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    summary = {"held_out_accuracy_before": before, "held_out_accuracy_after": after, "test_pairs": len(test_enc),
               "train_pairs": seen, "steps": step, "train_seconds": round(train_s, 1), "lr": args.lr,
               "precision": precision, "train_layers": args.train_layers}
    (out / "rm_build.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
