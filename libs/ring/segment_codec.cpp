#include "libs/ring/segment_codec.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdexcept>

namespace ravnest::ring {

namespace {

size_t int8_blocks(size_t values) {
  const auto block = static_cast<size_t>(wire::kInt8BlockValues);
  return (values + block - 1) / block;
}

#if defined(__x86_64__)
// AVX2 and F16C, chosen at run time (the build targets plain x86-64): the fused loops eight
// values at a time. No FMA on purpose: `w - q * scale` must round the product first, as the
// tensor path's separate operations do (the compiler would otherwise fuse them).
bool have_avx2_f16c() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return have;
}

__attribute__((target("avx2,f16c"))) size_t fp16_encode_avx2(const float* data, float* residual,
                                                             uint8_t* out, size_t values) {
  size_t i = 0;
  for (; i + 8 <= values; i += 8) {
    const __m256 wanted = _mm256_add_ps(_mm256_loadu_ps(data + i), _mm256_loadu_ps(residual + i));
    const __m128i coded = _mm256_cvtps_ph(wanted, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(residual + i, _mm256_sub_ps(wanted, _mm256_cvtph_ps(coded)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), coded);
  }
  return i;  // the rest is the scalar loop's
}

__attribute__((target("avx2,f16c"))) size_t fp16_decode_avx2(const uint8_t* bytes, size_t values,
                                                             float* dst, bool add) {
  size_t i = 0;
  for (; i + 8 <= values; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 2 * i)));
    if (add) v = _mm256_add_ps(_mm256_loadu_ps(dst + i), v);
    _mm256_storeu_ps(dst + i, v);
  }
  return i;
}

// wanted = data + residual for `n` (a multiple of 8) values; returns max |wanted|, or NaN when a
// value is not finite.
__attribute__((target("avx2"))) float int8_wanted_avx2(const float* data, const float* residual,
                                                       size_t n, float* wanted) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 amax = _mm256_setzero_ps();
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (size_t i = 0; i < n; i += 8) {
    const __m256 w = _mm256_add_ps(_mm256_loadu_ps(data + i), _mm256_loadu_ps(residual + i));
    _mm256_storeu_ps(wanted + i, w);
    const __m256 a = _mm256_and_ps(w, abs_mask);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, inf, _CMP_LT_OQ));  // false for inf, NaN
    amax = _mm256_max_ps(amax, a);
  }
  if (_mm256_movemask_ps(finite) != 0xff) return std::numeric_limits<float>::quiet_NaN();
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float m = 0;
  for (float v : lanes) m = std::max(m, v);
  return m;
}

__attribute__((target("avx2"))) void int8_decode_avx2(const int8_t* q, size_t n, float scale,
                                                      float* dst, bool add) {
  const __m256 s = _mm256_set1_ps(scale);
  for (size_t i = 0; i < n; i += 8) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)), s);
    if (add) v = _mm256_add_ps(_mm256_loadu_ps(dst + i), v);
    _mm256_storeu_ps(dst + i, v);
  }
}

// One int8 block of `n` (a multiple of 8) wanted values: codes into `q`, residuals updated.
__attribute__((target("avx2"))) void int8_block_avx2(const float* wanted, size_t n, float scale,
                                                     float safe, int8_t* q, float* residual) {
  const __m256 divisor = _mm256_set1_ps(safe), s = _mm256_set1_ps(scale);
  const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  for (size_t i = 0; i < n; i += 8) {
    const __m256 w = _mm256_loadu_ps(wanted + i);
    __m256 r = _mm256_round_ps(_mm256_div_ps(w, divisor), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(hi, _mm256_max_ps(lo, r));
    _mm256_storeu_ps(residual + i, _mm256_sub_ps(w, _mm256_mul_ps(r, s)));
    const __m256i codes = _mm256_cvtps_epi32(r);  // exact: r is a whole number
    alignas(32) int32_t c[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), codes);
    for (int k = 0; k < 8; ++k) q[i + k] = static_cast<int8_t>(c[k]);
  }
}
#endif

}  // namespace

