#!/usr/bin/env python3
"""Subscribes to a Pollux topic from Python and prints what arrives.

With the quickstart's publisher (examples/quickstart; README "Your first program"), from the
folder holding quickstart.toml (build/bin after the default build):

    PYTHONPATH=../python /usr/bin/python3 ../../examples/python/subscribe.py --config quickstart.toml &
    ./quickstart-pub

Quotes (24 bytes: id, bid, ask) are decoded; any other payload is printed as its length and
first bytes. Against another publisher, name its configuration and topic; both sides of a shm
stream must use the same runtime.name. Stops after --count messages, or on Ctrl-C.
"""

import argparse
import struct

import pollux

QUOTE = struct.Struct("<Qqq")  # examples/quickstart/quickstart.h: struct Quote


def describe(payload):
    if len(payload) == QUOTE.size:
        qid, bid, ask = QUOTE.unpack(payload)
        return f"quote {qid}: bid {bid} ask {ask}"
    return f"{len(payload)} bytes: {bytes(payload[:16]).hex()}"


def main():
    ap = argparse.ArgumentParser(description="Prints the messages of a Pollux topic.")
    ap.add_argument("--config", default="quickstart.toml", help="TOML configuration (path or text)")
    ap.add_argument("--topic", default="quotes")
    ap.add_argument("--count", type=int, default=0, help="stop after this many messages (0: until Ctrl-C)")
    ap.add_argument("--every", type=int, default=1, help="print every Nth message (the others are counted)")
    a = ap.parse_args()

    received = 0
    with pollux.Context(a.config) as ctx:
        sub = ctx.subscriber(a.topic)
        print(f"subscribed to {sub.topic!r} (stream {sub.stream_id}); Ctrl-C stops")
        try:
            while a.count == 0 or received < a.count:
                batch = sub.poll_batch(1024)
                if len(batch) == 0:
                    sub.wait(100_000)  # sleeps (GIL released) until data, at most 100 ms
                    continue
                seqs = batch.sequences
                for i, payload in enumerate(batch):
                    received += 1
                    if received % a.every == 0:
                        print(f"#{seqs[i]} {describe(payload)}")
                    if received == a.count:
                        break
        except KeyboardInterrupt:
            pass
        print(f"received {received} lost {sub.messages_lost} gaps {sub.gaps_reported}")


if __name__ == "__main__":
    main()
