#include "libs/data/dataset.h"

#include "libs/graph/torch_errors.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <sstream>
#include <cerrno>
#include <cstdio>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/config/config_error.h"

namespace ravnest::data {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& origin, const std::string& message) {
  throw std::runtime_error(origin + ": " + message);
}

std::string shorten(const std::string& text, size_t limit = 40) {
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

at::Tensor index_tensor(const std::vector<int64_t>& indices) {
  return at::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())},
                       at::TensorOptions().dtype(at::kLong))
      .clone();
}

// Labels must be integers in [0, num_classes); `what(i)` names sample i in the message.
template <typename Describe>
void check_label_range(const at::Tensor& labels, int64_t num_classes, const std::string& origin,
                       Describe what) {
  if (num_classes <= 0) return;
  at::Tensor flat = labels.reshape({-1}).to(at::kDouble).contiguous();
  const double* v = flat.data_ptr<double>();
  const int64_t per_sample = labels.dim() == 0 || labels.size(0) == 0 ? 1 : flat.numel() / labels.size(0);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (v[i] != std::floor(v[i]) || v[i] < 0 || v[i] >= static_cast<double>(num_classes)) {
      std::ostringstream value;
      value << v[i];
      fail(origin, what(i / per_sample) + ": label " + value.str() + " is out of range [0, " +
                       std::to_string(num_classes) + ")");
    }
  }
}

// ------------------------------------------------------------------------------------- CSV

std::string trim(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && (text[begin] == ' ' || text[begin] == '\t')) ++begin;
  while (end > begin && (text[end - 1] == ' ' || text[end - 1] == '\t')) --end;
  std::string out(text.substr(begin, end - begin));
  if (out.size() >= 2 && out.front() == '"' && out.back() == '"') out = out.substr(1, out.size() - 2);
  return out;
}

void split_fields(std::string_view line, std::vector<std::string_view>* fields) {
  fields->clear();
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields->push_back(line.substr(start));
      return;
    }
    fields->push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

bool parse_double(std::string_view text, double* value) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), *value);
  return result.ec == std::errc() && result.ptr == text.data() + text.size() && std::isfinite(*value);
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// ---------------------------------------------------------------------------------- binary

uint32_t big_endian_u32(const std::string& bytes, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + at;
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// An idx file: magic (0x0000 08 <dims>), dims as big-endian u32, then uint8 data.
at::Tensor read_idx(const std::string& path, uint32_t expected_magic, const char* kind) {
  const std::string bytes = read_maybe_gzip(path);
  const uint32_t dims = expected_magic & 0xff;
  if (bytes.size() < 4) fail(path, std::string("not an MNIST idx ") + kind + " file (too short)");
  const uint32_t magic = big_endian_u32(bytes, 0);
  if (magic != expected_magic) {
    fail(path, std::string("not an MNIST idx ") + kind + " file: magic " + hex32(magic) + ", expected " +
                   hex32(expected_magic));
  }
  const size_t header = 4 + 4 * dims;
  if (bytes.size() < header) fail(path, "truncated idx header");
  std::vector<int64_t> shape;
  uint64_t count = 1;
  for (uint32_t d = 0; d < dims; ++d) {
    shape.push_back(big_endian_u32(bytes, 4 + 4 * d));
    count *= static_cast<uint64_t>(shape.back());
  }
  if (bytes.size() - header != count) {
    fail(path, "size mismatch: the header announces " + std::to_string(count) + " bytes of data (" +
                   shape_text(shape) + "), the file has " + std::to_string(bytes.size() - header));
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kByte));
  if (count) std::memcpy(out.data_ptr<uint8_t>(), bytes.data() + header, count);
  return out;
}

std::string first_existing(const std::vector<fs::path>& candidates) {
  for (const auto& c : candidates) {
    if (fs::is_regular_file(c)) return c.string();
  }
  return "";
}

// ----------------------------------------------------------------------------------- tensors

std::string kind_of(const c10::IValue& value) { return value.tagKind(); }

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

// ------------------------------------------------------------------------------------ Batch

