"""Type stubs of the `pollux` extension module (api/python/module.cc; docs/PYTHON.md)."""

import os
from typing import Callable, Iterator, List, NamedTuple, Optional, Tuple, Union

__version__: str

BACK_PRESSURED: int
"""offer()/commit() result: the transport or ring is full; retry later."""
NOT_CONNECTED: int
"""offer()/commit() result: no subscriber can receive yet."""
CLOSED: int
"""offer()/commit() result: the publisher or its context is closed."""
MESSAGE_TOO_LARGE: int
"""offer()/commit() result: the payload exceeds Publisher.max_payload."""

def result_name(result: int) -> str:
    """Name of an offer()/commit() result: 'ok' for a position (>= 0), else e.g. 'back-pressured'."""

class Error(RuntimeError):
    """A failed control call (the library's message: file:line and key for configuration
    errors) or the use of a closed handle."""

class Message:
    """A message handed to Subscriber.poll()'s handler."""

    @property
    def payload(self) -> memoryview:
        """The payload: a read-only memoryview of bytes."""
    @property
    def sequence(self) -> int:
        """Sequence in its publisher session: +1 per message, from 1."""
    @property
    def session_id(self) -> int:
        """The publisher incarnation that sent it."""
    @property
    def stream_id(self) -> int:
        """The stream (topic) id."""
    @property
    def publisher_ns(self) -> int:
        """The publisher host's clock at offer (0 when the stream does not stamp)."""

class Batch:
    """The messages of one poll_batch(). Its views are valid until the next poll()/poll_batch()
    of the subscriber (a buffer is reused only once no view of it is referenced)."""

    def __len__(self) -> int:
        """Number of messages."""
    def __getitem__(self, index: int) -> memoryview:
        """Payload of message `index`: a read-only memoryview."""
    def __iter__(self) -> Iterator[memoryview]:
        """Iterates over the payloads."""
    def message(self, index: int) -> Message:
        """Message `index` with its sequence and session."""
    @property
    def data(self) -> memoryview:
        """Every payload back to back: one memoryview of bytes."""
    @property
    def offsets(self) -> memoryview:
        """Start of each payload in .data: memoryview of uint64 (format 'Q')."""
    @property
    def lengths(self) -> memoryview:
        """Length of each payload: memoryview of uint32 (format 'I')."""
    @property
    def sequences(self) -> memoryview:
        """Sequence of each message: memoryview of uint64 (format 'Q')."""
    @property
    def session_ids(self) -> memoryview:
        """Publisher session of each message: memoryview of uint32 (format 'I')."""
    @property
    def publisher_ns(self) -> memoryview:
        """Publisher timestamp of each message: memoryview of int64 (format 'q')."""

class Publisher:
    """One thread's handle on a stream (Context.publisher())."""

    def offer(self, payload: Union[bytes, bytearray, memoryview]) -> int:
        """Copies a bytes-like payload into the stream. Returns its position (>= 0) or
        BACK_PRESSURED, NOT_CONNECTED, CLOSED, MESSAGE_TOO_LARGE. Never blocks."""
    def try_claim(self, length: int) -> Optional[memoryview]:
        """Reserves `length` bytes in place: a writable memoryview to fill, then commit() or
        abort(). None when back-pressured or not connected (retry); raises Error when the
        message is too large or the stream closed."""
    def commit(self) -> int:
        """Publishes the open claim; returns its position or a result code."""
    def abort(self) -> None:
        """Drops the open claim."""
    def service(self) -> int:
        """Inline mode: runs the publisher's transport duties; call when idle. Returns work done."""
    @property
    def is_connected(self) -> bool:
        """True when at least one subscriber can receive."""
    @property
    def max_payload(self) -> int:
        """Largest payload offer() accepts."""
    @property
    def stream_id(self) -> int:
        """The stream id."""
    @property
    def topic(self) -> str:
        """The topic."""
    def close(self) -> None:
        """Flushes and releases the stream; further use raises Error."""
    def __enter__(self) -> "Publisher": ...
    def __exit__(self, *args: object) -> None: ...

