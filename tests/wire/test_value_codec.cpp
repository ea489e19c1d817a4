// value_codec and tensor_stream without a network: messages serialized to bytes and read back,
// streams through in-process ByteSink capabilities, and malformed messages.
#include <ATen/ATen.h>
#include <c10/util/complex.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <kj/async.h>

#include <cstring>
#include <random>

#include "libs/wire/transfer_codec.h"
#include "tests/wire/wire_test_util.h"

using namespace ravnest::wire;
namespace schema = ravnest::schema;
using ravnest::wire::test::same_tensor;
using ravnest::wire::test::same_value;

namespace {

// Serializes a builder to flat words and reads it back, as the wire does.
struct RoundTrip {
  explicit RoundTrip(capnp::MessageBuilder& builder)
      : words(capnp::messageToFlatArray(builder)), reader(words, reader_options()) {}
  kj::Array<capnp::word> words;
  capnp::FlatArrayMessageReader reader;
};

std::vector<IndexedIValue> round_trip(const std::vector<IndexedIValue>& values,
                                      size_t inline_limit, std::vector<at::Tensor>& pending,
                                      EncodedTensors* encoded_out = nullptr) {
  capnp::MallocMessageBuilder builder;
  auto transfer = builder.initRoot<schema::Transfer>();
  EncodedTensors encoded = encode_values(transfer, values, inline_limit);
  RoundTrip rt(builder);
  auto decoded = decode_values(rt.reader.getRoot<schema::Transfer>(), pending);
  REQUIRE(pending.size() == encoded.streamed.size());
  // Fill the pending tensors as a TensorSink would, straight from the sender's tensors.
  for (size_t i = 0; i < pending.size(); ++i) {
    REQUIRE(tensor_bytes(pending[i]) == tensor_bytes(encoded.streamed[i]));
    if (tensor_bytes(pending[i]) > 0) {
      std::memcpy(pending[i].data_ptr(), encoded.streamed[i].data_ptr(),
                  tensor_bytes(pending[i]));
    }
  }
  if (encoded_out != nullptr) *encoded_out = std::move(encoded);
  return decoded;
}

at::Tensor random_tensor(at::ScalarType dtype, at::IntArrayRef shape, int seed) {
  at::manual_seed(seed);
  if (dtype == at::kBool) return at::rand(shape) > 0.5;
  if (at::isFloatingType(dtype) || at::isComplexType(dtype)) {
    return at::randn(shape, at::TensorOptions().dtype(dtype));
  }
  int64_t high = dtype == at::kByte ? 255 : 100;
  int64_t low = dtype == at::kByte ? 0 : -100;
  return at::randint(low, high, shape, at::TensorOptions().dtype(dtype));
}

// A message with one tensor value, to be corrupted by the caller.
struct OneTensor {
  capnp::MallocMessageBuilder builder;
  schema::Tensor::Builder tensor = builder.initRoot<schema::Value>().initTensor();
  c10::IValue decode(const DecodeLimits& limits = {}) {
    RoundTrip rt(builder);
    std::vector<at::Tensor> pending;
    return decode_value(rt.reader.getRoot<schema::Value>(), pending, limits);
  }
};

}  // namespace

TEST_CASE("a micro-batch's tag round-trips, the batch's counted labels included", "[wire][codec]") {
  MicroBatchTag tag;
  tag.job_id = 7;
  tag.step = 3;
  tag.index = 1;
  tag.count = 3;
  tag.samples = 3;
  tag.batch_samples = 8;
  tag.epoch = 2;
  tag.last = true;
  tag.batch_counted = 97;  // [loss] ignore_index: the batch's labels that count
  capnp::MallocMessageBuilder builder;
  encode_batch(tag, builder.initRoot<schema::MicroBatch>());
  RoundTrip rt(builder);
  const MicroBatchTag back = decode_batch(rt.reader.getRoot<schema::MicroBatch>());
  CHECK(back.batch_counted == 97);
  CHECK(back.batch_samples == 8);
  CHECK(back.samples == 3);
  CHECK(back.last);
}

