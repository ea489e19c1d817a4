#include "libs/wire/value_codec.h"

#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

namespace ravnest::wire {

namespace {

using c10::ScalarType;

bool known_dtype(int code, ScalarType* out) {
  switch (code) {
    case static_cast<int>(ScalarType::Byte):
    case static_cast<int>(ScalarType::Char):
    case static_cast<int>(ScalarType::Short):
    case static_cast<int>(ScalarType::Int):
    case static_cast<int>(ScalarType::Long):
    case static_cast<int>(ScalarType::Half):
    case static_cast<int>(ScalarType::Float):
    case static_cast<int>(ScalarType::Double):
    case static_cast<int>(ScalarType::ComplexFloat):
    case static_cast<int>(ScalarType::ComplexDouble):
    case static_cast<int>(ScalarType::Bool):
    case static_cast<int>(ScalarType::BFloat16):
      if (out != nullptr) *out = static_cast<ScalarType>(code);
      return true;
    default:
      return false;
  }
}

[[noreturn]] void fail(const std::string& what) { throw WireError("wire: " + what); }

// The codec's number on the wire (schema Tensor.codec), and back.
uint8_t codec_code(TensorCodec codec) {
  switch (codec) {
    case TensorCodec::kNone: return 0;
    case TensorCodec::kFp16: return 1;
    case TensorCodec::kBf16: return 2;
    case TensorCodec::kInt8: return 3;
  }
  return 0;
}

bool codec_of(uint8_t code, TensorCodec* out) {
  switch (code) {
    case 0: *out = TensorCodec::kNone; return true;
    case 1: *out = TensorCodec::kFp16; return true;
    case 2: *out = TensorCodec::kBf16; return true;
    case 3: *out = TensorCodec::kInt8; return true;
    default: return false;
  }
}

// The dtype a codec's values travel as.
ScalarType coded_dtype(TensorCodec codec) {
  switch (codec) {
    case TensorCodec::kFp16: return ScalarType::Half;
    case TensorCodec::kBf16: return ScalarType::BFloat16;
    case TensorCodec::kInt8: return ScalarType::Char;
    case TensorCodec::kNone: break;
  }
  return ScalarType::Undefined;
}

// The dimensions of a dense, non-overlapping tensor that is not row-major (a permuted view, a
// channels-last activation), from outermost to innermost in memory; empty for a row-major tensor
// or one with gaps or overlaps (those travel row-major).
std::vector<int64_t> memory_order(const at::Tensor& t) {
  if (t.dim() < 2 || t.dim() > 255 || t.is_contiguous() || !t.is_non_overlapping_and_dense()) {
    return {};
  }
  std::vector<int64_t> order(static_cast<size_t>(t.dim()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const auto strides = t.strides();
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  if (!t.permute(order).is_contiguous()) return {};
  return order;
}

void encode_tensor(const at::Tensor& tensor, schema::Tensor::Builder out,
                   capnp::Orphanage orphanage, size_t inline_limit,
                   std::vector<at::Tensor>& streamed, std::vector<at::Tensor>& keep_alive,
                   TensorCodec codec, bool* saturated) {
  const std::vector<int64_t> order =
      tensor.defined() && tensor.layout() == c10::kStrided && tensor.device().is_cpu()
          ? memory_order(tensor)
          : std::vector<int64_t>{};
  // In memory order the tensor is row-major: its bytes go as they lie.
  at::Tensor t = wire_form(order.empty() ? tensor : tensor.permute(order));
  out.setDtype(static_cast<int8_t>(t.scalar_type()));
  auto sizes = t.sizes();
  auto shape = out.initShape(static_cast<unsigned>(sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) shape.set(static_cast<unsigned>(i), sizes[i]);
  if (!order.empty()) {
    auto list = out.initMemoryOrder(static_cast<unsigned>(order.size()));
    for (size_t i = 0; i < order.size(); ++i) {
      list.set(static_cast<unsigned>(i), static_cast<uint8_t>(order[i]));
    }
  }
  out.setRequiresGrad(tensor.requires_grad());
  // Only floating-point tensors are compressed; labels and indices travel as they are.
  if (codec != TensorCodec::kNone && c10::isFloatingType(t.scalar_type())) {
    CompressedTensor compressed = compress_tensor(t, codec);
    if (compressed.saturated && saturated != nullptr) *saturated = true;
    out.setCodec(codec_code(codec));
    if (compressed.scales.defined()) {
      const at::Tensor scales = compressed.scales.contiguous();
      out.setScales(capnp::Data::Reader(static_cast<const kj::byte*>(scales.data_ptr()),
                                        tensor_bytes(scales)));
    }
    t = wire_form(compressed.values);
  }
  uint64_t bytes = tensor_bytes(t);
  if (bytes <= inline_limit && bytes <= kMaxDataBytes) {
    if (bytes == 0) {
      out.initInline(0);
    } else if (bytes % 8 == 0) {
      out.adoptInline(orphanage.referenceExternalData(
          capnp::Data::Reader(static_cast<const kj::byte*>(t.data_ptr()), bytes)));
      keep_alive.push_back(std::move(t));
    } else {
      auto data = out.initInline(static_cast<unsigned>(bytes));
      std::memcpy(data.begin(), t.data_ptr(), bytes);
    }
  } else {
    out.setStreamed(bytes);
    streamed.push_back(std::move(t));
  }
}

// A compressed tensor as it arrives: its codec's values (`arrived`, possibly still to be filled by
// a stream) and its scales, copied out of the message.
CompressedTensor arrived_compressed(const at::Tensor& arrived, capnp::Data::Reader scales_bytes,
                                    TensorCodec codec, ScalarType dtype,
                                    const std::vector<int64_t>& sizes) {
  CompressedTensor compressed;
  compressed.codec = codec;
  compressed.dtype = dtype;
  compressed.sizes = sizes;
  compressed.values = arrived.reshape({-1});
  if (codec == TensorCodec::kInt8) {
    at::Tensor scales = at::empty({static_cast<int64_t>(scales_bytes.size() / 4)}, at::kFloat);
    if (scales.numel() > 0) std::memcpy(scales.data_ptr(), scales_bytes.begin(), scales_bytes.size());
    compressed.scales = scales;
  }
  return compressed;
}

uint64_t checked_mul(uint64_t a, uint64_t b, const char* what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(std::string(what) + " overflows 64 bits");
  return r;
}

at::Tensor decode_tensor(schema::Tensor::Reader in, std::vector<at::Tensor>& pending,
                         const DecodeLimits& limits, uint64_t& total_bytes,
                         std::vector<std::function<void()>>* after_stream) {
  ScalarType dtype;
  int code = in.getDtype();
  if (!known_dtype(code, &dtype)) fail("unknown or unsupported tensor dtype code " + std::to_string(code));
  auto shape = in.getShape();
  if (shape.size() > limits.max_dims) {
    fail("tensor has " + std::to_string(shape.size()) + " dimensions, more than the limit of " +
         std::to_string(limits.max_dims));
  }
  std::vector<int64_t> sizes;
  sizes.reserve(shape.size());
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("tensor has a negative dimension " + std::to_string(d));
    sizes.push_back(d);
    numel = checked_mul(numel, static_cast<uint64_t>(d), "tensor element count");
  }
  TensorCodec codec = TensorCodec::kNone;
  if (!codec_of(in.getCodec(), &codec)) fail("unknown tensor codec " + std::to_string(in.getCodec()));
  if (codec != TensorCodec::kNone && !c10::isFloatingType(dtype)) {
    fail(std::string("a compressed tensor of dtype ") + c10::toString(dtype));
  }
  // What arrives: the codec's values (and scales), decompressed into a tensor of `dtype`.
  const ScalarType arriving = codec == TensorCodec::kNone ? dtype : coded_dtype(codec);
  uint64_t bytes = checked_mul(numel, c10::elementSize(arriving), "tensor byte count");
  if (codec != TensorCodec::kNone) {
    // The decompressed tensor is allocated too: both count against the limits.
    const uint64_t decompressed = checked_mul(numel, c10::elementSize(dtype), "tensor byte count");
    if (decompressed > limits.max_tensor_bytes) {
      fail("tensor of " + std::to_string(decompressed) + " bytes exceeds the limit of " +
           std::to_string(limits.max_tensor_bytes));
    }
    total_bytes += decompressed;
    const uint64_t blocks = codec == TensorCodec::kInt8
                                ? (numel + kInt8BlockValues - 1) / kInt8BlockValues
                                : 0;
    if (in.getScales().size() != blocks * 4) {
      fail("compressed tensor has " + std::to_string(in.getScales().size()) +
           " bytes of scales, its codec and shape say " + std::to_string(blocks * 4));
    }
  } else if (in.hasScales()) {
    fail("an uncompressed tensor with scales");
  }
  if (bytes > limits.max_tensor_bytes) {
    fail("tensor of " + std::to_string(bytes) + " bytes exceeds the limit of " +
         std::to_string(limits.max_tensor_bytes));
  }
  if (bytes > limits.max_total_bytes - std::min(total_bytes, limits.max_total_bytes)) {
    fail("tensors of the message exceed the limit of " + std::to_string(limits.max_total_bytes) +
         " bytes");
  }
  bool requires_grad = in.getRequiresGrad();
  if (requires_grad && !c10::isFloatingType(dtype) && !c10::isComplexType(dtype)) {
    fail(std::string("a tensor of dtype ") + c10::toString(dtype) + " cannot require grad");
  }
  // `sizes` are in memory order (the shape of the bytes); with a memory order, memory dimension k
  // is the tensor's own dimension order[k], and the tensor is allocated with that layout.
  std::vector<int64_t> order;
  if (in.hasMemoryOrder()) {
    auto list = in.getMemoryOrder();
    if (list.size() != sizes.size()) {
      fail("tensor's memory order has " + std::to_string(list.size()) + " dimensions, its shape " +
           std::to_string(sizes.size()));
    }
    std::vector<bool> seen(sizes.size(), false);
    for (uint8_t d : list) {
      if (d >= sizes.size() || seen[d]) fail("tensor's memory order is not a permutation");
      seen[d] = true;
      order.push_back(d);
    }
  }
  // The received tensor (`base`, laid out as the sender's) and the same memory seen in memory
  // order (`view`: row-major, what bytes are written into).
  auto allocate = [&](ScalarType type) -> std::pair<at::Tensor, at::Tensor> {
    if (order.empty()) {
      at::Tensor base = at::empty(sizes, at::TensorOptions().dtype(type));
      return {base, base};
    }
    std::vector<int64_t> own_sizes(sizes.size()), own_strides(sizes.size());
    int64_t stride = 1;
    for (size_t k = sizes.size(); k-- > 0;) {
      own_sizes[static_cast<size_t>(order[k])] = sizes[k];
      own_strides[static_cast<size_t>(order[k])] = stride;
      stride *= std::max<int64_t>(sizes[k], 1);
    }
    at::Tensor base = at::empty_strided(own_sizes, own_strides, at::TensorOptions().dtype(type));
    return {base, base.permute(order)};
  };

  at::Tensor t;
  switch (in.which()) {
    case schema::Tensor::INLINE: {
      auto data = in.getInline();
      if (data.size() != bytes) {
        fail("inline tensor has " + std::to_string(data.size()) + " bytes, its shape and dtype say " +
             std::to_string(bytes));
      }
      if (dtype == ScalarType::Bool) {
        for (kj::byte b : data) {
          if (b > 1) fail("bool tensor holds a byte other than 0 and 1");
        }
      }
      if (codec == TensorCodec::kNone) {
        auto [base, view] = allocate(dtype);
        if (bytes > 0) std::memcpy(view.data_ptr(), data.begin(), bytes);
        t = base;
      } else {
        at::Tensor arrived = at::empty(sizes, at::TensorOptions().dtype(arriving));
        if (bytes > 0) std::memcpy(arrived.data_ptr(), data.begin(), bytes);
        at::Tensor values =
            decompress_tensor(arrived_compressed(arrived, in.getScales(), codec, dtype, sizes));
        if (order.empty()) {
          t = values;
        } else {
          auto [base, view] = allocate(dtype);
          view.copy_(values);
          t = base;
        }
      }
      break;
    }
    case schema::Tensor::STREAMED: {
      uint64_t announced = in.getStreamed();
      if (announced != bytes) {
        fail("streamed tensor announces " + std::to_string(announced) +
             " bytes, its shape and dtype say " + std::to_string(bytes));
      }
      auto advise = [&](const at::Tensor& arrives) {
        if (limits.huge_pages_from > 0 && bytes >= limits.huge_pages_from) {
          advise_huge_pages(arrives.data_ptr(), bytes);
        }
      };
      if (codec == TensorCodec::kNone) {
        auto [base, view] = allocate(dtype);
        advise(view);
        pending.push_back(view);  // row-major: the stream writes into it
        t = base;
      } else {
        if (after_stream == nullptr) fail("a compressed streamed tensor where none is expected");
        at::Tensor arrives = at::empty(sizes, at::TensorOptions().dtype(arriving));
        advise(arrives);
        pending.push_back(arrives);
        // Filled in place once the stream is done, so the value decoded now is the final one.
        auto [base, view] = allocate(dtype);
        t = base;
        auto compressed = arrived_compressed(arrives, in.getScales(), codec, dtype, sizes);
        after_stream->push_back([view = view, compressed]() mutable {
          // Into the same memory, outside autograd: the tensor may be a leaf that requires grad.
          view.detach().copy_(decompress_tensor(compressed));
        });
      }
      break;
    }
    default:
      fail("tensor is neither inline nor streamed (unknown union member)");
  }
  total_bytes += bytes;
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

uint64_t pending_bytes(const std::vector<at::Tensor>& pending) {
  uint64_t sum = 0;
  for (const auto& t : pending) sum += tensor_bytes(t);
  return sum;
}

c10::IValue decode_value_counted(schema::Value::Reader in, std::vector<at::Tensor>& pending,
                                 const DecodeLimits& limits, uint64_t& total_bytes,
                                 std::vector<std::function<void()>>* after_stream) {
  switch (in.which()) {
    case schema::Value::TENSOR:
      return decode_tensor(in.getTensor(), pending, limits, total_bytes, after_stream);
    case schema::Value::NONE:
      return c10::IValue();
    case schema::Value::UNINITIALIZED:
      return c10::IValue::uninitialized();
    case schema::Value::INT:
      return c10::IValue(static_cast<int64_t>(in.getInt()));
    case schema::Value::FLOAT:
      return c10::IValue(in.getFloat());
    case schema::Value::BOOL:
      return c10::IValue(in.getBool());
    case schema::Value::TEXT: {
      auto text = in.getText();
      return c10::IValue(std::string(text.begin(), text.size()));
    }
    case schema::Value::INTS: {
      auto list = in.getInts();
      c10::List<int64_t> out;
      out.reserve(list.size());
      for (int64_t v : list) out.push_back(v);
      return c10::IValue(std::move(out));
    }
    case schema::Value::FLOATS: {
      auto list = in.getFloats();
      c10::List<double> out;
      out.reserve(list.size());
      for (double v : list) out.push_back(v);
      return c10::IValue(std::move(out));
    }
    case schema::Value::BOOLS: {
      auto list = in.getBools();
      c10::List<bool> out;
      out.reserve(list.size());
      for (bool v : list) out.push_back(v);
      return c10::IValue(std::move(out));
    }
  }
  fail("value of unknown kind " + std::to_string(static_cast<int>(in.which())));
}

}  // namespace

bool is_wire_dtype(int code) { return known_dtype(code, nullptr); }

at::Tensor wire_form(const at::Tensor& tensor) {
  if (!tensor.defined()) throw std::invalid_argument("wire: cannot encode an undefined tensor");
  if (tensor.layout() != c10::kStrided) {
    throw std::invalid_argument(std::string("wire: cannot encode a tensor with layout ") +
                                c10::toString(tensor.layout()));
  }
  if (!known_dtype(static_cast<int>(tensor.scalar_type()), nullptr)) {
    throw std::invalid_argument(std::string("wire: cannot encode a tensor of dtype ") +
                                c10::toString(tensor.scalar_type()));
  }
  at::Tensor t = tensor.detach();
  if (!t.device().is_cpu()) t = t.to(at::kCPU);
  t = t.resolve_conj().resolve_neg().contiguous();
  if (t.numel() > 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 8 != 0) {
    t = t.clone(at::MemoryFormat::Contiguous);
  }
  return t;
}

void advise_huge_pages(void* data, uint64_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

uint64_t tensor_bytes(const at::Tensor& tensor) {
  return static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
}

void encode_value(const c10::IValue& value, schema::Value::Builder out, capnp::Orphanage orphanage,
                  size_t inline_limit, std::vector<at::Tensor>& streamed,
                  std::vector<at::Tensor>& keep_alive, TensorCodec codec, bool* saturated) {
  if (value.isTensor()) {
    encode_tensor(value.toTensor(), out.initTensor(), orphanage, inline_limit, streamed,
                  keep_alive, codec, saturated);
  } else if (value.isNone()) {
    out.setNone();
  } else if (value.tagKind() == "Uninitialized") {  // IValue has no isUninitialized() in 1.13
    out.setUninitialized();
  } else if (value.isInt()) {
    out.setInt(value.toInt());
  } else if (value.isDouble()) {
    out.setFloat(value.toDouble());
  } else if (value.isBool()) {
    out.setBool(value.toBool());
  } else if (value.isString()) {
    const std::string& s = value.toStringRef();
    out.setText(capnp::Text::Reader(s.data(), s.size()));
  } else if (value.isIntList()) {
    auto list = value.toIntList();
    auto b = out.initInts(static_cast<unsigned>(list.size()));
    for (size_t i = 0; i < list.size(); ++i) b.set(static_cast<unsigned>(i), list.get(i));
  } else if (value.isDoubleList()) {
    auto list = value.toDoubleList();
    auto b = out.initFloats(static_cast<unsigned>(list.size()));
    for (size_t i = 0; i < list.size(); ++i) b.set(static_cast<unsigned>(i), list.get(i));
  } else if (value.isBoolList()) {
    auto list = value.toBoolList();
    auto b = out.initBools(static_cast<unsigned>(list.size()));
    for (size_t i = 0; i < list.size(); ++i) b.set(static_cast<unsigned>(i), list.get(i));
  } else {
    throw std::invalid_argument("wire: cannot encode a value of type " + value.tagKind() +
                                (value.isList() ? " (" + value.type()->str() + ")" : ""));
  }
}

c10::IValue decode_value(schema::Value::Reader value, std::vector<at::Tensor>& pending,
                         const DecodeLimits& limits,
                         std::vector<std::function<void()>>* after_stream) {
  uint64_t total = pending_bytes(pending);
  return decode_value_counted(value, pending, limits, total, after_stream);
}

EncodedTensors encode_values(schema::Transfer::Builder transfer,
                             const std::vector<IndexedIValue>& values, size_t inline_limit,
                             TensorCodec codec) {
  EncodedTensors encoded;
  auto orphanage = capnp::Orphanage::getForMessageContaining(transfer);
  auto list = transfer.initValues(static_cast<unsigned>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    auto item = list[static_cast<unsigned>(i)];
    item.setIndex(values[i].index);
    encode_value(values[i].value, item.initValue(), orphanage, inline_limit, encoded.streamed,
                 encoded.keep_alive, codec, &encoded.saturated);
  }
  for (const auto& t : encoded.streamed) encoded.streamed_bytes += tensor_bytes(t);
  return encoded;
}

std::vector<IndexedIValue> decode_values(schema::Transfer::Reader transfer,
                                         std::vector<at::Tensor>& pending,
                                         const DecodeLimits& limits,
                                         std::vector<std::function<void()>>* after_stream) {
  uint64_t total = pending_bytes(pending);
  std::vector<IndexedIValue> out;
  auto list = transfer.getValues();
  out.reserve(list.size());
  for (auto item : list) {
    out.push_back({item.getIndex(), decode_value_counted(item.getValue(), pending, limits, total,
                                                         after_stream)});
  }
  return out;
}

}  // namespace ravnest::wire
