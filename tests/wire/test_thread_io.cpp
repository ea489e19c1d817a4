// ThreadIo's timer counts a delay from the present, however long the thread spent outside the
// event loop since it last waited (the dashboard between two HTTP requests, a command between
// two polls): KJ's own timer counted from the last wait, and a time limit fired at once.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "libs/wire/thread_io.h"

using namespace ravnest::wire;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("a delay begun after time spent outside the event loop lasts its length", "[wire][timer]") {
  auto io = ThreadIo::get();
  io->timer().afterDelay(1 * kj::MILLISECONDS).wait(io->wait_scope());  // the loop has waited once
  std::this_thread::sleep_for(std::chrono::milliseconds(600));         // then worked elsewhere

  const auto start = Clock::now();
  io->timer().afterDelay(300 * kj::MILLISECONDS).wait(io->wait_scope());
  CHECK(seconds_since(start) >= 0.29);

  // A time limit on a promise that never resolves: fires after its length, not before.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const auto limited = Clock::now();
  kj::Promise<void> never = kj::NEVER_DONE;
  CHECK_THROWS(io->timer().timeoutAfter(300 * kj::MILLISECONDS, kj::mv(never)).wait(io->wait_scope()));
  CHECK(seconds_since(limited) >= 0.29);

  // now() is the present, and never behind the loop's own reading.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto before = kj::systemPreciseMonotonicClock().now();
  CHECK(io->timer().now() >= before);
}
