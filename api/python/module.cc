// The `pollux` Python module (docs/PYTHON.md): Context, Publisher, Subscriber on the public API.
//
// GIL policy: every call that can wait or does transport work (poll, poll_batch, wait,
// service, close, Context creation) runs with the GIL released; offer/try_claim/commit keep it
// (a copy into the log, shorter than a release/acquire pair). A Python handler is never called
// from inside the library's poll: poll gathers the messages into a per-subscriber buffer with
// the GIL released, then calls the handler for each with the GIL held.
//
// Views: payloads are copied once, into a Storage. Python sees it through memoryviews whose
// owner keeps the Storage alive, and a Storage is reused only when nothing references it any
// more, so a view held past the next poll still points at valid, unchanged memory.
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pollux/context.h"
#include "pollux/publisher.h"
#include "pollux/subscriber.h"
#include "pollux/types.h"

namespace py = pybind11;

namespace pollux::python {
namespace {

#include "feed_source.h"  // kFeedSource: the pure-Python pollux.feed (feed.py), embedded

// pollux.Error: every absl::Status the library returns, and misuse (a closed handle).
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The one place a Status becomes an exception: its message names file:line and key for
// configuration errors, so it is passed on unchanged.
[[noreturn]] void raise(const absl::Status& s) { throw Error(std::string(s.message())); }

template <typename T>
T value_or_raise(absl::StatusOr<T> v) {
  if (!v.ok()) raise(v.status());
  return std::move(*v);
}

// Shared by a Context and every handle it opened. Handles keep it (and so the C++ Context)
// alive, so `Context(cfg).subscriber("t")` works without keeping the Context object. `mu`
// orders close() after the calls in flight on other threads: a handle's call holds it shared
// for the duration of the library call, close() takes it exclusively (both without the GIL).
struct ContextState {
  std::unique_ptr<Context> ctx;
  std::shared_mutex mu;
};

// Holds ContextState::mu shared for one call on a handle; raises when the handle or its
// context is closed.
class Use {
 public:
  Use(ContextState& st, bool handle_closed, const char* what) : lock_(st.mu) {
    if (handle_closed) throw Error(std::string(what) + " is closed");
    if (st.ctx == nullptr) throw Error(std::string(what) + ": its context is closed");
  }

 private:
  std::shared_lock<std::shared_mutex> lock_;
};

// One thread at a time per handle (the C++ handles are single-threaded); a second Python
// thread entering while the first runs without the GIL gets an error instead of a data race.
class Exclusive {
 public:
  Exclusive(std::atomic<bool>& busy, const char* what) : busy_(busy) {
    if (busy_.exchange(true, std::memory_order_acquire)) {
      throw Error(std::string(what) +
                  " is in use by another thread, or re-entered from its own handler (handles are single-threaded)");
    }
  }
  ~Exclusive() { busy_.store(false, std::memory_order_release); }
  Exclusive(const Exclusive&) = delete;
  Exclusive& operator=(const Exclusive&) = delete;

 private:
  std::atomic<bool>& busy_;
};

// ---- received messages ---------------------------------------------------------------------------

// Messages of one poll, copied out of the transport: payload bytes back to back, and one
// entry per message in each column.
struct Storage {
  std::vector<std::byte> data;
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint32_t> lengths;
  std::vector<std::uint64_t> sequences;
  std::vector<std::uint32_t> sessions;
  std::vector<std::int64_t> publisher_ns;
  std::uint32_t stream_id = 0;

