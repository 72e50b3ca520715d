"""The module's own contract in one process: configuration forms, offer/claim/poll/poll_batch,
view lifetimes, result codes, errors and closed handles."""

import pathlib

import pytest

from conftest import pollux, runtime_name, shm_config, wait_until, write


@pytest.fixture
def ctx():
    with pollux.Context(shm_config(runtime_name("api"))) as c:
        yield c


def connected_pair(ctx, topic="t"):
    sub = ctx.subscriber(topic)
    pub = ctx.publisher(topic)
    wait_until(lambda: pub.is_connected, "the subscriber", step=pub.service)
    return pub, sub


def offer_all(pub, payloads):
    for p in payloads:
        r = pub.offer(p)
        assert r >= 0, pollux.result_name(r)


def drain(sub, want):
    got = []
    wait_until(lambda: len(got) >= want, f"{want} messages", step=lambda: sub.poll(got.append) > 0)
    return got


def test_config_forms(tmp_path):
    text = shm_config(runtime_name("cfg"))
    path = write(tmp_path, text)
    for config in (text, str(path), path, pathlib.PurePosixPath(path)):
        with pollux.Context(config) as c:
            assert "config:" in c.describe()
            assert c.counters_path() == ""  # counters = false
            assert "[runtime]" in c.effective_config()
    with pollux.Context("") as c:  # all defaults
        assert c.stream_id("x") == c.stream_id("x")


def test_config_errors_name_file_line_and_key(tmp_path):
    bad = write(tmp_path, '[runtime]\nname = "x"\nthreading = "dedicted"\n', "bad.toml")
    with pytest.raises(pollux.Error) as e:
        pollux.Context(bad)
    print(e.value)
    assert f"{bad}:3" in str(e.value) and "runtime.threading" in str(e.value)
    assert isinstance(e.value, RuntimeError)
    with pytest.raises(pollux.Error, match=r"app.toml:2: .*runtime\.idel"):
        pollux.Context('[runtime]\nidel = "yield"\n', source_name="app.toml")
    with pytest.raises(pollux.Error) as e:
        pollux.Context(str(tmp_path / "missing.toml"))
    print(e.value)
    assert "missing.toml" in str(e.value)


def test_unknown_topic_gets_a_stable_derived_id(ctx):
    # Topics not listed in [[streams]] are not an error: their id is derived from the name, the
    # same in every process, so both sides meet without configuring the topic.
    pub, sub = connected_pair(ctx, "not-configured")
    assert pub.stream_id == sub.stream_id == ctx.stream_id("not-configured")
    assert sub.topic == "not-configured"
    assert ctx.stream_id("other") != sub.stream_id


def test_poll_handler_gets_messages(ctx):
    pub, sub = connected_pair(ctx)
    offer_all(pub, [b"a%d" % i for i in range(10)])
    got = []
    assert sub.poll(got.append, 3) <= 3
    got += drain(sub, 10 - len(got))
    assert [bytes(m.payload) for m in got] == [b"a%d" % i for i in range(10)]
    assert [m.sequence for m in got] == list(range(1, 11))
    assert got[0].stream_id == sub.stream_id and got[0].session_id != 0
    assert sub.messages_received == 10 and sub.messages_lost == 0 and sub.gaps_reported == 0


def test_poll_batch_columns(ctx):
    pub, sub = connected_pair(ctx)
    msgs = [bytes([i]) * (i + 1) for i in range(50)]
    offer_all(pub, msgs)
    batch = sub.poll_batch(1000)
    assert len(batch) == 50
    assert [bytes(v) for v in batch] == msgs
    assert bytes(batch[-1]) == msgs[-1]
    assert bytes(batch.data) == b"".join(msgs)
    assert batch.lengths.tolist() == [len(m) for m in msgs]
    offsets = batch.offsets.tolist()
    assert offsets[0] == 0 and offsets[1:] == [sum(map(len, msgs[:i])) for i in range(1, 50)]
    assert batch.sequences.tolist() == list(range(1, 51))
    assert (batch.offsets.format, batch.lengths.format, batch.sequences.format) == ("Q", "I", "Q")
    assert batch.message(3).sequence == 4
    assert batch.data.readonly and batch[0].readonly
    with pytest.raises(IndexError):
        batch[50]
    assert len(sub.poll_batch()) == 0


def test_views_held_past_the_next_poll_stay_intact(ctx):
    # A buffer is reused only when nothing references it: a kept view still reads its bytes.
    pub, sub = connected_pair(ctx)
    offer_all(pub, [b"first"])
    kept = sub.poll_batch()[0]
    for _ in range(5):
        offer_all(pub, [b"later"])
        assert bytes(sub.poll_batch()[0]) == b"later"
    assert bytes(kept) == b"first"


