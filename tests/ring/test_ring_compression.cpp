// The ring all-reduce with compressed segments (RingCompression; libs/ring/segment_codec.h) over
// the in-process ring: members agree bit for bit; the error of one run stays within what the
// codec's encodings can lose; integer tensors stay exact; the bytes sent are the codec's; and
// error feedback makes the average over many runs converge to the exact average (each stream
// with its own residuals).
// ATen before Catch: c10's logging pulls in glog, whose CHECK would otherwise replace Catch's.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "libs/ring/ring_allreduce.h"
#include "libs/ring/ring_local.h"
#include "libs/ring/segment_codec.h"

using namespace ravnest;
using namespace ravnest::ring;
using ravnest::wire::TensorCodec;

namespace {

// Counts what a member sends.
class CountingTransport final : public RingTransport {
 public:
  explicit CountingTransport(RingTransport& inner) : inner_(inner) {}
  void send(const RingTag& tag, const void* data, size_t bytes) override {
    sent += bytes;
    inner_.send(tag, data, bytes);
  }
  void recv(const RingTag& tag, void* data, size_t bytes) override {
    inner_.recv(tag, data, bytes);
  }
  void flush() override { inner_.flush(); }
  std::atomic<uint64_t> sent{0};

 private:
  RingTransport& inner_;
};

struct Ring {
  Ring(int n, size_t segment_bytes) : local(n) {
    ring::RingAllReduceOptions options;
    options.segment_bytes = segment_bytes;
    for (int i = 0; i < n; ++i) {
      links.push_back(std::make_unique<CountingTransport>(local.member(i)));
      members.push_back(std::make_unique<ring::RingAllReduce>(*links.back(), i, n, options));
    }
  }
  // Every member reduces its tensors; throws the first member's error.
  void run(uint64_t round, std::vector<std::vector<at::Tensor>>& tensors, bool average,
           const RingCompression& compression) {
    std::vector<std::string> errors(members.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < members.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          members[i]->run(round, tensors[i], average, compression);
        } catch (const std::exception& e) {
          errors[i] = e.what();
          local.abort(e.what());
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) {
      if (!e.empty()) throw std::runtime_error(e);
    }
  }
  uint64_t sent() const {
    uint64_t total = 0;
    for (const auto& l : links) total += l->sent;
    return total;
  }

  LocalRing local;
  std::vector<std::unique_ptr<CountingTransport>> links;
  std::vector<std::unique_ptr<ring::RingAllReduce>> members;
};

// Member i's tensors: two float32 tensors (one not contiguous), a float64 one, an int64 one.
std::vector<at::Tensor> inputs(int member, int64_t seed) {
  at::manual_seed(seed * 100 + member);
  return {at::randn({37, 29}) * (member + 1), at::randn({64, 33}).t() * 3,
          at::randn({301}, at::kDouble), at::randint(-1000, 1000, {19}, at::kLong)};
}

double codec_epsilon(TensorCodec codec) {
  switch (codec) {
    case TensorCodec::kFp16: return 1.0 / 1024;
    case TensorCodec::kBf16: return 1.0 / 128;
    case TensorCodec::kInt8: return 1.0 / 127;
    case TensorCodec::kNone: return 0;
  }
  return 0;
}

std::vector<std::vector<at::Tensor>> copies(const std::vector<std::vector<at::Tensor>>& from) {
  std::vector<std::vector<at::Tensor>> out;
  for (const auto& list : from) {
    out.emplace_back();
    for (const auto& t : list) out.back().push_back(t.clone());
  }
  return out;
}

}  // namespace