  std::size_t size() const noexcept { return lengths.size(); }
  void clear() noexcept {
    data.clear();
    offsets.clear();
    lengths.clear();
    sequences.clear();
    sessions.clear();
    publisher_ns.clear();
  }
  void add(const Message& m) {
    offsets.push_back(data.size());
    lengths.push_back(static_cast<std::uint32_t>(m.payload.size()));
    sequences.push_back(m.sequence);
    sessions.push_back(m.session_id);
    publisher_ns.push_back(m.publisher_ns);
    data.insert(data.end(), m.payload.begin(), m.payload.end());
  }
  // Messages [from, size()) into `out` (which is cleared), offsets rebased.
  void copy_tail(std::size_t from, Storage& out) const {
    out.clear();
    out.stream_id = stream_id;
    for (std::size_t i = from; i < size(); ++i) {
      const std::byte* p = data.data() + offsets[i];
      out.add(Message{{p, lengths[i]}, stream_id, sessions[i], sequences[i], publisher_ns[i], nullptr});
    }
  }
};

// The buffer-protocol owner of one column of a Storage (Python: pollux._Column). A memoryview
// of it holds a reference to it, and it holds the Storage.
struct Column {
  enum Kind { kData, kOffsets, kLengths, kSequences, kSessions, kPublisherNs };
  std::shared_ptr<Storage> s;
  Kind kind;

  py::buffer_info info() const {
    auto col = [](const auto& v) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      return py::buffer_info(const_cast<T*>(v.data()), static_cast<py::ssize_t>(sizeof(T)),
                             py::format_descriptor<T>::format(), 1, {static_cast<py::ssize_t>(v.size())},
                             {static_cast<py::ssize_t>(sizeof(T))}, /*readonly=*/true);
    };
    switch (kind) {
      case kData:
        return py::buffer_info(const_cast<std::byte*>(s->data.data()), 1, "B", 1,
                               {static_cast<py::ssize_t>(s->data.size())}, {1}, true);
      case kOffsets:
        return col(s->offsets);
      case kLengths:
        return col(s->lengths);
      case kSequences:
        return col(s->sequences);
      case kSessions:
        return col(s->sessions);
      case kPublisherNs:
        break;
    }
    return col(s->publisher_ns);
  }
};

py::memoryview column_view(const std::shared_ptr<Storage>& s, Column::Kind k) {
  return py::memoryview(py::cast(Column{s, k}));
}

// One message handed to poll()'s handler.
struct ReceivedMessage {
  py::object payload;  // memoryview
  std::uint64_t sequence;
  std::uint32_t session_id;
  std::uint32_t stream_id;
  std::int64_t publisher_ns;
};

// What poll_batch() returns: the messages of one poll as columns.
class Batch {
 public:
  explicit Batch(std::shared_ptr<Storage> s) : s_(std::move(s)), data_(column_view(s_, Column::kData)) {}
  std::size_t size() const noexcept { return s_->size(); }
  py::object payload(std::size_t i) const {
    const auto off = static_cast<py::ssize_t>(s_->offsets[i]);
    return data_[py::slice(off, off + static_cast<py::ssize_t>(s_->lengths[i]), 1)];
  }
  py::object at(py::ssize_t i) const {
    const auto n = static_cast<py::ssize_t>(size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) throw py::index_error("batch index out of range");
    return payload(static_cast<std::size_t>(i));
  }
  ReceivedMessage message(std::size_t i) const {
    return ReceivedMessage{payload(i), s_->sequences[i], s_->sessions[i], s_->stream_id, s_->publisher_ns[i]};
  }
  const py::memoryview& data() const { return data_; }
  py::memoryview column(Column::Kind k) const { return column_view(s_, k); }

 private:
  std::shared_ptr<Storage> s_;
  py::memoryview data_;
};

// ---- handles -----------------------------------------------------------------------------------

// What a Publisher and a Subscriber handle share: the C++ handle, its context's state, and the
// checks every call makes.
template <typename T>
class Handle {
 public:
  Handle(std::shared_ptr<ContextState> st, T h, const char* what)
      : st_(std::move(st)), h_(std::move(h)), what_(what), topic_(h_.topic()), stream_id_(h_.stream_id()) {}

  // f(handle) while the handle and its context are open (else raises).
  template <typename F>
  auto read(F f) {
    Use use(*st_, closed_, what_);
    return f(h_);
  }
  const std::string& topic() const { return topic_; }
  std::uint32_t stream_id() const { return stream_id_; }

