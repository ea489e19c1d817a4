// A ring link's data channel (libs/wire/data_channel.h) over a socket pair: frames of every size
// arrive whole and in order, sealed and plain, into place or in pieces; a relayable frame kept as
// it came and relayed over the next channel arrives whole there; a frame other than the one
// expected, a record changed on the way or sealed under another key, and a channel shut down
// under a blocked reader each fail with one line; `idle` runs while nothing moves and can end
// the wait.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "libs/wire/data_channel.h"

using namespace ravnest::wire;

namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, &a) == 0); }
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

const DataChannel::Idle kNoIdle = [] {};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void round_trip(const std::string& key) {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  DataChannel sender(fds[0], key, "receiver");
  DataChannel receiver(fds[1], key, "sender");
  CHECK(sender.sealed() == !key.empty());
  const std::vector<size_t> sizes = {0, 1, 64, kChannelRecordBytes, kChannelRecordBytes + 3,
                                     (size_t{1} << 20) + 5};
  std::thread send([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto data = pattern(sizes[i], static_cast<uint8_t>(i));
      for (int twice = 0; twice < 2; ++twice) {
        sender.send({7, static_cast<uint32_t>(i), static_cast<uint32_t>(twice), sizes[i]},
                    data.data(), kNoIdle);
      }
    }
  });
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto want = pattern(sizes[i], static_cast<uint8_t>(i));
    std::vector<uint8_t> into(sizes[i]);
    receiver.recv({7, static_cast<uint32_t>(i), 0, sizes[i]}, into.data(), kNoIdle);
    CHECK(into == want);
    std::vector<uint8_t> pieces(sizes[i]);
    size_t next = 0, count = 0;
    receiver.recv_pieces(
        {7, static_cast<uint32_t>(i), 1, sizes[i]},
        [&](size_t offset, const void* data, size_t n) {
          CHECK(offset == next);  // consecutive
          CHECK(n <= kChannelRecordBytes);
          if (offset + n < sizes[i]) CHECK(n % 64 == 0);
          std::memcpy(pieces.data() + offset, data, n);
          next += n;
          ++count;
        },
        kNoIdle);
    CHECK(next == sizes[i]);
    CHECK(pieces == want);
    if (sizes[i] > kChannelRecordBytes) CHECK(count > 1);
  }
  send.join();
}

}  // namespace

TEST_CASE("data channel: frames arrive whole and in order, sealed and plain", "[wire][channel]") {
  SECTION("sealed (AES-256-GCM)") { round_trip(random_bytes(kChannelKeyBytes)); }
  SECTION("plain (--insecure)") { round_trip(""); }
}

TEST_CASE("data channel: another frame than expected is an error naming both", "[wire][channel]") {
  Pair p;
  DataChannel sender(p.a, "", "receiver");
  DataChannel receiver(p.b, "", "node_1");
  uint8_t byte = 1;
  sender.send({3, 1, 0, 1}, &byte, kNoIdle);
  CHECK(error_of([&] { receiver.recv({3, 2, 0, 1}, &byte, kNoIdle); }) ==
        "data channel with node_1: expected round 3 step 2 segment 0 (1 bytes), got round 3 step "
        "1 segment 0 (1 bytes)");
}