TEST_CASE("compressed ring: members agree bitwise, errors within the codec's, integers exact",
          "[ring][compression]") {
  for (TensorCodec codec : {TensorCodec::kFp16, TensorCodec::kBf16, TensorCodec::kInt8}) {
    for (int n : {2, 3, 5}) {
      for (size_t segment : {size_t{64}, size_t{1000}, size_t{1} << 20}) {
        INFO(ravnest::config::to_string(codec) << ", N = " << n << ", segment_bytes " << segment);
        Ring ring(n, segment);
        std::vector<std::vector<at::Tensor>> tensors;
        for (int i = 0; i < n; ++i) tensors.push_back(inputs(i, 1));
        const auto original = copies(tensors);
        ring.run(1, tensors, true, {codec, "test"});
        for (size_t t = 0; t < tensors[0].size(); ++t) {
          INFO("tensor " << t);
          at::Tensor exact = at::zeros_like(original[0][t], at::kDouble);
          at::Tensor magnitude = at::zeros_like(exact);
          for (int i = 0; i < n; ++i) {
            exact += original[i][t].to(at::kDouble);
            magnitude += original[i][t].to(at::kDouble).abs();
          }
          for (int i = 1; i < n; ++i) CHECK(at::equal(tensors[i][t], tensors[0][t]));
          if (t == 3) {
            // Integers travel as they are: floor division of the exact sum.
            CHECK(at::equal(tensors[0][t], at::floor_divide(exact, n).to(at::kLong)));
            continue;
          }
          exact /= n;
          // Each element is encoded n times (n - 1 partial sums, the final value), each losing at
          // most eps times the largest value of its block, itself at most the block's largest
          // sum of magnitudes.
          const double bound = n * codec_epsilon(codec) * magnitude.max().item<double>();
          const double error = (tensors[0][t].to(at::kDouble) - exact).abs().max().item<double>();
          CHECK(error <= bound);
          CHECK(error > 0);  // it was compressed
        }
      }
    }
  }
}

TEST_CASE("compressed ring: the bytes sent are the codec's", "[ring][compression]") {
  const int n = 4;
  auto make = [&] {
    std::vector<std::vector<at::Tensor>> t;
    for (int i = 0; i < n; ++i) t.push_back({at::randn({100000}), at::randn({4097})});
    return t;
  };
  Ring plain(n, 1 << 16), half(n, 1 << 16), int8(n, 1 << 16);
  auto a = make(), b = make(), c = make();
  plain.run(1, a, true, {});
  half.run(1, b, true, {TensorCodec::kFp16, "x"});
  int8.run(1, c, true, {TensorCodec::kInt8, "x"});
  const double values = 104097.0;
  // Every member sends 2 (N - 1) / N of the buffer.
  CHECK(plain.sent() == static_cast<uint64_t>(values * 4 * 2 * (n - 1)));
  CHECK(half.sent() == plain.sent() / 2);
  INFO("int8 sent " << int8.sent() << " of " << plain.sent());
  CHECK(int8.sent() >= plain.sent() / 4);
  CHECK(int8.sent() <= plain.sent() / 4 * 1.02);
}

TEST_CASE("compressed ring: error feedback makes the average over runs converge",
          "[ring][compression]") {
  const int n = 3;
  Ring ring(n, 4096);
  std::vector<std::vector<at::Tensor>> a_inputs, b_inputs;
  for (int i = 0; i < n; ++i) {
    at::manual_seed(7 + i);
    a_inputs.push_back({at::randn({5000})});
    b_inputs.push_back({at::randn({700}) * 100, at::randn({3, 300})});
  }
  auto exact_of = [&](const std::vector<std::vector<at::Tensor>>& in, size_t t) {
    at::Tensor sum = at::zeros_like(in[0][t], at::kDouble);
    for (const auto& member : in) sum += member[t].to(at::kDouble);
    return sum / n;
  };
  // The same inputs every run, two streams in turn: each stream's mean result approaches its
  // exact average, although every single run has the codec's error.
  constexpr int kRuns = 64;
  at::Tensor a_mean = at::zeros({5000}, at::kDouble);
  double first_error = 0;
  for (int r = 0; r < kRuns; ++r) {
    auto a = copies(a_inputs);
    auto b = copies(b_inputs);
    ring.run(2 * r, a, true, {TensorCodec::kInt8, "a"});
    ring.run(2 * r + 1, b, true, {TensorCodec::kInt8, "b"});
    a_mean += a[0][0].to(at::kDouble);
    if (r == 0) first_error = (a[0][0].to(at::kDouble) - exact_of(a_inputs, 0)).abs().max().item<double>();
  }
  a_mean /= kRuns;
  const double mean_error = (a_mean - exact_of(a_inputs, 0)).abs().max().item<double>();
  INFO("one run's error " << first_error << ", error of the mean of " << kRuns << ": " << mean_error);
  CHECK(first_error > 0);
  CHECK(mean_error < first_error / 10);

  // Without feedback (a fresh residual every run) the mean keeps the single run's error.
  at::Tensor fresh_mean = at::zeros({5000}, at::kDouble);
  for (int r = 0; r < 8; ++r) {
    auto a = copies(a_inputs);
    for (auto& m : ring.members) m->clear_residuals();
    ring.run(1000 + r, a, true, {TensorCodec::kInt8, "a"});
    fresh_mean += a[0][0].to(at::kDouble);
  }
  fresh_mean /= 8;
  const double fresh_error = (fresh_mean - exact_of(a_inputs, 0)).abs().max().item<double>();
  INFO("error of the mean without feedback " << fresh_error);
  CHECK(fresh_error > first_error / 2);
}