TEST_CASE("every non-tensor value kind round-trips", "[wire][codec]") {
  std::vector<IndexedIValue> values = {
      {0, c10::IValue()},
      {1, c10::IValue::uninitialized()},
      {2, c10::IValue(int64_t{-1234567890123})},
      {3, c10::IValue(3.25)},
      {4, c10::IValue(std::numeric_limits<double>::quiet_NaN())},
      {5, c10::IValue(true)},
      {6, c10::IValue(false)},
      {7, c10::IValue(std::string("héllo, wire"))},
      {8, c10::IValue(std::string())},
      {9, c10::IValue(c10::List<int64_t>({1, -2, 3}))},
      {10, c10::IValue(c10::List<double>({0.5, -1e300}))},
      {11, c10::IValue(c10::List<bool>({true, false, true}))},
      {12, c10::IValue(c10::List<int64_t>())},
      {13, c10::IValue(c10::List<double>())},
      {14, c10::IValue(c10::List<bool>())},
  };
  std::vector<at::Tensor> pending;
  auto decoded = round_trip(values, kDefaultInlineLimit, pending);
  REQUIRE(decoded.size() == values.size());
  REQUIRE(pending.empty());
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("value " << i << " " << values[i].value.tagKind());
    std::string why;
    CHECK(decoded[i].index == values[i].index);
    CHECK(same_value(values[i].value, decoded[i].value, &why));
    INFO(why);
  }
  CHECK(decoded[1].value.tagKind() == "Uninitialized");
  CHECK(decoded[9].value.isIntList());
  CHECK(decoded[10].value.isDoubleList());
  CHECK(decoded[11].value.isBoolList());
}

TEST_CASE("tensors of every dtype and shape round-trip inline and streamed", "[wire][codec]") {
  const std::vector<at::ScalarType> dtypes = {
      at::kFloat, at::kDouble, at::kLong, at::kInt,   at::kShort,        at::kChar,
      at::kByte,  at::kBool,   at::kHalf, at::kBFloat16, at::kComplexFloat, at::kComplexDouble};
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3, 0, 2}, {1}, {7}, {5, 3}, {4, 3, 2, 3}};
  for (size_t inline_limit : {size_t{0}, size_t{16}, kDefaultInlineLimit}) {
    std::vector<IndexedIValue> values;
    uint32_t index = 0;
    for (auto dtype : dtypes) {
      for (const auto& shape : shapes) {
        values.push_back({index, random_tensor(dtype, shape, static_cast<int>(index))});
        ++index;
      }
    }
    std::vector<at::Tensor> pending;
    auto decoded = round_trip(values, inline_limit, pending);
    REQUIRE(decoded.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      std::string why;
      INFO("inline_limit " << inline_limit << " value " << i << " "
                           << values[i].value.toTensor().toString() << " "
                           << values[i].value.toTensor().sizes());
      CHECK(same_value(values[i].value, decoded[i].value, &why));
      INFO(why);
    }
  }
}

