"""The GIL is released while the library polls and waits: Python threads and the library's own
threads keep running beside a Python thread that polls or waits."""

import threading

import pytest

from conftest import finish, pollux, runtime_name, shm_config, wait_until, write

COUNT = 200_000


def test_polling_thread_beside_python_work_and_a_cpp_publisher(tmp_path, peer):
    # This process: a dedicated poller thread (C++) and a Python thread looping on poll_batch;
    # the main thread does Python work. The C++ publisher (another process) starts only once
    # the main thread has run Python code while the polling thread loops, and every message must
    # arrive, in order, none lost (back-pressure flow control: a stalled reader would stall the
    # publisher, which gives up after its timeout and the test fails).
    name = runtime_name("thr")
    cfg = write(tmp_path, shm_config(name, "dedicated"), "sub.toml")
    pub_cfg = write(tmp_path, shm_config(name, "inline"), "pub.toml")
    go = tmp_path / "go"
    received = []
    problems = []
    stop = threading.Event()
    started = threading.Event()

    with pollux.Context(cfg) as ctx:
        sub = ctx.subscriber("ticks")

        def poll_loop():
            expect = 1
            started.set()
            while len(received) < COUNT and not stop.is_set():
                b = sub.poll_batch(4096)
                n = len(b)
                if n == 0:
                    stop.wait(0.0002)  # 2 vCPUs: never spin without yielding
                    continue
                seqs = b.sequences.tolist()
                if seqs != list(range(expect, expect + n)):
                    problems.append(f"expected {expect}.., got {seqs[:3]}..")
                expect += n
                received.append(n)

        t = threading.Thread(target=poll_loop)
        t.start()
        try:
            pub = peer("pub", "--config", pub_cfg, "--topic", "ticks", "--count", COUNT, "--size", 32,
                       "--go-file", go, "--timeout", 60)
            started.wait(60)
            work = 0
            while work < 1000:  # Python work in the main thread while the poll thread loops
                work += sum(range(100)) > 0
            go.write_text("go")
            wait_until(lambda: sum(received) >= COUNT or not t.is_alive(), f"{COUNT} messages",
                       step=lambda: sum(i * i for i in range(200)) < 0)
        finally:
            stop.set()
            t.join(60)
        assert not problems, problems
        assert sum(received) == COUNT
        assert sub.messages_lost == 0
        rc, out = finish(pub)
        assert rc == 0, out


def test_wait_releases_the_gil():
    # A thread waits (inline shm: it sleeps on the log's futex); the main thread can publish
    # only if the waiting thread let go of the GIL. A wait that kept it would return False at its
    # timeout, after which the message is offered.
    with pollux.Context(shm_config(runtime_name("wait"))) as ctx:
        sub = ctx.subscriber("t")
        pub = ctx.publisher("t")
        wait_until(lambda: pub.is_connected, "the subscriber", step=pub.service)
        assert len(sub.poll_batch()) == 0  # the new-session event
        result = []
        waiting = threading.Event()

        def waiter():
            waiting.set()
            result.append(sub.wait(30_000_000))

        t = threading.Thread(target=waiter)
        t.start()
        waiting.wait(30)
        # A second thread on the same subscriber while it waits: refused, not a data race.
        with pytest.raises(pollux.Error, match="in use by another thread"):
            wait_until(lambda: False, "the waiter to enter wait()", seconds=30, step=lambda: sub.poll_batch() and False)
        assert pub.offer(b"wake") >= 0
        t.join(60)
        assert result == [True]
        assert [bytes(v) for v in sub.poll_batch()] == [b"wake"]


def test_close_from_another_thread_while_one_waits():
    # ctx.close() waits for the call in flight (a wait() slice is at most 100 ms), then the
    # waiting thread's next call raises.
    ctx = pollux.Context(shm_config(runtime_name("close")))
    sub = ctx.subscriber("t")
    errors = []

    def waiter():
        try:
            while True:
                sub.wait(1_000_000)
        except pollux.Error as e:
            errors.append(str(e))

    t = threading.Thread(target=waiter)
    t.start()
    ctx.close()
    t.join(60)
    assert not t.is_alive()
    assert errors and "context is closed" in errors[0]