 protected:
  std::shared_ptr<ContextState> st_;  // before h_: the C++ handle is destroyed first
  T h_;
  const char* what_;  // "publisher" | "subscriber", for error messages
  std::string topic_;
  std::uint32_t stream_id_;
  bool closed_ = false;
  std::atomic<bool> busy_{false};
};

class SubscriberHandle : public Handle<Subscriber> {
 public:
  SubscriberHandle(std::shared_ptr<ContextState> st, Subscriber sub)
      : Handle(std::move(st), std::move(sub), "subscriber") {}

  // Messages delivered to the handler. A handler exception stops the delivery; the messages
  // after it stay pending and come first from the next poll()/poll_batch().
  std::size_t poll(const py::object& handler, int limit) {
    Exclusive ex(busy_, "subscriber");
    std::shared_ptr<Storage> s;
    std::size_t from = 0;
    if (pending_ != nullptr) {
      s = std::move(pending_);
      from = pending_at_;
    } else {
      s = gather(limit);
    }
    Batch b(s);
    for (std::size_t i = from; i < b.size(); ++i) {
      try {
        handler(b.message(i));
      } catch (...) {
        if (i + 1 < b.size()) {
          pending_ = s;
          pending_at_ = i + 1;
        }
        throw;
      }
    }
    return b.size() - from;
  }

  Batch poll_batch(int limit) {
    Exclusive ex(busy_, "subscriber");
    if (pending_ != nullptr) {
      auto s = std::move(pending_);
      if (pending_at_ == 0) return Batch(std::move(s));
      auto rest = acquire();
      s->copy_tail(pending_at_, *rest);
      return Batch(std::move(rest));
    }
    return Batch(gather(limit));
  }

  bool wait(std::int64_t timeout_us) {
    Exclusive ex(busy_, "subscriber");
    // Slices of at most 100 ms, so Ctrl-C (a pending signal) is seen and ctx.close() from
    // another thread is not held up for a long timeout.
    constexpr std::int64_t kSliceUs = 100'000;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_us);
    for (;;) {
      std::int64_t slice = kSliceUs;
      if (timeout_us >= 0) {
        const auto left =
            std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now()).count();
        slice = std::max<std::int64_t>(0, std::min(left, kSliceUs));
      }
      bool woken;
      {
        py::gil_scoped_release nogil;
        Use use(*st_, closed_, "subscriber");
        woken = h_.wait(slice);
      }
      if (woken) return true;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (timeout_us >= 0 && std::chrono::steady_clock::now() >= deadline) return false;
    }
  }

  void close() {
    Exclusive ex(busy_, "subscriber");
    py::gil_scoped_release nogil;
    std::shared_lock lock(st_->mu);
    h_.close();
    closed_ = true;
    pending_.reset();
  }

 private:
  // A Storage nothing else references (no Batch, view or pending tail): reused, so a steady
  // poll loop alternates between two without allocating.
  std::shared_ptr<Storage> acquire() {
    for (auto& s : pool_) {
      if (s.use_count() == 1) {
        s->clear();
        return s;
      }
    }
    auto s = std::make_shared<Storage>();
    s->stream_id = stream_id_;
    if (pool_.size() < kPoolMax) pool_.push_back(s);
    return s;
  }

  // One library poll into a fresh Storage, without the GIL.
  std::shared_ptr<Storage> gather(int limit) {
    auto s = acquire();
    py::gil_scoped_release nogil;
    Use use(*st_, closed_, "subscriber");
    Storage* out = s.get();
    (void)h_.poll([out](const Message& m) { out->add(m); }, limit);
    return s;
  }

  static constexpr std::size_t kPoolMax = 4;
  std::vector<std::shared_ptr<Storage>> pool_;
  std::shared_ptr<Storage> pending_;
  std::size_t pending_at_ = 0;
};

