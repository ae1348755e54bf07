"""examples/data_preprocess/{arithmetic,gsm8k,math_dataset}.py on small local fixtures."""

import importlib.util
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.rewards import default_compute_score

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess"


def load_script(name):
    spec = importlib.util.spec_from_file_location(f"preprocess_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def read(path):
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def arithmetic():
    return load_script("arithmetic")


def check_worked_solution(solution: str) -> int:
    """Re-do every 'a op b = c' step of a worked solution by hand; return the value after ####."""
    for a, op, b, c in re.findall(r"(\d+) ([+*-]) (\d+) = (\d+)", solution):
        a, b, c = int(a), int(b), int(c)
        assert c == {"+": a + b, "-": a - b, "*": a * b}[op], solution
    return int(solution.split("####")[1])


def test_arithmetic_writes_disjoint_deterministic_splits(arithmetic, tmp_path):
    args = ["--train_size", "40", "--test_size", "15", "--seed", "3", "--difficulty", "2"]
    train_path, test_path = arithmetic.main(["--local_save_dir", str(tmp_path / "a"), *args])
    arithmetic.main(["--local_save_dir", str(tmp_path / "b"), *args])
    train, test = read(train_path), read(test_path)
    assert len(train) == 40 and len(test) == 15
    assert read(tmp_path / "b" / "train.parquet") == train  # same seed, same files
    questions = [row["extra_info"]["question"] for row in train + test]
    assert len(set(questions)) == 55  # no repeats, so train and test are disjoint

    other = arithmetic.main(["--local_save_dir", str(tmp_path / "c"), "--train_size", "40", "--test_size", "15",
                             "--seed", "4", "--difficulty", "2"])
    assert read(other[0]) != train

    row = train[0]
    assert row["data_source"] == "arithmetic" and row["ability"] == "math"
    assert row["reward_model"]["style"] == "rule"
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == 0
    assert test[3]["extra_info"] == {**test[3]["extra_info"], "split": "test", "index": 3}
    assert row["prompt"][-1] == {"role": "user", "content": "Question: " + row["extra_info"]["question"]}


def test_arithmetic_ground_truth_matches_the_worked_solution(arithmetic, tmp_path):
    train_path, _ = arithmetic.main(["--local_save_dir", str(tmp_path), "--train_size", "30", "--test_size", "5",
                                     "--difficulty", "6"])
    for row in read(train_path):
        info = row["extra_info"]
        assert check_worked_solution(info["answer"]) == int(row["reward_model"]["ground_truth"])
        assert len(re.findall(r" = ", info["answer"])) >= 3  # level 6: three steps (a box step takes two)
        assert default_compute_score("arithmetic", info["answer"], row["reward_model"]["ground_truth"]) == 1.0


def test_arithmetic_prompt_shows_one_worked_example_as_a_finished_exchange(arithmetic, tmp_path):
    train_path, _ = arithmetic.main(["--local_save_dir", str(tmp_path), "--train_size", "3", "--test_size", "1"])
    rows = read(train_path)
    prompt = rows[0]["prompt"]
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    assert '"####"' in prompt[0]["content"] and "Question: " in prompt[0]["content"]
    example_answer = prompt[1]["content"]
    assert re.fullmatch(r"[0-9+\-*=. ]+\n#### \d+", example_answer)  # the exact format, answer on its own line
    check_worked_solution(example_answer)
    assert prompt[2]["content"] == "Question: " + rows[0]["extra_info"]["question"]
    assert rows[1]["prompt"][:2] == prompt[:2]  # one shared example per level

    no_shot, _ = arithmetic.main(["--local_save_dir", str(tmp_path / "n"), "--train_size", "3", "--test_size", "1",
                                  "--no_fewshot"])
    plain = read(no_shot)[0]["prompt"]
    assert len(plain) == 1 and plain[0]["role"] == "user"
    assert plain[0]["content"].endswith('output the final answer after "####".')


@pytest.mark.parametrize("level, steps", [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3), (9, 6)])
def test_arithmetic_levels_set_the_number_of_steps(arithmetic, level, steps):
    import random

    problem = arithmetic.generate_problem(random.Random(0), level)
    assert problem.question.count(".") - 1 == steps  # opening sentence + one sentence per step
    assert check_worked_solution(problem.solution) == problem.answer