TEST_CASE("compressed transfers: floating tensors travel coded, inline and streamed; the rest "
          "as they are",
          "[wire][codec][compression]") {
  const auto codec = GENERATE(TensorCodec::kFp16, TensorCodec::kBf16, TensorCodec::kInt8);
  const size_t inline_limit = GENERATE(size_t{0}, kDefaultInlineLimit);
  INFO(ravnest::config::to_string(codec) << ", inline limit " << inline_limit);
  std::vector<IndexedIValue> values = {
      {0, random_tensor(at::kFloat, {4, 300}, 1)},      // 1200 values: 5 int8 blocks
      {1, random_tensor(at::kDouble, {3, 7}, 2)},
      {2, random_tensor(at::kLong, {32}, 3)},           // labels: never compressed
      {3, random_tensor(at::kFloat, {0, 5}, 4)},
      {4, c10::IValue(int64_t{7})}};
  values[0].value.toTensor().set_requires_grad(true);
  capnp::MallocMessageBuilder builder;
  auto transfer = builder.initRoot<schema::Transfer>();
  EncodedTensors encoded = encode_values(transfer, values, inline_limit, codec);
  RoundTrip rt(builder);
  std::vector<at::Tensor> pending;
  std::vector<std::function<void()>> after;
  auto decoded = decode_values(rt.reader.getRoot<schema::Transfer>(), pending, {}, &after);
  REQUIRE(pending.size() == encoded.streamed.size());
  uint64_t on_wire = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    REQUIRE(tensor_bytes(pending[i]) == tensor_bytes(encoded.streamed[i]));
    on_wire += tensor_bytes(pending[i]);
    if (tensor_bytes(pending[i]) > 0) {
      std::memcpy(pending[i].data_ptr(), encoded.streamed[i].data_ptr(), tensor_bytes(pending[i]));
    }
  }
  if (inline_limit == 0) {
    // Streamed: the coded bytes (2 or 1 per value), not the float32 ones.
    const uint64_t per_value = codec == TensorCodec::kInt8 ? 1 : 2;
    CHECK(on_wire == (1200 + 21) * per_value + 32 * 8);
    CHECK(after.size() == 2);  // the two floating tensors with bytes (an empty one is inline)
  } else {
    CHECK(after.empty());  // inline: decompressed at once
  }
  for (auto& fill : after) fill();
  REQUIRE(decoded.size() == values.size());
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    const at::Tensor sent = values[i].value.toTensor();
    const at::Tensor got = decoded[i].value.toTensor();
    CHECK(got.scalar_type() == sent.scalar_type());
    CHECK(got.sizes() == sent.sizes());
    // Exactly what the codec gives, whichever way it travelled.
    CHECK(got.equal(decompress_tensor(compress_tensor(sent, codec))));
    if (sent.numel() > 0) CHECK_FALSE(got.equal(sent));
  }
  CHECK(decoded[0].value.toTensor().requires_grad());
  CHECK(decoded[2].value.toTensor().equal(values[2].value.toTensor()));
  CHECK(decoded[4].value.toInt() == 7);
  CHECK_FALSE(encoded.saturated);
}

TEST_CASE("compressed tensors: the decoder refuses what does not add up", "[wire][codec][compression]") {
  auto message = [](TensorCodec codec, at::Tensor t, size_t inline_limit) {
    auto builder = std::make_unique<capnp::MallocMessageBuilder>();
    auto transfer = builder->initRoot<schema::Transfer>();
    encode_values(transfer, {{0, t}}, inline_limit, codec);
    return builder;
  };
  auto error_of = [](capnp::MessageBuilder& builder, std::vector<std::function<void()>>* after) {
    RoundTrip rt(builder);
    std::vector<at::Tensor> pending;
    try {
      decode_values(rt.reader.getRoot<schema::Transfer>(), pending, {}, after);
      return std::string("accepted");
    } catch (const WireError& e) {
      return std::string(e.what());
    }
  };
  std::vector<std::function<void()>> after;
  {
    auto b = message(TensorCodec::kInt8, at::ones({600}), kDefaultInlineLimit);
    b->getRoot<schema::Transfer>().getValues()[0].getValue().getTensor().setScales(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>("12345678"), 8));
    CHECK(error_of(*b, &after) ==
          "wire: compressed tensor has 8 bytes of scales, its codec and shape say 12");
  }
  {
    auto b = message(TensorCodec::kFp16, at::ones({6}), kDefaultInlineLimit);
    b->getRoot<schema::Transfer>().getValues()[0].getValue().getTensor().setCodec(9);
    CHECK(error_of(*b, &after) == "wire: unknown tensor codec 9");
  }
  {
    auto b = message(TensorCodec::kNone, at::arange(6), kDefaultInlineLimit);
    b->getRoot<schema::Transfer>().getValues()[0].getValue().getTensor().setCodec(3);
    CHECK(error_of(*b, &after) == "wire: a compressed tensor of dtype Long");
  }
  {
    auto b = message(TensorCodec::kFp16, at::ones({6}), 0);
    CHECK(error_of(*b, nullptr) == "wire: a compressed streamed tensor where none is expected");
    CHECK(error_of(*b, &after) == "accepted");
  }
  {
    auto b = message(TensorCodec::kFp16, at::ones({6}), kDefaultInlineLimit);
    auto t = b->getRoot<schema::Transfer>().getValues()[0].getValue().getTensor();
    t.setInline(capnp::Data::Reader(reinterpret_cast<const kj::byte*>("123456789012345678901234"), 24));
    CHECK(error_of(*b, &after) ==
          "wire: inline tensor has 24 bytes, its shape and dtype say 12");
  }
  {
    capnp::MallocMessageBuilder builder;
    auto transfer = builder.initRoot<schema::Transfer>();
    EncodedTensors encoded =
        encode_values(transfer, {{0, at::tensor({1.0f, 1e6f})}}, kDefaultInlineLimit,
                      TensorCodec::kFp16);
    CHECK(encoded.saturated);
  }
}

