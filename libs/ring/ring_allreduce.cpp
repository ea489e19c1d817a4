#include "libs/ring/ring_allreduce.h"

#include "libs/ring/segment_codec.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ravnest::ring {
namespace {

// ---- element-wise kernels, plain loops (no ATen dispatch, no intra-op thread pool) ----

template <typename T>
void add_into(void* dst_v, const void* src_v, size_t n) {
  T* __restrict dst = static_cast<T*>(dst_v);
  const T* __restrict src = static_cast<const T*>(src_v);
  if constexpr (std::is_integral_v<T>) {
    // Wrap around on overflow, without signed-overflow undefined behaviour.
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(static_cast<U>(static_cast<U>(dst[i]) + static_cast<U>(src[i])));
  } else if constexpr (std::is_floating_point_v<T>) {
    for (size_t i = 0; i < n; ++i) dst[i] += src[i];
  } else {  // c10::Half, c10::BFloat16: add in float, round once
    for (size_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(static_cast<float>(dst[i]) + static_cast<float>(src[i]));
  }
}

template <typename T>
void divide(void* data_v, size_t n, int divisor) {
  T* data = static_cast<T*>(data_v);
  if constexpr (std::is_integral_v<T>) {
    // Floor division (Python's //): the quotient rounds toward minus infinity.
    using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;  // N may exceed T's range
    const W d = static_cast<W>(divisor);
    for (size_t i = 0; i < n; ++i) {
      const W x = static_cast<W>(data[i]);
      W q = x / d;
      if constexpr (std::is_signed_v<T>) {
        if (x % d != 0 && x < 0) --q;
      }
      data[i] = static_cast<T>(q);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < n; ++i) data[i] /= d;
  } else {
    const float d = static_cast<float>(divisor);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<float>(data[i]) / d);
  }
}

using AddFn = void (*)(void*, const void*, size_t);
using DivFn = void (*)(void*, size_t, int);

struct Kernels {
  AddFn add;
  DivFn div;
};

bool supported(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kChar: case at::kShort: case at::kInt: case at::kLong: case at::kByte:
      return true;
    default:
      return false;
  }
}

Kernels kernels_for(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return {&add_into<float>, &divide<float>};
    case at::kDouble: return {&add_into<double>, &divide<double>};
    case at::kHalf: return {&add_into<c10::Half>, &divide<c10::Half>};
    case at::kBFloat16: return {&add_into<c10::BFloat16>, &divide<c10::BFloat16>};
    case at::kChar: return {&add_into<int8_t>, &divide<int8_t>};
    case at::kShort: return {&add_into<int16_t>, &divide<int16_t>};
    case at::kInt: return {&add_into<int32_t>, &divide<int32_t>};
    case at::kLong: return {&add_into<int64_t>, &divide<int64_t>};
    case at::kByte: return {&add_into<uint8_t>, &divide<uint8_t>};
    default:
      throw std::invalid_argument(std::string("ring all-reduce: unsupported dtype ") +
                                  c10::toString(t));
  }
}

// Chunk c of `count` elements split `size` ways: the first count % size chunks get one more.
struct Span {
  size_t begin;
  size_t count;
};

Span chunk_span(size_t count, int size, int c) {
  const size_t n = static_cast<size_t>(size), i = static_cast<size_t>(c);
  const size_t base = count / n, rem = count % n;
  return {i * base + std::min(i, rem), base + (i < rem ? 1 : 0)};
}

int mod(int a, int n) { return ((a % n) + n) % n; }

size_t segment_size(size_t chunk_bytes, size_t segment_bytes, size_t min_segment_bytes) {
  if (min_segment_bytes == 0) return segment_bytes;
  return std::min(segment_bytes, std::max(min_segment_bytes, (chunk_bytes + 1) / 2));
}

