"""What a notebook printed, held to the book's column: one rule for the committed outputs (tests/test_book.py),
JupyterLab's run (tests/test_browser.py) and nbval's run of every chapter (conftest.py)."""

COLUMN = 100  # characters of a printed line that the book's column and JupyterLab hold (DEVELOPERS.md)


def wide_output_lines(nb: dict, width: int = COLUMN) -> list[str]:
    """Printed lines (stream and text/plain outputs, not widgets' fallbacks) longer than width characters.
    -> 'cell <id>: <length> chars: <start of the line>'."""
    bad = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data or "text/html" in data:
                continue  # a widget's or an HTML table's text/plain is a fallback the reader does not see
            text = out.get("text") or data.get("text/plain") or ""
            text = "".join(text) if isinstance(text, list) else text
            bad += [f"cell {cell.get('id', i)}: {len(line)} chars: {line[:50]!r}"
                    for line in text.splitlines() if len(line) > width]
    return bad