// A Python buffer held for one call: any C-contiguous bytes-like object.
class ReadBuffer {
 public:
  explicit ReadBuffer(const py::object& o) {
    if (PyObject_GetBuffer(o.ptr(), &view_, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  }
  ~ReadBuffer() { PyBuffer_Release(&view_); }
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  const void* data() const { return view_.buf; }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

class PublisherHandle : public Handle<Publisher> {
 public:
  PublisherHandle(std::shared_ptr<ContextState> st, Publisher pub)
      : Handle(std::move(st), std::move(pub), "publisher") {}

  std::int64_t offer(const py::object& payload) {
    Exclusive ex(busy_, "publisher");
    ReadBuffer b(payload);
    Use use(*st_, closed_, "publisher");
    no_open_claim();
    return h_.offer(b.data(), b.size());
  }

  // A writable memoryview of n bytes, or None when back-pressured or not connected.
  py::object try_claim(std::size_t n) {
    Exclusive ex(busy_, "publisher");
    Use use(*st_, closed_, "publisher");
    no_open_claim();
    const std::int64_t r = h_.claim(n, claim_);
    if (r == kBackPressured || r == kNotConnected) return py::none();
    if (r < 0) throw Error("try_claim(" + std::to_string(n) + "): " + std::string(result_name(r)));
    const auto buf = claim_.buffer();
    claim_view_ = py::memoryview::from_memory(buf.data(), static_cast<py::ssize_t>(buf.size()), false);
    return claim_view_;
  }

  std::int64_t commit() {
    Exclusive ex(busy_, "publisher");
    Use use(*st_, closed_, "publisher");
    end_claim();
    return h_.commit(claim_);
  }

  void abort() {
    Exclusive ex(busy_, "publisher");
    Use use(*st_, closed_, "publisher");
    end_claim();
    h_.abort(claim_);
  }

  int service() {
    Exclusive ex(busy_, "publisher");
    py::gil_scoped_release nogil;
    Use use(*st_, closed_, "publisher");
    return h_.service();
  }

  void close() {
    Exclusive ex(busy_, "publisher");
    if (!claim_view_.is_none()) {
      end_claim();
      h_.abort(claim_);
    }
    py::gil_scoped_release nogil;
    std::shared_lock lock(st_->mu);
    h_.close();  // lingers for the subscribers where the transport does
    closed_ = true;
  }

 private:
  void no_open_claim() const {
    if (!claim_view_.is_none()) throw Error("publisher: a claim is open (commit() or abort() it first)");
  }
  // Releases the claim's memoryview, so using it after commit/abort raises ValueError instead
  // of writing into a published frame. (Views the caller derived from it are not tracked.)
  void end_claim() {
    if (claim_view_.is_none()) throw Error("publisher: no open claim (try_claim() first)");
    py::object v = std::move(claim_view_);
    claim_view_ = py::none();
    try {
      v.attr("release")();
    } catch (py::error_already_set&) {
      // BufferError: the caller still holds an export of it; nothing more to revoke.
    }
  }

  Claim claim_;
  py::object claim_view_ = py::none();
};

class ContextHandle {
 public:
  explicit ContextHandle(const py::object& config, const std::string& source_name) {
    bool is_path = py::isinstance(config, py::module_::import("os").attr("PathLike"));
    std::string text = py::str(is_path ? py::module_::import("os").attr("fspath")(config) : config);
    if (!is_path && !text.empty()) {
      // A string is a path when such a file exists or it looks like no TOML (no newline, no
      // '='): then a missing file is reported as such, not as a TOML syntax error.
      std::error_code ec;
      is_path = std::filesystem::exists(text, ec) || text.find_first_of("\n=") == std::string::npos;
    }
    absl::StatusOr<std::unique_ptr<Context>> c;
    {
      py::gil_scoped_release nogil;
      c = is_path ? Context::from_file(text) : Context::from_string(text, source_name);
    }
    st_ = std::make_shared<ContextState>();
    st_->ctx = value_or_raise(std::move(c));
  }

  // Handles hold atomics and so cannot move: Python owns them through a unique_ptr.
  std::unique_ptr<PublisherHandle> publisher(const std::string& topic) {
    Use use(*st_, false, "context");
    return std::make_unique<PublisherHandle>(st_, value_or_raise(st_->ctx->publisher(topic)));
  }
  std::unique_ptr<SubscriberHandle> subscriber(const std::string& topic) {
    Use use(*st_, false, "context");
    return std::make_unique<SubscriberHandle>(st_, value_or_raise(st_->ctx->subscriber(topic)));
  }
  template <typename F>
  auto read(F f) {
    Use use(*st_, false, "context");
    return f(*st_->ctx);
  }
  // Stops the pollers and closes every handle; waits for calls in flight on other threads.
  void close() {
    std::unique_ptr<Context> c;
    py::gil_scoped_release nogil;
    std::unique_lock lock(st_->mu);
    c = std::move(st_->ctx);
    c.reset();
  }
  bool closed() const { return st_->ctx == nullptr; }

 private:
  std::shared_ptr<ContextState> st_;
};

// A read of the C++ object behind handle H (Publisher, Subscriber, Context) through H::read,
// which raises once the handle or its context is closed.
template <typename H, typename T, typename R>
auto reader(R (T::*get)() const) {
  return [get](H& h) { return h.read([get](T& x) { return (x.*get)(); }); };
}
template <typename H, typename T, typename R>
auto reader(R (T::*get)() const noexcept) {
  return [get](H& h) { return h.read([get](T& x) { return (x.*get)(); }); };
}

// `with handle:` closes it at the end of the block.
template <typename H>
void closes_on_exit(py::class_<H>& cls) {
  cls.def(
         "__enter__", [](py::object self) { return self; }, "Returns the handle itself.")
      .def(
          "__exit__", [](H& h, py::args) { h.close(); }, "Closes the handle.");
}

}  // namespace
}  // namespace pollux::python

PYBIND11_MODULE(pollux, m) {
  using namespace pollux;
  using namespace pollux::python;
  m.doc() =
      "Pollux: polling-mode publish/subscribe over shared memory, UDP and RDMA (docs/PYTHON.md).\n\n"
      "    ctx = pollux.Context('app.toml')\n"
      "    sub = ctx.subscriber('quotes')\n"
      "    n = sub.poll(lambda msg: print(msg.sequence, bytes(msg.payload)), 256)\n";
  m.attr("__version__") = POLLUX_PROJECT_VERSION;

  py::register_exception<Error>(m, "Error", PyExc_RuntimeError).attr("__doc__") =
      "A Pollux error: a failed control call (the library's message: file:line and key for "
      "configuration errors) or the use of a closed handle. A subclass of RuntimeError.";

  m.attr("BACK_PRESSURED") = kBackPressured;
  m.attr("NOT_CONNECTED") = kNotConnected;
  m.attr("CLOSED") = kClosed;
  m.attr("MESSAGE_TOO_LARGE") = kMessageTooLarge;
  m.def(
      "result_name", [](std::int64_t r) { return std::string(result_name(r)); }, py::arg("result"),
      "Name of an offer()/commit() result: 'ok' for a position (>= 0), else e.g. 'back-pressured'.");

  py::class_<Column>(m, "_Column", py::buffer_protocol(),
                     "Owner of one column of a received batch (what its memoryviews keep alive).")
      .def_buffer([](Column& c) { return c.info(); });

  py::class_<ReceivedMessage>(m, "Message", "A message handed to Subscriber.poll()'s handler.")
      .def_readonly("payload", &ReceivedMessage::payload, "The payload: a read-only memoryview of bytes.")
      .def_readonly("sequence", &ReceivedMessage::sequence,
                    "Sequence in its publisher session: +1 per message, from 1.")
      .def_readonly("session_id", &ReceivedMessage::session_id, "The publisher incarnation that sent it.")
      .def_readonly("stream_id", &ReceivedMessage::stream_id, "The stream (topic) id.")
      .def_readonly("publisher_ns", &ReceivedMessage::publisher_ns,
                    "pollux::now_ns() of the publisher's host at offer (0 when the stream does not stamp).")
      .def("__repr__", [](const ReceivedMessage& msg) {
        return "<pollux.Message sequence=" + std::to_string(msg.sequence) +
               " length=" + std::to_string(py::len(msg.payload)) + ">";
      });

  py::class_<Batch>(m, "Batch",
                    "The messages of one poll_batch(). Its views are valid until the next poll()/poll_batch() "
                    "of the subscriber (a buffer is reused only once no view of it is referenced).")
      .def("__len__", &Batch::size, "Number of messages.")
      .def("__getitem__", &Batch::at, py::arg("index"), "Payload of message `index`: a read-only memoryview.")
      .def(
          "__iter__",
          [](const Batch& b) {
            py::list out(b.size());
            for (std::size_t i = 0; i < b.size(); ++i) out[i] = b.payload(i);
            return py::iter(out);
          },
          "Iterates over the payloads (memoryviews).")
      .def(
          "message", [](const Batch& b, py::ssize_t i) { return b.message(static_cast<std::size_t>(i)); },
          py::arg("index"), "Message `index` with its sequence and session.")
      .def_property_readonly("data", &Batch::data, "Every payload back to back: one memoryview of bytes.")
      .def_property_readonly(
          "offsets", [](const Batch& b) { return b.column(Column::kOffsets); },
          "Start of each payload in .data: memoryview of uint64 (format 'Q').")
      .def_property_readonly(
          "lengths", [](const Batch& b) { return b.column(Column::kLengths); },
          "Length of each payload: memoryview of uint32 (format 'I').")
      .def_property_readonly(
          "sequences", [](const Batch& b) { return b.column(Column::kSequences); },
          "Sequence of each message: memoryview of uint64 (format 'Q').")
      .def_property_readonly(
          "session_ids", [](const Batch& b) { return b.column(Column::kSessions); },
          "Publisher session of each message: memoryview of uint32 (format 'I').")
      .def_property_readonly(
          "publisher_ns", [](const Batch& b) { return b.column(Column::kPublisherNs); },
          "Publisher timestamp of each message: memoryview of int64 (format 'q').");

  py::class_<PublisherHandle> publisher_cls(m, "Publisher", "One thread's handle on a stream (Context.publisher()).");
  closes_on_exit(publisher_cls);
  publisher_cls
      .def("offer", &PublisherHandle::offer, py::arg("payload"),
           "Copies a bytes-like payload into the stream. Returns its position (>= 0) or BACK_PRESSURED, "
           "NOT_CONNECTED, CLOSED, MESSAGE_TOO_LARGE. Never blocks (runs with the GIL held).")
      .def("try_claim", &PublisherHandle::try_claim, py::arg("length"),
           "Reserves `length` bytes in place: a writable memoryview to fill, then commit() or abort(). "
           "Returns None when back-pressured or not connected (retry); raises pollux.Error when the "
           "message is too large or the stream closed.")
      .def("commit", &PublisherHandle::commit, "Publishes the open claim; returns its position or a result code.")
      .def("abort", &PublisherHandle::abort, "Drops the open claim.")
      .def("service", &PublisherHandle::service,
           "Inline mode: runs the publisher's transport duties (connect, heartbeats, repairs); call it "
           "when there is nothing to offer. Returns work done (GIL released).")
      .def_property_readonly("is_connected", reader<PublisherHandle>(&Publisher::is_connected),
                             "True when at least one subscriber can receive.")
      .def_property_readonly("max_payload", reader<PublisherHandle>(&Publisher::max_payload),
                             "Largest payload offer() accepts.")
      .def_property_readonly("stream_id", &PublisherHandle::stream_id, "The stream id.")
      .def_property_readonly("topic", &PublisherHandle::topic, "The topic.")
      .def("close", &PublisherHandle::close, "Flushes and releases the stream; further use raises pollux.Error.");

  py::class_<SubscriberHandle> subscriber_cls(m, "Subscriber",
                                              "One thread's handle on a stream (Context.subscriber()).");
  closes_on_exit(subscriber_cls);
  subscriber_cls
      .def("poll", &SubscriberHandle::poll, py::arg("handler"), py::arg("limit") = 256,
           "Polls up to `limit` messages (GIL released), then calls handler(msg: Message) for each with "
           "the GIL held. Returns the number handled. A handler exception propagates; the messages after "
           "it are delivered first by the next poll.")
      .def("poll_batch", &SubscriberHandle::poll_batch, py::arg("limit") = 4096,
           "Polls up to `limit` messages (GIL released) and returns them as a Batch.")
      .def("wait", &SubscriberHandle::wait, py::arg("timeout_us") = -1,
           "Blocks (GIL released) until poll would find something or `timeout_us` passes (< 0: no "
           "limit). True when woken by data (spurious wake-ups possible), False on timeout.")
      .def_property_readonly("messages_received", reader<SubscriberHandle>(&Subscriber::messages_received),
                             "Messages received since creation.")
      .def_property_readonly("messages_lost", reader<SubscriberHandle>(&Subscriber::messages_lost),
                             "Messages reported lost (gaps).")
      .def_property_readonly("gaps_reported", reader<SubscriberHandle>(&Subscriber::gaps_reported),
                             "Number of gap notifications.")
      .def_property_readonly("is_connected", reader<SubscriberHandle>(&Subscriber::is_connected),
                             "True while a publisher is attached and the stream has not ended.")
      .def_property_readonly("stream_id", &SubscriberHandle::stream_id, "The stream id.")
      .def_property_readonly("topic", &SubscriberHandle::topic, "The topic.")
      .def("close", &SubscriberHandle::close, "Releases the stream; further use raises pollux.Error.");

  py::class_<ContextHandle> context_cls(
      m, "Context",
      "One configured Pollux instance. `config` is a TOML file (str or os.PathLike) or TOML "
      "text: a str is read as a path when such a file exists or when it holds neither a "
      "newline nor '='; '' is the all-defaults configuration. Errors raise pollux.Error "
      "naming file:line and key.");
  closes_on_exit(context_cls);
  context_cls
      .def(py::init<const py::object&, const std::string&>(), py::arg("config"), py::arg("source_name") = "<string>",
           "Loads and validates the configuration and starts the pollers (GIL released).")
      .def("publisher", &ContextHandle::publisher, py::arg("topic"), "Opens a Publisher on `topic`.")
      .def("subscriber", &ContextHandle::subscriber, py::arg("topic"), "Opens a Subscriber on `topic`.")
      .def(
          "stream_id",
          [](ContextHandle& c, const std::string& t) { return c.read([&](Context& x) { return x.stream_id(t); }); },
          py::arg("topic"), "The stream id of `topic` ([[streams]] id, else derived from the name).")
      .def("describe", reader<ContextHandle>(&Context::describe), "What this context runs, one fact per line.")
      .def("effective_config", reader<ContextHandle>(&Context::effective_config),
           "The effective configuration as TOML.")
      .def("counters_path", reader<ContextHandle>(&Context::counters_path),
           "Path of the shared-memory counters file ('' when runtime.counters = false).")
      .def("close", &ContextHandle::close,
           "Stops the pollers and closes every publisher and subscriber of this context (their use then "
           "raises pollux.Error). Idempotent.")
      .def_property_readonly("closed", &ContextHandle::closed, "True after close().");

  // pollux.feed: pure Python, compiled into the module so one file is the whole package.
  py::module_ types = py::module_::import("types");
  py::module_ feed = types.attr("ModuleType")("pollux.feed");
  py::exec(kFeedSource, feed.attr("__dict__"));
  m.attr("feed") = feed;
  py::module_::import("sys").attr("modules")["pollux.feed"] = feed;
}
