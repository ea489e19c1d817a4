// Ring all-reduce (libs/ring/ring_allreduce.h) over the in-process ring (ring_local.h): N
// members as threads, mixed dtypes and awkward shapes, checked against a double-precision /
// exact-integer reference; bitwise agreement between members; several rounds on one transport;
// segment sizes below and above the chunk size; flow control with tiny link capacity; failures
// (a member that throws, one that vanishes, members that disagree on sizes) end every member
// with a RingError. Every multi-threaded case runs under a deadline: a hang fails the test.
// ATen before Catch: c10's logging pulls in glog, whose CHECK would otherwise replace Catch's
// CHECK (silently, when the torch PCH is not force-included first).
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "libs/ring/ring_allreduce.h"
#include "libs/ring/ring_local.h"

using namespace ravnest;
using namespace ravnest::ring;
using namespace std::chrono_literals;

namespace {

// Runs body(i) on n threads; waits at most `limit`, then aborts the ring (so blocked members
// return) and reports the hang. Returns each member's exception (null when it returned).
std::vector<std::exception_ptr> run_members(int n, LocalRing& ring,
                                            const std::function<void(int)>& body,
                                            std::chrono::milliseconds limit = 60000ms,
                                            bool* hung = nullptr) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(m);
      ++done;
      cv.notify_all();
    });
  }
  bool timed_out;
  {
    std::unique_lock<std::mutex> lock(m);
    timed_out = !cv.wait_for(lock, limit, [&] { return done == n; });
  }
  if (timed_out) ring.abort("test deadline passed");
  for (auto& t : threads) t.join();
  if (hung) *hung = timed_out;
  return errors;
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "(non-std exception)";
  }
}

bool is_ring_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const RingError&) {
    return true;
  } catch (...) {
    return false;
  }
}

struct Spec {
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  bool transposed = false;     // a non-contiguous view
  bool requires_grad = false;  // a leaf parameter
};

// The mixed set every member reduces: sizes not divisible by N, smaller than N, empty, scalar,
// one element, non-contiguous, a parameter requiring grad, integer buffers.
std::vector<Spec> mixed_specs() {
  return {
      {at::kFloat, {3, 5}},
      {at::kDouble, {13, 3}},
      {at::kFloat, {2}},
      {at::kLong, {}},  // num_batches_tracked
      {at::kFloat, {0}},
      {at::kFloat, {1}},
      {at::kInt, {4, 4}},
      {at::kFloat, {97, 31}},
      {at::kDouble, {1}},
      {at::kFloat, {6, 7}, /*transposed=*/true},
      {at::kFloat, {11, 3}, false, /*requires_grad=*/true},
      {at::kLong, {2, 0, 3}},
      {at::kHalf, {9}},
      {at::kByte, {5}},
      {at::kBFloat16, {3}},
      {at::kLong, {1001}},
  };
}

at::Tensor make_tensor(const Spec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> shape = s.shape;
  if (s.transposed) std::swap(shape[0], shape[1]);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(-8, 8), byte(0, 30);
  std::uniform_int_distribution<int64_t> big(-100000, 100000);
  const double scale = std::pow(10.0, static_cast<double>(seed % 5) - 2.0);
  const bool integral = at::isIntegralType(s.dtype, false);
  std::vector<double> reals;
  std::vector<int64_t> ints;
  for (int64_t i = 0; i < n; ++i) {
    switch (s.dtype) {
      case at::kFloat: case at::kDouble: reals.push_back(real(rng) * scale); break;
      case at::kHalf: case at::kBFloat16: reals.push_back(small(rng)); break;
      case at::kByte: ints.push_back(byte(rng)); break;
      default: ints.push_back(big(rng)); break;
    }
  }
  at::Tensor t = (integral ? at::tensor(ints, at::kLong) : at::tensor(reals, at::kDouble))
                     .to(s.dtype).view(shape);
  if (s.transposed) t = t.t();
  if (s.requires_grad) t.set_requires_grad(true);
  return t;
}

std::vector<at::Tensor> make_inputs(const std::vector<Spec>& specs, int member, uint64_t round) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < specs.size(); ++i)
    out.push_back(make_tensor(specs[i], static_cast<uint32_t>(1000003 * round + 7919 * member + i)));
  return out;
}

// Exact reference: doubles for floating types, int64 with floor division for integers.
at::Tensor reference(const std::vector<std::vector<at::Tensor>>& inputs, size_t k, int n, bool average) {
  const at::ScalarType dtype = inputs[0][k].scalar_type();
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/false);
  at::Tensor sum = at::zeros(inputs[0][k].sizes(), at::TensorOptions().dtype(integral ? at::kLong : at::kDouble));
  for (const auto& member : inputs) sum += member[k].detach().to(sum.scalar_type());
  if (!average) return sum;
  return integral ? at::div(sum, n, "floor") : sum / n;
}