def test_arithmetic_rejects_impossible_sizes(arithmetic, tmp_path):
    with pytest.raises(ValueError, match="--train_size"):
        arithmetic.main(["--local_save_dir", str(tmp_path), "--train_size", "0"])


GSM8K_ROWS = {
    "train": [
        {"question": "Tom has 3 boxes of 4 pens. How many pens?", "answer": "3 * 4 = <<3*4=12>>12\n#### 12"},
        {"question": "A car costs 1,200 dollars plus 300. Total?", "answer": "1200 + 300 = 1500\n#### 1,500"},
    ],
    "test": [{"question": "What is 7 - 9?", "answer": "7 - 9 = -2\n#### -2"}],
}


@pytest.mark.parametrize("layout", ["flat", "hub"])
def test_gsm8k_conversion(tmp_path, layout):
    source = tmp_path / "gsm8k_src"
    for split, rows in GSM8K_ROWS.items():
        target = source / f"{split}.parquet" if layout == "flat" else source / "main" / f"{split}-00000-of-00001.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), str(target))
    train_path, test_path = load_script("gsm8k").main(
        ["--local_dataset_path", str(source), "--local_save_dir", str(tmp_path / "out")]
    )
    train, test = read(train_path), read(test_path)
    assert [row["reward_model"]["ground_truth"] for row in train] == ["12", "1500"]
    assert test[0]["reward_model"] == {"style": "rule", "ground_truth": "-2"}
    row = train[0]
    assert row["data_source"] == "openai/gsm8k"
    assert row["prompt"] == [{"role": "user", "content": "Tom has 3 boxes of 4 pens. How many pens? "
                              "Let's think step by step and output the final answer after \"####\"."}]
    assert row["extra_info"] == {"split": "train", "index": 0, "answer": GSM8K_ROWS["train"][0]["answer"],
                                 "question": GSM8K_ROWS["train"][0]["question"]}
    assert default_compute_score(row["data_source"], "so #### 12", row["reward_model"]["ground_truth"]) == 1.0


def test_gsm8k_missing_split_and_column(tmp_path):
    gsm8k = load_script("gsm8k")
    source = tmp_path / "src"
    source.mkdir()
    pq.write_table(pa.Table.from_pylist([{"text": "x"}]), str(source / "train.parquet"))
    with pytest.raises(ValueError, match="no column 'question'.*'text'"):
        gsm8k.main(["--local_dataset_path", str(source), "--local_save_dir", str(tmp_path / "out")])
    (source / "train.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="no 'train' split"):
        gsm8k.main(["--local_dataset_path", str(source), "--local_save_dir", str(tmp_path / "out")])


MATH_ROWS = {
    "train": [
        {"problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.", "solution": "We get $\\boxed{\\frac{3}{4}}$.",
         "level": "Level 1", "type": "Algebra"},
        {"problem": "Find $x$ if $x^2=4$, $x>0$.", "solution": "First \\boxed{-2} is out, so $\\boxed{2}$.",
         "level": "Level 1", "type": "Algebra"},
    ],
    "test": [{"problem": "What is $2^{10}$?", "solution": "It is $\\boxed{1024}$.", "level": "Level 2",
              "type": "Prealgebra"}],
}


def test_math_conversion_hub_layout(tmp_path):
    source = tmp_path / "math_src" / "default"
    source.mkdir(parents=True)
    for split, rows in MATH_ROWS.items():
        pq.write_table(pa.Table.from_pylist(rows), str(source / f"{split}-00000-of-00001.parquet"))
    train_path, test_path = load_script("math_dataset").main(
        ["--local_dataset_path", str(tmp_path / "math_src"), "--local_save_dir", str(tmp_path / "out")]
    )
    train, test = read(train_path), read(test_path)
    assert [row["reward_model"]["ground_truth"] for row in train] == ["\\frac{3}{4}", "2"]  # the last box
    assert test[0]["reward_model"]["ground_truth"] == "1024"
    row = train[0]
    assert row["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert row["prompt"][0]["content"] == ("Compute $\\frac{1}{2}+\\frac{1}{4}$. Let's think step by step and "
                                           "output the final answer within \\boxed{}.")
    assert row["extra_info"] == {"split": "train", "index": 0}
    assert default_compute_score(row["data_source"], "\\boxed{\\dfrac34}", row["reward_model"]["ground_truth"]) == 1.0