def test_handler_exception_propagates_and_keeps_the_rest(ctx):
    pub, sub = connected_pair(ctx)
    offer_all(pub, [b"%d" % i for i in range(6)])

    def handler(m):
        if m.sequence == 3:
            raise ValueError("boom")
        seen.append(m.sequence)

    seen = []
    wait_until(lambda: len(seen) >= 2, "two messages before the exception",
               step=lambda: sub.poll(handler, 1) > 0)
    with pytest.raises(ValueError, match="boom"):
        sub.poll(handler)
    assert seen == [1, 2]
    # The messages after the one that raised come first from the next poll.
    rest = drain(sub, 3)
    assert [m.sequence for m in rest] == [4, 5, 6]


def test_claim(ctx):
    pub, sub = connected_pair(ctx)
    view = pub.try_claim(4)
    assert view is not None and not view.readonly and len(view) == 4
    view[:] = b"abcd"
    with pytest.raises(pollux.Error, match="claim is open"):
        pub.offer(b"x")
    assert pub.commit() >= 0
    with pytest.raises(ValueError):
        view[0] = 1  # released at commit: no write into a published frame
    view = pub.try_claim(3)
    pub.abort()
    with pytest.raises(pollux.Error, match="no open claim"):
        pub.commit()
    assert [bytes(m.payload) for m in drain(sub, 1)] == [b"abcd"]
    with pytest.raises(pollux.Error, match="message-too-large|too large|too-large"):
        pub.try_claim(pub.max_payload + 1)


def test_result_codes(ctx):
    pub, _ = connected_pair(ctx)
    assert pub.offer(b"x" * (pub.max_payload + 1)) == pollux.MESSAGE_TOO_LARGE
    names = {pollux.result_name(r) for r in (pollux.BACK_PRESSURED, pollux.NOT_CONNECTED, pollux.CLOSED,
                                             pollux.MESSAGE_TOO_LARGE)}
    assert len(names) == 4 and pollux.result_name(0) == "ok"
    lonely = ctx.publisher("nobody-listens")
    assert lonely.offer(b"x") == pollux.NOT_CONNECTED
    with pytest.raises(TypeError):
        pub.offer("text is not bytes")


def test_back_pressure_is_a_result_not_an_error(ctx):
    pub, sub = connected_pair(ctx)
    big = b"z" * 4096
    results = set()
    for _ in range(1000):  # 4 MiB into a 1 MiB log nobody reads
        r = pub.offer(big)
        results.add(r if r < 0 else 0)
        if r == pollux.BACK_PRESSURED:
            break
    assert pollux.BACK_PRESSURED in results
    assert pub.try_claim(4096) is None
    assert len(sub.poll_batch(100000)) > 0


def test_closed_handles_raise(ctx):
    pub, sub = connected_pair(ctx)
    sub.close()
    with pytest.raises(pollux.Error, match="subscriber is closed"):
        sub.poll(print)
    with pytest.raises(pollux.Error, match="subscriber is closed"):
        sub.poll_batch()
    with pytest.raises(pollux.Error, match="subscriber is closed"):
        sub.messages_received
    pub.close()
    with pytest.raises(pollux.Error, match="publisher is closed"):
        pub.offer(b"x")
    pub2, sub2 = connected_pair(ctx, "u")
    ctx.close()
    assert ctx.closed
    ctx.close()  # idempotent
    for call in (lambda: pub2.offer(b"x"), lambda: sub2.poll_batch(), lambda: sub2.wait(0),
                 lambda: ctx.subscriber("v"), ctx.describe):
        with pytest.raises(pollux.Error, match="context is closed"):
            call()


def test_handles_keep_the_context_alive():
    sub = pollux.Context(shm_config(runtime_name("alive"))).subscriber("t")
    assert len(sub.poll_batch()) == 0  # the Context object is gone, its context is not


def test_context_manager_closes(ctx):
    with ctx.publisher("t") as pub:
        pass
    with pytest.raises(pollux.Error):
        pub.offer(b"x")


def test_stubs_cover_the_module():
    stub = pathlib.Path(pollux.__file__).with_name("pollux.pyi").read_text()
    for name in ("Context", "Publisher", "Subscriber", "Batch", "Message", "Error", "result_name",
                 "BACK_PRESSURED", "poll_batch", "try_claim", "read_books"):
        assert name in stub, name
    for obj in (pollux.Context, pollux.Publisher.offer, pollux.Subscriber.poll, pollux.Batch, pollux.Error):
        assert obj.__doc__