at::Tensor mean_abs(const std::vector<std::vector<at::Tensor>>& inputs, size_t k, int n) {
  at::Tensor acc = at::zeros(inputs[0][k].sizes(), at::TensorOptions().dtype(at::kDouble));
  for (const auto& member : inputs) acc += member[k].detach().to(at::kDouble).abs();
  return acc / n;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  at::Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.nbytes())) == 0;
}

// Checks the members' outputs against the reference and against each other.
void check_results(const std::vector<std::vector<at::Tensor>>& inputs,
                   const std::vector<std::vector<at::Tensor>>& outputs, int n, bool average) {
  for (size_t k = 0; k < inputs[0].size(); ++k) {
    const at::ScalarType dtype = inputs[0][k].scalar_type();
    INFO("tensor " << k << " dtype " << c10::toString(dtype) << " numel " << inputs[0][k].numel());
    for (int i = 1; i < n; ++i) {
      INFO("member " << i);
      CHECK(bitwise_equal(outputs[static_cast<size_t>(i)][k], outputs[0][k]));
    }
    const at::Tensor ref = reference(inputs, k, n, average);
    const at::Tensor got = outputs[0][k].detach();
    REQUIRE(got.sizes() == ref.sizes());
    REQUIRE(got.scalar_type() == dtype);
    if (at::isIntegralType(dtype, false)) {
      CHECK(at::equal(got.to(at::kLong), ref));
    } else {
      // Relative to the magnitude of the terms (a sum near zero has no meaningful relative error).
      const double rel = (dtype == at::kFloat || dtype == at::kDouble) ? 1e-6 : 1e-2;
      at::Tensor mag = at::maximum(ref.abs(), mean_abs(inputs, k, n) * (average ? 1 : n));
      at::Tensor err = (got.to(at::kDouble) - ref).abs();
      const bool ok = got.numel() == 0 || (err <= mag * rel + 1e-300).all().item<bool>();
      if (!ok) INFO("max error " << (err - mag * rel).max().item<double>());
      CHECK(ok);
    }
  }
}

std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

// One all-reduce of `specs` on an n-member ring, checked.
void reduce_and_check(int n, const std::vector<Spec>& specs, RingAllReduceOptions options,
                      LocalRingOptions ring_options = {}, int rounds = 1) {
  ring::LocalRing ring(n, ring_options);
  std::vector<std::unique_ptr<ring::RingAllReduce>> reducers;
  for (int i = 0; i < n; ++i) reducers.push_back(std::make_unique<RingAllReduce>(ring.member(i), i, n, options));
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<at::Tensor>> inputs, outputs;
    for (int i = 0; i < n; ++i) {
      outputs.push_back(make_inputs(specs, i, static_cast<uint64_t>(r)));
      inputs.push_back(clone_all(outputs.back()));
    }
    bool hung = false;
    auto errors = run_members(n, ring, [&](int i) {
      reducers[static_cast<size_t>(i)]->run(static_cast<uint64_t>(r), outputs[static_cast<size_t>(i)]);
    }, 60000ms, &hung);
    REQUIRE_FALSE(hung);
    for (int i = 0; i < n; ++i) {
      INFO("member " << i << ": " << (errors[static_cast<size_t>(i)] ? message_of(errors[static_cast<size_t>(i)]) : ""));
      REQUIRE_FALSE(errors[static_cast<size_t>(i)]);
    }
    // Tensors keep their identity-related properties.
    for (int i = 0; i < n; ++i)
      for (size_t k = 0; k < specs.size(); ++k)
        CHECK(outputs[static_cast<size_t>(i)][k].requires_grad() == specs[k].requires_grad);
    if (n == 1) {
      for (size_t k = 0; k < specs.size(); ++k) CHECK(bitwise_equal(outputs[0][k], inputs[0][k]));
    } else {
      check_results(inputs, outputs, n, options.average);
    }
    CHECK(ring.pending_messages() == 0);
  }
}

}  // namespace

