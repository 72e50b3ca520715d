// The metrics endpoint's HTTP server: Boost.Beast over one Asio io_context on one thread.
// Boost is already a dependency (Boost.Lockfree, Boost.CRC), Beast is header-only, and its
// asynchronous model gives what a monitoring endpoint on a trading host needs without a thread
// per client: a stalled client holds only its own socket until its timer closes it.
#include <pthread.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <list>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "api/metrics.h"
#include "core/config_values.h"

namespace pollux::detail::metrics {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
class Session;
}

// Declared so that what sessions touch (sessions) outlives the io_context, whose destruction
// destroys the sessions still pending.
struct Server::Impl {
  ServerOptions options;
  Collect collect;
  std::string url;
  std::uint16_t port = 0;
  // Open connections, oldest first (io thread only). At max_connections the oldest is closed to
  // make room: a client that holds connections open without finishing requests (slowloris) loses
  // them to newer ones, while a scrape, answered in milliseconds, is never the oldest for long.
  std::list<Session*> sessions;
  RateHistory rates;  // from the /api/snapshot requests
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::thread thread;

  void accept();
  http::response<http::string_body> answer(const http::request<http::empty_body>& req);
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, Server::Impl* srv) : stream_(std::move(s)), srv_(srv) {
    at_ = srv_->sessions.insert(srv_->sessions.end(), this);
  }
  ~Session() { srv_->sessions.erase(at_); }

  // Closed to make room for a newer connection: its pending read or write ends (aborted).
  void evict() {
    evicted_ = true;
    close();
  }
  bool evicted() const noexcept { return evicted_; }

  void read() {
    parser_.emplace();
    parser_->header_limit(8 * 1024);
    parser_->body_limit(0);  // a GET has no body: one is refused
    stream_.expires_after(std::chrono::milliseconds(srv_->options.timeout_ms));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec) {
      // Timeout, end of stream or a request the parser refused (too large, malformed): a
      // malformed one is told so once; the connection ends either way.
      if (ec != http::error::end_of_stream && ec != beast::error::timeout && ec != asio::error::operation_aborted &&
          ec != asio::error::eof && ec != asio::error::connection_reset) {
        res_ = {};
        head_ = false;
        res_.result(http::status::bad_request);
        res_.set(http::field::content_type, "text/plain; charset=utf-8");
        res_.body() = absl::StrCat("bad request: ", ec.message(), "\n");
        res_.keep_alive(false);
        write();
        return;
      }
      close();
      return;
    }
    head_ = parser_->get().method() == http::verb::head;
    res_ = srv_->answer(parser_->get());
    write();
  }

  void write() {
    if (head_) {
      const std::size_t n = res_.body().size();
      res_.body().clear();
      res_.content_length(n);  // what a GET would carry
    } else {
      res_.prepare_payload();
    }
    stream_.expires_after(std::chrono::milliseconds(srv_->options.timeout_ms));
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec || !self->res_.keep_alive()) {
        self->close();
        return;
      }
      self->read();
    });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  Server::Impl* srv_;
  beast::flat_buffer buffer_{8 * 1024};
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> res_;
  bool head_ = false;
  bool evicted_ = false;
  std::list<Session*>::iterator at_;
};

}  // namespace

void Server::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted) return;  // closing
    if (!ec) {
      std::size_t live = 0;
      Session* oldest = nullptr;
      for (Session* x : sessions) {
        if (x->evicted()) continue;
        if (oldest == nullptr) oldest = x;
        ++live;
      }
      if (live >= options.max_connections && oldest != nullptr) oldest->evict();
      std::make_shared<Session>(std::move(s), this)->read();
    }
    accept();
  });
}

http::response<http::string_body> Server::Impl::answer(const http::request<http::empty_body>& req) {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(req.keep_alive());
  res.set(http::field::server, "pollux");
  res.set(http::field::cache_control, "no-store");
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET, HEAD");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = "only GET and HEAD\n";
    return res;
  }
  const auto t = req.target();
  std::string_view target(t.data(), t.size());
  target = target.substr(0, target.find('?'));
  if (target == "/metrics") {
    const auto accept = req[http::field::accept];
    const Format f = negotiate(std::string_view(accept.data(), accept.size()));
    res.set(http::field::content_type, std::string(content_type(f)));
    res.body() = render(collect(), f);
  } else if (target == "/api/snapshot") {
    res.set(http::field::content_type, "application/json");
    res.body() = render_json(collect(), &rates);
  } else if (target == "/" || target == "/index.html") {
    res.set(http::field::content_type, "text/html; charset=utf-8");
    res.body() = std::string(page_html());
  } else {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = "not found: this endpoint serves /metrics, / and /api/snapshot\n";
  }
  return res;
}

absl::StatusOr<std::unique_ptr<Server>> Server::start(const ServerOptions& options, Collect collect) {
  std::string error;
  const core::ListenAddress where = core::parse_listen_address(options.listen, &error);
  if (!error.empty()) return absl::InvalidArgumentError(absl::StrCat("metrics endpoint: ", error));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->collect = std::move(collect);
  beast::error_code ec;
  const auto addr = asio::ip::make_address(where.host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("metrics endpoint: bad address ", where.host));
  const tcp::endpoint ep(addr, where.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("metrics endpoint: cannot listen on ", options.listen, ": ",
                                               ec.message(), " (another process on that port? choose another)"));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  impl->url = addr.is_v6() ? absl::StrCat("http://[", where.host, "]:", impl->port, "/")
                           : absl::StrCat("http://", where.host, ":", impl->port, "/");
  impl->accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    pthread_setname_np(pthread_self(), "pollux-metrics");
    raw->ioc.run();
  });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  // Close the acceptor on its own thread, then stop: sessions die with the io_context.
  asio::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->ioc.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& Server::url() const noexcept { return impl_->url; }
std::uint16_t Server::port() const noexcept { return impl_->port; }

}  // namespace pollux::detail::metrics
