"""A Python side and a C++ side (pollux-test-peer) on one stream, over shm and UDP on loopback,
in both directions. The peer checks or writes tests/support/payload.h's payloads, so every
byte is checked on the receiving side."""

import pytest

from conftest import finish, payload, pollux, runtime_name, shm_config, udp_config, udp_port, wait_until, write

COUNT = 20000
SIZE = 64


def config(transport, tag):
    name = runtime_name(tag)
    return shm_config(name) if transport == "shm" else udp_config(name, udp_port())


def receive_all(sub, count, size, step=None):
    """Polls `sub` with poll_batch until `count` messages came; checks order and payloads."""
    got = []

    def poll():
        b = sub.poll_batch(1024)
        if len(b) == 0:
            if step is not None:
                step()
            return False
        seqs = b.sequences.tolist()
        for i, seq in enumerate(seqs):
            assert bytes(b[i]) == payload(seq, size), f"payload of message {seq}"
        got.extend(seqs)
        return True

    wait_until(lambda: len(got) >= count, f"{count} messages (got {len(got)})", step=poll)
    assert got == list(range(1, count + 1)), "messages out of order or missing"


@pytest.mark.parametrize("transport", ["shm", "udp"])
def test_cpp_publisher_python_subscriber(tmp_path, peer, transport):
    cfg = write(tmp_path, config(transport, "cp"))
    with pollux.Context(cfg) as ctx:
        sub = ctx.subscriber("ticks")
        pub = peer("pub", "--config", cfg, "--topic", "ticks", "--count", COUNT, "--size", SIZE, "--timeout", 60)
        receive_all(sub, COUNT, SIZE)
        assert sub.messages_received >= COUNT
        assert sub.messages_lost == 0
        rc, out = finish(pub)
        assert rc == 0, out
        assert f"pub done sent={COUNT}" in out


@pytest.mark.parametrize("transport", ["shm", "udp"])
@pytest.mark.parametrize("claim", [False, True], ids=["offer", "claim"])
def test_python_publisher_cpp_subscriber(tmp_path, peer, transport, claim):
    cfg = write(tmp_path, config(transport, "pc"))
    sub = peer("sub", "--config", cfg, "--topic", "ticks", "--count", COUNT, "--no-loss", "--size", SIZE,
               "--timeout", 60)
    with pollux.Context(cfg) as ctx:
        pub = ctx.publisher("ticks")
        wait_until(lambda: pub.is_connected, "the C++ subscriber", step=pub.service)
        seq = 1
        tries = 0
        while seq <= COUNT:
            msg = payload(seq, SIZE)
            if claim:
                view = pub.try_claim(SIZE)
                ok = view is not None
                if ok:
                    view[:] = msg
                    r = pub.commit()
                    assert r >= 0, pollux.result_name(r)
            else:
                r = pub.offer(msg)
                assert r >= 0 or r in (pollux.BACK_PRESSURED, pollux.NOT_CONNECTED), pollux.result_name(r)
                ok = r >= 0
            if ok:
                seq += 1
                continue
            pub.service()
            tries += 1
            assert tries < 10_000_000, f"stuck at message {seq}"
        pub.close()  # lingers until the subscriber saw the end (UDP)
    rc, out = finish(sub)
    assert rc == 0, out
    assert f"sub done received={COUNT} lost=0" in out