TEST_CASE("ring all-reduce: mixed dtypes and shapes, N = 1..6, averaged and summed", "[ring]") {
  const auto specs = mixed_specs();
  for (int n = 1; n <= 6; ++n) {
    for (bool average : {true, false}) {
      // 8 bytes: several segments per chunk even for tiny tensors; 1 MiB: one segment per chunk.
      for (size_t segment : {size_t{8}, size_t{100}, size_t{1} << 20}) {
        INFO("N = " << n << " average " << average << " segment_bytes " << segment);
        ring::RingAllReduceOptions options;
        options.segment_bytes = segment;
        options.average = average;
        reduce_and_check(n, specs, options);
      }
    }
  }
}

TEST_CASE("ring all-reduce: several rounds on the same transport", "[ring]") {
  for (int n : {2, 3, 5}) {
    INFO("N = " << n);
    ring::RingAllReduceOptions options;
    options.segment_bytes = 256;
    reduce_and_check(n, mixed_specs(), options, {}, /*rounds=*/5);
  }
}

TEST_CASE("ring all-reduce: one large tensor, segments much smaller than chunks, tight flow control", "[ring]") {
  const std::vector<Spec> specs = {{at::kFloat, {250007}}};
  for (int n : {2, 4, 6}) {
    INFO("N = " << n);
    ring::RingAllReduceOptions options;
    options.segment_bytes = 4096;
    ring::LocalRingOptions ring_options;
    ring_options.capacity_bytes = 1;  // one message in flight per link
    reduce_and_check(n, specs, options, ring_options, 2);
    options.segment_bytes = 64 << 20;  // larger than the whole buffer
    reduce_and_check(n, specs, options, {}, 1);
  }
}

TEST_CASE("ring all-reduce: chunks split in two down to min_segment_bytes", "[ring]") {
  // 250007 floats: chunks of ~1 MB (N = 1..4 split unevenly); the daemon's sizes, and sizes that
  // make the halving, the floor and the ceiling each decide.
  const std::vector<Spec> specs = {{at::kFloat, {250007}}, {at::kLong, {333}}, {at::kHalf, {7}}};
  for (int n : {2, 3, 4}) {
    for (auto [segment, minimum] : {std::pair<size_t, size_t>{4 << 20, 512 << 10},
                                    {100000, 4096}, {4 << 20, 8}, {64, 64}}) {
      INFO("N = " << n << " segment " << segment << " min " << minimum);
      ring::RingAllReduceOptions options;
      options.segment_bytes = segment;
      options.min_segment_bytes = minimum;
      reduce_and_check(n, specs, options, {}, 2);
    }
  }
}

TEST_CASE("ring all-reduce: a single contiguous tensor is reduced in place", "[ring]") {
  const int n = 3;
  ring::LocalRing ring(n);
  std::vector<std::unique_ptr<ring::RingAllReduce>> reducers;
  for (int i = 0; i < n; ++i) reducers.push_back(std::make_unique<RingAllReduce>(ring.member(i), i, n));
  std::vector<std::vector<at::Tensor>> tensors(n);
  std::vector<void*> pointers;
  for (int i = 0; i < n; ++i) {
    tensors[static_cast<size_t>(i)] = {at::full({10}, static_cast<float>(i + 1))};
    pointers.push_back(tensors[static_cast<size_t>(i)][0].data_ptr());
  }
  auto errors = run_members(n, ring, [&](int i) { reducers[static_cast<size_t>(i)]->run(7, tensors[static_cast<size_t>(i)]); });
  for (int i = 0; i < n; ++i) {
    REQUIRE_FALSE(errors[static_cast<size_t>(i)]);
    CHECK(tensors[static_cast<size_t>(i)][0].data_ptr() == pointers[static_cast<size_t>(i)]);
    CHECK(at::equal(tensors[static_cast<size_t>(i)][0], at::full({10}, 2.0f)));
  }
}

TEST_CASE("ring all-reduce: integer averaging is floor division of the exact sum", "[ring]") {
  const int n = 4;
  ring::LocalRing ring(n);
  std::vector<std::unique_ptr<ring::RingAllReduce>> reducers;
  for (int i = 0; i < n; ++i) reducers.push_back(std::make_unique<RingAllReduce>(ring.member(i), i, n));
  // sums: 10 -> 2, -10 -> -3, 7 -> 1, -1 -> -1, 0 -> 0
  const std::vector<std::vector<int64_t>> values = {{1, -1, 7, -1, 0}, {2, -2, 0, 0, 0}, {3, -3, 0, 0, 0}, {4, -4, 0, 0, 0}};
  std::vector<std::vector<at::Tensor>> tensors(n);
  for (int i = 0; i < n; ++i) {
    auto v = values[static_cast<size_t>(i)];
    tensors[static_cast<size_t>(i)] = {at::tensor(v, at::kLong), at::tensor(std::vector<int32_t>(v.begin(), v.end()), at::kInt)};
  }
  auto errors = run_members(n, ring, [&](int i) { reducers[static_cast<size_t>(i)]->run(0, tensors[static_cast<size_t>(i)]); });
  const std::vector<int64_t> expected = {2, -3, 1, -1, 0};
  for (int i = 0; i < n; ++i) {
    REQUIRE_FALSE(errors[static_cast<size_t>(i)]);
    CHECK(at::equal(tensors[static_cast<size_t>(i)][0], at::tensor(expected, at::kLong)));
    CHECK(at::equal(tensors[static_cast<size_t>(i)][1], at::tensor(std::vector<int32_t>(expected.begin(), expected.end()), at::kInt)));
  }
}

