// wan_relay: a TCP relay that holds every chunk for a fixed delay before forwarding it, in both
// directions: the one-way delay of a slow link, which this kernel's tc cannot add (no netem).
// scripts/wan runs one in front of each daemon.
//   wan_relay --listen HOST:PORT --to HOST:PORT --delay-ms MS
// Each chunk read is stamped on arrival and written at arrival + delay, in order, so the relay
// adds latency without limiting throughput (the rate comes from tbf on the links). Runs until
// killed. An end of stream travels like the bytes before it: once every chunk read before it
// was written, the other side's writing is shut down (a half-close, as TCP does end to end), so
// a sender that closes right after its last bytes loses none of them; the connection closes
// when both directions ended. A failure closes both of its sides at once.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <asio.hpp>

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Endpoint {
  std::string host;
  std::string port;
};

Endpoint split(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("expected HOST:PORT, got " + text);
  return {text.substr(0, colon), text.substr(colon + 1)};
}

// One direction of a connection: reads from `from`, writes to `to` `delay` later.
class Pipe : public std::enable_shared_from_this<Pipe> {
 public:
  // `close`: a failure (both sides close); `ended`: this direction's end of stream was passed on.
  Pipe(tcp::socket& from, tcp::socket& to, Clock::duration delay, std::function<void()> close,
       std::function<void()> ended)
      : from_(from), to_(to), timer_(from.get_executor()), delay_(delay), close_(std::move(close)),
        ended_(std::move(ended)) {}

  void start() { read(); }

 private:
  struct Chunk {
    Clock::time_point due;
    std::vector<char> bytes;
  };

  void read() {
    auto buffer = std::make_shared<std::vector<char>>(64 * 1024);
    auto self = shared_from_this();
    from_.async_read_some(asio::buffer(*buffer), [this, self, buffer](std::error_code ec, size_t n) {
      if (ec == asio::error::eof) {
        eof_ = true;
        if (queue_.empty() && !writing_) pass_end();
        return;
      }
      if (ec) return close_();
      buffer->resize(n);
      queue_.push_back({Clock::now() + delay_, std::move(*buffer)});
      if (queue_.size() == 1 && !writing_) schedule();
      read();
    });
  }

  void pass_end() {
    std::error_code ignored;
    to_.shutdown(tcp::socket::shutdown_send, ignored);
    ended_();
  }

  void schedule() {
    if (queue_.empty()) {
      if (eof_) pass_end();
      return;
    }
    writing_ = true;
    timer_.expires_at(queue_.front().due);
    auto self = shared_from_this();
    timer_.async_wait([this, self](std::error_code ec) {
      if (ec) return close_();
      asio::async_write(to_, asio::buffer(queue_.front().bytes),
                        [this, self](std::error_code ec, size_t) {
                          if (ec) return close_();
                          queue_.pop_front();
                          writing_ = false;
                          schedule();
                        });
    });
  }

  tcp::socket& from_;
  tcp::socket& to_;
  asio::steady_timer timer_;
  Clock::duration delay_;
  std::function<void()> close_;
  std::function<void()> ended_;
  std::deque<Chunk> queue_;
  bool writing_ = false;
  bool eof_ = false;  // the end of stream was read; passed on once the queue is written
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket client, asio::io_context& io) : client_(std::move(client)), upstream_(io) {}

  void start(const tcp::resolver::results_type& target, Clock::duration delay) {
    auto self = shared_from_this();
    asio::async_connect(upstream_, target, [this, self, delay](std::error_code ec, const tcp::endpoint&) {
      if (ec) return close();
      const asio::ip::tcp::no_delay nodelay(true);
      client_.set_option(nodelay, ec);
      upstream_.set_option(nodelay, ec);
      auto closer = [self] { self->close(); };
      auto ended = [self] {
        if (++self->ended_ == 2) self->close();
      };
      std::make_shared<Pipe>(client_, upstream_, delay, closer, ended)->start();
      std::make_shared<Pipe>(upstream_, client_, delay, closer, ended)->start();
    });
  }

  void close() {
    std::error_code ignored;
    client_.close(ignored);
    upstream_.close(ignored);
  }

 private:
  tcp::socket client_;
  tcp::socket upstream_;
  int ended_ = 0;  // directions whose end of stream was passed on
};

}  // namespace

int main(int argc, char** argv) {
  std::string listen, to;
  double delay_ms = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--listen") listen = argv[i + 1];
    else if (flag == "--to") to = argv[i + 1];
    else if (flag == "--delay-ms") delay_ms = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "wan_relay: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (listen.empty() || to.empty() || delay_ms < 0) {
    std::fprintf(stderr, "usage: wan_relay --listen HOST:PORT --to HOST:PORT --delay-ms MS\n");
    return 2;
  }
  try {
    asio::io_context io;
    const Endpoint at = split(listen), target = split(to);
    tcp::resolver resolver(io);
    const auto targets = resolver.resolve(target.host, target.port);
    tcp::acceptor acceptor(io, *resolver.resolve(at.host, at.port).begin());
    const auto delay = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(delay_ms));
    std::function<void()> accept = [&] {
      acceptor.async_accept([&](std::error_code ec, tcp::socket socket) {
        if (!ec) std::make_shared<Connection>(std::move(socket), io)->start(targets, delay);
        accept();
      });
    };
    accept();
    io.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wan_relay: %s\n", e.what());
    return 1;
  }
  return 0;
}
