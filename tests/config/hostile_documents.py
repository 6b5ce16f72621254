"""Configuration documents of a hostile shape, shared by every test of a reader of them."""

from __future__ import annotations


def billion_laughs(levels: int) -> str:
    """YAML whose anchors ``a0`` .. ``a{levels-1}`` each hold ten aliases of the one before:
    ``10**levels`` values once expanded (the "billion laughs" at 9 levels)."""
    text = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for i in range(1, levels):
        text += f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text
