// SharedSegments (libs/daemon/rings/shared_segments.h): what a receiver accepts of a sender's offer of
// shared memory, and what it refuses. The rings that use it are tested on daemons
// (test_data_parallel).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "libs/daemon/rings/shared_segments.h"

using namespace ravnest;
using namespace ravnest::daemon;

namespace {

std::shared_ptr<const SharedSegmentsReader> open_offer(const SharedSegmentsOffer& offer,
                                                       std::string& refusal) {
  refusal.clear();
  return SharedSegmentsReader::open(offer, refusal);
}

}  // namespace

TEST_CASE("shared segments: the receiver reads what the sender wrote, in every slot") {
  daemon::SharedSegmentsWriter writer(2, 4096);
  std::string refusal;
  auto reader = open_offer(writer.offer(), refusal);
  INFO(refusal);
  REQUIRE(reader != nullptr);
  CHECK(reader->slots() == 2);
  CHECK(reader->slot_bytes() == 4096);
  for (uint32_t slot = 0; slot < 2; ++slot) {
    std::memset(writer.slot(slot), 'a' + static_cast<int>(slot), 4096);
  }
  CHECK(reader->slot(0)[0] == 'a');
  CHECK(reader->slot(0)[4095] == 'a');
  CHECK(reader->slot(1)[0] == 'b');
  CHECK(reader->slot(1)[4095] == 'b');
  std::memset(writer.slot(1), 'z', 10);
  CHECK(reader->slot(1)[9] == 'z');
}

TEST_CASE("shared segments: the mapping outlives the sender's memory") {
  std::shared_ptr<const SharedSegmentsReader> reader;
  {
    daemon::SharedSegmentsWriter writer(1, 4096);
    std::memset(writer.slot(0), 7, 4096);
    std::string refusal;
    reader = open_offer(writer.offer(), refusal);
    REQUIRE(reader != nullptr);
  }
  CHECK(reader->slot(0)[4095] == 7);
}

TEST_CASE("shared segments: another process's offer is accepted through /proc") {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  int go_fds[2];
  REQUIRE(pipe(go_fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(pipe_fds[0]);
    close(go_fds[1]);
    daemon::SharedSegmentsWriter writer(2, 8192);
    std::memset(writer.slot(1), 42, 8192);
    const auto& offer = writer.offer();
    const std::string line = std::to_string(offer.pid) + " " + std::to_string(offer.fd) + " ";
    (void)!write(pipe_fds[1], line.data(), line.size());
    (void)!write(pipe_fds[1], offer.nonce.data(), offer.nonce.size());
    close(pipe_fds[1]);
    char done;
    (void)!read(go_fds[0], &done, 1);  // keep the memory until the parent has mapped it
    _exit(0);
  }
  close(pipe_fds[1]);
  close(go_fds[0]);
  std::string received;
  char buffer[256];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof buffer)) > 0) received.append(buffer, n);
  close(pipe_fds[0]);
  daemon::SharedSegmentsOffer offer;
  const auto first = received.find(' '), second = received.find(' ', first + 1);
  REQUIRE(second != std::string::npos);
  offer.pid = static_cast<uint32_t>(std::stoul(received.substr(0, first)));
  offer.fd = static_cast<uint32_t>(std::stoul(received.substr(first + 1, second - first - 1)));
  offer.nonce = received.substr(second + 1);
  offer.slots = 2;
  offer.slot_bytes = 8192;
  CHECK(offer.pid == static_cast<uint32_t>(child));
  std::string refusal;
  auto reader = open_offer(offer, refusal);
  INFO(refusal);
  (void)!write(go_fds[1], "x", 1);
  close(go_fds[1]);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(reader != nullptr);
  CHECK(reader->slot(1)[0] == 42);
  CHECK(reader->slot(1)[8191] == 42);  // readable after the sender exited
}

TEST_CASE("shared segments: offers that are not the sender's sealed memory are refused") {
  daemon::SharedSegmentsWriter writer(2, 4096);
  std::string refusal;

  SECTION("another nonce (the same path names another file on another host)") {
    auto offer = writer.offer();
    offer.nonce[0] ^= 1;
    CHECK(open_offer(offer, refusal) == nullptr);
    CHECK(refusal.find("nonce") != std::string::npos);
  }
  SECTION("another size") {
    auto offer = writer.offer();
    offer.slot_bytes = 8192;
    CHECK(open_offer(offer, refusal) == nullptr);
    offer = writer.offer();
    offer.slots = 1;
    CHECK(open_offer(offer, refusal) == nullptr);
  }
  SECTION("no such process or descriptor") {
    auto offer = writer.offer();
    offer.fd = 1000000;
    CHECK(open_offer(offer, refusal) == nullptr);
    CHECK(!refusal.empty());
    offer = writer.offer();
    offer.pid = 0;
    CHECK(open_offer(offer, refusal) == nullptr);
  }
  SECTION("a device or a pipe is not even opened") {
    auto offer = writer.offer();
    const int null_fd = ::open("/dev/null", O_RDONLY);
    REQUIRE(null_fd >= 0);
    offer.fd = static_cast<uint32_t>(null_fd);
    CHECK(open_offer(offer, refusal) == nullptr);
    close(null_fd);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    offer.fd = static_cast<uint32_t>(fds[0]);
    CHECK(open_offer(offer, refusal) == nullptr);
    close(fds[0]);
    close(fds[1]);
  }
  SECTION("an unsealed file of the right size and nonce") {
    char path[] = "/tmp/ravnest-shared-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    unlink(path);
    const auto& offer = writer.offer();
    REQUIRE(ftruncate(fd, 4096 + 2 * 4096) == 0);
    REQUIRE(pwrite(fd, offer.nonce.data(), offer.nonce.size(), 0) ==
            static_cast<ssize_t>(offer.nonce.size()));
    auto unsealed = offer;
    unsealed.fd = static_cast<uint32_t>(fd);
    CHECK(open_offer(unsealed, refusal) == nullptr);
    CHECK(refusal.find("sealed") != std::string::npos);
    close(fd);
  }
  SECTION("sizes beyond the limits") {
    auto offer = writer.offer();
    offer.slots = 0;
    CHECK(open_offer(offer, refusal) == nullptr);
    offer.slots = daemon::kMaxSharedSlots + 1;
    CHECK(open_offer(offer, refusal) == nullptr);
    offer.slots = 2;
    offer.slot_bytes = daemon::kMaxSharedBytes;
    CHECK(open_offer(offer, refusal) == nullptr);
    offer.slot_bytes = uint64_t{1} << 62;  // slots * slot_bytes would wrap around
    CHECK(open_offer(offer, refusal) == nullptr);
    offer = writer.offer();
    offer.nonce = "short";
    CHECK(open_offer(offer, refusal) == nullptr);
    CHECK_THROWS_AS(SharedSegmentsWriter(0, 4096), std::runtime_error);
    CHECK_THROWS_AS(SharedSegmentsWriter(2, kMaxSharedBytes), std::runtime_error);
  }
}