Batch Batch::slice(int64_t begin, int64_t end) const {
  Batch out;
  for (const auto& t : inputs) out.inputs.push_back(t.slice(0, begin, end));
  out.labels = labels.slice(0, begin, end);
  return out;
}

// ---------------------------------------------------------------------------------- Dataset

Dataset::Dataset(std::vector<at::Tensor> inputs, at::Tensor labels, std::string origin,
                 bool bytes_to_unit_float)
    : inputs_(std::move(inputs)), labels_(std::move(labels)), origin_(std::move(origin)),
      bytes_to_unit_float_(bytes_to_unit_float) {
  if (!labels_.defined() || labels_.dim() == 0) fail(origin_, "the labels must have one row per sample");
  if (inputs_.empty()) fail(origin_, "no inputs");
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (!inputs_[i].defined() || inputs_[i].dim() == 0 || inputs_[i].size(0) != labels_.size(0)) {
      fail(origin_, "input " + std::to_string(i) + " has " +
                        (inputs_[i].defined() && inputs_[i].dim() ? std::to_string(inputs_[i].size(0)) : "no") +
                        " rows but there are " + std::to_string(labels_.size(0)) + " labels");
    }
  }
  if (labels_.size(0) == 0) fail(origin_, "empty dataset");
}

Batch Dataset::finish(std::vector<at::Tensor> inputs, at::Tensor labels) const {
  Batch batch;
  for (auto& t : inputs) {
    if (bytes_to_unit_float_ && t.scalar_type() == at::kByte) t = t.to(at::kFloat).div_(255);
    batch.inputs.push_back(std::move(t));
  }
  batch.labels = std::move(labels);
  return batch;
}

Batch Dataset::get(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (int64_t i : indices) {
    if (i < 0 || i >= n) {
      throw std::out_of_range(origin_ + ": sample index " + std::to_string(i) + " is out of range [0, " +
                              std::to_string(n) + ")");
    }
  }
  const at::Tensor index = index_tensor(indices);
  std::vector<at::Tensor> inputs;
  for (const auto& t : inputs_) inputs.push_back(t.index_select(0, index));
  return finish(std::move(inputs), labels_.index_select(0, index));
}

Batch Dataset::get_range(int64_t start, int64_t count) const {
  if (start < 0 || count < 0 || start + count > size()) {
    throw std::out_of_range(origin_ + ": samples [" + std::to_string(start) + ", " +
                            std::to_string(start + count) + ") are out of range [0, " +
                            std::to_string(size()) + ")");
  }
  std::vector<at::Tensor> inputs;
  for (const auto& t : inputs_) inputs.push_back(t.narrow(0, start, count).clone());
  return finish(std::move(inputs), labels_.narrow(0, start, count).clone());
}

// ------------------------------------------------------------------------------ read helpers

std::string read_maybe_gzip(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(path, "is a directory, expected a file");
  if (!fs::exists(path, ec)) fail(path, "no such file");
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) fail(path, std::string("cannot open: ") + std::strerror(errno));
  gzbuffer(file, 1 << 17);
  std::string out;
  std::vector<char> chunk(1 << 20);
  while (true) {
    const int got = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      fail(path, "read error: " + message);
    }
    if (got == 0) break;
    out.append(chunk.data(), static_cast<size_t>(got));
  }
  int code = 0;
  const char* message = gzerror(file, &code);
  if (code != Z_OK && code != Z_BUF_ERROR) {
    std::string text = message;
    gzclose(file);
    fail(path, "read error: " + text);
  }
  // A truncated gzip stream ends without error from gzread; gzclose reports it.
  if (gzclose(file) != Z_OK) fail(path, "read error: truncated or corrupt gzip data");
  return out;
}


// ------------------------------------------------------------------------------------- CSV

