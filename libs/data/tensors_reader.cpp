// read_tensors(): tensors saved with torch.save (dataset.h).
//
// LibTorch 1.13's loader (torch::jit::pickle_load) trusts the file: fuzzing found that a pickle
// announcing a 4 GiB string makes it allocate 4 GiB before reading, and that a storage whose
// pickle claims more elements than its record holds becomes a tensor reaching past its buffer (a
// heap overflow when the dataset is read). So the file is read here in three steps:
//   1. the archive is opened with LibTorch's own reader (PyTorchStreamReader: records are bounded
//      by the file), data.pkl is scanned (check_pickle: every length inside the record, memo
//      indices dense, only pickle's opcodes);
//   2. every storage record is read into a storage of exactly its size, handed to the unpickler
//      (DeserializationStorageContext), so that the pickle's element counts are never trusted;
//   3. every tensor of the result must be strided, of an ordinary dtype, on one of those
//      storages, and reach no byte past it (check_within_storage).
#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>

#include <cstring>
#include <memory>
#include <set>

#include "libs/data/dataset.h"
#include "libs/data/reader_internal.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::data {
namespace {

using detail::fail;

std::string kind_of(const c10::IValue& value) { return value.tagKind(); }

// The file's bytes for LibTorch's archive reader, never read past their end.
class BytesAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesAdapter(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// Step 1: the pickle's opcodes (Python's pickletools), each with its argument inside the record.
// Returns why not, or "".
std::string check_pickle(const uint8_t* p, size_t size) {
  size_t at = 0;
  uint64_t memo = 0;  // memo entries so far: a PUT may only add the next one or replace one
  auto need = [&](uint64_t n) { return n <= size - at; };
  auto little = [&](size_t bytes) {
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= uint64_t{p[at + i]} << (8 * i);
    at += bytes;
    return v;
  };
  auto put = [&](uint64_t index) {
    if (index > memo) return false;
    if (index == memo) ++memo;
    return true;
  };
  while (at < size) {
    const uint8_t op = p[at++];
    switch (op) {
      case '.':  // STOP
        return "";
      // no argument
      case '(': case '0': case '1': case '2': case 'N': case 0x88: case 0x89: case ')': case 't':
      case 0x85: case 0x86: case 0x87: case ']': case 'a': case 'e': case 'l': case '}':
      case 'd': case 's': case 'u': case 0x8f: case 0x90: case 0x91: case 'Q': case 'R':
      case 'b': case 'o': case 0x81: case 0x92: case 0x93: case 0x97: case 0x98:
        break;
      case 0x94:  // MEMOIZE
        ++memo;
        break;
      // fixed-size arguments
      case 0x80: case 'h': case 'K': case 0x82:  // PROTO BINGET BININT1 EXT1
        if (!need(1)) return "truncated";
        at += 1;
        break;
      case 'q':  // BINPUT
        if (!need(1)) return "truncated";
        if (!put(little(1))) return "memo index out of order";
        break;
      case 'M': case 0x83:  // BININT2 EXT2
        if (!need(2)) return "truncated";
        at += 2;
        break;
      case 'J': case 'j': case 0x84:  // BININT LONG_BINGET EXT4
        if (!need(4)) return "truncated";
        at += 4;
        break;
      case 'r':  // LONG_BINPUT
        if (!need(4)) return "truncated";
        if (!put(little(4))) return "memo index out of order";
        break;
      case 'G':  // BINFLOAT
        if (!need(8)) return "truncated";
        at += 8;
        break;
      // length-prefixed arguments
      case 'U': case 'C': case 0x8c: case 0x8a: {  // SHORT_BINSTRING SHORT_BINBYTES
        if (!need(1)) return "truncated";          // SHORT_BINUNICODE LONG1
        const uint64_t n = little(1);
        if (op == 0x8a && n > 8) return "an integer of more than 64 bits";
        if (!need(n)) return "a length past the end";
        at += n;
        break;
      }
      case 'T': case 'B': case 'X': case 0x8b: {  // BINSTRING BINBYTES BINUNICODE LONG4
        if (!need(4)) return "truncated";
        const uint64_t n = little(4);
        if (op == 0x8b && n > 8) return "an integer of more than 64 bits";
        if (!need(n)) return "a length past the end";
        at += n;
        break;
      }
      case 0x8d: case 0x8e: case 0x96: case 0x95: {  // BINUNICODE8 BINBYTES8 BYTEARRAY8 FRAME
        if (!need(8)) return "truncated";
        const uint64_t n = little(8);
        if (op == 0x95) break;  // FRAME: the opcodes follow
        if (!need(n)) return "a length past the end";
        at += n;
        break;
      }
      // arguments ending with a newline (two for GLOBAL and INST)
      case 'I': case 'L': case 'F': case 'S': case 'V': case 'p': case 'g': case 'P':
      case 'c': case 'i': {
        for (int lines = (op == 'c' || op == 'i') ? 2 : 1; lines > 0; --lines) {
          const void* end = std::memchr(p + at, '\n', size - at);
          if (!end) return "truncated";
          at = static_cast<size_t>(static_cast<const uint8_t*>(end) - p) + 1;
        }
        if (op == 'p') ++memo;  // PUT (its index is text; LibTorch refuses it anyway)
        break;
      }
      default:
        return "unknown opcode " + std::to_string(op);
    }
  }
  return "no STOP";
}

// Step 3: a tensor that only views bytes of a storage the file held.
std::string check_within_storage(const at::Tensor& t, const std::set<const void*>& storages) {
  if (!t.defined()) return "an undefined tensor";
  if (t.layout() != c10::kStrided || t.is_quantized()) return "a tensor that is not dense";
  if (t.numel() == 0) return "";
  if (!storages.count(t.storage().unsafeGetStorageImpl())) return "a tensor without its storage";
  if (t.storage_offset() < 0) return "a negative storage offset";
  uint64_t last = static_cast<uint64_t>(t.storage_offset());
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) return "a negative stride";
    uint64_t reach = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.size(d) - 1),
                               static_cast<uint64_t>(t.stride(d)), &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      return "a tensor larger than 2^64 elements";
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(last + 1, static_cast<uint64_t>(t.element_size()), &bytes) ||
      bytes > t.storage().nbytes()) {
    return "a tensor of " + detail::shape_text(t.sizes().vec()) + " reaching past its storage of " +
           std::to_string(t.storage().nbytes()) + " bytes";
  }
  return "";
}