class Subscriber:
    """One thread's handle on a stream (Context.subscriber())."""

    def poll(self, handler: Callable[[Message], object], limit: int = 256) -> int:
        """Polls up to `limit` messages (GIL released), then calls handler(msg) for each with the
        GIL held. Returns the number handled. A handler exception propagates; the messages after
        it are delivered first by the next poll."""
    def poll_batch(self, limit: int = 4096) -> Batch:
        """Polls up to `limit` messages (GIL released) and returns them as a Batch."""
    def wait(self, timeout_us: int = -1) -> bool:
        """Blocks (GIL released) until poll would find something or `timeout_us` passes (< 0: no
        limit). True when woken by data (spurious wake-ups possible), False on timeout."""
    @property
    def messages_received(self) -> int:
        """Messages received since creation."""
    @property
    def messages_lost(self) -> int:
        """Messages reported lost (gaps)."""
    @property
    def gaps_reported(self) -> int:
        """Number of gap notifications."""
    @property
    def is_connected(self) -> bool:
        """True while a publisher is attached and the stream has not ended."""
    @property
    def stream_id(self) -> int:
        """The stream id."""
    @property
    def topic(self) -> str:
        """The topic."""
    def close(self) -> None:
        """Releases the stream; further use raises Error."""
    def __enter__(self) -> "Subscriber": ...
    def __exit__(self, *args: object) -> None: ...

class Context:
    """One configured Pollux instance. `config` is a TOML file (str or os.PathLike) or TOML
    text: a str is a path when such a file exists or when it holds neither a newline nor '=';
    '' is the all-defaults configuration. Errors raise Error naming file:line and key."""

    def __init__(self, config: Union[str, "os.PathLike[str]"], source_name: str = "<string>") -> None:
        """Loads and validates the configuration and starts the pollers."""
    def publisher(self, topic: str) -> Publisher:
        """Opens a Publisher on `topic`."""
    def subscriber(self, topic: str) -> Subscriber:
        """Opens a Subscriber on `topic`."""
    def stream_id(self, topic: str) -> int:
        """The stream id of `topic` ([[streams]] id, else derived from the name)."""
    def describe(self) -> str:
        """What this context runs, one fact per line."""
    def effective_config(self) -> str:
        """The effective configuration as TOML."""
    def counters_path(self) -> str:
        """Path of the shared-memory counters file ('' when runtime.counters = false)."""
    def close(self) -> None:
        """Stops the pollers and closes every handle of this context (their use then raises
        Error). Idempotent."""
    @property
    def closed(self) -> bool:
        """True after close()."""
    def __enter__(self) -> "Context": ...
    def __exit__(self, *args: object) -> None: ...

class _Book(NamedTuple):
    symbol: str
    bids: List[Tuple[int, int]]
    asks: List[Tuple[int, int]]
    def best_bid(self) -> Optional[Tuple[int, int]]: ...
    def best_ask(self) -> Optional[Tuple[int, int]]: ...

class _Feed:
    """pollux.feed: the feed handler's --book-out / --counts-out files (api/python/feed.py)."""

    PRICE_SCALE: int
    Book = _Book
    @staticmethod
    def read_books(path: Union[str, "os.PathLike[str]"]) -> List[_Book]:
        """Every book of a --book-out file, in file order."""
    @staticmethod
    def iter_books(path: Union[str, "os.PathLike[str]"]) -> Iterator[_Book]:
        """Yields the books of a --book-out file one by one."""
    @staticmethod
    def read_counts(path: Union[str, "os.PathLike[str]"]) -> dict[str, int]:
        """The message counts of a --counts-out file."""
    @staticmethod
    def price(raw: int) -> float:
        """A raw ITCH price as a float."""

feed: _Feed
