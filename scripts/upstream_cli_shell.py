"""Shell side of scripts/measure_upstream_cli.py: the `python -m verl.trainer.main_ppo` invocations of an upstream
example script as command lines (backslash continuations joined, literal assignments and arithmetic expanded,
redirects and pipes dropped; what cannot be expanded is marked unresolved)."""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path

MODULE = "verl.trainer.main_ppo"
HOME = "/root"
CONFIG_FLAGS = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name"}
UNRESOLVED = "\x00"  # wraps the name of what could not be expanded: "\x00name\x00"
SPECIAL_ARGS = {"@", "*"} | {str(i) for i in range(10)}


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