TEST_CASE("data channel: a changed record or another key fails authentication",
          "[wire][channel]") {
  const std::string key = random_bytes(kChannelKeyBytes);
  // What the sender writes, captured, then replayed (changed or not) to a receiver.
  Pair wire_pair;
  std::vector<uint8_t> captured;
  {
    DataChannel sender(wire_pair.a, key, "receiver");
    const auto data = pattern(1000, 9);
    sender.send({1, 0, 0, data.size()}, data.data(), kNoIdle);
  }  // closes the sending end
  uint8_t buffer[4096];
  for (ssize_t n; (n = ::read(wire_pair.b, buffer, sizeof(buffer))) > 0;) {
    captured.insert(captured.end(), buffer, buffer + n);
  }
  ::close(wire_pair.b);
  REQUIRE(captured.size() == 64 + 16 + 1000 + 16);  // header record, one data record
  auto replay = [&](const std::vector<uint8_t>& bytes, const std::string& with_key) {
    Pair p;
    REQUIRE(::write(p.a, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    DataChannel receiver(p.b, with_key, "node_2");
    std::vector<uint8_t> out(1000);
    const std::string error = error_of([&] { receiver.recv({1, 0, 0, 1000}, out.data(), kNoIdle); });
    ::close(p.a);  // after the receiver's acknowledgment went in
    return error;
  };
  CHECK(replay(captured, key).empty());
  auto changed = captured;
  changed[64 + 16 + 500] ^= 0x01;
  CHECK(replay(changed, key) ==
        "data channel with node_2: a record failed authentication (not from the peer, or damaged)");
  CHECK(replay(captured, random_bytes(kChannelKeyBytes)).find("failed authentication") !=
        std::string::npos);
  // Records replayed out of order fail too: each record's nonce is its position.
  auto swapped = captured;
  std::rotate(swapped.begin(), swapped.begin() + 80, swapped.end());
  CHECK(replay(swapped, key).find("failed authentication") != std::string::npos);
}

TEST_CASE("data channel: idle runs while nothing moves; shutdown wakes a blocked reader",
          "[wire][channel]") {
  Pair p;
  DataChannel sender(p.a, "", "receiver");
  DataChannel receiver(p.b, "", "node_3", /*poll_ms=*/50);
  int idles = 0;
  uint8_t byte = 0;
  CHECK(error_of([&] {
          receiver.recv({0, 0, 0, 1}, &byte, [&] {
            if (++idles == 3) throw std::runtime_error("node_3 stopped answering");
          });
        }) == "node_3 stopped answering");
  CHECK(idles == 3);

  std::atomic<bool> woke{false};
  std::string error;
  std::thread reader([&] {
    error = error_of([&] { receiver.recv({0, 0, 0, 1}, &byte, kNoIdle); });
    woke = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(woke);
  const auto shut_at = std::chrono::steady_clock::now();
  receiver.shutdown();
  reader.join();
  CHECK(std::chrono::steady_clock::now() - shut_at < std::chrono::seconds(1));
  CHECK(error.find("data channel with node_3") == 0);
}

TEST_CASE("data channel: a peer that closes ends the read with one line", "[wire][channel]") {
  Pair p;
  DataChannel receiver(p.b, "", "node_4");
  ::close(p.a);
  uint8_t byte = 0;
  CHECK(error_of([&] { receiver.recv({0, 0, 0, 1}, &byte, kNoIdle); }) ==
        "data channel with node_4: closed by the peer");
}

TEST_CASE("data channel: the sender learns that every frame was read", "[wire][channel]") {
  for (const std::string key : {random_bytes(kChannelKeyBytes), std::string()}) {
    int fds[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    DataChannel sender(fds[0], key, "receiver", /*poll_ms=*/50);
    DataChannel receiver(fds[1], key, "sender");
    const auto data = pattern(3000, 1);
    sender.send({1, 0, 0, 3000}, data.data(), kNoIdle);
    sender.send({1, 0, 1, 3000}, data.data(), kNoIdle);
    std::vector<uint8_t> out(3000);
    receiver.recv({1, 0, 0, 3000}, out.data(), kNoIdle);
    // One of two frames read: the wait goes on (idle runs) until the caller gives up.
    int idles = 0;
    CHECK(error_of([&] {
            sender.wait_acknowledged([&] {
              if (++idles == 3) throw std::runtime_error("gave up");
            });
          }) == "gave up");
    receiver.recv({1, 0, 1, 3000}, out.data(), kNoIdle);
    CHECK(error_of([&] { sender.wait_acknowledged(kNoIdle); }).empty());
    CHECK(error_of([&] { sender.wait_acknowledged(kNoIdle); }).empty());  // nothing more to wait for
  }
}

namespace {

// Everything `send` writes to a channel's socket, captured.
std::vector<uint8_t> captured_frame(const std::string& key,
                                    const std::function<void(DataChannel&)>& send) {
  Pair p;
  std::vector<uint8_t> bytes;
  std::thread reader([&] {  // read while it writes: a frame may be more than the socket holds
    std::vector<uint8_t> buffer(65536);
    for (ssize_t n; (n = ::read(p.b, buffer.data(), buffer.size())) > 0;) {
      bytes.insert(bytes.end(), buffer.data(), buffer.data() + n);
    }
  });
  {
    DataChannel sender(p.a, key, "receiver");
    send(sender);
  }
  reader.join();
  ::close(p.b);
  return bytes;
}

}  // namespace

TEST_CASE("data channel: a relayable frame goes on sealed as it came, and arrives whole",
          "[wire][channel]") {
  // Three members a -> b -> c, each link with its own key; b keeps what a sent and relays it.
  const std::string ab_key = random_bytes(kChannelKeyBytes), bc_key = random_bytes(kChannelKeyBytes);
  int ab[2], bc[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ab) == 0);
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, bc) == 0);
  DataChannel a_out(ab[0], ab_key, "b"), b_in(ab[1], ab_key, "a");
  DataChannel b_out(bc[0], bc_key, "c"), c_in(bc[1], bc_key, "b");
  const std::vector<size_t> sizes = {0, 5, kChannelRecordBytes, 9 * kChannelRecordBytes + 7};
  std::thread a([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const auto data = pattern(sizes[i], static_cast<uint8_t>(i));
      a_out.send({4, 3, static_cast<uint32_t>(i), sizes[i]}, data.data(), kNoIdle,
                 /*relayable=*/true);
    }
  });
  std::thread b([&] {
    SealedFrame kept;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> into(sizes[i]);
      b_in.recv({4, 3, static_cast<uint32_t>(i), sizes[i]}, into.data(), kNoIdle, &kept);
      CHECK(into == pattern(sizes[i], static_cast<uint8_t>(i)));
      REQUIRE(kept.key.size() == kChannelKeyBytes);
      b_out.relay({4, 4, static_cast<uint32_t>(i), sizes[i]}, kept, kNoIdle);
    }
  });
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto want = pattern(sizes[i], static_cast<uint8_t>(i));
    std::vector<uint8_t> got(sizes[i]);
    if (i % 2 == 0) {
      c_in.recv({4, 4, static_cast<uint32_t>(i), sizes[i]}, got.data(), kNoIdle);
    } else {
      c_in.recv_pieces({4, 4, static_cast<uint32_t>(i), sizes[i]},
                       [&](size_t offset, const void* data, size_t n) {
                         std::memcpy(got.data() + offset, data, n);
                       },
                       kNoIdle);
    }
    CHECK(got == want);
  }
  a.join();
  b.join();
  CHECK(error_of([&] { a_out.wait_acknowledged(kNoIdle); }).empty());
  CHECK(error_of([&] { b_out.wait_acknowledged(kNoIdle); }).empty());
}

