"""pollux.feed reads what the sample feed handler writes (pollux-feed --book-out/--counts-out)."""

import os
import pathlib
import subprocess

import pytest

from conftest import pollux, runtime_name

FEED = os.environ.get("POLLUX_FEED", "")
FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "data" / "itch_gen_s3_m5000_seed42.itch"


def check_books(books):
    assert books, "no book"
    for b in books:
        assert isinstance(b.symbol, str) and b.symbol
        assert [p for p, _ in b.bids] == sorted((p for p, _ in b.bids), reverse=True), b.symbol
        assert [p for p, _ in b.asks] == sorted(p for p, _ in b.asks), b.symbol
        assert all(s > 0 for _, s in b.bids + b.asks), b.symbol


def test_reads_the_documented_format(tmp_path):
    path = tmp_path / "books.jsonl"
    path.write_text(
        '{"symbol": "ALC", "bids": [[1002500, 300], [1002400, 100]], "asks": [[1002600, 50]]}\n'
        '{"symbol": "B\\u0001Z", "bids": [], "asks": []}\n'
    )
    books = pollux.feed.read_books(path)
    assert books[0] == ("ALC", [(1002500, 300), (1002400, 100)], [(1002600, 50)])
    assert books[0].best_bid() == (1002500, 300) and books[1].best_ask() is None
    assert books[1].symbol == "B\x01Z"
    assert pollux.feed.price(1002500) == 100.25
    (tmp_path / "bad.jsonl").write_text('{"symbol": "A", "bids": [], "asks": []}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        pollux.feed.read_books(tmp_path / "bad.jsonl")


def test_import_as_submodule():
    import pollux.feed as feed  # registered in sys.modules by the extension

    assert feed is pollux.feed and feed.read_books.__doc__


@pytest.mark.skipif(not FEED or not FIXTURE.exists(), reason="POLLUX_FEED (pollux-feed) or the ITCH fixture missing")
def test_reads_pollux_feed_output(tmp_path):
    cfg = tmp_path / "feed.toml"
    cfg.write_text(
        f'[runtime]\nname = "{runtime_name("feed")}"\nthreading = "inline"\nidle = "yield"\ncounters = false\n'
        '[shm]\nlog_size = "1MiB"\nflow_control = "backpressure"\n'
        "[feed]\nstreams = 1\nsubscribers = 1\nprogress_ms = 0\n"
    )
    books_path, counts_path = tmp_path / "books.jsonl", tmp_path / "counts.json"
    r = subprocess.run([FEED, "--config", cfg, "--itch", FIXTURE, "--book-out", books_path, "--counts-out",
                        counts_path, "--quiet"], capture_output=True, text=True, timeout=300)
    print(r.stdout, r.stderr)
    assert r.returncode == 0
    books = pollux.feed.read_books(books_path)
    check_books(books)
    assert len(books) == len(books_path.read_text().splitlines())
    counts = pollux.feed.read_counts(counts_path)
    assert sum(counts.values()) > 0 and all(len(k) == 1 for k in counts)
