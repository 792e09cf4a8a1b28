"""Tables that fit the terminal: as built when every column gets a readable width, else
transposed (rows become columns), else one block per row. A number is never cut to ``…`` and
text never wraps to one word per line.

    print_table(out, table)   # instead of out.print(table)

Outline of :func:`fit_table`:

1. measure every column (header and cells): its natural width and its longest word;
2. a column needs its natural width when that is at most `TEXT_MIN` (numbers, short names),
   else `TEXT_MIN` (long text wraps there, a longer word is folded, never cut);
3. the table as built when the columns need no more than the width (columns of short single
   tokens are then set ``no_wrap`` so that Rich narrows the text columns, never a number;
   every other column folds what does not fit instead of cutting it to ``…``);
4. else the same measure for the transposed table (one column per row: a few rows of many
   numbers, such as a stage table per stream count);
5. else each row as a block of ``header  value`` lines, values wrapped to the width.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

TEXT_MIN = 24
"""Narrowest width a column of running text is wrapped to."""


def _measure(console: Console, width: int, cells: Sequence[RenderableType]) -> tuple[int, int]:
    """(longest word, natural width) over `cells`."""
    options = console.options.update_width(max(1, width))
    low = high = 0
    for cell in cells:
        m = Measurement.get(console, options, cell)
        low, high = max(low, m.minimum), max(high, m.maximum)
    return low, high


def _needed(high: int) -> int:
    return min(high, TEXT_MIN)


def _frame(table: Table, columns: int) -> int:
    """Columns of the terminal that borders and padding take."""
    _, right, _, left = table.padding
    pad = (left + right) * columns
    if not table.pad_edge:
        pad -= left + right
    if table.box is None:
        return pad
    return pad + (columns + 1 if table.show_edge else columns - 1)


def _cells(column: Column) -> list[RenderableType]:
    return [column.header, *column.cells]


def _fits(console: Console, width: int, table: Table,
          columns: Sequence[Sequence[RenderableType]]) -> bool:
    need = sum(_needed(_measure(console, width, cells)[1]) for cells in columns)
    return need + _frame(table, len(columns)) <= width


def _transposed(table: Table) -> Table:
    """Rows become columns: the first column's cells head the new columns."""
    first, *rest = table.columns
    out = Table(title=table.title, caption=table.caption, title_justify=table.title_justify,
                caption_justify=table.caption_justify, box=table.box, show_lines=False)
    out.add_column(first.header, justify="left")
    for head in first.cells:
        out.add_column(head, justify="right")
    for column in rest:
        out.add_row(column.header, *column.cells)
    return out


def _records(table: Table) -> RenderableType:
    """One block per row: ``header  value`` lines, the value wrapped."""
    parts: list[RenderableType] = []
    if table.title:
        parts.append(Text.from_markup(table.title) if isinstance(table.title, str)
                     else table.title)
    columns = [list(c.cells) for c in table.columns]
    for row in range(table.row_count):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for column, cells in zip(table.columns, columns, strict=True):
            grid.add_row(column.header, cells[row])
        parts.append(Padding(grid, (1, 0, 0, 0)))
    if table.caption:
        parts.append(Padding(Text.from_markup(table.caption) if isinstance(table.caption, str)
                             else table.caption, (1, 0, 0, 0)))
    return Group(*parts)


def fit_table(console: Console, table: Table, width: int | None = None) -> RenderableType:
    """`table` laid out for `width` columns (default: the console's); see the module outline."""
    width = console.width if width is None else width
    if not table.columns:
        return table
    columns = [_cells(c) for c in table.columns]
    if _fits(console, width, table, columns):
        for column, cells in zip(table.columns, columns, strict=True):
            low, high = _measure(console, width, cells[1:] or cells)
            column.overflow = "fold"
            if low == high <= TEXT_MIN:  # one short token per cell (a number): never wrapped
                column.no_wrap = True
        return table
    if table.row_count and len(table.columns) > 1:
        flipped = _transposed(table)
        if _fits(console, width, flipped, [_cells(c) for c in flipped.columns]):
            return flipped
    return _records(table)


def print_table(console: Console, table: Table) -> None:
    """Print `table` fitted to the console's width."""
    console.print(fit_table(console, table))


__all__ = ["TEXT_MIN", "fit_table", "print_table"]
