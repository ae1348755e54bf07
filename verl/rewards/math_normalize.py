"""Extracting `\\boxed{...}` answers and normalizing LaTeX answer strings so equal answers compare equal.

The rules follow the usual MATH-benchmark normalization (spacing commands, \\left/\\right, \\dfrac, units,
degrees, dollar signs, `x = ...`, bare fractions and square roots, trailing `.0`).
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed_only_string(text: str) -> str | None:
    """The last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) in `text`, braces balanced, or None."""
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    rest = text[start:]
    if rest.startswith("\\boxed "):
        # `\boxed 5` form: the argument runs to the next `$` or whitespace.
        return "\\boxed " + re.split(r"[\s$]", rest[len("\\boxed ") :], maxsplit=1)[0]
    depth = 0
    for offset, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[: offset + 1]
    return None


def remove_boxed(boxed: str) -> str:
    """`\\boxed{x}` -> `x` (also `\\fbox{x}` and `\\boxed x`)."""
    if boxed.startswith("\\boxed "):
        return boxed[len("\\boxed ") :]
    for command in _BOX_COMMANDS:
        prefix = command + "{"
        if boxed.startswith(prefix) and boxed.endswith("}"):
            return boxed[len(prefix) : -1]
    raise ValueError(f"remove_boxed: expected '\\boxed{{...}}', got {boxed!r}")


_PLAIN_INT = re.compile(r"[+-]?\d+")


def _canonical_int_if_safe(text: str) -> str:
    """`"+033"` -> `"33"`, `"-0"` -> `"0"`: a plain signed integer in canonical form; anything else unchanged."""
    return str(int(text)) if _PLAIN_INT.fullmatch(text) else text


def extract_boxed_answer(text: str) -> str | None:
    boxed = last_boxed_only_string(text)
    return None if boxed is None else remove_boxed(boxed)


def _unwrap_command(text: str, command: str) -> str:
    """`\\text{abc}` -> `abc` for every occurrence whose braces contain no nested braces."""
    return re.sub(re.escape(command) + r"\{([^{}]*)\}", r"\1", text)


def _remove_trailing_units(text: str) -> str:
    """`5\\text{ cm}` -> `5`: a text block after a value is a unit, not part of the answer."""
    return re.sub(r"(?<=\S)\s*\\(?:text|mbox|mathrm)\{\s*[a-zA-Z][a-zA-Z\s^\d]*\}\s*$", "", text)


def _fix_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`."""
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", text)


def _fix_fracs(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{7}` -> `\\frac{1}{7}`, `\\frac{1}2` -> `\\frac{1}{2}`."""
    text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)
    text = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", text)
    return re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", text)


def _fix_slash_fraction(text: str) -> str:
    """`3/4` -> `\\frac{3}{4}` when the whole answer is one integer fraction."""
    match = re.fullmatch(r"(-?\d+)/(\d+)", text)
    if match is None:
        return text
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}"


def _strip_equation_lhs(text: str) -> str:
    """`x=5` -> `5`, `k = 3` -> `3`; longer left sides are part of the answer and stay."""
    parts = text.split("=")
    if len(parts) == 2 and len(parts[0].strip()) <= 2:
        return parts[1]
    return text


def _normalize_number(text: str) -> str:
    """`1,000` -> `1000`, `5.0` -> `5`, `0.50` -> `0.5`, `.5` -> `0.5`."""
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    if re.fullmatch(r"-?\d*\.\d+|-?\d+\.?", text):
        value = text.rstrip(".")
        if "." in value:
            value = value.rstrip("0").rstrip(".")
        if value.startswith("."):
            value = "0" + value
        if value.startswith("-."):
            value = "-0" + value[1:]
        return value or "0"
    return text


def normalize_answer(text: str) -> str:
    """Canonical form of a final-answer string for string comparison."""
    text = text.strip().replace("\n", "")
    text = text.rstrip(".")
    for spacing in ("\\!", "\\,", "\\;", "\\:", "\\ ", "\\quad", "\\qquad", "\\displaystyle"):
        text = text.replace(spacing, "")
    text = text.replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    text = text.replace("\\$", "").replace("$", "")
    text = _remove_trailing_units(text)
    for command in ("\\text", "\\textbf", "\\mbox", "\\mathrm"):
        text = _unwrap_command(text, command)
    text = text.replace("\\%", "").replace("%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    text = _strip_equation_lhs(text)
    text = _fix_sqrt(text)
    text = text.replace(" ", "")
    text = _fix_fracs(text)
    text = _normalize_number(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _fix_slash_fraction(text)


def _as_number(text: str) -> Fraction | None:
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(\d+)\}", text)
    try:
        if frac is not None:
            sign = -1 if frac.group(1) else 1
            return sign * Fraction(int(frac.group(2)), int(frac.group(3)))
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def is_equiv(answer: str | None, ground_truth: str | None) -> bool:
    """String equality after normalization, or equal values when both are plain numbers or fractions."""
    if answer is None or ground_truth is None:
        return False
    left, right = normalize_answer(answer), normalize_answer(ground_truth)
    if left == right:
        return True
    left_value, right_value = _as_number(left), _as_number(right)
    return left_value is not None and left_value == right_value