c10::IValue load(const std::string& path, const std::string& bytes, std::set<const void*>& storages) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesAdapter>(bytes));
  if (!reader.hasRecord("data.pkl")) fail(path, "no data.pkl in the archive");
  const auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  const std::string why = check_pickle(static_cast<const uint8_t*>(pickle.get()), pickle_size);
  if (!why.empty()) fail(path, "a malformed pickle in data.pkl: " + why);
  auto context = std::make_shared<torch::jit::DeserializationStorageContext>();
  for (const std::string& name : reader.getAllRecords()) {
    if (name.rfind("data/", 0) != 0) continue;
    auto [data, size] = reader.getRecord(name);
    c10::Storage storage(c10::Storage::use_byte_size_t(), size, std::move(data),
                         /*allocator=*/nullptr, /*resizable=*/false);
    storages.insert(storage.unsafeGetStorageImpl());
    context->addStorage(name.substr(5), std::move(storage));
  }
  return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                           /*type_resolver=*/c10::nullopt,
                                           /*obj_loader=*/c10::nullopt, /*device=*/c10::nullopt,
                                           reader, torch::jit::Unpickler::defaultTypeParser,
                                           context);
}

std::vector<at::Tensor> tensors_of(const c10::IValue& value, const std::string& path) {
  std::vector<at::Tensor> out;
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) {
      if (!item.isTensor()) fail(path, "the inputs hold a " + kind_of(item) + ", expected tensors");
      out.push_back(item.toTensor());
    }
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) {
      if (!item.isTensor()) fail(path, "the inputs hold a " + kind_of(item) + ", expected tensors");
      out.push_back(item.toTensor());
    }
  } else {
    fail(path, "the inputs are a " + kind_of(value) + ", expected a tensor or a tuple of tensors");
  }
  if (out.empty()) fail(path, "the inputs are an empty tuple");
  return out;
}

}  // namespace

