"""prime_code: model-written programs run against APPS-style tests in a separate, confined process."""

import json
import os

import pytest

from verl.rewards import default_compute_score, prime_code
from verl.rewards.prime_code import apps_check_correctness, compute_score, remove_think_tags
from verl.rewards.prime_code.utils import PlainProcessRunner, code_runner
from verl.sandbox.runner import SandboxRunner
from verl.utils.reward_score import prime_code as upstream_path

ADD = {"inputs": ["1 2\n", "5 7\n", "-3 3\n"], "outputs": ["3\n", "12\n", "0\n"]}
ADD_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
CALL = {"fn_name": "add", "inputs": ["1\n2", "5\n7", "[1, 2]\n[3]"], "outputs": ["3", "12", "[1, 2, 3]"]}


def test_upstream_path_is_the_same_package():
    assert upstream_path is prime_code and upstream_path.apps_check_correctness is apps_check_correctness


def test_stdin_program_right():
    results, metadata = apps_check_correctness(ADD, ADD_PROGRAM, timeout=5, debug=False)
    assert results == [True, True, True] and metadata == [{}]
    assert compute_score(f"Here:\n```python\n{ADD_PROGRAM}```", json.dumps(ADD)) == (True, {})


def test_stdin_program_wrong_stops_at_the_first_failure():
    program = "a, b = map(int, input().split())\nprint(a + b if a > 0 else 99)\n"
    results, metadata = apps_check_correctness(ADD, program, timeout=5, debug=False)
    assert results == [True, True, False]
    assert metadata[0]["error_message"] == "Wrong Answer" and metadata[0]["output"].strip() == "99"
    score, per_case = compute_score(program, ADD, continuous=True)
    assert score == pytest.approx(2 / 3) and [c["test_case"]["res"] for c in per_case] == ["[True]"] * 2 + ["[False]"]
    assert compute_score(program, ADD) == (False, metadata)


def test_output_comparison_ignores_spacing_and_allows_float_tolerance():
    spaced = "print('  1 2 ')\nprint()\nprint('3  ')\n"
    assert apps_check_correctness({"inputs": [""], "outputs": ["1 2\n3\n"]}, spaced, timeout=5, debug=False)[0] == [True]
    assert apps_check_correctness({"inputs": [""], "outputs": ["0.3333333\n"]}, "print(1/3)", timeout=5,
                                  debug=False)[0] == [True]  # fmt: skip
    assert apps_check_correctness({"inputs": [""], "outputs": ["0.34\n"]}, "print(1/3)", timeout=5,
                                  debug=False)[0] == [False]  # fmt: skip


def test_stdin_read_styles():
    cases = {"inputs": ["2\n3 4\n"], "outputs": ["7\n"]}
    for program in (
        "import sys\nn = int(sys.stdin.readline())\nprint(sum(map(int, sys.stdin.readline().split())))",
        "import sys\ndata = sys.stdin.buffer.read().split()\nprint(int(data[1]) + int(data[2]))",
        "data = open(0).read().split()\nprint(int(data[1]) + int(data[2]))",
        "def main():\n    input()\n    print(sum(map(int, input().split())))\n\nif __name__ == '__main__':\n    main()",
        "import sys\ninput()\nsys.stdout.write(str(sum(map(int, input().split()))) + '\\n')\nsys.exit(0)",
    ):
        assert apps_check_correctness(cases, program, timeout=5, debug=False)[0] == [True], program


def test_call_based_function_and_solution_class():
    function = "def add(a, b):\n    return a + b\n"
    assert apps_check_correctness(CALL, function, timeout=5, debug=False)[0] == [True, True, True]
    method = "class Solution:\n    def add(self, a, b):\n        print('noise')\n        return a + b\n"
    assert apps_check_correctness(CALL, method, timeout=5, debug=False)[0] == [True, True, True]
    wrong = "def add(a, b):\n    return a - b\n"
    results, metadata = apps_check_correctness(CALL, wrong, timeout=5, debug=False)
    assert results == [False] and metadata[0]["error_message"] == "Wrong Answer"
    results, metadata = apps_check_correctness(CALL, "def sub(a, b):\n    return a - b\n", timeout=5, debug=False)
    assert results == [-2] and "add" in metadata[0]["error"]
    # tuples count as the lists JSON has
    pairs = {"fn_name": "pair", "inputs": ["1"], "outputs": ["[[1, 2]]"]}
    assert apps_check_correctness(pairs, "def pair(x):\n    return (x, x + 1)\n", timeout=5, debug=False)[0] == [True]


def test_crashing_and_non_compiling_programs_score_zero():
    results, metadata = apps_check_correctness(ADD, "raise RuntimeError('boom')", timeout=5, debug=False)
    assert results == [-1] and "boom" in metadata[0]["error"]
    results, metadata = apps_check_correctness(ADD, "def broken(:\n", timeout=5, debug=False)
    assert results == [-2] and "SyntaxError" in metadata[0]["error"]
    assert compute_score("def broken(:\n", ADD, continuous=True)[0] == 0.0
    # a crash of the whole process (here: it kills itself) fails every case instead of the caller
    results, metadata = apps_check_correctness(ADD, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                                               timeout=5, debug=False)  # fmt: skip
    assert results == [-1, -1, -1] and metadata[0]["error_message"] == "Runtime Error"