namespace {

// Wraps a member's transport and throws after `fail_after` receives.
class FailingTransport : public RingTransport {
 public:
  FailingTransport(RingTransport& inner, int fail_after) : inner_(inner), left_(fail_after) {}
  void send(const RingTag& tag, const void* data, size_t bytes) override { inner_.send(tag, data, bytes); }
  void recv(const RingTag& tag, void* data, size_t bytes) override {
    if (left_-- == 0) throw std::runtime_error("injected failure at " + tag.to_string());
    inner_.recv(tag, data, bytes);
  }

 private:
  RingTransport& inner_;
  std::atomic<int> left_;
};

std::vector<at::Tensor> big_input(int member) {
  return {at::full({100000}, static_cast<float>(member)), at::arange(1000, at::kLong)};
}

}  // namespace

TEST_CASE("ring all-reduce: a member that throws mid-round aborts the ring; everyone hears its name", "[ring][failure]") {
  for (int n : {2, 3, 5, 6}) {
    for (int fail_after : {0, 3}) {
      INFO("N = " << n << " failing after " << fail_after << " receives");
      const int bad = n / 2;
      ring::LocalRingOptions ring_options;
      ring_options.timeout = 10000ms;
      ring::LocalRing ring(n, ring_options);
      FailingTransport failing(ring.member(bad), fail_after);
      ring::RingAllReduceOptions options;
      options.segment_bytes = 4096;
      std::vector<std::unique_ptr<ring::RingAllReduce>> reducers;
      for (int i = 0; i < n; ++i)
        reducers.push_back(std::make_unique<RingAllReduce>(i == bad ? static_cast<RingTransport&>(failing) : ring.member(i), i, n, options));
      std::vector<std::vector<at::Tensor>> tensors;
      for (int i = 0; i < n; ++i) tensors.push_back(big_input(i));
      // The failing member reports its failure to the ring, as a node reports to its peers.
      const auto start = std::chrono::steady_clock::now();
      bool hung = false;
      auto errors = run_members(n, ring, [&](int i) {
        try {
          reducers[static_cast<size_t>(i)]->run(1, tensors[static_cast<size_t>(i)]);
        } catch (const std::exception& e) {
          if (i == bad) ring.abort(LocalRing::member_name(i) + " failed: " + e.what());
          throw;
        }
      }, 60000ms, &hung);
      const auto elapsed = std::chrono::steady_clock::now() - start;
      REQUIRE_FALSE(hung);
      CHECK(elapsed < ring_options.timeout);  // the abort, not a timeout, ended the others
      REQUIRE(errors[static_cast<size_t>(bad)]);
      for (int i = 0; i < n; ++i) {
        if (i == bad) continue;
        REQUIRE(errors[static_cast<size_t>(i)]);
        const std::string what = message_of(errors[static_cast<size_t>(i)]);
        INFO("member " << i << ": " << what);
        CHECK(is_ring_error(errors[static_cast<size_t>(i)]));
        CHECK(what.find(LocalRing::member_name(bad)) != std::string::npos);
      }
      // The ring stays aborted.
      char byte = 0;
      CHECK_THROWS_AS(ring.member(0).send({9, 0, 0}, &byte, 1), RingError);
    }
  }
}