TEST_CASE("segment codec: sizes and a round trip", "[ring][compression]") {
  CHECK(ring::segment_wire_bytes(TensorCodec::kFp16, 10) == 20);
  CHECK(segment_wire_bytes(TensorCodec::kInt8, 256) == 256 + 4);
  CHECK(segment_wire_bytes(TensorCodec::kInt8, 257) == 257 + 8);
  CHECK_THROWS_AS(segment_wire_bytes(TensorCodec::kNone, 1), std::invalid_argument);
  ravnest::wire::ErrorFeedback feedback(TensorCodec::kInt8);
  const at::Tensor x = at::randn({1000});
  std::vector<uint8_t> bytes;
  ring::encode_segment(feedback, "k", at::kFloat, x.data_ptr(), 1000, bytes);
  REQUIRE(bytes.size() == segment_wire_bytes(TensorCodec::kInt8, 1000));
  const at::Tensor back = ring::decode_segment(TensorCodec::kInt8, bytes.data(), 1000);
  CHECK((back - x).abs().max().item<double>() <= x.abs().max().item<double>() / 254 * 1.0001);
  // What was lost is carried over.
  CHECK(at::allclose(feedback.residual("k"), x - back));
  at::Tensor bad = at::randn({300});
  bad[7] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(encode_segment(feedback, "nan", at::kFloat, bad.data_ptr(), 300, bytes),
                  std::invalid_argument);
}

// The all-reduce encodes and decodes float32 segments with fused loops (encode_floats,
// decode_floats): the same bits as the tensor path (ErrorFeedback::encode, decompress_tensor),
// residuals included, over several runs so the residuals matter; blocks of zeros, a partial last
// block, values far apart in size.
TEST_CASE("segment codec: the fused float32 path gives the tensor path's bits",
          "[ring][compression]") {
  for (const TensorCodec codec : {TensorCodec::kFp16, TensorCodec::kBf16, TensorCodec::kInt8}) {
    INFO(static_cast<int>(codec));
    ravnest::wire::ErrorFeedback fused(codec), reference(codec);
    for (int run = 0; run < 3; ++run) {
      at::manual_seed(run);
      at::Tensor x = at::randn({1003}) * at::pow(10.0, at::randint(-3, 4, {1003}).to(at::kFloat));
      x.narrow(0, 256, 256).zero_();  // a block of zeros (int8: scale 0)
      std::vector<uint8_t> bytes(segment_wire_bytes(codec, 1003));
      ring::encode_floats(fused, "k", x.data_ptr<float>(), 1003, bytes.data());
      const auto coded = reference.encode("k", x);
      const at::Tensor want = ravnest::wire::decompress_tensor(coded);
      std::vector<float> got(1003, 0.5f);
      ring::decode_floats(codec, bytes.data(), 1003, got.data(), /*add=*/false);
      const at::Tensor got_t = at::from_blob(got.data(), {1003}).clone();
      CHECK(at::equal(got_t, want));
      CHECK(at::equal(fused.residual("k"), reference.residual("k")));
      CHECK(at::equal(ring::decode_segment(codec, bytes.data(), 1003), want));
      std::vector<float> sum(1003, 1.25f);
      ring::decode_floats(codec, bytes.data(), 1003, sum.data(), /*add=*/true);
      CHECK(at::equal(at::from_blob(sum.data(), {1003}).clone(), want + 1.25f));
    }
  }
}
