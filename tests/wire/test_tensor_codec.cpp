// The compression codecs (tensor_codec.h) and error feedback (error_feedback.h): error bounds,
// sizes on the wire, saturation, refusals, and that feedback makes a lossy average unbiased.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cmath>

#include "libs/wire/error_feedback.h"
#include "libs/wire/tensor_codec.h"

using namespace ravnest::wire;

namespace {

at::Tensor sample(int64_t n, double spread, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn({n}, gen, at::kFloat) * spread;
}

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

}  // namespace

TEST_CASE("tensor codecs: names", "[wire][compression]") {
  for (std::string name : {"none", "fp16", "bf16", "int8"}) {
    TensorCodec codec = TensorCodec::kNone;
    REQUIRE(ravnest::config::parse_wire_codec(name, codec));
    CHECK(ravnest::config::to_string(codec) == name);
  }
  TensorCodec codec = TensorCodec::kFp16;
  CHECK_FALSE(ravnest::config::parse_wire_codec("float16", codec));
  CHECK_FALSE(ravnest::config::parse_wire_codec("", codec));
  CHECK_FALSE(ravnest::config::parse_wire_codec("INT8", codec));
  CHECK(codec == TensorCodec::kFp16);
}

TEST_CASE("tensor codecs: round trips within their bounds, in their sizes", "[wire][compression]") {
  // Shapes whose sizes are and are not multiples of the int8 block.
  const auto shape = GENERATE(std::vector<int64_t>{4, 64}, std::vector<int64_t>{3, 7, 11},
                              std::vector<int64_t>{1}, std::vector<int64_t>{0, 5});
  const auto dtype = GENERATE(at::kFloat, at::kDouble);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  const at::Tensor x = sample(n, 3.0, 7).to(dtype).reshape(shape);
  INFO("shape numel " << n << " dtype " << c10::toString(dtype));

  const auto none = compress_tensor(x, TensorCodec::kNone);
  CHECK(decompress_tensor(none).equal(x));

  const auto half = compress_tensor(x, TensorCodec::kFp16);
  const at::Tensor h = decompress_tensor(half);
  CHECK(h.scalar_type() == dtype);
  CHECK(h.sizes() == x.sizes());
  CHECK(half.wire_bytes() == static_cast<uint64_t>(2 * n));
  CHECK_FALSE(half.saturated);
  if (n > 0) CHECK(max_abs((h - x) / x.abs().clamp_min(1e-3)) <= std::ldexp(1.0, -11) * 1.01 + 1e-7);

  const auto bf = compress_tensor(x, TensorCodec::kBf16);
  const at::Tensor b = decompress_tensor(bf);
  CHECK(bf.wire_bytes() == static_cast<uint64_t>(2 * n));
  if (n > 0) CHECK(max_abs((b - x) / x.abs().clamp_min(1e-3)) <= std::ldexp(1.0, -8) * 1.01);

  const auto i8 = compress_tensor(x, TensorCodec::kInt8);
  const at::Tensor q = decompress_tensor(i8);
  const int64_t blocks = (n + kInt8BlockValues - 1) / kInt8BlockValues;
  CHECK(i8.wire_bytes() == static_cast<uint64_t>(n + 4 * blocks));
  CHECK(q.sizes() == x.sizes());
  if (n > 0) {
    // Per block: |error| <= scale / 2 = max|x in block| / 254.
    at::Tensor flat_x = x.reshape({-1}).to(at::kFloat), flat_q = q.reshape({-1}).to(at::kFloat);
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t from = k * kInt8BlockValues;
      const int64_t len = std::min(kInt8BlockValues, n - from);
      const double bound = max_abs(flat_x.narrow(0, from, len)) / 254.0;
      CHECK(max_abs(flat_q.narrow(0, from, len) - flat_x.narrow(0, from, len)) <=
            bound * 1.0001 + 1e-7);
    }
  }
}