TEST_CASE("ring all-reduce: a member that vanishes is named by the timeout, and no one hangs", "[ring][failure]") {
  for (int n : {2, 4, 6}) {
    INFO("N = " << n);
    const int gone = 1;
    ring::LocalRingOptions ring_options;
    ring_options.timeout = 300ms;
    ring::LocalRing ring(n, ring_options);
    std::vector<std::unique_ptr<ring::RingAllReduce>> reducers;
    for (int i = 0; i < n; ++i) reducers.push_back(std::make_unique<RingAllReduce>(ring.member(i), i, n));
    std::vector<std::vector<at::Tensor>> tensors;
    for (int i = 0; i < n; ++i) tensors.push_back(big_input(i));
    bool hung = false;
    auto errors = run_members(n, ring, [&](int i) {
      if (i == gone) return;  // never takes part
      reducers[static_cast<size_t>(i)]->run(0, tensors[static_cast<size_t>(i)]);
    }, 30000ms, &hung);
    REQUIRE_FALSE(hung);
    for (int i = 0; i < n; ++i) {
      if (i == gone) continue;
      REQUIRE(errors[static_cast<size_t>(i)]);
      const std::string what = message_of(errors[static_cast<size_t>(i)]);
      INFO("member " << i << ": " << what);
      CHECK(is_ring_error(errors[static_cast<size_t>(i)]));
      // Whichever member's timer fires first, the blame goes to the one that is not sending.
      CHECK(what.find(LocalRing::member_name(gone)) != std::string::npos);
    }
    CHECK(ring.aborted());
    const std::string reason = ring.abort_reason();
    INFO(reason);
    const bool blamed = reason.find(LocalRing::member_name(gone) + " is not sending") != std::string::npos ||
                        reason.find("waiting for " + LocalRing::member_name(gone) + " (") != std::string::npos;
    CHECK(blamed);
  }
}

TEST_CASE("ring all-reduce: members whose tensors differ in size fail instead of mixing data", "[ring][failure]") {
  const int n = 3;
  ring::LocalRingOptions ring_options;
  ring_options.timeout = 2000ms;
  ring::LocalRing ring(n, ring_options);
  std::vector<std::unique_ptr<ring::RingAllReduce>> reducers;
  for (int i = 0; i < n; ++i) reducers.push_back(std::make_unique<RingAllReduce>(ring.member(i), i, n));
  std::vector<std::vector<at::Tensor>> tensors;
  for (int i = 0; i < n; ++i) tensors.push_back({at::ones({i == 2 ? 31 : 30})});
  bool hung = false;
  auto errors = run_members(n, ring, [&](int i) { reducers[static_cast<size_t>(i)]->run(0, tensors[static_cast<size_t>(i)]); }, 30000ms, &hung);
  REQUIRE_FALSE(hung);
  for (int i = 0; i < n; ++i) {
    REQUIRE(errors[static_cast<size_t>(i)]);
    INFO("member " << i << ": " << message_of(errors[static_cast<size_t>(i)]));
    CHECK(is_ring_error(errors[static_cast<size_t>(i)]));
  }
}

TEST_CASE("ring all-reduce: bad arguments", "[ring]") {
  ring::LocalRing ring(2);
  CHECK_THROWS_AS(ring::RingAllReduce(ring.member(0), 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(ring::RingAllReduce(ring.member(0), 0, 0), std::invalid_argument);
  ring::RingAllReduceOptions zero;
  zero.segment_bytes = 0;
  CHECK_THROWS_AS(ring::RingAllReduce(ring.member(0), 0, 2, zero), std::invalid_argument);
  ring::RingAllReduce reducer(ring.member(0), 0, 2);
  std::vector<at::Tensor> bools = {at::ones({3}, at::kBool)};
  CHECK_THROWS_AS(reducer.run(0, bools), std::invalid_argument);
  std::vector<at::Tensor> undefined = {at::Tensor()};
  CHECK_THROWS_AS(reducer.run(0, undefined), std::invalid_argument);
  CHECK(ring.pending_messages() == 0);  // refused before sending anything
}

TEST_CASE("local ring: abort wakes a blocked receiver and sender", "[ring]") {
  ring::LocalRingOptions options;
  options.timeout = 20000ms;
  options.capacity_bytes = 4;
  ring::LocalRing ring(2, options);
  std::exception_ptr recv_error, send_error;
  std::thread receiver([&] {
    char buf[4];
    try { ring.member(0).recv({0, 0, 0}, buf, 4); } catch (...) { recv_error = std::current_exception(); }
  });
  std::thread sender([&] {
    char buf[4] = {};
    try {
      ring.member(0).send({0, 0, 0}, buf, 4);  // fills the link
      ring.member(0).send({0, 0, 1}, buf, 4);  // blocks: member 1 never receives
    } catch (...) { send_error = std::current_exception(); }
  });
  std::this_thread::sleep_for(100ms);
  ring.abort("operator stopped the job");
  receiver.join();
  sender.join();
  REQUIRE(recv_error);
  REQUIRE(send_error);
  CHECK(message_of(recv_error).find("operator stopped the job") != std::string::npos);
  CHECK(message_of(send_error).find("operator stopped the job") != std::string::npos);
}