// How one dtype group's chunks travel: in segments of at most `segment_bytes`, each tagged by
// the round, the algorithm's step and its index within the chunk.
struct Segments {
  Segments(uint64_t round, uint32_t group, int size, at::ScalarType dtype, uint8_t* base,
           size_t count, size_t segment_bytes, size_t min_segment_bytes)
      : round(round),
        element_size(c10::elementSize(dtype)),
        per_segment(std::max<size_t>(
            1, segment_size(chunk_span(count, size, 0).count * element_size, segment_bytes,
                            min_segment_bytes) / element_size)),
        base(base) {
    const uint32_t steps = 2 * static_cast<uint32_t>(size - 1);
    if (static_cast<uint64_t>(group) * steps + steps > UINT32_MAX)
      throw std::invalid_argument("ring all-reduce: too many dtype groups for the tag space");
    step0 = group * steps;
    if (this->count(chunk_span(count, size, 0)) > UINT32_MAX)
      throw std::invalid_argument("ring all-reduce: too many segments per chunk; raise segment_bytes");
  }
  RingTag tag(uint32_t step, size_t i) const {
    return RingTag{round, step0 + step, static_cast<uint32_t>(i)};
  }
  size_t count(const Span& c) const { return (c.count + per_segment - 1) / per_segment; }
  size_t elements(const Span& c, size_t i) const {
    return std::min(per_segment, c.count - i * per_segment);
  }
  uint8_t* at(const Span& c, size_t i) const {
    return base + (c.begin + i * per_segment) * element_size;
  }

  uint64_t round;
  uint32_t step0 = 0;
  size_t element_size;
  size_t per_segment;  // elements
  uint8_t* base;
};

}  // namespace

RingAllReduce::RingAllReduce(RingTransport& transport, int position, int size, Options options)
    : transport_(transport), position_(position), size_(size), options_(options) {
  if (size < 1) throw std::invalid_argument("ring all-reduce: size must be >= 1");
  if (position < 0 || position >= size)
    throw std::invalid_argument("ring all-reduce: position " + std::to_string(position) +
                                " outside [0, " + std::to_string(size) + ")");
  if (options_.segment_bytes == 0)
    throw std::invalid_argument("ring all-reduce: segment_bytes must be > 0");
  if (size_ > 1) sender_ = std::thread([this] { sender_loop(); });
}

RingAllReduce::~RingAllReduce() {
  if (!sender_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  sender_.join();
}

void RingAllReduce::sender_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    SendJob job = queue_.front();
    queue_.pop_front();
    sending_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      switch (job.kind) {
        case SendKind::kSend:
          transport_.send(job.tag, job.data, job.bytes);
          break;
        case SendKind::kRelayable:
          transport_.send_relayable(job.tag, job.data, job.bytes);
          break;
        case SendKind::kRelay:
          transport_.relay(job.received, job.tag, job.data, job.bytes);
          break;
      }
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    sending_ = false;
    if (error) {
      if (!send_error_) send_error_ = error;
      queue_.clear();  // nothing after a failed send can be meaningful
    }
    cv_.notify_all();
  }
}

void RingAllReduce::enqueue_send(const RingTag& tag, const void* data, size_t bytes,
                                 SendKind kind, const RingTag& received) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (send_error_) std::rethrow_exception(send_error_);
    queue_.push_back({tag, data, bytes, kind, received});
  }
  cv_.notify_all();
}

std::vector<uint8_t>& RingAllReduce::next_encoded(size_t bytes) {
  if (encoded_used_ == encoded_.size()) encoded_.emplace_back();
  auto& buffer = encoded_[encoded_used_++];
  buffer.resize(bytes);
  return buffer;
}

void RingAllReduce::gather_segment(const RingTag& tag, const RingTag& next, void* data,
                                   size_t bytes, bool pass_on) {
  if (!pass_on) {
    transport_.recv(tag, data, bytes);
    return;
  }
  transport_.recv_to_relay(tag, data, bytes);
  enqueue_send(next, data, bytes, SendKind::kRelay, tag);
}

void RingAllReduce::rethrow_send_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (send_error_) std::rethrow_exception(send_error_);
}