TEST_CASE("data channel: what is not a kept relayable frame is not relayed", "[wire][channel]") {
  const std::string key = random_bytes(kChannelKeyBytes);
  SECTION("a frame under the channel's key keeps nothing") {
    Pair p;
    DataChannel sender(p.a, key, "receiver"), receiver(p.b, key, "sender");
    const auto data = pattern(100, 1);
    sender.send({1, 0, 0, 100}, data.data(), kNoIdle);
    SealedFrame kept;
    std::vector<uint8_t> out(100);
    receiver.recv({1, 0, 0, 100}, out.data(), kNoIdle, &kept);
    CHECK(kept.key.empty());
    CHECK(error_of([&] { receiver.relay({1, 1, 0, 100}, kept, kNoIdle); })
              .find("nothing kept to relay") != std::string::npos);
  }
  SECTION("a plain channel sends a relayable frame as any other, and keeps nothing") {
    Pair p;
    DataChannel sender(p.a, "", "receiver"), receiver(p.b, "", "sender");
    const auto data = pattern(100, 2);
    sender.send({1, 0, 0, 100}, data.data(), kNoIdle, /*relayable=*/true);
    SealedFrame kept;
    std::vector<uint8_t> out(100);
    receiver.recv({1, 0, 0, 100}, out.data(), kNoIdle, &kept);
    CHECK(out == data);
    CHECK(kept.key.empty());
  }
  SECTION("a kept frame relayed as a frame of another size") {
    const auto bytes = captured_frame(key, [&](DataChannel& sender) {
      const auto data = pattern(100, 3);
      sender.send({1, 0, 0, 100}, data.data(), kNoIdle, true);
    });
    Pair p;
    REQUIRE(::write(p.a, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    DataChannel receiver(p.b, key, "sender");
    SealedFrame kept;
    std::vector<uint8_t> out(100);
    receiver.recv({1, 0, 0, 100}, out.data(), kNoIdle, &kept);
    CHECK(kept.key.size() == kChannelKeyBytes);
    Pair q;
    DataChannel next(q.a, key, "next");
    CHECK(error_of([&] { next.relay({1, 1, 0, 99}, kept, kNoIdle); })
              .find("nothing kept to relay") != std::string::npos);
  }
}

TEST_CASE("data channel: a relayable frame's records changed, reordered or under another key fail",
          "[wire][channel]") {
  const std::string key = random_bytes(kChannelKeyBytes);
  const size_t size = 2 * kChannelRecordBytes + 10;
  const auto data = pattern(size, 5);
  const auto captured = captured_frame(key, [&](DataChannel& sender) {
    sender.send({2, 1, 0, size}, data.data(), kNoIdle, /*relayable=*/true);
  });
  REQUIRE(captured.size() == 64 + 16 + size + 3 * 16);
  auto replay = [&](const std::vector<uint8_t>& bytes, const std::string& with_key) {
    Pair p;
    std::thread writer([&] {  // until all is written or the receiver closed its end
      for (size_t at = 0; at < bytes.size();) {
        const ssize_t n = ::send(p.a, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
        if (n <= 0) break;
        at += static_cast<size_t>(n);
      }
    });
    std::vector<uint8_t> out(size);
    std::string error;
    {
      DataChannel receiver(p.b, with_key, "node_5");
      SealedFrame kept;
      error = error_of([&] { receiver.recv({2, 1, 0, size}, out.data(), kNoIdle, &kept); });
    }
    writer.join();
    ::close(p.a);
    if (error.empty() && out != data) error = "wrong bytes";
    return error;
  };
  CHECK(replay(captured, key).empty());
  auto changed = captured;
  changed[80 + kChannelRecordBytes + 16 + 3] ^= 0x10;  // in the second record
  CHECK(replay(changed, key) ==
        "data channel with node_5: a record failed authentication (not from the peer, or damaged)");
  CHECK(replay(captured, random_bytes(kChannelKeyBytes)).find("failed authentication") !=
        std::string::npos);
  // The first two records swapped: each record's nonce is its place in the frame.
  auto swapped = captured;
  const size_t record = kChannelRecordBytes + 16;
  std::swap_ranges(swapped.begin() + 80, swapped.begin() + 80 + record,
                   swapped.begin() + 80 + record);
  CHECK(replay(swapped, key).find("failed authentication") != std::string::npos);
}

TEST_CASE("data channel: a header of an unknown kind, or a relayable frame on a plain channel, "
          "is refused with one line", "[wire][channel]") {
  for (const uint32_t kind : {1u, 7u}) {
    Pair p;
    uint8_t header[64] = {};
    header[0] = 3;                                        // round 3
    header[16] = 1;                                       // 1 byte
    for (int i = 0; i < 4; ++i) header[24 + i] = static_cast<uint8_t>(kind >> (8 * i));
    REQUIRE(::write(p.a, header, sizeof(header)) == static_cast<ssize_t>(sizeof(header)));
    DataChannel receiver(p.b, "", "node_6");  // plain: no frame keys
    uint8_t byte = 0;
    CHECK(error_of([&] { receiver.recv({3, 0, 0, 1}, &byte, kNoIdle); }) ==
          "data channel with node_6: a frame of kind " + std::to_string(kind) +
              " (round 3 step 0 segment 0 (1 bytes))");
  }
}
