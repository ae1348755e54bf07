"""The test driver that runs *inside* the sandbox process next to a model's program; never imported by verl.

It is started as a script in a work dir holding `solution.py` (the program) and `spec.json`
({"in_outs": ..., "timeout": seconds per case, "cpu_seconds": for the whole run, "memory_mb": ..., "debug": ...}) and writes one JSON line,
{"results": [...], "metadata": {...}}, on the stdout it started with. The program's own output is captured per
case, and its raw writes to file descriptor 1 go to /dev/null, so it cannot interleave with that line.

Result codes per case, as upstream's APPS harness: True (passed), False (wrong answer), -1 (runtime error or time
limit), -2 (the program does not compile, or lacks the function a call-based test calls). Testing stops at the
first case that does not pass, again as upstream.

Standard library only: the sandbox's interpreter may lack verl's dependencies.
"""

import io
import json
import math
import os
import resource
import signal
import sys
import traceback

# Upstream's APPS harness runs every program after these imports; programs written for it rely on them.
_PRELUDE = """
from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from random import *
from statistics import *
from itertools import *
from functools import *
from operator import *
from io import *
from sys import *
from json import *
from builtins import *
from typing import *
import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools, functools
import operator, io, sys, json
"""
_SHOW = 200  # characters of inputs/outputs kept in the metadata


class CaseTimeout(BaseException):
    """Raised by the per-case alarm; a BaseException, so a program's `except Exception` cannot swallow it."""


def _on_alarm(signum, frame):
    raise CaseTimeout()