void RingAllReduce::drain_sends(bool cancel) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (cancel) queue_.clear();
  cv_.wait(lock, [&] { return queue_.empty() && !sending_; });
}

void RingAllReduce::reduce_buffer(uint64_t round, uint32_t group, at::ScalarType dtype,
                                  uint8_t* base, size_t count, bool average) {
  const int n = size_, p = position_;
  const Kernels k = kernels_for(dtype);
  const Segments layout(round, group, n, dtype, base, count, options_.segment_bytes,
                        options_.min_segment_bytes);
  const size_t es = layout.element_size;
  auto tag = [&](uint32_t s, size_t i) { return layout.tag(s, i); };
  auto segments = [&](const Span& c) { return layout.count(c); };
  auto seg_elems = [&](const Span& c, size_t i) { return layout.elements(c, i); };
  auto seg_ptr = [&](const Span& c, size_t i) { return layout.at(c, i); };

  // Reduce-scatter step 0: our own chunk, ready to go.
  const Span own = chunk_span(count, n, p);
  for (size_t i = 0; i < segments(own); ++i) enqueue_send(tag(0, i), seg_ptr(own, i), seg_elems(own, i) * es);

  // Reduce-scatter: receive chunk (p-s-1), add, forward it at step s+1 (or, at the last step,
  // average it and start the all-gather with it).
  for (int s = 0; s < n - 1; ++s) {
    const Span c = chunk_span(count, n, mod(p - s - 1, n));
    const bool last = s == n - 2;
    for (size_t i = 0; i < segments(c); ++i) {
      rethrow_send_error();
      const size_t elems = seg_elems(c, i);
      uint8_t* dst = seg_ptr(c, i);
      // Added straight from the received message, or piece by piece as a socket delivers it:
      // no copy of the segment first.
      transport_.recv_pieces(tag(static_cast<uint32_t>(s), i), elems * es,
                             [&](size_t offset, const void* src, size_t bytes) {
                               k.add(dst + offset, src, bytes / es);
                             });
      if (last && average) k.div(dst, elems, n);
      enqueue_send(tag(static_cast<uint32_t>(s + 1), i), dst, elems * es, scatter_send(last));
    }
  }

  // All-gather: receive the final chunk (p-s) in place, forward it unless it is the last step.
  for (int s = 0; s < n - 1; ++s) {
    const Span c = chunk_span(count, n, mod(p - s, n));
    const uint32_t step = static_cast<uint32_t>(n - 1 + s);
    for (size_t i = 0; i < segments(c); ++i) {
      rethrow_send_error();
      const size_t elems = seg_elems(c, i);
      uint8_t* dst = seg_ptr(c, i);
      gather_segment(tag(step, i), tag(step + 1, i), dst, elems * es, s < n - 2);
    }
  }
}