size_t segment_wire_bytes(wire::TensorCodec codec, size_t values) {
  switch (codec) {
    case wire::TensorCodec::kFp16:
    case wire::TensorCodec::kBf16:
      return values * 2;
    case wire::TensorCodec::kInt8:
      return values + int8_blocks(values) * sizeof(float);
    case wire::TensorCodec::kNone:
      break;
  }
  throw std::invalid_argument("a ring segment is encoded only under a lossy codec");
}

void encode_floats(wire::ErrorFeedback& feedback, const std::string& key, const float* data,
                   size_t values, uint8_t* out) {
  float* residual = feedback.residual_values(key, values);
  switch (feedback.codec()) {
    case wire::TensorCodec::kFp16: {
      auto* h = reinterpret_cast<c10::Half*>(out);
      size_t done = 0;
#if defined(__x86_64__)
      if (have_avx2_f16c()) done = fp16_encode_avx2(data, residual, out, values);
#endif
      for (size_t i = done; i < values; ++i) {
        const float wanted = data[i] + residual[i];
        const c10::Half coded(wanted);
        residual[i] = wanted - static_cast<float>(coded);
        h[i] = coded;
      }
      return;
    }
    case wire::TensorCodec::kBf16: {
      auto* b = reinterpret_cast<c10::BFloat16*>(out);
      for (size_t i = 0; i < values; ++i) {
        const float wanted = data[i] + residual[i];
        const c10::BFloat16 coded(wanted);
        residual[i] = wanted - static_cast<float>(coded);
        b[i] = coded;
      }
      return;
    }
    case wire::TensorCodec::kInt8: {
      // As compress_tensor: per block, scale = max|x| / 127, q = round(x / scale) (half to even)
      // clamped to +-127, decoded q * scale; a block of zeros divides by 1.
      auto* q = reinterpret_cast<int8_t*>(out);
      uint8_t* scales = out + values;  // after the values: not aligned for float
      constexpr size_t kBlock = static_cast<size_t>(wire::kInt8BlockValues);
      float wanted[kBlock];
      for (size_t start = 0, block = 0; start < values; start += kBlock, ++block) {
        const size_t n = std::min(kBlock, values - start);
        float amax = 0;
        bool finite = true;
        size_t first = 0;
#if defined(__x86_64__)
        if (have_avx2_f16c()) {
          first = n / 8 * 8;
          amax = int8_wanted_avx2(data + start, residual + start, first, wanted);
          finite = !std::isnan(amax);
        }
#endif
        for (size_t i = first; i < n; ++i) {
          wanted[i] = data[start + i] + residual[start + i];
          finite = finite && std::isfinite(wanted[i]);
          amax = std::max(amax, std::fabs(wanted[i]));
        }
        if (!finite) throw std::invalid_argument("int8 cannot carry inf or NaN");
        const float scale = amax / 127.0f;
        const float safe = scale > 0 ? scale : 1.0f;
        size_t done = 0;
#if defined(__x86_64__)
        if (have_avx2_f16c()) {
          done = n / 8 * 8;
          int8_block_avx2(wanted, done, scale, safe, q + start, residual + start);
        }
#endif
        for (size_t i = done; i < n; ++i) {
          const float r = std::nearbyint(wanted[i] / safe);
          const int8_t code = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, r)));
          q[start + i] = code;
          residual[start + i] = wanted[i] - static_cast<float>(code) * scale;
        }
        std::memcpy(scales + block * sizeof(float), &scale, sizeof(float));
      }
      return;
    }
    case wire::TensorCodec::kNone:
      break;
  }
  throw std::invalid_argument("a ring segment is encoded only under a lossy codec");
}

