#include "apps/ravnest/dashboard_server.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <asio.hpp>

#include "apps/ravnest/dashboard_page.h"
#include "apps/ravnest/dashboard_state.h"
#include "apps/ravnest/tracker_view.h"
#include "libs/base/address.h"
#include "libs/base/atomic_file.h"
#include "libs/requester/job_identity.h"

namespace ravnest::cli {

namespace {

using asio::ip::tcp;

constexpr size_t kMaxRequestBytes = 8192;

struct Response {
  int status = 200;
  std::string type = "text/plain; charset=utf-8";
  std::string body;
};

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    default: return "Internal Server Error";
  }
}

// --listen: host:port (port 0 picks a free one), the host an IP address (no name is resolved).
tcp::endpoint parse_listen(const std::string& listen) {
  std::string why;
  const auto parsed = base::Address::try_parse(listen, base::Address::PortRule::kZeroAllowed, &why);
  if (!parsed) throw std::runtime_error("--listen " + listen + ": " + why);
  asio::error_code error;
  const auto address = asio::ip::make_address(parsed->host(), error);
  if (error) throw std::runtime_error("--listen " + listen + ": not an IP address");
  return tcp::endpoint(address, parsed->port());
}

// What the page shows, gathered from the daemons; kept half a second (one poll per page).
class StateSource {
 public:
  explicit StateSource(const DashboardOptions& options)
      : options_(options),
        plan_(requester::load_plan(options.plan_dir)),
        requester_(plan_, options.secret, options.insecure) {}

  const std::string& json() {
    const auto now = std::chrono::steady_clock::now();
    if (!cached_.empty() && now - taken_ < std::chrono::milliseconds(500)) return cached_;
    const auto reports = requester_.status();
    std::vector<LossHistory> histories;
    for (const auto& r : reports) {
      // As `ravnest losses`: a parameter server's servers compute no loss, its evaluator only
      // validates.
      if (!r.reachable || !r.node.returns_model_output) continue;
      if (r.node.role == config::Role::kServer) continue;
      try {
        const auto fetched = requester_.fetch_losses(r.node.node_id);
        histories.push_back(
            parse_loss_history(r.node.cluster, fetched.losses, fetched.validation, r.node.name));
        if (r.node.role == config::Role::kEvaluator) histories.back().name = "evaluator";
      } catch (const std::exception&) {
        // A leaf that cannot say: its curve is missing, its node card says why.
      }
    }
    std::string job_path, job_text;
    try {
      job_path = requester::last_job_path(options_.plan_dir);
      job_text = base::read_file(job_path);
    } catch (const std::exception&) {
    }
    auto state = dashboard_state(plan_, reports, histories, job_path, job_text);
    if (!options_.tracker.empty()) {
      try {
        state["tracker"] = tracker_pool_state(
            tracker::fetch_pool(options_.tracker,
                                wire::make_transport_security(options_.secret, options_.insecure),
                                3),
            options_.tracker);
      } catch (const std::exception& e) {
        state["tracker"] = {{"address", options_.tracker}, {"error", e.what()}};
      }
    }
    cached_ = state.dump();
    taken_ = now;
    return cached_;
  }

 private:
  const DashboardOptions& options_;
  requester::Plan plan_;
  requester::Requester requester_;
  std::string cached_;
  std::chrono::steady_clock::time_point taken_;
};

// The request's Host header, lowercased and without its port; nullopt when it has none (a
// client that is no browser: a browser always sends one).
std::optional<std::string> host_of(const std::string& head) {
  size_t line = head.find("\r\n");
  while (line != std::string::npos && line + 2 < head.size()) {
    const size_t begin = line + 2;
    const size_t end = head.find("\r\n", begin);
    std::string field = head.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    line = end;
    const size_t colon = field.find(':');
    if (colon == std::string::npos) continue;
    std::string name = field.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name != "host") continue;
    std::string value = field.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    std::transform(value.begin(), value.end(), value.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!value.empty() && value.front() == '[') {
      const size_t close = value.find(']');
      return close == std::string::npos ? value : value.substr(1, close - 1);
    }
    const size_t port = value.rfind(':');
    return port == std::string::npos ? value : value.substr(0, port);
  }
  return std::nullopt;
}

// DNS rebinding: a page elsewhere whose name comes to resolve to this address reaches the server
// from the user's browser, which sends that name as Host. Answered: the listen address itself,
// `localhost`, and, when listening on every address, any IP address (a name is what a rebinding
// needs); a request without Host (no browser) too.
bool host_allowed(const std::string& head, const asio::ip::address& listen) {
  const auto host = host_of(head);
  if (!host) return true;
  if (*host == "localhost") return true;
  asio::error_code error;
  const auto address = asio::ip::make_address(*host, error);
  if (error) return false;
  return listen.is_unspecified() || address == listen;
}

Response route(const std::string& method, const std::string& target, StateSource& state) {
  const std::string path = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") return {405, "text/plain; charset=utf-8", "GET only\n"};
  if (path == "/" || path == "/index.html") return {200, "text/html; charset=utf-8", dashboard_page()};
  if (path == "/api/state") {
    try {
      return {200, "application/json", state.json()};
    } catch (const std::exception& e) {
      return {500, "text/plain; charset=utf-8", std::string(e.what()) + "\n"};
    }
  }
  if (path == "/favicon.ico") return {204, "text/plain", ""};
  return {404, "text/plain; charset=utf-8", "not found\n"};
}