void RingAllReduce::reduce_buffer_compressed(uint64_t round, uint32_t group,
                                             at::ScalarType dtype, uint8_t* base, size_t count,
                                             bool average, wire::ErrorFeedback& feedback,
                                             const std::string& key) {
  const int n = size_, p = position_;
  const wire::TensorCodec codec = feedback.codec();
  const Segments layout(round, group, n, dtype, base, count, options_.segment_bytes,
                        options_.min_segment_bytes);
  auto tag = [&](uint32_t s, size_t i) { return layout.tag(s, i); };
  auto segments = [&](const Span& c) { return layout.count(c); };
  auto seg_elems = [&](const Span& c, size_t i) { return layout.elements(c, i); };
  auto seg_ptr = [&](const Span& c, size_t i) { return layout.at(c, i); };
  auto values = [&](uint8_t* data, size_t elems) {
    return at::from_blob(data, {static_cast<int64_t>(elems)}, at::TensorOptions().dtype(dtype));
  };
  // Every element is encoded once per run by each member: "rs" as a partial sum it forwards,
  // "ag" as the final value of the chunk it owns. The keys name those places, stable across runs.
  auto residual_key = [&](const char* phase, int chunk, size_t i) {
    return key + "/" + phase + "/" + std::to_string(chunk) + "/" + std::to_string(i);
  };
  auto encode = [&](const char* phase, int chunk, const Span& c, size_t i) -> std::vector<uint8_t>& {
    auto& bytes = next_encoded(segment_wire_bytes(codec, seg_elems(c, i)));
    if (dtype == at::kFloat) {
      encode_floats(feedback, residual_key(phase, chunk, i),
                    reinterpret_cast<const float*>(seg_ptr(c, i)), seg_elems(c, i), bytes.data());
    } else {
      encode_segment(feedback, residual_key(phase, chunk, i), dtype, seg_ptr(c, i),
                     seg_elems(c, i), bytes);
    }
    return bytes;
  };
  // Decoded into the tensor's memory: added (`add`) or copied, as the float32 values decode.
  auto decode = [&](const uint8_t* bytes, const Span& c, size_t i, bool add) {
    const size_t elems = seg_elems(c, i);
    if (dtype == at::kFloat) {
      decode_floats(codec, bytes, elems, reinterpret_cast<float*>(seg_ptr(c, i)), add);
    } else if (add) {
      values(seg_ptr(c, i), elems).add_(decode_segment(codec, bytes, elems).to(dtype));
    } else {
      values(seg_ptr(c, i), elems).copy_(decode_segment(codec, bytes, elems));
    }
  };

  // Reduce-scatter step 0: our own chunk.
  const Span own = chunk_span(count, n, p);
  for (size_t i = 0; i < segments(own); ++i) {
    const auto& bytes = encode("rs", p, own, i);
    enqueue_send(tag(0, i), bytes.data(), bytes.size());
  }
  // Reduce-scatter: receive chunk (p-s-1), add, forward it at step s+1 (or, at the last step,
  // average it, encode it once for the all-gather and keep what the others will get).
  for (int s = 0; s < n - 1; ++s) {
    const int chunk = mod(p - s - 1, n);
    const Span c = chunk_span(count, n, chunk);
    const bool last = s == n - 2;
    for (size_t i = 0; i < segments(c); ++i) {
      rethrow_send_error();
      const size_t elems = seg_elems(c, i);
      const size_t wire_bytes = segment_wire_bytes(codec, elems);
      if (scratch_.size() < wire_bytes) scratch_.resize(wire_bytes);
      transport_.recv(tag(static_cast<uint32_t>(s), i), scratch_.data(), wire_bytes);
      decode(scratch_.data(), c, i, /*add=*/true);
      if (last && average) values(seg_ptr(c, i), elems).div_(n);
      const auto& bytes = encode(last ? "ag" : "rs", chunk, c, i);
      if (last) decode(bytes.data(), c, i, /*add=*/false);
      enqueue_send(tag(static_cast<uint32_t>(s + 1), i), bytes.data(), bytes.size(),
                   scatter_send(last));
    }
  }
  // All-gather: receive the final chunk (p-s), decode it in place, forward the same bytes.
  for (int s = 0; s < n - 1; ++s) {
    const Span c = chunk_span(count, n, mod(p - s, n));
    const uint32_t step = static_cast<uint32_t>(n - 1 + s);
    for (size_t i = 0; i < segments(c); ++i) {
      rethrow_send_error();
      const size_t elems = seg_elems(c, i);
      auto& bytes = next_encoded(segment_wire_bytes(codec, elems));
      gather_segment(tag(step, i), tag(step + 1, i), bytes.data(), bytes.size(), s < n - 2);
      decode(bytes.data(), c, i, /*add=*/false);
    }
  }
}

void RingAllReduce::run(uint64_t round, std::vector<at::Tensor>& tensors) {
  run(round, tensors, options_.average);
}