std::vector<at::Tensor> detail::read_saved_tensors(const std::string& path) {
  const std::string bytes = read_maybe_gzip(path);
  c10::IValue value;
  std::set<const void*> storages;
  try {
    value = load(path, bytes, storages);
  } catch (const std::exception& e) {
    if (std::string(e.what()).rfind(path + ": ", 0) == 0) throw;  // ours, already one line
    fail(path, "not a file saved with torch.save that LibTorch can read (" +
                   torch_support::torch_message(e) + ")");
  }
  // Not tensors_of: its words are a dataset's ("the inputs are ...").
  std::vector<at::Tensor> out;
  std::vector<c10::IValue> items;
  if (value.isTensor()) {
    items.push_back(value);
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) items.push_back(item);
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) items.push_back(item);
  } else {
    fail(path, "holds a " + kind_of(value) + ", expected a tensor or a list of tensors");
  }
  for (const auto& item : items) {
    if (!item.isTensor()) {
      fail(path, "holds a list of " + kind_of(item) + ", expected a list of tensors");
    }
    out.push_back(item.toTensor());
  }
  if (out.empty()) fail(path, "holds an empty list, expected tensors");
  for (auto& t : out) {
    const std::string why = check_within_storage(t, storages);
    if (!why.empty()) fail(path, "holds " + why + " (a malformed file)");
    t = t.detach().contiguous();
  }
  return out;
}

Dataset read_tensors(const std::string& path, bool labels_optional) {
  const std::string bytes = read_maybe_gzip(path);
  c10::IValue value;
  std::set<const void*> storages;
  try {
    value = load(path, bytes, storages);
  } catch (const std::exception& e) {
    if (std::string(e.what()).rfind(path + ": ", 0) == 0) throw;  // ours, already one line
    fail(path, "not a file saved with torch.save that LibTorch can read (" + torch_support::torch_message(e) +
                   "); save a tuple (inputs, labels) or a dict {\"inputs\": ..., \"labels\": ...} "
                   "(LibTorch cannot unpickle one-element lists or dicts)");
  }
  c10::IValue inputs, labels;
  if (value.isTuple() || value.isList()) {
    std::vector<c10::IValue> items;
    if (value.isTuple()) {
      for (const auto& item : value.toTupleRef().elements()) items.push_back(item);
    } else {
      for (const auto& item : value.toListRef()) items.push_back(item);
    }
    if (items.size() == 1 && labels_optional) {
      inputs = items[0];  // (inputs,): to predict on
    } else {
      if (items.size() != 2) {
        fail(path, "holds a tuple of " + std::to_string(items.size()) + " items, expected (inputs, labels)");
      }
      inputs = items[0];
      labels = items[1];
    }
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (!entry.key().isString()) fail(path, "the dict's keys must be \"inputs\" and \"labels\"");
      const std::string key = entry.key().toStringRef();
      if (key == "inputs") {
        inputs = entry.value();
      } else if (key == "labels") {
        labels = entry.value();
      } else {
        fail(path, "unexpected key \"" + key + "\" in the dict (expected \"inputs\" and \"labels\")");
      }
    }
    if (inputs.isNone()) fail(path, "the dict has no \"inputs\"");
    if (labels.isNone() && !labels_optional) fail(path, "the dict has no \"labels\"");
  } else if (value.isTensor() && labels_optional) {
    inputs = value;  // the inputs alone, to predict on
  } else {
    fail(path, "holds a " + kind_of(value) + ", expected a tuple (inputs, labels) or a dict "
               "{\"inputs\": ..., \"labels\": ...}");
  }
  std::vector<at::Tensor> x = tensors_of(inputs, path);
  if (labels.isNone() && labels_optional && !x.empty() && x[0].dim() > 0) {
    labels = at::zeros({x[0].size(0)}, at::kLong);  // none: read and ignored
    storages.insert(labels.toTensor().storage().unsafeGetStorageImpl());
  }
  if (!labels.isTensor()) fail(path, "the labels are a " + kind_of(labels) + ", expected a tensor");
  const std::string why = check_within_storage(labels.toTensor(), storages);
  if (!why.empty()) fail(path, "the labels are " + why + " (a malformed file)");
  for (size_t i = 0; i < x.size(); ++i) {
    const std::string why = check_within_storage(x[i], storages);
    if (!why.empty()) fail(path, "input " + std::to_string(i) + " is " + why + " (a malformed file)");
  }
  at::Tensor y = labels.toTensor().detach().contiguous();
  if (y.dim() == 0) fail(path, "the labels are a scalar, expected one row per sample");
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = x[i].detach().contiguous();
    if (x[i].dim() == 0 || x[i].size(0) != y.size(0)) {
      fail(path, (x.size() == 1 ? std::string("the inputs have ") : "input " + std::to_string(i) + " has ") +
                     (x[i].dim() ? std::to_string(x[i].size(0)) : std::string("no")) + " rows but there are " +
                     std::to_string(y.size(0)) + " labels");
    }
  }
  if (y.size(0) == 0) fail(path, "empty dataset (no samples)");
  return Dataset(std::move(x), y, path);
}

}  // namespace ravnest::data
