"""How many of upstream verl's example command lines pass our pre-Ray config check.

    .venv/bin/python scripts/measure_upstream_cli.py /tmp/upstream_cli [--show accepted,gpu_only,other,invalid]

The folder holds upstream's example scripts (`*.sh`, any depth; fetched by hand, never kept in this repo). Each
`python -m verl.trainer.main_ppo` invocation in them becomes one command line: backslash continuations are joined,
literal `NAME=value` assignments made earlier in the script are expanded (`$NAME`, `${NAME}`, `${NAME:-default}`,
`$((arithmetic))`, simple bash arrays), redirects, pipes and `$@` are dropped. `$(pwd)` / `$PWD` stand for the
folder (upstream's scripts run from the repository root), `$HOME` for /root.

A value still holding an unresolved shell variable or command substitution gets our default for that key as a
neutral stand-in (the line is "invalid" when the key has no default); the data files are swapped for a tiny local
parquet and the model paths for the bundled default model, nothing else is changed. Each line then goes through
what `python -m verl.trainer.main_ppo` runs before Ray: the alias rewrite and unknown-key check, Hydra composition
(with the line's own `--config-path`/`--config-name`, after `gpu_only_config_problem`), and `validate_config`
(files checked). The device check is left out: it judges this machine, not the command line.

Each line is classified: accepted; refused only for a GPU-only engine (Megatron, SGLang, TRT-LLM, NPU, fused
kernels, liger, multi-GPU expert parallelism, judged by the refusal message); refused for another reason (the keys
named by those messages are counted); invalid (not a usable command line, with the reason).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import operator
import os
import re
import sys
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE = "verl.trainer.main_ppo"
HOME = "/root"
DATA_KEYS = ("data.train_files", "data.val_files")
MODEL_KEY_ENDINGS = ("model.path", "model.tokenizer_path", "model.input_tokenizer")
CONFIG_FLAGS = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name"}
GPU_ONLY = re.compile(
    r"megatron|mcore|\bsglang|tensorrt|trt-?llm|\bnpu\b|ascend|fused[ _]kernels?|liger|expert[ _]parallel",
    re.IGNORECASE,
)
UNRESOLVED = "\x00"  # wraps the name of what could not be expanded: "\x00name\x00"
# stand-ins where our default would not be neutral: upstream's scripts are written for one node of 8 GPUs
NEUTRAL = {"trainer.n_gpus_per_node": 8, "trainer.nnodes": 1}
MISSING_FILE = re.compile(r"not found: '|does not exist|no such file", re.IGNORECASE)
SPECIAL_ARGS = {"@", "*"} | {str(i) for i in range(10)}


# ---------------------------------------------------------------------------------------------- shell expansion


class ShellSyntaxError(ValueError):
    pass


def _unresolved(name: str) -> str:
    return f"{UNRESOLVED}{'_'.join(name.split())}{UNRESOLVED}"


def unresolved_names(text: str) -> list[str]:
    return re.findall(f"{UNRESOLVED}([^{UNRESOLVED}]*){UNRESOLVED}", text)


def _matching(text: str, start: int, opener: str, closer: str) -> int:
    """Index of the closer matching the opener just before `start` (quotes respected)."""
    depth, i, quote = 1, start, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif text.startswith(opener, i):
            depth += 1
            i += len(opener) - 1
        elif text.startswith(closer, i):
            depth -= 1
            if depth == 0:
                return i
            i += len(closer) - 1
        i += 1
    raise ShellSyntaxError(f"no closing {closer!r}")


_ARITH_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}


def _arith(expr: str, env: dict[str, str]) -> str:
    def name_value(match: re.Match) -> str:
        value = env.get(match.group(1), "0")
        return value if re.fullmatch(r"-?\d+", value.strip()) else "__bad__"

    text = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", name_value, expr)
    text = re.sub(r"\b([A-Za-z_]\w*)\b", name_value, text)

    def evaluate(node):
        if isinstance(node, ast.Expression):
            return evaluate(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            return _ARITH_OPS[type(node.op)](evaluate(node.left), evaluate(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        raise ValueError(expr)

    try:
        return str(evaluate(ast.parse(text.strip(), mode="eval")))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return _unresolved(f"$(({expr}))")


class Shell:
    """Just enough of bash to read upstream's example scripts: variables, quotes, arrays, arithmetic."""

    def __init__(self, root: Path):
        self.root = str(root)
        self.env: dict[str, str] = {"HOME": HOME, "PWD": self.root}
        self.arrays: dict[str, list[str]] = {}

    # one `$...` expansion starting at text[i] == "$"; returns (expansion, next index)
    def dollar(self, text: str, i: int, quoted: bool) -> tuple[str, int]:
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if text.startswith("$((", i):
            end = _matching(text, i + 3, "((", "))")
            return _arith(text[i + 3:end], self.env), end + 2
        if nxt == "(":
            end = _matching(text, i + 2, "(", ")")
            inner = text[i + 2:end].strip()
            if inner == "pwd":
                return self.root, end + 1
            return _unresolved(f"$({inner})"), end + 1
        if nxt == "{":
            end = _matching(text, i + 2, "{", "}")
            return self.braced(text[i + 2:end], quoted), end + 1
        match = re.match(r"[A-Za-z_]\w*", text[i + 1:])
        if match:
            name = match.group(0)
            return self.lookup(name), i + 1 + len(name)
        if nxt in SPECIAL_ARGS or nxt in "#?$!-":
            return _unresolved(f"${nxt}"), i + 2
        return "$", i + 1

    def lookup(self, name: str) -> str:
        if name in self.env:
            return self.env[name]
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return _unresolved(f"${name}")

    def braced(self, body: str, quoted: bool) -> str:
        array = re.fullmatch(r"([A-Za-z_]\w*)\[[@*]\]", body)
        if array:
            name = array.group(1)
            if name in self.arrays:
                return "\x01".join(self.arrays[name])  # split into words by `words`
            return _unresolved("${" + body + "}")
        if body in SPECIAL_ARGS or re.fullmatch(r"@:\d+", body):
            return _unresolved("${" + body + "}")
        match = re.fullmatch(r"([A-Za-z_]\w*|\d+)(?:(:?[-=+])(.*))?", body, re.DOTALL)
        if not match:
            return _unresolved("${" + body + "}")
        name, op, word = match.groups()
        value = self.env.get(name)
        if op is None:
            return self.lookup(name)
        empty = value is None or (op.startswith(":") and value == "")
        if op.endswith("+"):
            return "" if empty else self.expand(word)
        if not empty:
            return value
        default = self.expand(word)
        if op.endswith("="):
            self.env[name] = default
        return default

    def expand(self, text: str) -> str:
        """Expansion of a double-quoted string's contents."""
        out, i = [], 0
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\':
                out.append(text[i + 1])
                i += 2
            elif c == "$":
                piece, i = self.dollar(text, i, quoted=True)
                out.append(piece)
            elif c == "`":
                end = text.index("`", i + 1)
                out.append(_unresolved(text[i:end + 1]))
                i = end + 1
            elif c == '"':
                i += 1
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def words(self, line: str) -> list[str]:
        """The line's words up to the first pipe, redirect, `;`, `&&` or `&`; comments dropped."""
        words: list[str] = []
        cur: list[str] = []
        started = False
        i = 0

        def flush():
            nonlocal cur, started
            if started:
                words.extend(part for part in "".join(cur).split("\x01") if part)
            cur, started = [], False

        while i < len(line):
            c = line[i]
            if c in " \t\n":
                flush()
                i += 1
            elif c == "#" and not started:
                break
            elif c in "|;&<>":
                if "".join(cur).isdigit() and c in "<>":
                    cur, started = [], False  # a file descriptor: 2>&1
                flush()
                break
            elif c == "'":
                end = line.find("'", i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated single quote")
                cur.append(line[i + 1:end])
                started, i = True, end + 1
            elif c == '"':
                end = i + 1
                while end < len(line) and line[end] != '"':
                    if line[end] == "\\":
                        end += 1
                    elif line[end] == "$" and line.startswith("$(", end):
                        end = _matching(line, end + 2, "(", ")")
                    elif line[end] == "$" and line.startswith("${", end):
                        end = _matching(line, end + 2, "{", "}")
                    end += 1
                if end >= len(line):
                    raise ShellSyntaxError("unterminated double quote")
                cur.append(self.expand(line[i + 1:end]))
                started, i = True, end + 1
            elif c == "\\":
                cur.append(line[i + 1:i + 2])
                started, i = True, i + 2
            elif c == "$":
                piece, i = self.dollar(line, i, quoted=False)
                cur.append(re.sub(r"\s+", "\x01", piece))  # an unquoted expansion is split into words
                started = True
            elif c == "`":
                end = line.find("`", i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated backtick")
                cur.append(_unresolved(line[i:end + 1]))
                started, i = True, end + 1
            else:
                cur.append(c)
                started, i = True, i + 1
        flush()
        return words


ASSIGNMENT = re.compile(r"^(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)?)?([A-Za-z_]\w*)=(.*)$", re.DOTALL)


def _open_quote(text: str, quote: str | None) -> str | None:
    """The quote still open after `text`, starting inside `quote` (None: outside any); comments skipped."""
    i, word_start = 0, True
    while i < len(text):
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = None
        elif c == "#" and word_start:
            break
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        word_start = quote is None and c in " \t\n;|&("
        i += 1
    return quote


def logical_lines(text: str) -> list[str]:
    """Backslash continuations joined, and lines inside an open quote; a bash array `NAME=(` ... `)` kept whole."""
    joined, buf, quote, heredoc = [], "", None, None
    for raw in text.splitlines():
        if heredoc is not None:  # a here-document's body is data (often a script being written), not commands
            if raw.strip() == heredoc:
                heredoc = None
            continue
        opener = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", raw) if quote is None else None
        if opener:
            heredoc = opener.group(1)
        stripped = raw.rstrip()
        continued = stripped.endswith("\\") and not stripped.endswith("\\\\")
        piece = stripped[:-1] if continued else raw  # bash drops the backslash-newline pair
        quote = _open_quote(piece, quote)
        buf += piece
        if continued:
            continue
        if quote is not None:
            buf += "\n"
            continue
        joined.append(buf)
        buf = ""
    if buf:
        joined.append(buf)
    lines, array = [], None
    for line in joined:
        if array is not None:
            array += " " + line.split(" #", 1)[0]
            if array.count("(") <= array.count(")"):
                lines.append(array)
                array = None
            continue
        if re.match(r"^\s*(?:export\s+|local\s+|declare\s+-a\s+)?[A-Za-z_]\w*=\(", line) and ")" not in line:
            array = line
            continue
        lines.append(line)
    return lines


# ---------------------------------------------------------------------------------------------- command lines


@dataclass
class CommandLine:
    script: str
    index: int
    flags: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    invalid: str | None = None
    status: str = ""
    problems: list[str] = field(default_factory=list)
    other_keys: list[str] = field(default_factory=list)
    missing_files_only: bool = False  # every non-GPU problem names a file that is not in the fetched tree

    @property
    def name(self) -> str:
        return f"{self.script}#{self.index}"


def _module_start(words: list[str]) -> int | None:
    for i in range(len(words) - 1):
        if words[i] == "-m" and words[i + 1] == MODULE:
            return i + 2
    return None


_TESTS = {"=": operator.eq, "==": operator.eq, "!=": operator.ne}
_NUMERIC_TESTS = {"-eq": operator.eq, "-ne": operator.ne, "-gt": operator.gt, "-lt": operator.lt,
                  "-ge": operator.ge, "-le": operator.le}


def condition(shell: Shell, text: str) -> bool | None:
    """A simple `[ a = b ]` / `[[ a == b ]]` / `[ a -eq b ]` test; None when it cannot be decided here."""
    text = re.sub(r";?\s*then\s*$", "", text.strip())
    try:
        words = shell.words(text)
    except (ShellSyntaxError, ValueError):
        return None
    if len(words) == 5 and words[0] in {"[", "[["} and words[4] in {"]", "]]"}:
        left, op, right = words[1:4]
        if UNRESOLVED in left + right:
            return None
        if op in _TESTS:
            return _TESTS[op](left, right)
        if op in _NUMERIC_TESTS and re.fullmatch(r"-?\d+", left) and re.fullmatch(r"-?\d+", right):
            return _NUMERIC_TESTS[op](int(left), int(right))
    return None


def extract(script: Path, root: Path) -> list[CommandLine]:
    shell = Shell(root)
    found: list[CommandLine] = []
    rel = str(script.relative_to(root))
    frames: list[dict] = []  # if/elif/else: {"outer": parent active, "taken": bool | None, "active": bool}
    for line in logical_lines(script.read_text(errors="replace")):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        head = stripped.split(None, 1)[0]
        if head == "if" and not re.search(r"\bfi\s*$", stripped):
            outer = not frames or frames[-1]["active"]
            taken = condition(shell, stripped[2:])
            frames.append({"outer": outer, "taken": taken, "active": outer and taken is not False})
            continue
        if frames and head == "elif":
            frame = frames[-1]
            taken = False if frame["taken"] else condition(shell, stripped[4:])
            frame["active"] = frame["outer"] and taken is not False and frame["taken"] is not True
            frame["taken"] = True if frame["taken"] or taken else (None if taken is None else frame["taken"])
            continue
        if frames and head == "else":
            frame = frames[-1]
            frame["active"] = frame["outer"] and frame["taken"] is not True
            continue
        if frames and head == "fi":
            frames.pop()
            continue
        if frames and not frames[-1]["active"]:
            continue
        try:
            words = shell.words(stripped)
        except (ShellSyntaxError, ValueError) as err:
            if MODULE in stripped and not stripped.startswith("#"):
                cmd = CommandLine(rel, len(found) + 1, invalid=f"shell syntax: {err}")
                found.append(cmd)
            continue
        if not words:
            continue
        start = _module_start(words)
        if start is None:
            array = re.match(r"^(?:export\s+|local\s+|declare\s+-a\s+)?([A-Za-z_]\w*)=\((.*)\)\s*$", stripped,
                             re.DOTALL)
            if array:
                shell.env.pop(array.group(1), None)
                shell.arrays[array.group(1)] = shell.words(array.group(2))
            elif ASSIGNMENT.match(stripped) and all(re.match(r"^[A-Za-z_]\w*=", w) or w in {"export", "local"}
                                                    for w in words):
                for word in words:
                    name, eq, value = word.partition("=")
                    if eq and re.fullmatch(r"[A-Za-z_]\w*", name):
                        shell.env[name] = value
                        shell.arrays.pop(name, None)
            continue
        cmd = CommandLine(rel, len(found) + 1)
        found.append(cmd)
        args = words[start:]
        i = 0
        while i < len(args):
            word = args[i]
            flag, eq, value = word.partition("=")
            if flag in CONFIG_FLAGS:
                if not eq:
                    value = args[i + 1] if i + 1 < len(args) else ""
                    i += 1
                cmd.flags.append(f"{flag}={value}")
            elif word.startswith("-"):
                cmd.notes.append(f"flag {word} ignored")
            elif UNRESOLVED in word and "=" not in word.split(UNRESOLVED, 1)[0]:
                names = unresolved_names(word)
                if not all(re.fullmatch(r"\$\{?[@*0-9](:\d+)?\}?", n) for n in names):
                    cmd.notes.append(f"extra arguments {', '.join(names)} dropped")
            elif word.startswith("hydra."):
                cmd.notes.append(f"{flag} (Hydra's own setting) dropped")
            elif word:
                cmd.overrides.append(word)
            i += 1
    return found


# ---------------------------------------------------------------------------------------------- the check


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _default_of(defaults, key: str):
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(defaults, key, throw_on_missing=False, throw_on_resolution_failure=False)
    except Exception:  # an interpolation that needs a resolver's input
        return None


def prepare(cmd: CommandLine, defaults, parquet: str, model: str, root: Path) -> None:
    """Swap data and model paths, stand in for unresolved values, resolve --config-path; or mark invalid."""
    if cmd.invalid:
        return
    fixed = []
    for override in cmd.overrides:
        if "=" not in override and not override.startswith("~"):
            cmd.invalid = f"word {override!r} is not a key=value override (broken quoting or continuation)"
            return
        prefix = override[: len(override) - len(override.lstrip("+~"))]
        key, value = _key(override), override.split("=", 1)[1]
        if UNRESOLVED in key:
            cmd.invalid = f"override key built from {', '.join(unresolved_names(key))}"
            return
        if key in DATA_KEYS:
            value = parquet
        elif key.endswith(MODEL_KEY_ENDINGS):
            value = model
        elif UNRESOLVED in value:
            names = ", ".join(unresolved_names(value))
            default = NEUTRAL.get(key, _default_of(defaults, key))
            if default is None or not isinstance(default, (bool, int, float, str)):
                cmd.invalid = f"{key} takes {names}, unresolved, and has no default to stand in"
                return
            value = str(default).lower() if isinstance(default, bool) else str(default)
            cmd.notes.append(f"{key}: {names} unresolved, our default {value!r} stands in")
        fixed.append(f"{prefix}{key}={value}")
    cmd.overrides = fixed
    flags = []
    for flag in cmd.flags:
        name, _, value = flag.partition("=")
        if UNRESOLVED in value:
            cmd.invalid = f"{name} takes {', '.join(unresolved_names(value))}, unresolved"
            return
        flags.append(f"{name}={value}")
    cmd.flags = flags


def _config_of(flags: list[str]) -> tuple[str | None, str | None]:
    path = name = None
    for flag in flags:
        key, _, value = flag.partition("=")
        if CONFIG_FLAGS[key] == "path":
            path = value
        else:
            name = value[: -len(".yaml")] if value.endswith(".yaml") else value
    return path, name


def compose(cmd: CommandLine, root: Path):
    """The composed DictConfig, as main_ppo's Hydra main would receive it; raises ConfigError for key problems."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from verl.trainer.config import ConfigError, load_config, unknown_override_problems
    from verl.trainer.config.aliases import rewrite_aliases
    from verl.trainer.config.config_names import gpu_only_config_problem

    refusal = gpu_only_config_problem(cmd.flags, cwd=root)
    if refusal is not None:
        raise ConfigError([refusal])
    path, name = _config_of(cmd.flags)
    name = name or "ppo_trainer"
    config_dir = REPO / "verl" / "trainer" / "config"
    # Hydra reads a relative --config-path from the entry point's folder (verl/trainer); upstream's scripts mean
    # their repository root, which the folder of scripts stands for
    folders = [config_dir] if not path else [Path(path)] if os.path.isabs(path) else [
        root / path, config_dir.parent / path]
    if path and os.path.isabs(path) and "/examples/" in path:
        # someone's own checkout of upstream (/home/me/verl/examples/...): the fetched folder stands for it
        folders.append(root / ("examples/" + path.rsplit("/examples/", 1)[1]))
    folder = next((f for f in folders if (f / f"{name}.yaml").is_file()), None)
    if folder is None:
        raise FileNotFoundError(f"--config-name={name}: no {name}.yaml in {', '.join(map(str, folders))}")
    if folder.resolve() == config_dir.resolve():
        return load_config(cmd.overrides, config_name=name)
    overrides = rewrite_aliases(cmd.overrides)
    problems = unknown_override_problems(overrides)
    if problems:
        raise ConfigError(problems)
    with initialize_config_dir(config_dir=str(folder.resolve()), version_base=None):
        return hydra_compose(config_name=name, overrides=list(overrides))


def _problem_key(message: str) -> str:
    for pattern in (r"^Unknown config key '([^']+)'", r"^'([^']+)' is not in the default config",
                    r"^(?:--config-name=\S+)", r"^([+~]*[A-Za-z_][\w.\[\]]*)\s*(?:=|:|\(| is| and| must| has)",
                    r"[Kk]ey '([^']+)'", r"'([a-z_]+\.[\w.]+)'"):
        match = re.search(pattern, message)
        if match:
            key = match.group(1) if match.groups() else match.group(0)
            return re.sub(r"\[\d+\]", "", key.lstrip("+~"))
    return message.split(":", 1)[0][:60]


def is_gpu_only(message: str) -> bool:
    """A refusal for a GPU-only engine: judged by the reason, the first sentence (what the key asks for)."""
    head = re.split(r"(?<=[.;])\s", message, maxsplit=1)[0]
    return bool(GPU_ONLY.search(head))


def check(cmd: CommandLine, root: Path) -> None:
    from verl.trainer.config import ConfigError, ConfigWarning, validate_config

    if cmd.invalid:
        cmd.status = "invalid"
        return
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore", ConfigWarning)
            cfg = compose(cmd, root)
            validate_config(cfg, check_files=True)
        cmd.status = "accepted"
        return
    except ConfigError as err:
        cmd.problems = list(err.problems)
    except Exception as err:  # Hydra's own composition errors: what the command line would print too
        message = " ".join(str(err).split())
        if type(err).__name__ in {"OverrideParseException", "MissingConfigException"} or isinstance(
                err, FileNotFoundError):
            # upstream's own Hydra would not parse this line either, or it names a config file not in the folder
            cmd.status, cmd.invalid = "invalid", f"{type(err).__name__}: {message[:160]}"
            return
        cmd.problems = [f"{type(err).__name__}: {message}"]
    other = [p for p in cmd.problems if not is_gpu_only(p)]
    cmd.status = "other" if other else "gpu_only"
    cmd.missing_files_only = bool(other) and all(MISSING_FILE.search(p) for p in other)
    cmd.other_keys = sorted({_problem_key(p.split(": ", 1)[1] if p.split(":", 1)[0].endswith(("Exception", "Error"))
                                          else p) for p in other})


# ---------------------------------------------------------------------------------------------- main


def tiny_parquet(folder: Path) -> str:
    sys.path.insert(0, str(REPO))
    from tests.data.conftest import make_row, write_rows

    rows = [make_row(f"Tom has {i} apples. How many?", index=i, truth=str(i)) for i in range(8)]
    return write_rows(folder / "tiny.parquet", rows)


def default_model() -> str:
    from verl.utils.default_model import default_model_path

    with contextlib.redirect_stdout(io.StringIO()):
        return default_model_path()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("folder", type=Path, help="upstream's example scripts (*.sh, any depth)")
    parser.add_argument("--show", default="other,invalid",
                        help="classes whose lines are listed with their messages (accepted,gpu_only,other,invalid)")
    parser.add_argument("--model", help="model folder to point model paths at (default: the bundled default model)")
    args = parser.parse_args(argv)
    root = args.folder.resolve()
    os.chdir(REPO)  # user yamls' hydra.searchpath file://verl/trainer/config is read from the working directory

    scripts = sorted(root.rglob("*.sh"))
    lines: list[CommandLine] = []
    with_module = 0
    for script in scripts:
        found = extract(script, root)
        with_module += bool(found)
        lines += found

    from verl.trainer.config import load_config

    defaults = load_config([])
    model = args.model or default_model()
    with tempfile.TemporaryDirectory() as tmp:
        parquet = tiny_parquet(Path(tmp))
        for cmd in lines:
            prepare(cmd, defaults, parquet, model, root)
            check(cmd, root)

    counts = Counter(cmd.status for cmd in lines)
    valid = len(lines) - counts["invalid"]
    show = set(args.show.split(","))
    for cmd in lines:
        if cmd.status not in show:
            continue
        print(f"[{cmd.status}] {cmd.name}" + (f": {cmd.invalid}" if cmd.invalid else ""))
        for problem in cmd.problems:
            tag = "gpu" if is_gpu_only(problem) else "OTHER"
            print(f"    {tag}: {problem[:300]}")
        for note in cmd.notes:
            print(f"    note: {note}")

    print(f"\nscripts: {len(scripts)}, with a {MODULE} invocation: {with_module}, command lines: {len(lines)}")
    print(f"{'class':<12}{'lines':>6}")
    for status in ("accepted", "gpu_only", "other", "invalid"):
        print(f"{status:<12}{counts[status]:>6}")
    print(f"{'valid':<12}{valid:>6}")
    ok = counts["accepted"] + counts["gpu_only"]
    if valid:
        print(f"\n(accepted + gpu_only) / valid = {ok}/{valid} = {ok / valid:.1%}")
    missing = sum(cmd.missing_files_only for cmd in lines)
    if missing:
        print(f"of the 'other' lines, {missing} are refused only for a file (reward function, dataset class, tool "
              f"config) that is not in the fetched folder")
    folders: dict[str, Counter] = {}
    for cmd in lines:
        parts = Path(cmd.script).parts
        folder = "/".join(parts[:2]) if parts[0] == "examples" and len(parts) > 2 else parts[0]
        folders.setdefault(folder, Counter())[cmd.status] += 1
    print(f"\n{'folder':<44}{'accepted':>9}{'gpu_only':>9}{'other':>7}{'invalid':>8}")
    for folder, count in sorted(folders.items()):
        print(f"{folder:<44}{count['accepted']:>9}{count['gpu_only']:>9}{count['other']:>7}{count['invalid']:>8}")
    keys = Counter(key for cmd in lines for key in cmd.other_keys)
    examples: dict[str, str] = {}
    for cmd in lines:
        for problem in cmd.problems:
            if not is_gpu_only(problem):
                examples.setdefault(_problem_key(problem.split(": ", 1)[1] if problem.split(":", 1)[0].endswith(
                    ("Exception", "Error")) else problem), f"{cmd.name}: {problem[:220]}")
    if keys:
        print("\nkeys behind the 'other' refusals (lines naming each, with one message):")
        for key, n in keys.most_common():
            print(f"{n:>5}  {key}\n         e.g. {examples.get(key, '')}")
    reasons = Counter(re.sub(r"\$\S+|'[^']*'", "…", cmd.invalid or "") for cmd in lines if cmd.invalid)
    if reasons:
        print("\ninvalid lines by reason:")
        for reason, n in reasons.most_common():
            print(f"{n:>5}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
