"""pollux.feed: the sample feed handler's outputs, read from Python.

The feed handler (examples/feed_handler, `pollux-feed --book-out FILE`) writes the final book
of every symbol as JSON lines, one object per book in stock locate order:

    {"symbol": "ALC", "bids": [[price, shares], ...], "asks": [[price, shares], ...]}

Levels are best first (bids descending, asks ascending); prices are raw ITCH integers with
PRICE_SCALE (4) implied decimals. `--counts-out FILE` writes one JSON object of message counts
by type letter.
"""

import json
import os
from typing import Dict, Iterator, List, NamedTuple, Tuple, Union

PRICE_SCALE = 10000  # ITCH prices carry 4 implied decimals

Level = Tuple[int, int]  # (price as a raw ITCH integer, shares)


class Book(NamedTuple):
    """One symbol's final book: levels best first, prices as raw ITCH integers."""

    symbol: str
    bids: List[Level]
    asks: List[Level]

    def best_bid(self):
        """The best (highest) bid level, or None."""
        return self.bids[0] if self.bids else None

    def best_ask(self):
        """The best (lowest) ask level, or None."""
        return self.asks[0] if self.asks else None


def _levels(raw, where):
    out = []
    for lv in raw:
        if not (isinstance(lv, list) and len(lv) == 2 and all(isinstance(v, int) for v in lv)):
            raise ValueError(f"{where}: a level is not [price, shares]: {lv!r}")
        out.append((lv[0], lv[1]))
    return out


def iter_books(path: Union[str, "os.PathLike[str]"]) -> Iterator[Book]:
    """Yields the books of a --book-out file one by one (a line that is not a book raises
    ValueError naming file:line)."""
    with open(os.fspath(path), "r", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{os.fspath(path)}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON: {e}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("symbol"), str):
                raise ValueError(f"{where}: not a book (no \"symbol\")")
            yield Book(obj["symbol"], _levels(obj.get("bids", []), where), _levels(obj.get("asks", []), where))


def read_books(path: Union[str, "os.PathLike[str]"]) -> List[Book]:
    """Every book of a --book-out file, in file (stock locate) order."""
    return list(iter_books(path))


def read_counts(path: Union[str, "os.PathLike[str]"]) -> Dict[str, int]:
    """The message counts of a --counts-out file: {type letter: count}."""
    with open(os.fspath(path), "r", encoding="utf-8") as f:
        return {str(k): int(v) for k, v in json.load(f).items()}


def price(raw: int) -> float:
    """A raw ITCH price as a float (for display; keep the integers for arithmetic)."""
    return raw / PRICE_SCALE