Dataset read_csv(const std::string& path, const CsvOptions& options) {
  const std::string text = read_maybe_gzip(path);
  std::vector<std::string_view> fields;
  std::vector<std::string> names;
  size_t columns = 0;
  int64_t label_col = -1;
  std::vector<float> features;
  std::vector<double> labels;
  std::vector<int64_t> label_lines;
  bool integral_labels = true;
  int64_t line_no = 0;

  auto resolve_label = [&](size_t ncols) {
    if (!options.label_column.empty()) {
      auto it = std::find(names.begin(), names.end(), options.label_column);
      if (it == names.end()) {
        std::string list;
        for (size_t i = 0; i < names.size(); ++i) {
          if (i == 3 && names.size() > 6) {
            list += ", ...";
            i = names.size() - 3;
          }
          list += (list.empty() ? "" : ", ") + shorten(names[i], 20);
        }
        fail(path, "no column named '" + options.label_column + "' in the header (" + list + ")");
      }
      label_col = it - names.begin();
    } else {
      int64_t index = options.label_index < 0 ? static_cast<int64_t>(ncols) + options.label_index
                                              : options.label_index;
      if (index < 0 || index >= static_cast<int64_t>(ncols)) {
        fail(path, "label column index " + std::to_string(options.label_index) +
                       " is out of range: the file has " + std::to_string(ncols) + " columns");
      }
      label_col = index;
    }
    if (ncols < 2) fail(path, "needs a label column and at least one feature column, got " +
                                  std::to_string(ncols) + " column");
  };

  size_t pos = 0;
  bool seen_header = !options.header;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    split_fields(line, &fields);
    if (!seen_header) {
      seen_header = true;
      for (auto f : fields) names.push_back(trim(f));
      columns = fields.size();
      resolve_label(columns);
      continue;
    }
    if (columns == 0) {
      columns = fields.size();
      resolve_label(columns);
    }
    if (fields.size() != columns) {
      fail(path, "line " + std::to_string(line_no) + ": expected " + std::to_string(columns) +
                     " columns, got " + std::to_string(fields.size()));
    }
    for (size_t c = 0; c < columns; ++c) {
      double value;
      if (!parse_double(fields[c], &value)) {
        std::string column = "column " + std::to_string(c + 1);
        if (!names.empty()) column += " ('" + shorten(names[c], 20) + "')";
        fail(path, "line " + std::to_string(line_no) + ", " + column + ": non-numeric value '" +
                       shorten(trim(fields[c])) + "'");
      }
      if (static_cast<int64_t>(c) == label_col) {
        labels.push_back(value);
        label_lines.push_back(line_no);
        if (value != std::floor(value) || std::fabs(value) > 9e15) integral_labels = false;
      } else {
        features.push_back(static_cast<float>(value));
      }
    }
  }
  if (labels.empty()) fail(path, "empty dataset (no data rows)");

  const int64_t rows = static_cast<int64_t>(labels.size());
  const int64_t per_row = static_cast<int64_t>(columns) - 1;
  if (options.num_classes > 0) {
    for (int64_t r = 0; r < rows; ++r) {
      const double v = labels[r];
      if (v != std::floor(v) || v < 0 || v >= static_cast<double>(options.num_classes)) {
        std::ostringstream value;
        value << v;
        fail(path, "row " + std::to_string(r + 1) + " (line " + std::to_string(label_lines[r]) +
                       "): label " + value.str() + " is out of range [0, " +
                       std::to_string(options.num_classes) + ")");
      }
    }
  }
  std::vector<int64_t> shape = options.input_shape.empty() ? std::vector<int64_t>{per_row} : options.input_shape;
  if (product(shape) != per_row) {
    fail(path, "input_shape " + shape_text(shape) + " holds " + std::to_string(product(shape)) +
                   " values but each row has " + std::to_string(per_row) + " features");
  }
  std::vector<int64_t> full{rows};
  full.insert(full.end(), shape.begin(), shape.end());
  at::Tensor x = at::from_blob(features.data(), full, at::TensorOptions().dtype(at::kFloat)).clone();
  if (options.scale != 1.0) x = x.mul(options.scale);
  at::Tensor y;
  if (integral_labels) {
    y = at::empty({rows}, at::TensorOptions().dtype(at::kLong));
    int64_t* out = y.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<int64_t>(labels[r]);
  } else {
    y = at::from_blob(labels.data(), {rows}, at::TensorOptions().dtype(at::kDouble)).to(at::kFloat);
  }
  return Dataset({x}, y, path);
}

// ----------------------------------------------------------------------------------- MNIST

