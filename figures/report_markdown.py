"""Markdown pieces of the reproduction report (:mod:`figures.report`): table cells, one-line summaries of long
texts, explicit anchors, setup lists, figure links relative to the report's folder, and :class:`Section`, a
section beyond the claims (title, markdown body, optional figures) that the report places after the claims.

A figure is embedded with a relative link from the report's folder to the PNG in its job folder, so the report
renders with its figures wherever the results folder is opened (GitHub, an editor); a PNG that does not exist
gets a sentence saying so and what to run, never a broken link.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from figures.claims.base import Setup

ELLIPSIS = "…"
MIN_CUT = 20  # brief(): the shortest piece of a part worth showing cut


def cell(text: object) -> str:
    """``text`` on one line, fit for a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def split_top(text: str, sep: str = ";") -> list[str]:
    """``text`` split at every ``sep`` outside parentheses and brackets, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth = max(depth - 1, 0)
        elif char == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def strip_parentheses(text: str) -> str:
    """``text`` without its top-level parenthesised asides."""
    out, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
    return re.sub(r"\s+([,.;:])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip()


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit - len(ELLIPSIS)]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:(") + ELLIPSIS


def brief(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters that keeps as much of ``text`` as fits: the whole text, else its
    ``;``-separated parts without their parenthesised asides, as many as fit, then the next one cut at a word
    with an ellipsis (or only the ellipsis when too little room is left)."""
    text = " ".join(str(text).split()).rstrip(".")
    if len(text) <= limit:
        return text
    parts = [part for part in (strip_parentheses(p) for p in split_top(text)) if part]
    kept: list[str] = []
    for i, part in enumerate(parts):
        more = i < len(parts) - 1
        if len("; ".join([*kept, part])) + (len(ELLIPSIS) + 2 if more else 0) > limit:
            room = limit - len("; ".join(kept)) - (2 if kept else 0)
            if room >= MIN_CUT or not kept:  # the part that does not fit, cut where the line ends
                piece = _cut(part, room)
                if piece == part:  # it fits, but not with the sign that more follows
                    piece = _cut(part, len(part) - 1)
                return "; ".join([*kept, piece])
            return f"{'; '.join(kept)}; {ELLIPSIS}"
        kept.append(part)
    return "; ".join(kept)


def anchor(name: str) -> str:
    """A stable anchor id: ``name`` in lower case, runs of other characters than letters, digits, ``-`` and
    ``_`` turned into ``-``."""
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")


def heading(title: str, name: str, level: int = 2) -> list[str]:
    """An explicit anchor (``<a id>``, kept when the title changes) and the heading."""
    return [f'<a id="{name}"></a>', "", f"{'#' * level} {title}", ""]


def _items(text: str) -> list[str]:
    return [f"  - {part}" for part in split_top(text)]


def setup_lines(setup: Setup) -> list[str]:
    """A setup as a list: Paper, Ours (each ``;``-separated fact a sub-bullet) and Differences; empty parts
    are left out."""
    lines = []
    for label, text in (("Paper", setup.paper), ("Ours", setup.ours)):
        if not text:
            continue
        parts = split_top(text)
        lines += [f"- **{label}:** {parts[0]}"] if len(parts) == 1 else [f"- **{label}:**", *_items(text)]
    if setup.differences:
        lines += ["- **Differences:**", *(f"  - {d}" for d in setup.differences)]
    return lines


def relative_link(target: Path, out_dir: Path) -> str:
    """The URL-quoted path of ``target`` relative to the folder ``out_dir`` (``/`` separated)."""
    rel = os.path.relpath(Path(target).resolve(), Path(out_dir).resolve())
    return quote(Path(rel).as_posix())


def figure_lines(png: Path, out_dir: Path, hint: str, alt: str = "") -> list[str]:
    """The image link of ``png`` relative to ``out_dir``, or, when it does not exist, a sentence saying it is
    not drawn and ``hint`` (what to run)."""
    if Path(png).is_file():
        return [f"![{alt or Path(png).stem}]({relative_link(png, out_dir)})", ""]
    return [f"_Figure `{Path(png).name}` not drawn: {hint}._", ""]


@dataclass(frozen=True)
class Section:
    """A report section beyond the claims: a title, its markdown body, and the PNGs it shows (embedded after
    the body, relative to the report; ``figure_hint`` says what draws a missing one)."""

    title: str
    body: str
    figures: tuple[Path, ...] = ()
    figure_hint: str = "run `python -m figures` on its results folder"
    name: str = ""

    @property
    def anchor(self) -> str:
        return self.name or anchor(self.title)


def section_lines(section: Section, out_dir: Path) -> list[str]:
    """The markdown of one :class:`Section`."""
    lines = [*heading(section.title, section.anchor), *section.body.strip("\n").splitlines(), ""]
    for png in section.figures:
        lines += figure_lines(png, out_dir, section.figure_hint)
    return lines


def links(pairs: Iterable[tuple[str, str]]) -> str:
    """``[title](#anchor), ...`` for (title, anchor) pairs."""
    return ", ".join(f"[{title}](#{name})" for title, name in pairs)