void decode_floats(wire::TensorCodec codec, const uint8_t* bytes, size_t values, float* dst,
                   bool add) {
  switch (codec) {
    case wire::TensorCodec::kFp16: {
      const auto* h = reinterpret_cast<const c10::Half*>(bytes);
      size_t done = 0;
#if defined(__x86_64__)
      if (have_avx2_f16c()) done = fp16_decode_avx2(bytes, values, dst, add);
#endif
      if (add) {
        for (size_t i = done; i < values; ++i) dst[i] += static_cast<float>(h[i]);
      } else {
        for (size_t i = done; i < values; ++i) dst[i] = static_cast<float>(h[i]);
      }
      return;
    }
    case wire::TensorCodec::kBf16: {
      const auto* b = reinterpret_cast<const c10::BFloat16*>(bytes);
      if (add) {
        for (size_t i = 0; i < values; ++i) dst[i] += static_cast<float>(b[i]);
      } else {
        for (size_t i = 0; i < values; ++i) dst[i] = static_cast<float>(b[i]);
      }
      return;
    }
    case wire::TensorCodec::kInt8: {
      const auto* q = reinterpret_cast<const int8_t*>(bytes);
      constexpr size_t kBlock = static_cast<size_t>(wire::kInt8BlockValues);
      for (size_t start = 0, block = 0; start < values; start += kBlock, ++block) {
        float scale;
        std::memcpy(&scale, bytes + values + block * sizeof(float), sizeof(float));
        const size_t end = std::min(values, start + kBlock);
        size_t i = start;
#if defined(__x86_64__)
        if (have_avx2_f16c()) {
          const size_t whole = (end - start) / 8 * 8;
          int8_decode_avx2(q + start, whole, scale, dst + start, add);
          i += whole;
        }
#endif
        if (add) {
          for (; i < end; ++i) dst[i] += static_cast<float>(q[i]) * scale;
        } else {
          for (; i < end; ++i) dst[i] = static_cast<float>(q[i]) * scale;
        }
      }
      return;
    }
    case wire::TensorCodec::kNone:
      break;
  }
  throw std::invalid_argument("a ring segment is decoded only under a lossy codec");
}

void encode_segment(wire::ErrorFeedback& feedback, const std::string& key, at::ScalarType dtype,
                    const void* data, size_t values, std::vector<uint8_t>& out) {
  if (dtype == at::kFloat) {
    out.resize(segment_wire_bytes(feedback.codec(), values));
    encode_floats(feedback, key, static_cast<const float*>(data), values, out.data());
    return;
  }
  const at::Tensor view = at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(values)},
                                        at::TensorOptions().dtype(dtype));
  const wire::CompressedTensor coded = feedback.encode(key, view);
  const size_t value_bytes = coded.values.numel() * coded.values.element_size();
  const size_t scale_bytes = coded.scales.defined() ? coded.scales.numel() * sizeof(float) : 0;
  if (value_bytes + scale_bytes != segment_wire_bytes(coded.codec, values)) {
    throw std::logic_error("ring segment: the codec wrote an unexpected size");
  }
  out.resize(value_bytes + scale_bytes);
  std::memcpy(out.data(), coded.values.data_ptr(), value_bytes);
  if (scale_bytes) std::memcpy(out.data() + value_bytes, coded.scales.data_ptr(), scale_bytes);
}

at::Tensor decode_segment(wire::TensorCodec codec, const uint8_t* bytes, size_t values) {
  wire::CompressedTensor coded;
  coded.codec = codec;
  coded.dtype = at::kFloat;
  coded.sizes = {static_cast<int64_t>(values)};
  auto* base = const_cast<uint8_t*>(bytes);
  const auto n = static_cast<int64_t>(values);
  switch (codec) {
    case wire::TensorCodec::kFp16:
      coded.values = at::from_blob(base, {n}, at::TensorOptions().dtype(at::kHalf));
      break;
    case wire::TensorCodec::kBf16:
      coded.values = at::from_blob(base, {n}, at::TensorOptions().dtype(at::kBFloat16));
      break;
    case wire::TensorCodec::kInt8: {
      coded.values = at::from_blob(base, {n}, at::TensorOptions().dtype(at::kChar));
      // The scales follow the values: aligned for float only by chance, so copied out.
      at::Tensor scales = at::empty({static_cast<int64_t>(int8_blocks(values))},
                                    at::TensorOptions().dtype(at::kFloat));
      std::memcpy(scales.data_ptr(), bytes + values, scales.numel() * sizeof(float));
      coded.scales = scales;
      break;
    }
    case wire::TensorCodec::kNone:
      throw std::invalid_argument("a ring segment is decoded only under a lossy codec");
  }
  return wire::decompress_tensor(coded);
}

}  // namespace ravnest::ring
