"""What a notebook printed, held to the book's column: one rule for the committed outputs (tests/test_book.py),
JupyterLab's run (tests/test_browser.py) and nbval's run of every chapter (conftest.py)."""

COLUMN = 100  # characters of a printed line that the book's column and JupyterLab hold (DEVELOPERS.md)


def wide_output_lines(nb: dict, width: int = COLUMN) -> list[str]:
    """Printed lines (stream and text/plain outputs, not widgets' fallbacks) wider than `width` display columns (a
    Chinese character takes two, as in the book's monospace column). -> 'cell <id>: <width> columns: <start>'."""
    from commlib.columns import width as columns

    bad = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data or "text/html" in data:
                continue  # a widget's or an HTML table's text/plain is a fallback the reader does not see
            text = out.get("text") or data.get("text/plain") or ""
            text = "".join(text) if isinstance(text, list) else text
            bad += [f"cell {cell.get('id', i)}: {columns(line)} columns: {line[:50]!r}"
                    for line in text.splitlines() if columns(line) > width]
    return bad
