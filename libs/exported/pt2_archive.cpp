#include "libs/exported/pt2_archive.h"

#include <cstring>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/istream_adapter.h>
#include <ATen/ATen.h>

#include "libs/base/config_error.h"
#include "libs/base/printable.h"
#include "libs/exported/scalar_types.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::exported {
namespace {

using base::ConfigError;
using caffe2::serialize::PyTorchStreamReader;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw ConfigError(origin + ": " + what);
}

std::string read_record(PyTorchStreamReader& reader, const std::string& origin,
                        const std::string& name, size_t limit) {
  if (!reader.hasRecord(name)) fail(origin, "no " + name + " in the archive");
  const size_t size = reader.getRecordSize(name);
  if (size > limit) {
    fail(origin, name + " is " + std::to_string(size) + " bytes, more than the " +
                     std::to_string(limit >> 20) + " MiB it may have");
  }
  auto [data, bytes] = reader.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), bytes);
}

// The element count an entry's layout reaches into its file, checked against overflow.
bool reach_of(const PayloadTensor& t, uint64_t& elements) {
  uint64_t last = t.storage_offset;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] == 0) {
      elements = 0;
      return true;
    }
    uint64_t step = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.sizes[d] - 1),
                               static_cast<uint64_t>(t.strides[d]), &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return false;
    }
  }
  elements = last + 1;
  return elements != 0;
}