Dataset read_mnist(const std::string& path, Split split) {
  std::error_code ec;
  std::string images, labels;
  if (fs::is_directory(path, ec)) {
    const std::string prefix = split == Split::kTrain ? "train" : "t10k";
    std::vector<fs::path> dirs = {fs::path(path), fs::path(path) / "MNIST" / "raw", fs::path(path) / "raw"};
    for (const auto& dir : dirs) {
      std::vector<fs::path> image_names, label_names;
      for (const char* sep : {"-", "."}) {
        for (const char* gz : {"", ".gz"}) {
          image_names.push_back(dir / (prefix + "-images" + sep + "idx3-ubyte" + gz));
          label_names.push_back(dir / (prefix + "-labels" + sep + "idx1-ubyte" + gz));
        }
      }
      images = first_existing(image_names);
      labels = first_existing(label_names);
      if (!images.empty()) break;
    }
    if (images.empty()) {
      fail(path, "no " + prefix + "-images-idx3-ubyte[.gz] in this directory (nor in MNIST/raw/, raw/)");
    }
    if (labels.empty()) fail(path, "no " + prefix + "-labels-idx1-ubyte[.gz] next to " + images);
  } else {
    if (!fs::exists(path, ec)) fail(path, "no such file or directory");
    images = path;
    const std::string name = fs::path(path).filename().string();
    std::string label_name = name;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"images-idx3", "labels-idx1"}, {"images.idx3", "labels.idx1"}}) {
      const auto at = label_name.find(from);
      if (at != std::string::npos) {
        label_name.replace(at, from.size(), to);
        break;
      }
    }
    if (label_name == name) {
      fail(path, "cannot tell the labels file from this name: expected an images file named like "
                 "train-images-idx3-ubyte[.gz], or give the directory");
    }
    std::vector<fs::path> candidates = {fs::path(path).parent_path() / label_name};
    // The labels may be compressed when the images are not, or the other way round.
    if (label_name.size() > 3 && label_name.substr(label_name.size() - 3) == ".gz") {
      candidates.push_back(fs::path(path).parent_path() / label_name.substr(0, label_name.size() - 3));
    } else {
      candidates.push_back(fs::path(path).parent_path() / (label_name + ".gz"));
    }
    labels = first_existing(candidates);
    if (labels.empty()) fail(path, "the labels file " + candidates[0].string() + " does not exist");
  }
  at::Tensor x = read_idx(images, 0x00000803, "images");
  at::Tensor y = read_idx(labels, 0x00000801, "labels");
  if (x.size(0) != y.size(0)) {
    fail(images, std::to_string(x.size(0)) + " images but " + labels + " has " + std::to_string(y.size(0)) +
                     " labels");
  }
  if (x.size(0) == 0) fail(images, "empty dataset (no images)");
  return Dataset({x.unsqueeze(1)}, y.to(at::kLong), images, /*bytes_to_unit_float=*/true);
}

// -------------------------------------------------------------------------------- CIFAR-10

