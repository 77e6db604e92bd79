"""Chinese text wrapped by display width: a line of at most `columns` columns (a Chinese character takes two),
broken after Chinese punctuation or at a space where one is near the end, else between two Chinese characters;
never inside a Latin word or a number, and never before a closing mark (，。；：、）！？)."""

from __future__ import annotations

import textwrap

from commlib.columns import width
from commlib.ui.language import _TOKEN

CLOSING = "，。；：、）！？”"
SLACK = 20  # columns a line may give up to end at a mark or a space instead of inside a run of Chinese


def wrap(line: str, columns: int = 100) -> list[str]:
    """line as lines of at most `columns` display columns (a longer Latin word stays whole on its own line)."""
    out, cur = [], []
    for tok in _TOKEN.findall(line):
        # the spaces before tok count; what a break after an early mark leaves may still be too long: again
        while cur and not tok.isspace() and width("".join(cur) + tok) > columns:
            cut = _break(cur, end=tok not in CLOSING)  # a closing mark takes the word before it along
            out.append("".join(cur[:cut]).rstrip())
            cur = cur[cut:]
            while cur and cur[0].isspace():
                cur.pop(0)
        if cur or not tok.isspace():
            cur.append(tok)
    tail = "".join(cur).rstrip()
    return out + [tail] if tail else out


def _break(tokens: list[str], end: bool = True) -> int:
    """Where to end the line: after the last closing mark, else at the last space, within SLACK columns of the
    end; else at the end (between two Chinese characters, or before a word), or before the last token when the
    next one is a closing mark (end=False)."""
    space, tail, last = None, 0, len(tokens) if end else max(len(tokens) - 1, 1)
    while not end and last > 1 and tokens[last] in CLOSING:
        last -= 1
    for i in range(last, 0, -1):
        if tail > SLACK:
            break
        if tokens[i - 1] in CLOSING and (i == len(tokens) or tokens[i] not in CLOSING) and (end or i < len(tokens)):
            return i
        if space is None and i < len(tokens) and tokens[i].isspace():
            space = i
        tail += width(tokens[i - 1])
    return space if space is not None else last


def fill(text: str, columns: int = 100, indent: str = "") -> str:
    """textwrap.fill(text, columns, subsequent_indent=indent) where text has no Chinese (the English edition prints
    exactly what it did); Chinese text wrapped by display width (wrap), its later lines indented."""
    if text.isascii():
        return textwrap.fill(text, columns, subsequent_indent=indent)
    body = text.lstrip()
    lead = text[:len(text) - len(body)]   # kept, as textwrap keeps it (a right-aligned name)
    first = wrap(body, columns - width(lead))[0]
    rest = body[len(first):].strip()
    later = [indent + line for line in wrap(rest, columns - width(indent))] if rest else []
    return "\n".join([lead + first] + later)