// The bytes answering `request` (its head, up to the blank line; empty when it was too large).
std::string answer(const std::string& request, bool too_large, const asio::ip::address& listen,
                   StateSource& state) {
  Response response;
  std::string method;
  if (too_large) {
    response = {400, "text/plain; charset=utf-8", "request too large\n"};
  } else {
    std::istringstream in(request.substr(0, request.find("\r\n")));
    std::string target, version;
    in >> method >> target >> version;
    if (method.empty() || target.empty() || target.front() != '/' || version.rfind("HTTP/1.", 0) != 0) {
      response = {400, "text/plain; charset=utf-8", "not an HTTP/1.x request\n"};
    } else if (!host_allowed(request, listen)) {
      response = {403, "text/plain; charset=utf-8",
                  "the dashboard answers only its own address or localhost as Host\n"};
    } else {
      response = route(method, target, state);
    }
  }
  std::ostringstream head;
  head << "HTTP/1.1 " << response.status << ' ' << reason(response.status) << "\r\n"
       << "Content-Type: " << response.type << "\r\n"
       << "Content-Length: " << response.body.size() << "\r\n"
       << "Cache-Control: no-store\r\n"
       << "X-Content-Type-Options: nosniff\r\n"
       << "Content-Security-Policy: default-src 'self'; script-src 'unsafe-inline'; "
          "style-src 'unsafe-inline'; img-src 'self' data:\r\n"
       << "Connection: close\r\n\r\n";
  return method == "HEAD" ? head.str() : head.str() + response.body;
}

// One connection: its request read as it arrives, then the answer written, all on the server's
// event loop, so that a client that sends nothing holds nobody else. It is closed once answered,
// or 5 s after it was accepted, whichever comes first. Counted in `open` while it lives.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const asio::ip::address& listen, StateSource& state, size_t& open)
      : socket_(std::move(socket)),
        deadline_(socket_.get_executor()),
        listen_(listen),
        state_(state),
        open_(open) {
    ++open_;
  }
  ~Connection() { --open_; }

  void start() {
    deadline_.expires_after(std::chrono::seconds(5));
    deadline_.async_wait([self = shared_from_this()](const asio::error_code& error) {
      asio::error_code ignored;
      if (!error) self->socket_.close(ignored);  // too slow: nobody to answer
    });
    read();
  }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(chunk_), [self = shared_from_this()](const asio::error_code& error, size_t n) {
          if (error) return self->finish();  // closed, or closed by the deadline
          self->request_.append(self->chunk_.data(), n);
          if (self->request_.find("\r\n\r\n") != std::string::npos) return self->reply(false);
          if (self->request_.size() > kMaxRequestBytes) return self->reply(true);
          self->read();
        });
  }

  void reply(bool too_large) {
    reply_ = answer(request_, too_large, listen_, state_);
    asio::async_write(socket_, asio::buffer(reply_),
                      [self = shared_from_this()](const asio::error_code&, size_t) {
                        asio::error_code ignored;
                        self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
                        self->finish();
                      });
  }

  void finish() { deadline_.cancel(); }

  tcp::socket socket_;
  asio::steady_timer deadline_;
  const asio::ip::address listen_;
  StateSource& state_;
  size_t& open_;
  std::array<char, 2048> chunk_{};
  std::string request_;
  std::string reply_;
};

// Connections served at once; one more is closed as soon as it is accepted.
constexpr size_t kMaxConnections = 64;

}  // namespace

void run_dashboard(const DashboardOptions& options) {
  StateSource state(options);
  size_t open = 0;  // connections alive (each Connection counts itself); outlives `io`
  asio::io_context io;
  tcp::acceptor acceptor(io);
  const auto endpoint = parse_listen(options.listen);
  asio::error_code error;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(16, error);
  if (error) throw std::runtime_error("cannot listen on " + options.listen + ": " + error.message());
  const auto bound = acceptor.local_endpoint();
  if (options.log) {
    if (!bound.address().is_loopback()) {
      options.log("warning: the dashboard has no authentication: anyone who reaches " +
                  options.listen + " sees the plan, the losses and the job");
    }
    options.log("dashboard on http://" +
                (bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                         : bound.address().to_string()) +
                ":" + std::to_string(bound.port()) + "/ (Ctrl-C ends it)");
  }
  bool stopping = false;
  std::function<void()> accept_next = [&] {
    acceptor.async_accept([&](const asio::error_code& accepted, tcp::socket socket) {
      if (!accepted && open < kMaxConnections) {
        std::make_shared<Connection>(std::move(socket), bound.address(), state, open)->start();
      }
      if (!stopping) accept_next();
    });
  };
  accept_next();
  while (!(options.interrupted && options.interrupted())) {
    io.run_for(std::chrono::milliseconds(100));
    if (io.stopped()) io.restart();
  }
  stopping = true;
  acceptor.close(error);
}

}  // namespace ravnest::cli