Dataset read_cifar10(const std::string& path, Split split) {
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    fs::path dir(path);
    if (!fs::exists(dir / "test_batch.bin") && !fs::exists(dir / "data_batch_1.bin") &&
        fs::is_directory(dir / "cifar-10-batches-bin")) {
      dir /= "cifar-10-batches-bin";
    }
    if (split == Split::kTrain) {
      std::map<int, std::string> numbered;
      for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("data_batch_", 0) == 0 && name.size() > 15 && name.substr(name.size() - 4) == ".bin") {
          try {
            numbered[std::stoi(name.substr(11, name.size() - 15))] = entry.path().string();
          } catch (const std::exception&) {
          }
        }
      }
      for (const auto& [n, file] : numbered) files.push_back(file);
      if (files.empty()) fail(path, "no data_batch_*.bin in this directory (CIFAR-10 binary version)");
    } else {
      if (!fs::exists(dir / "test_batch.bin")) fail(path, "no test_batch.bin in this directory");
      files.push_back((dir / "test_batch.bin").string());
    }
  } else {
    files.push_back(path);
  }
  std::vector<std::string> contents;
  int64_t total = 0;
  for (const auto& file : files) {
    contents.push_back(read_maybe_gzip(file));
    const auto size = static_cast<int64_t>(contents.back().size());
    if (size % kRecord != 0) {
      fail(file, "size " + std::to_string(size) + " is not a multiple of 3073 bytes (1 label byte + 3072 "
                 "pixel bytes per image): not a CIFAR-10 binary batch");
    }
    total += size / kRecord;
  }
  if (total == 0) fail(files.front(), "empty dataset (no images)");
  at::Tensor x = at::empty({total, 3, 32, 32}, at::TensorOptions().dtype(at::kByte));
  at::Tensor y = at::empty({total}, at::TensorOptions().dtype(at::kLong));
  uint8_t* px = x.data_ptr<uint8_t>();
  int64_t* py = y.data_ptr<int64_t>();
  int64_t row = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(contents[f].data());
    const int64_t records = static_cast<int64_t>(contents[f].size()) / kRecord;
    for (int64_t r = 0; r < records; ++r, ++row) {
      const uint8_t* record = bytes + r * kRecord;
      if (record[0] >= 10) {
        fail(files[f], "record " + std::to_string(r + 1) + ": label " + std::to_string(record[0]) +
                           " is out of range [0, 10)");
      }
      py[row] = record[0];
      std::memcpy(px + row * (kRecord - 1), record + 1, kRecord - 1);
    }
  }
  return Dataset({x}, y, files.size() == 1 ? files.front() : path, /*bytes_to_unit_float=*/true);
}

// ---------------------------------------------------------------------------------- tensors

Dataset read_tensors(const std::string& path) {
  const std::string bytes = read_maybe_gzip(path);
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    fail(path, "not a file saved with torch.save that LibTorch can read (" + graph::torch_message(e) +
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
    if (items.size() != 2) {
      fail(path, "holds a tuple of " + std::to_string(items.size()) + " items, expected (inputs, labels)");
    }
    inputs = items[0];
    labels = items[1];
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
    if (labels.isNone()) fail(path, "the dict has no \"labels\"");
  } else {
    fail(path, "holds a " + kind_of(value) + ", expected a tuple (inputs, labels) or a dict "
               "{\"inputs\": ..., \"labels\": ...}");
  }
  if (!labels.isTensor()) fail(path, "the labels are a " + kind_of(labels) + ", expected a tensor");
  at::Tensor y = labels.toTensor().detach().contiguous();
  if (y.dim() == 0) fail(path, "the labels are a scalar, expected one row per sample");
  std::vector<at::Tensor> x = tensors_of(inputs, path);
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

// --------------------------------------------------------------------------- load_dataset

Dataset load_dataset(const config::DataSpec& spec, Split split) {
  const config::JobPath& where = split == Split::kTrain ? spec.train : spec.validation;
  if (where.empty()) {
    throw config::ConfigError(std::string("data.") + (split == Split::kTrain ? "train" : "validation") +
                              ": not set");
  }
  const std::string& path = where.resolved;
  const int64_t num_classes = spec.num_classes.value_or(0);
  switch (spec.format) {
    case config::DataFormat::kCsv: {
      CsvOptions options;
      options.header = spec.header;
      options.label_column = spec.label_column;
      options.label_index = spec.label_index;
      options.input_shape = spec.input_shape;
      options.scale = spec.scale;
      options.num_classes = num_classes;
      return read_csv(path, options);
    }
    case config::DataFormat::kMnist: {
      Dataset d = read_mnist(path, split);
      check_label_range(d.labels(), num_classes, d.origin(),
                        [](int64_t i) { return "image " + std::to_string(i + 1); });
      return d;
    }
    case config::DataFormat::kCifar10: {
      Dataset d = read_cifar10(path, split);
      check_label_range(d.labels(), num_classes, d.origin(),
                        [](int64_t i) { return "image " + std::to_string(i + 1); });
      return d;
    }
    case config::DataFormat::kTensors: {
      Dataset d = read_tensors(path);
      check_label_range(d.labels(), num_classes, d.origin(),
                        [](int64_t i) { return "sample " + std::to_string(i + 1); });
      return d;
    }
  }
  throw std::logic_error("load_dataset: unknown format");
}

}  // namespace ravnest::data