std::string shape_text(const std::vector<int64_t>& sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

// The tensors of one payload config (directory "data/weights/" or "data/constants/").
std::map<std::string, at::Tensor> read_payload(PyTorchStreamReader& reader,
                                               const std::string& origin,
                                               const PayloadConfig& config,
                                               const std::string& directory) {
  std::map<std::string, at::Tensor> files;  // path_name -> its bytes as a flat tensor
  std::map<std::string, at::Tensor> out;
  // One tensor per (file, layout): tied weights stay one tensor.
  std::map<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>, int64_t>, at::Tensor>
      views;
  for (const auto& [name, t] : config) {
    const std::string entry = "'" + base::printable(name, 100) + "'";
    if (t.use_pickle) {
      fail(origin, directory + " entry " + entry +
                       " is pickled (a tensor subclass); only plain tensors are read");
    }
    const std::string record = directory + t.path_name;
    if (t.path_name.empty() || t.path_name.find('/') != std::string::npos) {
      fail(origin, directory + " entry " + entry + ": bad path_name '" +
                       base::printable(t.path_name, 100) + "'");
    }
    if (t.device_type != "cpu" && t.device_type != "cuda" && t.device_type != "meta") {
      fail(origin, directory + " entry " + entry + ": device type '" +
                       base::printable(t.device_type, 40) + "' is not read");
    }
    const at::ScalarType dtype = to_scalar_type(t.dtype);
    const size_t element = scalar_type_size(t.dtype);
    uint64_t elements = 0;
    if (!reach_of(t, elements) || elements > (uint64_t{1} << 50)) {
      fail(origin, record + " (" + entry + "): sizes " + shape_text(t.sizes) + " with strides " +
                       shape_text(t.strides) + " are beyond any tensor");
    }
    if (!reader.hasRecord(record)) fail(origin, "no " + record + " (" + entry + ") in the archive");
    auto file = files.find(t.path_name);
    if (file == files.end()) {
      const size_t nbytes = reader.getRecordSize(record);
      if (nbytes % element != 0) {
        fail(origin, record + " (" + entry + ") is " + std::to_string(nbytes) +
                         " bytes, not a multiple of its dtype's " + std::to_string(element));
      }
      at::Tensor flat = at::empty({static_cast<int64_t>(nbytes / element)},
                                  at::TensorOptions().dtype(dtype));
      if (nbytes) reader.getRecord(record, flat.data_ptr(), nbytes);
      file = files.emplace(t.path_name, flat).first;
    }
    const at::Tensor& flat = file->second;
    at::Tensor tensor;
    if (flat.numel() == 0 && elements > 0) {
      // What torch.export.save writes for a tensor without data (Python reads it as zeros).
      tensor = at::zeros(t.sizes, at::TensorOptions().dtype(dtype));
    } else if (elements > static_cast<uint64_t>(flat.numel())) {
      fail(origin, record + " (" + entry + ") is " + std::to_string(flat.numel() * element) +
                       " bytes; its sizes " + shape_text(t.sizes) + " need " +
                       std::to_string(elements * element));
    } else if (flat.scalar_type() != dtype) {
      fail(origin, record + " (" + entry + ") is shared by tensors of different dtypes");
    } else {
      const auto key = std::make_tuple(t.path_name, t.sizes, t.strides, t.storage_offset);
      auto view = views.find(key);
      if (view == views.end()) {
        view = views.emplace(key, flat.as_strided(t.sizes, t.strides, t.storage_offset).detach()).first;
      }
      tensor = view->second;
    }
    // A parameter is a leaf that autograd fills (tied entries are the same tensor: set once).
    if (t.is_param && t.requires_grad && !tensor.requires_grad()) tensor.requires_grad_(true);
    out.emplace(name, tensor);
  }
  return out;
}

Pt2Archive read(PyTorchStreamReader& reader, const std::string& origin) {
  Pt2Archive archive;
  archive.origin = origin;
  std::vector<std::string> models;
  for (const std::string& record : reader.getAllRecords()) {
    if (record.rfind("models/", 0) == 0 && record.size() > 12 &&
        record.compare(record.size() - 5, 5, ".json") == 0 &&
        record.find('/', 7) == std::string::npos) {
      models.push_back(record.substr(7, record.size() - 12));
    }
  }
  if (reader.hasRecord("archive_format")) {
    const std::string format = read_record(reader, origin, "archive_format", 64);
    if (format != "pt2") {
      fail(origin, "archive_format is '" + base::printable(format, 40) +
                       "', not a torch.export archive (pt2)");
    }
  }
  if (models.empty()) {
    fail(origin, "no models/<name>.json: not a torch.export archive (torch.export.save's .pt2)");
  }
  if (models.size() > 1) {
    fail(origin, "holds " + std::to_string(models.size()) + " models (" +
                     base::printable(models[0], 40) + ", " + base::printable(models[1], 40) +
                     ", ...); one model an archive is read");
  }
  archive.model_name = models[0];
  const std::string model_json = "models/" + archive.model_name + ".json";
  archive.model_json = read_record(reader, origin, model_json, kMaxModelJsonBytes);
  archive.program = parse_exported_program(archive.model_json, origin + " (" + model_json + ")");

  const std::string weights_config = "data/weights/" + archive.model_name + "_weights_config.json";
  if (reader.hasRecord(weights_config)) {
    const PayloadConfig config = parse_payload_config(
        read_record(reader, origin, weights_config, kMaxModelJsonBytes),
        origin + " (" + weights_config + ")");
    archive.weights = read_payload(reader, origin, config, "data/weights/");
  }
  const std::string constants_config =
      "data/constants/" + archive.model_name + "_constants_config.json";
  if (reader.hasRecord(constants_config)) {
    const PayloadConfig config = parse_payload_config(
        read_record(reader, origin, constants_config, kMaxModelJsonBytes),
        origin + " (" + constants_config + ")");
    archive.constants = read_payload(reader, origin, config, "data/constants/");
  }
  return archive;
}

template <typename MakeReader>
Pt2Archive read_with(const std::string& origin, MakeReader make_reader) {
  std::unique_ptr<PyTorchStreamReader> reader;
  try {
    reader = make_reader();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    fail(origin, "not a readable .pt2 (zip) archive: " + torch_support::torch_message(e));
  }
  try {
    return read(*reader, origin);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    fail(origin, "a damaged archive: " + torch_support::torch_message(e));
  }
}

}  // namespace

Pt2Archive read_pt2_archive(const std::string& path) {
  return read_with(path, [&] { return std::make_unique<PyTorchStreamReader>(path); });
}

Pt2Archive read_pt2_archive_bytes(const std::string& bytes, const std::string& origin) {
  auto stream = std::make_shared<std::istringstream>(bytes);
  return read_with(origin, [&] {
    return std::make_unique<PyTorchStreamReader>(
        std::make_shared<caffe2::serialize::IStreamAdapter>(stream.get()));
  });
}

}  // namespace ravnest::exported
