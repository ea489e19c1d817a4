// CoalescingStream (the socket under kj-tls): every byte arrives, in order, whatever the sizes of
// the writes and reads; the end of the stream comes after the last byte; a failed write-out fails
// the next write. Over a real socket pair.
#include <catch2/catch.hpp>

#include <kj/async-io.h>

#include <csignal>
#include <cstdint>
#include <random>
#include <vector>

#include "libs/wire/coalescing_stream.h"

using ravnest::wire::CoalescingStream;

namespace {

std::vector<kj::byte> pattern(size_t n, uint32_t seed) {
  std::vector<kj::byte> out(n);
  std::mt19937 random(seed);
  for (auto& b : out) b = static_cast<kj::byte>(random());
  return out;
}

}  // namespace

TEST_CASE("coalescing stream: every byte in order; small and large writes and reads",
          "[wire][coalescing]") {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  CoalescingStream writer(kj::mv(pipe.ends[0]));
  CoalescingStream reader(kj::mv(pipe.ends[1]));

  // Sizes around the buffers' (256 KiB written, 128 KiB read) and TLS-record-like ones.
  std::mt19937 random(7);
  std::vector<size_t> sizes = {1, 5, 8192, 16406, 262144, 262145, 1 << 20, 3, 0, 131072};
  for (int i = 0; i < 200; ++i) sizes.push_back(random() % 40000);
  size_t total = 0;
  for (auto s : sizes) total += s;
  const auto data = pattern(total, 1);

  auto written = kj::evalLater([&]() -> kj::Promise<void> {
    kj::Promise<void> chain = kj::READY_NOW;
    size_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t s = sizes[i];
      const kj::byte* p = data.data() + at;
      at += s;
      if (i % 3 == 2 && s > 1) {  // some as two pieces
        chain = chain.then([&writer, p, s]() {
          auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(
              {kj::ArrayPtr<const kj::byte>(p, s / 2), kj::ArrayPtr<const kj::byte>(p + s / 2, s - s / 2)});
          auto view = pieces.asPtr();
          return writer.write(view).attach(kj::mv(pieces));
        });
      } else {
        chain = chain.then([&writer, p, s]() { return writer.write(p, s); });
      }
    }
    return chain.then([&writer]() { writer.shutdownWrite(); });
  }).eagerlyEvaluate(nullptr);  // runs while the reads below wait

  std::vector<kj::byte> got(total + 10);
  size_t have = 0;
  std::mt19937 reads(3);
  while (true) {
    const size_t max = 1 + reads() % (reads() % 2 ? 300000 : 9000);
    const size_t min = 1 + reads() % max;
    const size_t room = std::min(max, got.size() - have);
    const size_t n = reader.tryRead(got.data() + have, std::min(min, room), room).wait(io.waitScope);
    have += n;
    if (n < std::min(min, room) || have == got.size()) break;  // the end of the stream
  }
  written.wait(io.waitScope);
  REQUIRE(have == total);
  got.resize(have);
  CHECK(got == data);
}

TEST_CASE("coalescing stream: a write-out that fails fails the next write", "[wire][coalescing]") {
  std::signal(SIGPIPE, SIG_IGN);  // as ravnestd does: a write to a closed socket fails instead
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  CoalescingStream writer(kj::mv(pipe.ends[0]));
  pipe.ends[1] = nullptr;  // the peer is gone
  const auto data = pattern(4096, 2);
  bool failed = false;
  for (int i = 0; i < 100 && !failed; ++i) {
    writer.write(data.data(), data.size())
        .then([]() {}, [&failed](kj::Exception&&) { failed = true; })
        .wait(io.waitScope);
    io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);  // write-outs run
  }
  CHECK(failed);
}