void RingAllReduce::run(uint64_t round, std::vector<at::Tensor>& tensors, bool average,
                        const RingCompression& compression) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined()) throw std::invalid_argument("ring all-reduce: tensor " + std::to_string(i) + " is undefined");
    if (!t.device().is_cpu() || t.layout() != at::kStrided)
      throw std::invalid_argument("ring all-reduce: tensor " + std::to_string(i) +
                                  " is not a strided CPU tensor");
    if (!supported(t.scalar_type()))
      throw std::invalid_argument("ring all-reduce: tensor " + std::to_string(i) +
                                  " has unsupported dtype " + c10::toString(t.scalar_type()));
  }
  if (size_ == 1) return;

  // Groups by dtype, in order of first appearance (the same on every member).
  std::vector<std::pair<at::ScalarType, std::vector<size_t>>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::ScalarType t = tensors[i].scalar_type();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == t; });
    if (it == groups.end()) groups.push_back({t, {i}});
    else it->second.push_back(i);
  }

  at::NoGradGuard no_grad;  // copies into leaves that require grad
  struct Buffer {
    at::Tensor flat;  // undefined when reducing a tensor in place
    uint8_t* data;
    size_t count;
  };
  std::vector<Buffer> buffers;
  buffers.reserve(groups.size());
  {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      send_error_ = nullptr;
    }
    if (flat_cache_.size() < groups.size()) flat_cache_.resize(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& [dtype, members] = groups[g];
      size_t count = 0;
      for (size_t i : members) count += static_cast<size_t>(tensors[i].numel());
      if (members.size() == 1 && tensors[members[0]].is_contiguous()) {
        buffers.push_back({at::Tensor(), static_cast<uint8_t*>(tensors[members[0]].data_ptr()), count});
        continue;
      }
      at::Tensor& cached = flat_cache_[g];
      if (!cached.defined() || cached.scalar_type() != dtype || static_cast<size_t>(cached.numel()) < count)
        cached = at::empty({static_cast<int64_t>(count)}, at::TensorOptions().dtype(dtype));
      at::Tensor flat = cached.narrow(0, 0, static_cast<int64_t>(count));
      int64_t offset = 0;
      for (size_t i : members) {
        const at::Tensor& t = tensors[i];
        flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
        offset += t.numel();
      }
      buffers.push_back({flat, static_cast<uint8_t*>(flat.data_ptr()), count});
    }
  }

  wire::ErrorFeedback* feedback = nullptr;
  if (compression.codec != wire::TensorCodec::kNone) {
    auto it = feedback_.find(compression.stream);
    if (it == feedback_.end() || it->second.codec() != compression.codec) {
      it = feedback_.insert_or_assign(compression.stream, wire::ErrorFeedback(compression.codec))
               .first;
    }
    feedback = &it->second;
  }
  try {
    for (size_t g = 0; g < groups.size(); ++g) {
      const at::ScalarType dtype = groups[g].first;
      if (feedback && (dtype == at::kFloat || dtype == at::kDouble)) {
        reduce_buffer_compressed(round, static_cast<uint32_t>(g), dtype, buffers[g].data,
                                 buffers[g].count, average, *feedback,
                                 std::to_string(g));
      } else {
        reduce_buffer(round, static_cast<uint32_t>(g), dtype, buffers[g].data, buffers[g].count,
                      average);
      }
    }
    drain_sends(/*cancel=*/false);
    rethrow_send_error();
    transport_.flush();
    transport_.confirm_delivered();
    encoded_used_ = 0;  // kept for the next run: no fresh pages per segment
  } catch (...) {
    drain_sends(/*cancel=*/true);  // the sender must not touch the buffers after we return
    try {
      transport_.flush();  // nor the transport
    } catch (...) {
    }
    encoded_.clear();
    encoded_used_ = 0;
    // Residuals half updated by a run that failed would skew the next ones.
    if (feedback) feedback->clear();
    throw;
  }

  for (size_t g = 0; g < groups.size(); ++g) {
    if (!buffers[g].flat.defined()) continue;
    int64_t offset = 0;
    for (size_t i : groups[g].second) {
      at::Tensor& t = tensors[i];
      t.copy_(buffers[g].flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace ravnest::ring
