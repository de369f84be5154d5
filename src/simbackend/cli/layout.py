"""How the commands lay out their tables: a boxed rich table where it fits, plain lines everywhere else.

A table of several columns is readable on a terminal wide enough for it; at 80
columns rich squeezes its columns until names are cut short ("actuator_kin…")
and words break, and piped into a file or ``grep`` its box drawing is noise. So
a command asks :func:`boxed` whether its table fits (a terminal, and the
columns' widths within the console's), and otherwise prints the same content
as plain lines (:func:`show`, :func:`fields`, :func:`columns`): no box
drawing, nothing cut short, words never broken, every line within the
console's width (a single word longer than a line is left whole). Styles
reach a terminal only (rich drops them elsewhere).

Everything here prints :class:`rich.text.Text`, never markup: a value such as
``dof_pos[elbow]`` or ``pip install 'simbackend[ray]'`` is printed as it is.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Sequence

from rich.console import Console
from rich.text import Text

#: columns between a plain layout's columns
GAP = 2


def boxed(console: Console, widths: Sequence[int]) -> bool:
    """Whether a boxed table whose columns need ``widths`` characters of content each fits ``console``:
    only on a terminal (a pipe or a file gets plain lines), with rich's padding and borders counted."""
    return console.is_terminal and sum(widths) + 3 * len(widths) + 1 <= console.width


def wrapped(text: str, width: int, indent: int = 0, hanging: int | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words only, the first line
    indented by ``indent`` and the others by ``hanging`` (default: ``indent``)."""
    hanging = indent if hanging is None else hanging
    lines = textwrap.wrap(
        " ".join(text.split()),
        width=max(width, max(indent, hanging) + 20),
        initial_indent=" " * indent,
        subsequent_indent=" " * hanging,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [" " * indent]


def title(console: Console, text: str) -> None:
    """A plain layout's title line."""
    console.print(Text(text, style="bold"), soft_wrap=True)


def fields(console: Console, rows: Iterable[tuple[str, Sequence[Text | str]]]) -> None:
    """``key  value`` lines: each row's key, then its values one under the other in a column after the
    longest key (at most a third of the width: a longer key gets its values on the lines below), each
    value wrapped between words with its continuation lines indented by two more."""
    rows = list(rows)
    width = console.width
    longest = max((len(key) for key, _ in rows), default=0)
    column = min(longest, max(width // 3, 8)) + GAP
    for key, values in rows:
        values = list(values) or [""]
        first = True
        if len(key) + GAP > column:
            console.print(Text(key, style="bold"), soft_wrap=True)
            first = False
        for value in values:
            style = value.style if isinstance(value, Text) else ""
            lines = wrapped(str(value), width, column, column + 2)
            for line in lines:
                head = Text(key.ljust(column), style="bold") if first else Text(line[:column])
                console.print(head + Text(line[column:], style=style), soft_wrap=True)
                first = False


def columns(
    console: Console,
    headers: Sequence[str],
    rows: Sequence[Sequence[Text | str]],
    right: Sequence[bool],
    notes: Sequence[str] | None = None,
    indent: int = 4,
) -> None:
    """Plain aligned columns, ``GAP`` apart (``right``: right-aligned), under a header line; each row's
    note (if any) on the lines below it, indented by ``indent`` and wrapped between words. A row wider
    than the console has its first two cells on a line of their own and the others on the next."""
    width = console.width
    cells = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]

    def line(row: Sequence[Text], sizes: Sequence[int], align: Sequence[bool]) -> Text:
        out = Text()
        for i, (cell, size, r) in enumerate(zip(row, sizes, align, strict=True)):
            pad = " " * (size - len(cell))
            out += Text(" " * GAP if i else "") + (Text(pad) + cell if r else cell + Text(pad))
        out.rstrip()
        return out

    console.print(line([Text(h, style="bold") for h in headers], widths, right), soft_wrap=True)
    for k, row in enumerate(cells):
        text = line(row, widths, right)
        if len(text) > width:  # a long name: the first two cells alone, the rest below
            console.print(line(row[:2], [len(row[0]), len(row[1])], right[:2]), soft_wrap=True)
            rest = line(row[2:], widths[2:], right[2:])
            console.print(Text(" " * indent) + rest, soft_wrap=True)
        else:
            console.print(text, soft_wrap=True)
        for note in wrapped(notes[k], width, indent) if notes and notes[k] else ():
            console.print(Text(note), soft_wrap=True)


def _longest_word(cell: Text | str) -> int:
    return max((len(w) for w in str(cell).split()), default=0)


def _share(least: Sequence[int], full: Sequence[int], room: int) -> list[int]:
    """Column widths within ``room`` characters: each at least ``least``, the room left shared in
    proportion to what each column lacks of its ``full`` width."""
    spare = room - sum(least)
    lacking = [f - m for m, f in zip(least, full, strict=True)]
    if spare >= sum(lacking):
        return list(full)
    return [m + (spare * gap) // max(sum(lacking), 1) for m, gap in zip(least, lacking, strict=True)]


def show(
    console: Console,
    heading: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Text | str]],
    *,
    wrap: Sequence[int] = (),
    right: Sequence[int] = (),
    least: int = 16,
    show_header: bool = True,
    plain: Iterable[tuple[str, Sequence[Text | str]]] | Callable[[], None] | None = None,
) -> None:
    """A table: boxed where it fits (:func:`boxed`), else plain :func:`fields` lines.

    Args:
        heading: the title.
        headers: the column names; the first column's cells are the keys of the plain lines.
        rows: the cells (``Text`` keeps its style; a ``str`` is literal too).
        wrap: the columns whose cells may wrap between words in the boxed table (at least ``least``
            characters wide); the others must fit whole.
        right: the columns aligned right (numbers).
        plain: the plain layout's ``(key, values)`` rows (default: each row's first cell, then the
            others), or a function that prints the plain layout after the title.
    """
    from rich.table import Table

    least_widths, full_widths = [], []
    for i, name in enumerate(headers):
        cells = [str(row[i]) for row in rows] + ([name] if show_header else [])
        full = max((len(c) for c in cells), default=0)
        least_widths.append(max([min(least, full), *(_longest_word(c) for c in cells)]) if i in wrap else full)
        full_widths.append(full)
    if boxed(console, least_widths):
        table = Table(title=heading, title_justify="left", show_header=show_header)
        widths = _share(least_widths, full_widths, console.width - 3 * len(headers) - 1)
        for i, name in enumerate(headers):  # columns as wide as _share says: rich never cuts a word
            table.add_column(
                name,
                style="bold" if i == 0 else "",
                width=widths[i],
                overflow="fold",
                justify="right" if i in right else "left",
            )
        for row in rows:
            table.add_row(*(c if isinstance(c, Text) else Text(c) for c in row))
        console.print(table)
        return
    title(console, heading)
    if callable(plain):
        plain()
        return
    fields(console, plain if plain is not None else [(str(row[0]), list(row[1:])) for row in rows])