TEST_CASE("tensor codecs: int8 is ~3.9x smaller than float32 on a large tensor", "[wire][compression]") {
  const at::Tensor x = sample(1 << 20, 1.0, 3);
  const auto coded = compress_tensor(x, TensorCodec::kInt8);
  const double ratio = double(x.numel() * 4) / double(coded.wire_bytes());
  CHECK(ratio > 3.9);
  CHECK(ratio < 4.0);
  const at::Tensor zeros = at::zeros({300});
  CHECK(decompress_tensor(compress_tensor(zeros, TensorCodec::kInt8)).equal(zeros));  // scale 0
}

TEST_CASE("tensor codecs: fp16 saturates, keeps inf and NaN; int8 refuses them", "[wire][compression]") {
  const at::Tensor x = at::tensor({1.0f, 1e6f, -7e4f, INFINITY, NAN, 65504.0f});
  const auto coded = compress_tensor(x, TensorCodec::kFp16);
  CHECK(coded.saturated);
  const at::Tensor d = decompress_tensor(coded);
  CHECK(d[0].item<float>() == 1.0f);
  CHECK(d[1].item<float>() == 65504.0f);
  CHECK(d[2].item<float>() == -65504.0f);
  CHECK(std::isinf(d[3].item<float>()));
  CHECK(std::isnan(d[4].item<float>()));
  CHECK(d[5].item<float>() == 65504.0f);
  CHECK_FALSE(compress_tensor(at::tensor({1.0f, 2.0f}), TensorCodec::kFp16).saturated);
  CHECK_THROWS_WITH(compress_tensor(x, TensorCodec::kInt8), "int8 cannot carry inf or NaN");
  CHECK(std::isinf(decompress_tensor(compress_tensor(x, TensorCodec::kBf16))[1].item<float>()) == false);
}

TEST_CASE("tensor codecs: only floating-point tensors are compressed", "[wire][compression]") {
  const at::Tensor labels = at::arange(10, at::kLong);
  CHECK(decompress_tensor(compress_tensor(labels, TensorCodec::kNone)).equal(labels));
  CHECK_THROWS_WITH(compress_tensor(labels, TensorCodec::kInt8),
                    "int8 compresses floating-point tensors, not Long");
  CHECK_THROWS_WITH(compress_tensor(labels, TensorCodec::kFp16),
                    "fp16 compresses floating-point tensors, not Long");
  CompressedTensor bad = compress_tensor(at::ones({600}), TensorCodec::kInt8);
  bad.scales = bad.scales.narrow(0, 0, 1);
  CHECK_THROWS_WITH(decompress_tensor(bad), "int8: 1 scales for 600 values");
}

TEST_CASE("error feedback: the sum of what int8 sent tracks the true sum within one residual",
          "[wire][compression]") {
  // The same slowly varying tensor, as a ring's segment is step after step. Without feedback
  // int8's rounding is the same each step and the error of the sum grows with the steps.
  const at::Tensor base = sample(1000, 1.0, 11);
  ErrorFeedback feedback(TensorCodec::kInt8);
  at::Tensor true_sum = at::zeros_like(base), sent_sum = at::zeros_like(base),
             plain_sum = at::zeros_like(base);
  const int steps = 200;
  for (int k = 0; k < steps; ++k) {
    const at::Tensor x = base + 0.001 * k;
    true_sum += x;
    sent_sum += decompress_tensor(feedback.encode("segment", x));
    plain_sum += decompress_tensor(compress_tensor(x, TensorCodec::kInt8));
  }
  const double with_feedback = max_abs(sent_sum - true_sum);
  const double without = max_abs(plain_sum - true_sum);
  // Exactly the last residual (up to float rounding of the sums).
  CHECK(max_abs(sent_sum - (true_sum - feedback.residual("segment"))) < 1e-3);
  CHECK(with_feedback <= max_abs(base) / 127.0 + 1e-3);
  INFO("error of the sum: " << with_feedback << " with feedback, " << without << " without");
  CHECK(without > 10 * with_feedback);
  CHECK_FALSE(feedback.residual("other").defined());
  feedback.clear();
  CHECK_FALSE(feedback.residual("segment").defined());
}
