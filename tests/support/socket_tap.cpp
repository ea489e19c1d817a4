#include "tests/support/socket_tap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <stdexcept>

namespace ravnest::test {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

}  // namespace

SocketTap::SocketTap(const std::vector<int>& targets) {
  for (int target : targets) {
    Relay relay;
    relay.target = target;
    relay.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    auto address = loopback(0);
    if (relay.listen_fd < 0 ||
        ::bind(relay.listen_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(relay.listen_fd, 64) != 0) {
      throw std::runtime_error("socket tap: cannot listen on 127.0.0.1");
    }
    socklen_t length = sizeof(address);
    ::getsockname(relay.listen_fd, reinterpret_cast<sockaddr*>(&address), &length);
    relay.port = ntohs(address.sin_port);
    relays_.push_back(relay);
  }
  thread_ = std::thread([this] { run(); });
}

SocketTap::~SocketTap() {
  stop_ = true;
  thread_.join();
  for (const auto& relay : relays_) ::close(relay.listen_fd);
}

std::string SocketTap::captured() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return captured_;
}

size_t SocketTap::connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return connections_;
}

void SocketTap::run() {
  std::map<int, int> other;  // each relayed socket -> the socket it forwards to
  auto close_pair = [&](int fd) {
    const int peer = other[fd];
    other.erase(fd);
    other.erase(peer);
    ::close(fd);
    ::close(peer);
  };
  while (!stop_) {
    std::vector<pollfd> fds;
    for (const auto& relay : relays_) fds.push_back({relay.listen_fd, POLLIN, 0});
    for (const auto& [fd, peer] : other) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (i < relays_.size()) {
        const int client = ::accept4(relays_[i].listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) continue;
        const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        auto address = loopback(relays_[i].target);
        if (::connect(upstream, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
          ::close(client);
          ::close(upstream);
          continue;
        }
        other[client] = upstream;
        other[upstream] = client;
        std::lock_guard<std::mutex> lock(mutex_);
        ++connections_;
        continue;
      }
      const int fd = fds[i].fd;
      if (other.count(fd) == 0) continue;  // closed with its peer in this round
      char buffer[65536];
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_pair(fd);
        continue;
      }
      if (n < 0) continue;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        captured_.append(buffer, static_cast<size_t>(n));
      }
      // Blocking: a slow reader on the other side slows this relay, which is what TCP would do.
      ssize_t sent = 0;
      while (sent < n) {
        const ssize_t w = ::send(other[fd], buffer + sent, static_cast<size_t>(n - sent),
                                 MSG_NOSIGNAL);
        if (w <= 0) break;
        sent += w;
      }
      if (sent < n) close_pair(fd);
    }
  }
  for (const auto& [fd, peer] : other) ::close(fd);
}

}  // namespace ravnest::test
