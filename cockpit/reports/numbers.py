"""Numbers as every report and pane writes them, so a table and a pane never disagree on a digit."""

from __future__ import annotations


def format_tok_s(value: float) -> str:
    """One decimal below 1000 (26.3, 577.8), whole numbers with separators above (3,982)."""
    return f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def format_ms(value: float | None) -> str:
    """Milliseconds as tok/s are written (12.3, 1,234); `-` where the client measured nothing."""
    return "-" if value is None else format_tok_s(value)
