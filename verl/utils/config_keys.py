"""Finding the key a user most likely meant when they typed one that does not exist.

Shared by the command-line pre-check (before Hydra) and the dataclass builder (after Hydra), so a typo
gets the same message whichever one catches it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def _parent(key: str) -> str:
    return key.rpartition(".")[0]


def _leaf(key: str) -> str:
    return key.rpartition(".")[2]


def suggest_key(key: str, known: Iterable[str]) -> str | None:
    """The known dotted key closest to `key`, or None when nothing is close.

    Order of preference: the very same name in another section (right key, wrong place), then a similar
    name in the same section (a typo in the last part), then the closest path as deep as the typed one
    in another section (a typo in a section name).
    """
    known = sorted(set(known))
    parent, leaf = _parent(key), _leaf(key)

    same_leaf = [k for k in known if _leaf(k) == leaf and k != key]
    if same_leaf:
        return difflib.get_close_matches(key, same_leaf, n=1, cutoff=0.0)[0]

    siblings = {_leaf(k): k for k in known if _parent(k) == parent}
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)
    if close:
        return siblings[close[0]]

    # Other sections only: within the same section a shared prefix would make any name look close.
    depth = key.count(".")
    elsewhere = [k for k in known if k.count(".") == depth and _parent(k) != parent]
    close = difflib.get_close_matches(key, elsewhere, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_key_message(key: str, known: Iterable[str]) -> str:
    """`Unknown config key 'a.b'. Did you mean 'a.c'?` — or the valid keys of the section when nothing is close."""
    known = sorted(set(known))
    suggestion = suggest_key(key, known)
    if suggestion is not None:
        return f"Unknown config key '{key}'. Did you mean '{suggestion}'?"
    parent = _parent(key)
    while parent and parent not in known:
        parent = _parent(parent)
    children = sorted({_leaf(k) for k in known if _parent(k) == parent})
    where = f"under '{parent}'" if parent else "at the top level"
    return f"Unknown config key '{key}'. Valid keys {where}: {', '.join(children)}."