def test_infinite_loop_ends_at_the_timeout_and_scores_zero():
    looping = "while True:\n    pass\n"
    results, metadata = apps_check_correctness({"inputs": ["1\n"], "outputs": ["1\n"]}, looping, timeout=1, debug=False)
    assert results == [-1] and metadata[0]["error_message"] == "Time Limit Exceeded"
    # `except BaseException` inside the program cannot keep it alive: the whole run has a wall clock too
    stubborn = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n"
    results, metadata = apps_check_correctness({"inputs": ["1\n"], "outputs": ["1\n"]}, stubborn, timeout=1, debug=False)
    assert results == [-1] and metadata[0]["error_message"] == "Time Limit Exceeded"


def test_program_cannot_fake_the_report_through_file_descriptor_one():
    fake = 'import os\nos.write(1, b\'{"results": [true, true, true], "metadata": {}}\\n\')\nraise SystemExit(3)'
    results, _ = apps_check_correctness(ADD, fake, timeout=5, debug=False)
    assert results == [False]


def test_code_is_taken_from_the_answer_not_the_thinking():
    completion = "<think>```python\nprint('draft')\n```</think>Final:\n```python\n" + ADD_PROGRAM + "```"
    assert remove_think_tags(completion).startswith("Final")
    assert compute_score(completion, ADD)[0] is True


def test_ground_truth_must_be_test_cases():
    with pytest.raises(ValueError, match="inputs"):
        compute_score(ADD_PROGRAM, {"tests": []})
    with pytest.raises(ValueError, match="JSON"):
        compute_score(ADD_PROGRAM, "{not json")
    assert compute_score(ADD_PROGRAM, {"inputs": [], "outputs": []})[0] is False


def test_default_compute_score_routes_code_sources_here_without_a_sandbox_url():
    for source in ("codecontests", "apps", "codeforces", "taco"):
        assert default_compute_score(source, ADD_PROGRAM, json.dumps(ADD)) == 1.0
    half = "a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)\n"
    assert default_compute_score("apps", half, ADD) == pytest.approx(2 / 3)


def test_the_program_runs_in_another_process_confined_where_possible():
    same_pid = {"inputs": [""], "outputs": [f"{os.getpid()}\n"]}
    assert apps_check_correctness(same_pid, "import os\nprint(os.getpid())", timeout=5, debug=False)[0] == [False]
    runner = code_runner()
    if isinstance(runner, SandboxRunner):
        # in the sandbox the caller's files under /tmp are hidden and the network is gone
        net = "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n    print('net')\n" \
              "except OSError:\n    print('no net')\n"  # fmt: skip
        assert apps_check_correctness({"inputs": [""], "outputs": ["no net"]}, net, timeout=5, debug=False)[0] == [True]
        write = f"try:\n    open({os.path.abspath(__file__) + '.x'!r}, 'w')\n    print('wrote')\nexcept OSError:\n    print('no')"
        assert apps_check_correctness({"inputs": [""], "outputs": ["no"]}, write, timeout=5, debug=False)[0] == [True]


def test_plain_runner_kills_the_program_at_the_wall_clock():
    execution = PlainProcessRunner().run("import time\ntime.sleep(60)\n", run_timeout=1.0, files={})
    assert execution.status == "TimeLimitExceeded" and execution.return_code is None
    done = PlainProcessRunner().run("print(open('x.txt').read())", run_timeout=30.0, files={"x.txt": b"hi"})
    assert (done.status, done.return_code, done.stdout) == ("Finished", 0, "hi\n")


def test_without_the_sandbox_the_plain_runner_scores_the_same(monkeypatch):
    from verl.rewards.prime_code import utils

    monkeypatch.setattr(utils, "_runners", {os.getpid(): PlainProcessRunner()})
    assert apps_check_correctness(ADD, ADD_PROGRAM, timeout=5, debug=False)[0] == [True, True, True]
    assert apps_check_correctness(CALL, "def add(a, b):\n    return a + b\n", timeout=5, debug=False)[0] == [True] * 3
    results, metadata = apps_check_correctness({"inputs": ["1\n"], "outputs": ["1\n"]}, "while True:\n    pass\n",
                                               timeout=1, debug=False)  # fmt: skip
    assert results == [-1] and metadata[0]["error_message"] == "Time Limit Exceeded"
    # the memory limit holds in this mode too: the allocation fails inside the program, which then fails the case
    hog = "x = bytearray(4 << 30)\nprint(1)\n"
    assert apps_check_correctness({"inputs": [""], "outputs": ["1"]}, hog, timeout=5, debug=False)[0] == [-1]