TEST_CASE("non-contiguous, offset and requires-grad tensors are sent as their values",
          "[wire][codec]") {
  at::Tensor base = at::arange(0, 240, at::kFloat).reshape({6, 40});
  at::Tensor grad = at::randn({3, 5}, at::kDouble).requires_grad_(true);
  at::Tensor conj = at::randn({4}, at::kComplexFloat).conj();  // lazy conjugate bit
  std::vector<IndexedIValue> values = {
      {0, base.t()},                                  // transposed
      {1, base.index({at::indexing::Slice(), at::indexing::Slice(1, at::indexing::None, 3)})},
      {2, base.narrow(1, 1, 1).squeeze(1)},           // strided column
      {3, base.view({-1}).narrow(0, 1, 17)},          // contiguous but misaligned (offset 4 bytes)
      {4, at::randn({2, 3}).expand({4, 2, 3})},       // zero strides
      {5, grad},
      {6, conj},
      {7, at::randn({30000}).narrow(0, 3, 25001)},       // misaligned, large, odd byte count
  };
  for (size_t inline_limit : {size_t{0}, kDefaultInlineLimit}) {
    std::vector<at::Tensor> pending;
    auto decoded = round_trip(values, inline_limit, pending);
    for (size_t i = 0; i < values.size(); ++i) {
      std::string why;
      INFO("value " << i << " inline_limit " << inline_limit);
      CHECK(same_value(values[i].value, decoded[i].value, &why));
      INFO(why);
    }
    CHECK(decoded[5].value.toTensor().requires_grad());
    CHECK(decoded[5].value.toTensor().is_leaf());
  }
}

TEST_CASE("dense tensors keep their memory layout: channels-last, permuted views",
          "[wire][codec]") {
  // A kernel rounds differently on another layout (a convolution on channels-last input against
  // a contiguous copy differs in the last bits), so an activation must arrive laid out as it left.
  at::Tensor nchw = at::randn({2, 3, 4, 5});
  std::vector<IndexedIValue> values = {
      {0, nchw.contiguous(at::MemoryFormat::ChannelsLast)},
      {1, at::randn({4, 5, 6}).permute({2, 0, 1})},
      {2, at::randn({3, 1, 4}).transpose(0, 2)},  // a size-1 dimension in the middle
      {3, at::randn({6, 40}).t()},
      {4, at::randn({6, 40}).narrow(1, 2, 10)},   // not dense: travels row-major
      {5, nchw.contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true)},
  };
  for (size_t inline_limit : {size_t{0}, kDefaultInlineLimit}) {
    INFO("inline limit " << inline_limit);
    std::vector<at::Tensor> pending;
    auto decoded = round_trip(values, inline_limit, pending);
    for (size_t i = 0; i < values.size(); ++i) {
      INFO("value " << i);
      const at::Tensor sent = values[i].value.toTensor();
      const at::Tensor got = decoded[i].value.toTensor();
      CHECK(got.equal(sent));
      if (i == 4) {
        CHECK(got.is_contiguous());
      } else {
        CHECK(ravnest::wire::test::same_layout(got, sent));
      }
    }
    CHECK(decoded[0].value.toTensor().is_contiguous(at::MemoryFormat::ChannelsLast));
    CHECK(decoded[5].value.toTensor().requires_grad());
    CHECK(decoded[5].value.toTensor().is_leaf());
  }
  // Compressed, inline and streamed: the layout holds too.
  for (size_t inline_limit : {size_t{0}, kDefaultInlineLimit}) {
    capnp::MallocMessageBuilder builder;
    auto transfer = builder.initRoot<schema::Transfer>();
    EncodedTensors encoded =
        encode_values(transfer, {values[0], values[1]}, inline_limit, TensorCodec::kInt8);
    RoundTrip rt(builder);
    std::vector<at::Tensor> pending;
    std::vector<std::function<void()>> after;
    auto decoded = decode_values(rt.reader.getRoot<schema::Transfer>(), pending, {}, &after);
    REQUIRE(pending.size() == encoded.streamed.size());
    for (size_t i = 0; i < pending.size(); ++i) {
      std::memcpy(pending[i].data_ptr(), encoded.streamed[i].data_ptr(), tensor_bytes(pending[i]));
    }
    for (auto& fill : after) fill();
    for (size_t i = 0; i < 2; ++i) {
      const at::Tensor sent = values[i].value.toTensor();
      const at::Tensor got = decoded[i].value.toTensor();
      CHECK(ravnest::wire::test::same_layout(got, sent));
      CHECK((got - sent).abs().max().item<float>() < 0.05f);
    }
  }
}