def _shorten(text, limit=_SHOW):
    text = text if isinstance(text, str) else json.dumps(text, default=repr)
    return text if len(text) <= limit else text[: limit // 2] + "...(truncated)..." + text[-limit // 2 :]


def _lower_limit(kind, value):
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    if soft == resource.RLIM_INFINITY or value < soft:
        resource.setrlimit(kind, (value, hard))


def _error(exc):
    timed_out = isinstance(exc, CaseTimeout)
    meta = {"error": "TimeoutError()" if timed_out else repr(exc), "traceback": traceback.format_exc(limit=5)[-2000:]}
    meta["error_message"] = "Time Limit Exceeded" if timed_out else "Runtime Error"
    return meta


class _Case:
    """One case's stdin and stdout: text streams with a binary `.buffer`, as real ones have."""

    def __init__(self, stdin_text):
        self.stdin = io.TextIOWrapper(io.BytesIO(stdin_text.encode()), encoding="utf-8")
        self._out = io.BytesIO()
        self.stdout = io.TextIOWrapper(self._out, encoding="utf-8", write_through=True)

    def output(self):
        self.stdout.flush()
        return self._out.getvalue().decode("utf-8", "replace")

    def opener(self, real_open):
        # `open(0)` is a common way to read all of stdin in contest code
        def _open(file, *args, **kwargs):
            if file in (0, "/dev/stdin"):
                return io.StringIO(self.stdin.read())
            return real_open(file, *args, **kwargs)

        return _open


def _run_timed(timeout, fn):
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _floats(tokens):
    try:
        return [float(t) for t in tokens]
    except ValueError:
        return None


def stdout_matches(output, expected):
    """Exact after stripping; else line by line ignoring blank lines and edge spaces; else token by token as
    numbers within a relative 1e-5 / absolute 1e-8 tolerance."""
    if isinstance(expected, list):
        expected = "\n".join(expected)
    if output.strip() == expected.strip():
        return True
    got = [line.strip() for line in output.splitlines() if line.strip()]
    want = [line.strip() for line in expected.splitlines() if line.strip()]
    if got == want:
        return True
    got_n, want_n = _floats(output.split()), _floats(expected.split())
    if got_n is None or want_n is None or len(got_n) != len(want_n) or not got_n:
        return False
    return all(math.isclose(g, w, rel_tol=1e-5, abs_tol=1e-8) for g, w in zip(got_n, want_n))


def _int_keys(value):
    # JSON object keys are strings; APPS tests with int-keyed dicts expect them back as ints
    if isinstance(value, dict):
        try:
            return {int(k): v for k, v in value.items()}
        except (TypeError, ValueError):
            return value
    return value


def _as_lists(value):
    if isinstance(value, tuple | list):
        return [_as_lists(v) for v in value]
    return value


def returned_matches(returned, expected):
    got = _as_lists(returned)
    if got == expected:
        return True
    # APPS often wraps the expected return value in a one-element list
    return isinstance(expected, list) and len(expected) > 0 and got == expected[0]


def _call_args(raw):
    if isinstance(raw, list):
        args = raw
    else:
        args = [json.loads(line) for line in raw.split("\n") if line.strip()]
    if args:
        args[0] = _int_keys(args[0])
    return args


def _expected_return(raw):
    value = json.loads(raw) if isinstance(raw, str) else raw
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = [_int_keys(value[0])] + value[1:]
    return _int_keys(value)


def run_stdin_cases(code, base, cases, timeout, real_open):
    results = []
    for stdin_text, expected in zip(*cases):
        stdin_text = "\n".join(stdin_text) if isinstance(stdin_text, list) else stdin_text
        case = _Case(stdin_text)
        namespace = dict(base, __name__="__main__", stdin=case.stdin, stdout=case.stdout, open=case.opener(real_open))
        sys.stdin, sys.stdout = case.stdin, case.stdout
        try:
            _run_timed(timeout, lambda: exec(code, namespace))  # noqa: B023 (called at once)
        except SystemExit:
            pass  # exiting is how some programs end; the output decides
        except BaseException as exc:  # noqa: BLE001 (anything the program raises is its failure)
            sys.stdin, sys.stdout = sys.__stdin__, sys.__stdout__
            results.append(-1)
            return results, {**_error(exc), "inputs": _shorten(stdin_text)}
        sys.stdin, sys.stdout = sys.__stdin__, sys.__stdout__
        output = case.output()
        if not stdout_matches(output, expected):
            results.append(False)
            return results, {"output": _shorten(output), "expected": _shorten(expected),
                             "inputs": _shorten(stdin_text), "error_message": "Wrong Answer"}  # fmt: skip
        results.append(True)
    return results, {}


def _load_function(code, source, base, fn_name, timeout):
    namespace = dict(base, __name__="tmp_sol")
    _run_timed(timeout, lambda: exec(code, namespace))
    if "class Solution" in source and "Solution" in namespace:
        return getattr(namespace["Solution"](), fn_name)
    # the prelude's names do not count: `operator.add` must not pass a test of the program's own `add`
    if fn_name not in namespace or namespace[fn_name] is base.get(fn_name):
        raise NameError(f"the program defines no function {fn_name!r}")
    return namespace[fn_name]


def run_call_cases(code, source, base, cases, fn_name, timeout):
    try:
        fn = _load_function(code, source, base, fn_name, timeout)
    except BaseException as exc:  # noqa: BLE001
        return [-2], _error(exc)
    results = []
    for raw_args, raw_expected in zip(*cases):
        sink = _Case("")
        sys.stdout = sink.stdout
        try:
            returned = _run_timed(timeout, lambda: fn(*_call_args(raw_args)))  # noqa: B023
        except BaseException as exc:  # noqa: BLE001
            sys.stdout = sys.__stdout__
            results.append(-1)
            return results, {**_error(exc), "inputs": _shorten(raw_args)}
        sys.stdout = sys.__stdout__
        if not returned_matches(returned, _expected_return(raw_expected)):
            results.append(False)
            return results, {"output": _shorten(_as_lists(returned)), "expected": _shorten(raw_expected),
                             "inputs": _shorten(raw_args), "error_message": "Wrong Answer"}  # fmt: skip
        results.append(True)
    return results, {}


def main():
    report = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    with open("spec.json") as f:
        spec = json.load(f)
    with open("solution.py") as f:
        source = f.read()
    _lower_limit(resource.RLIMIT_AS, spec["memory_mb"] << 20)
    _lower_limit(resource.RLIMIT_CPU, max(1, math.ceil(spec["cpu_seconds"])))
    _lower_limit(resource.RLIMIT_FSIZE, 64 << 20)
    _lower_limit(resource.RLIMIT_CORE, 0)
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(100_000)
    in_outs, timeout = spec["in_outs"], float(spec["timeout"])
    base = {"__builtins__": __builtins__}
    exec(_PRELUDE, base)
    try:
        code = compile(source, "<solution>", "exec")
    except (SyntaxError, ValueError) as exc:
        results, meta = [-2], _error(exc)
    else:
        cases = (in_outs["inputs"], in_outs["outputs"])
        fn_name = in_outs.get("fn_name")
        if fn_name:
            results, meta = run_call_cases(code, source, base, cases, fn_name, timeout)
        else:
            results, meta = run_stdin_cases(code, base, cases, timeout, open)
    if spec.get("debug"):
        print(f"[prime_code harness] results={results} metadata={meta}", file=sys.__stderr__)
    report.write(json.dumps({"results": results, "metadata": meta}, default=repr) + "\n")
    report.flush()
    # skip interpreter shutdown: threads or atexit hooks the program left must not hold the result back
    os._exit(0)


if __name__ == "__main__":
    main()