TEST_CASE("a memory order that is not a permutation of the shape is refused",
          "[wire][codec][robustness]") {
  for (const std::vector<uint8_t>& order :
       {std::vector<uint8_t>{0, 0, 1}, std::vector<uint8_t>{0, 1}, std::vector<uint8_t>{0, 1, 3}}) {
    OneTensor m;
    m.tensor.setDtype(static_cast<int8_t>(at::kFloat));
    auto shape = m.tensor.initShape(3);
    shape.set(0, 2);
    shape.set(1, 3);
    shape.set(2, 4);
    m.tensor.initInline(2 * 3 * 4 * 4);
    auto list = m.tensor.initMemoryOrder(static_cast<unsigned>(order.size()));
    for (size_t i = 0; i < order.size(); ++i) list.set(static_cast<unsigned>(i), order[i]);
    CHECK_THROWS(m.decode());
  }
}

TEST_CASE("inline tensors are referenced, not copied, by the message", "[wire][codec]") {
  at::Tensor t = at::randn({16, 16});
  capnp::MallocMessageBuilder builder;
  auto value = builder.initRoot<schema::Value>();
  std::vector<at::Tensor> streamed, keep_alive;
  encode_value(t, value, capnp::Orphanage::getForMessageContaining(value), 1 << 20, streamed,
               keep_alive);
  REQUIRE(value.getTensor().isInline());
  CHECK(value.asReader().getTensor().getInline().begin() ==
        static_cast<const kj::byte*>(t.data_ptr()));
  CHECK(streamed.empty());
  REQUIRE(keep_alive.size() == 1);
  CHECK(keep_alive[0].data_ptr() == t.data_ptr());

  // Large: streamed, announced with its byte count.
  capnp::MallocMessageBuilder builder2;
  auto value2 = builder2.initRoot<schema::Value>();
  streamed.clear();
  keep_alive.clear();
  encode_value(t, value2, capnp::Orphanage::getForMessageContaining(value2), 64, streamed,
               keep_alive);
  REQUIRE(value2.getTensor().isStreamed());
  CHECK(value2.getTensor().getStreamed() == 16 * 16 * 4);
  REQUIRE(streamed.size() == 1);
  CHECK(streamed[0].data_ptr() == t.data_ptr());
}

TEST_CASE("values the wire does not carry are refused with the type named", "[wire][codec]") {
  capnp::MallocMessageBuilder builder;
  auto value = builder.initRoot<schema::Value>();
  auto orphanage = capnp::Orphanage::getForMessageContaining(value);
  std::vector<at::Tensor> streamed, keep_alive;
  auto refuse = [&](const c10::IValue& v, const std::string& needle) {
    INFO(needle);
    try {
      encode_value(v, value, orphanage, 1024, streamed, keep_alive);
      FAIL("no exception");
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  refuse(c10::ivalue::Tuple::create({c10::IValue(1), c10::IValue(2)}), "Tuple");
  refuse(c10::IValue(c10::Dict<std::string, int64_t>()), "GenericDict");
  refuse(c10::IValue(c10::List<at::Tensor>({at::ones({2})})), "Tensor[]");
  refuse(c10::IValue(c10::List<std::string>({"a"})), "str[]");
  refuse(c10::IValue(c10::complex<double>(1, 2)), "ComplexDouble");
  refuse(c10::IValue(at::Tensor()), "undefined");
  refuse(c10::IValue(at::ones({2, 2}).to_sparse()), "Sparse");
  refuse(c10::IValue(at::quantize_per_tensor(at::ones({2}), 0.1, 0, at::kQInt8)), "QInt8");
  refuse(c10::IValue(c10::Device(c10::kCPU)), "Device");
  CHECK(streamed.empty());
}

TEST_CASE("the decoder refuses malformed tensors", "[wire][codec][robustness]") {
  auto expect_error = [](OneTensor& m, const std::string& needle, const DecodeLimits& limits = {}) {
    INFO(needle);
    try {
      m.decode(limits);
      FAIL("no exception");
    } catch (const WireError& e) {
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  SECTION("inline byte count differs from the shape") {
    OneTensor m;
    m.tensor.setDtype(6);
    m.tensor.initShape(1).set(0, 4);
    m.tensor.initInline(15);
    expect_error(m, "inline tensor has 15 bytes");
  }
  SECTION("streamed byte count differs from the shape") {
    OneTensor m;
    m.tensor.setDtype(4);
    m.tensor.initShape(2).set(0, 3);
    m.tensor.getShape().set(1, 3);
    m.tensor.setStreamed(71);
    expect_error(m, "announces 71 bytes");
  }
  SECTION("unknown dtypes") {
    for (int code : {-1, 12, 13, 16, 99, 127, -128}) {
      OneTensor m;
      m.tensor.setDtype(static_cast<int8_t>(code));
      m.tensor.initShape(0);
      m.tensor.initInline(8);
      expect_error(m, "dtype code " + std::to_string(code));
    }
  }
  SECTION("negative dimension") {
    OneTensor m;
    m.tensor.setDtype(6);
    m.tensor.initShape(2).set(0, 2);
    m.tensor.getShape().set(1, -2);
    m.tensor.initInline(0);
    expect_error(m, "negative dimension");
  }
  SECTION("absurd sizes are refused before any allocation") {
    OneTensor m;
    m.tensor.setDtype(7);
    m.tensor.initShape(2).set(0, int64_t{1} << 20);
    m.tensor.getShape().set(1, int64_t{1} << 20);  // 8 TiB
    m.tensor.setStreamed(uint64_t{8} << 40);
    expect_error(m, "exceeds the limit");
  }
  SECTION("element count overflowing 64 bits") {
    OneTensor m;
    m.tensor.setDtype(6);
    auto shape = m.tensor.initShape(3);
    shape.set(0, int64_t{1} << 62);
    shape.set(1, int64_t{1} << 62);
    shape.set(2, 0);  // the product is 0 mathematically, but the running product overflows
    m.tensor.setStreamed(0);
    expect_error(m, "overflows");
  }
  SECTION("byte count overflowing 64 bits") {
    OneTensor m;
    m.tensor.setDtype(7);
    m.tensor.initShape(1).set(0, int64_t{1} << 62);
    m.tensor.setStreamed(0);
    expect_error(m, "overflows");
  }
  SECTION("too many dimensions") {
    OneTensor m;
    m.tensor.setDtype(6);
    auto shape = m.tensor.initShape(65);
    for (unsigned i = 0; i < 65; ++i) shape.set(i, 1);
    m.tensor.initInline(4);
    expect_error(m, "dimensions");
  }
  SECTION("a configurable cap") {
    OneTensor m;
    m.tensor.setDtype(6);
    m.tensor.initShape(1).set(0, 1024);
    m.tensor.setStreamed(4096);
    DecodeLimits limits;
    limits.max_tensor_bytes = 4095;
    expect_error(m, "exceeds the limit", limits);
    limits.max_tensor_bytes = 4096;
    CHECK_NOTHROW(m.decode(limits));
  }
  SECTION("bool bytes other than 0 and 1") {
    OneTensor m;
    m.tensor.setDtype(11);
    m.tensor.initShape(1).set(0, 3);
    auto data = m.tensor.initInline(3);
    data[0] = 1;
    data[1] = 0;
    data[2] = 2;
    expect_error(m, "bool");
  }
  SECTION("requires grad on an integer tensor") {
    OneTensor m;
    m.tensor.setDtype(4);
    m.tensor.initShape(0);
    m.tensor.initInline(8);
    m.tensor.setRequiresGrad(true);
    expect_error(m, "cannot require grad");
  }
  SECTION("unset union: empty inline data of a non-empty shape") {
    OneTensor m;
    m.tensor.setDtype(6);
    m.tensor.initShape(1).set(0, 2);  // inline (the default member) with no data
    expect_error(m, "inline tensor has 0 bytes");
  }
}

TEST_CASE("the total limit counts every tensor of a transfer", "[wire][codec][robustness]") {
  capnp::MallocMessageBuilder builder;
  auto transfer = builder.initRoot<schema::Transfer>();
  auto list = transfer.initValues(3);
  for (unsigned i = 0; i < 3; ++i) {
    auto t = list[i].initValue().initTensor();
    t.setDtype(6);
    t.initShape(1).set(0, 1000);
    t.setStreamed(4000);
  }
  RoundTrip rt(builder);
  DecodeLimits limits;
  limits.max_total_bytes = 11999;
  std::vector<at::Tensor> pending;
  CHECK_THROWS_AS(decode_values(rt.reader.getRoot<schema::Transfer>(), pending, limits),
                  WireError);
  limits.max_total_bytes = 12000;
  pending.clear();
  CHECK(decode_values(rt.reader.getRoot<schema::Transfer>(), pending, limits).size() == 3);
  CHECK(pending.size() == 3);
}

TEST_CASE("corrupted and random messages throw, never crash", "[wire][codec][robustness]") {
  std::vector<IndexedIValue> values = {
      {0, at::randn({4, 5})},
      {1, at::randint(0, 10, {300}, at::kLong)},
      {2, c10::IValue(std::string("text"))},
      {3, c10::IValue(c10::List<int64_t>({1, 2, 3}))},
      {4, at::rand({3}) > 0.5},
  };
  capnp::MallocMessageBuilder builder;
  auto encoded = encode_values(builder.initRoot<schema::Transfer>(), values, 1024);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  std::mt19937 rng(1234);
  DecodeLimits limits;
  limits.max_total_bytes = 64 << 20;
  int decoded = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    kj::Array<capnp::word> copy = kj::heapArray<capnp::word>(words.size());
    std::memcpy(copy.begin(), words.begin(), bytes.size());
    auto b = copy.asBytes();
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<kj::byte>(1u << (rng() % 8));
    try {
      capnp::FlatArrayMessageReader reader(copy, reader_options(1 << 20));
      std::vector<at::Tensor> pending;
      auto out = decode_values(reader.getRoot<schema::Transfer>(), pending, limits);
      for (auto& v : out) (void)v.value.tagKind();
      ++decoded;
    } catch (const std::exception&) {
      ++refused;
    }
  }
  for (int round = 0; round < 500; ++round) {
    auto garbage = kj::heapArray<capnp::word>(1 + rng() % 64);
    for (auto& w : garbage.asBytes()) w = static_cast<kj::byte>(rng());
    try {
      capnp::FlatArrayMessageReader reader(garbage, reader_options(1 << 20));
      std::vector<at::Tensor> pending;
      decode_values(reader.getRoot<schema::Transfer>(), pending, limits);
      ++decoded;
    } catch (const std::exception&) {
      ++refused;
    }
  }
  CHECK(decoded + refused == 3500);
  CHECK(refused > 0);
}

// ---------------------------------------------------------------------------------------------
// Streams through in-process capabilities (no network).

namespace {

struct Loop {
  kj::EventLoop loop;
  kj::WaitScope scope{loop};
};

}  // namespace

TEST_CASE("stream_tensors fills a TensorSink in order, any chunk size", "[wire][stream]") {
  Loop loop;
  std::vector<at::Tensor> sent = {at::randn({1000}), at::randint(0, 100, {13}, at::kByte),
                                  at::empty({0}), at::randn({3, 333}, at::kDouble),
                                  at::rand({77}) > 0.5, at::randn({5}).to(at::kHalf)};
  for (size_t chunk : {size_t{1}, size_t{8}, size_t{24}, size_t{4096}, size_t{1} << 20}) {
    std::vector<at::Tensor> targets;
    for (auto& t : sent) targets.push_back(at::empty(t.sizes(), t.options()));
    auto opened = TensorSink::open(targets);
    stream_tensors(kj::mv(opened.sink), sent, chunk).wait(loop.scope);
    opened.completion.wait(loop.scope);
    for (size_t i = 0; i < sent.size(); ++i) {
      std::string why;
      INFO("chunk " << chunk << " tensor " << i);
      CHECK(same_tensor(sent[i], targets[i], &why));
      INFO(why);
    }
  }
}

TEST_CASE("a TensorSink refuses too many, too few and invalid bytes", "[wire][stream]") {
  Loop loop;
  SECTION("more bytes than announced") {
    auto opened = TensorSink::open({at::empty({10}, at::kFloat)});
    auto p = stream_tensors(kj::mv(opened.sink), {at::zeros({11}, at::kFloat)}, 8);
    CHECK_THROWS_WITH(p.wait(loop.scope), Catch::Contains("more bytes arrived than announced"));
    CHECK_THROWS_WITH(opened.completion.wait(loop.scope),
                      Catch::Contains("more bytes arrived than announced"));
  }
  SECTION("fewer bytes than announced") {
    auto opened = TensorSink::open({at::empty({10}, at::kFloat)});
    auto p = stream_tensors(kj::mv(opened.sink), {at::zeros({9}, at::kFloat)});
    CHECK_THROWS_WITH(p.wait(loop.scope), Catch::Contains("done() before all announced bytes"));
    CHECK_THROWS_WITH(opened.completion.wait(loop.scope), Catch::Contains("done() before"));
  }
  SECTION("bool bytes other than 0 and 1") {
    auto opened = TensorSink::open({at::empty({4}, at::kBool)});
    auto p = stream_tensors(kj::mv(opened.sink), {at::full({4}, 7, at::kByte)});
    CHECK_THROWS_WITH(p.wait(loop.scope), Catch::Contains("bool"));
  }
  SECTION("released before done") {
    auto opened = TensorSink::open({at::empty({4}, at::kFloat)});
    opened.sink = nullptr;
    CHECK_THROWS_WITH(opened.completion.wait(loop.scope), Catch::Contains("released before done"));
  }
  SECTION("targets must be contiguous") {
    CHECK_THROWS(TensorSink::open({at::empty({4, 4}).t()}));
  }
}

TEST_CASE("stream_bytes copies what it cannot reference (unaligned start, odd tail)",
          "[wire][stream]") {
  Loop loop;
  std::vector<kj::byte> source(100003);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<kj::byte>(i * 7 + 3);
  for (size_t offset : {0, 1, 3, 8}) {
    for (size_t chunk : {size_t{16}, size_t{4096}, size_t{1} << 20}) {
      size_t n = source.size() - offset;
      at::Tensor target = at::empty({static_cast<int64_t>(n)}, at::kByte);
      auto opened = TensorSink::open({target});
      stream_bytes(kj::mv(opened.sink), kj::arrayPtr(source.data() + offset, n), chunk)
          .wait(loop.scope);
      opened.completion.wait(loop.scope);
      INFO("offset " << offset << " chunk " << chunk);
      CHECK(std::memcmp(target.data_ptr(), source.data() + offset, n) == 0);
    }
  }
}

TEST_CASE("stream_tensors rejects (does not throw) an undefined tensor", "[wire][stream]") {
  Loop loop;
  auto opened = TensorSink::open({at::empty({4})});
  kj::Promise<void> p = nullptr;
  REQUIRE_NOTHROW(p = stream_tensors(kj::mv(opened.sink), {at::Tensor()}));
  CHECK_THROWS_WITH(p.wait(loop.scope), Catch::Contains("undefined tensor"));
}
