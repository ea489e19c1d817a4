#include "libs/exported/pt2_writer.h"

#include <exception>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/base/printable.h"
#include "libs/exported/pt2_archive.h"
#include "libs/exported/scalar_types.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::exported {
namespace {

using base::ConfigError;
using json = nlohmann::ordered_json;

// One file of a payload directory: the span [begin, end) of elements of one storage, in one
// dtype, that its tensors reach.
struct PayloadFile {
  std::string path_name;  // "weight_0"
  at::Tensor any;         // one of its tensors (the storage, the dtype, the device)
  int64_t begin = 0;
  int64_t end = 0;
};

struct Payload {
  std::vector<PayloadFile> files;
  json config = json::object();
};

// The element index past the last one `t` reaches in its storage; its offset when it is empty.
int64_t reach_end(const at::Tensor& t) {
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return t.storage_offset();
    last += (t.size(d) - 1) * t.stride(d);
  }
  return last + 1;
}

json sym_ints(at::IntArrayRef values) {
  json out = json::array();
  for (int64_t v : values) out.push_back({{"as_int", v}});
  return out;
}

// The files and the config of one payload directory, before any byte is copied.
Payload plan_payload(const std::map<std::string, at::Tensor>& tensors,
                     const std::set<std::string>& parameters, const std::string& prefix,
                     const std::function<void(const std::string&)>& fail) {
  Payload payload;
  // (storage, dtype) -> index into payload.files
  std::map<std::pair<const c10::StorageImpl*, at::ScalarType>, size_t> file_of;
  std::vector<std::pair<std::string, at::Tensor>> entries;
  for (const auto& [name, original] : tensors) {
    const std::string entry = "'" + base::printable(name, 100) + "'";
    if (!original.defined()) fail(entry + " is an undefined tensor");
    if (original.layout() != at::kStrided || original.is_quantized() || !original.has_storage()) {
      fail(entry + " is not a dense tensor (only strided tensors are written)");
    }
    at::Tensor t = original.detach();
    // A conjugate or negative view's bytes are not its values: written as a tensor of its own.
    if (t.is_conj() || t.is_neg()) t = t.resolve_conj().resolve_neg();
    const auto key = std::make_pair(t.storage().unsafeGetStorageImpl(), t.scalar_type());
    auto it = file_of.find(key);
    if (it == file_of.end()) {
      PayloadFile file;
      file.path_name = prefix + std::to_string(payload.files.size());
      file.any = t;
      file.begin = t.storage_offset();
      file.end = reach_end(t);
      it = file_of.emplace(key, payload.files.size()).first;
      payload.files.push_back(std::move(file));
    }
    PayloadFile& file = payload.files[it->second];
    file.begin = std::min(file.begin, t.storage_offset());
    file.end = std::max(file.end, reach_end(t));
    entries.emplace_back(name, t);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [name, t] = entries[i];
    const at::Tensor& original = tensors.at(name);
    const PayloadFile& file = payload.files[file_of.at({t.storage().unsafeGetStorageImpl(), t.scalar_type()})];
    int code = 0;
    try {
      code = dtype_code(t.scalar_type());
    } catch (const ConfigError& e) {
      fail("'" + base::printable(name, 100) + "': " + e.what());
    }
    payload.config[name] = {
        {"path_name", file.path_name},
        {"is_param", parameters.count(name) > 0},
        {"use_pickle", false},
        {"tensor_meta",
         {{"dtype", code},
          {"sizes", sym_ints(t.sizes())},
          {"requires_grad", original.requires_grad()},
          {"device", {{"type", "cpu"}, {"index", nullptr}}},
          {"strides", sym_ints(t.strides())},
          {"storage_offset", {{"as_int", t.storage_offset() - file.begin}}},
          {"layout", 7}}}};
  }
  return payload;
}

// The bytes of `file` on the host (a device's tensor copied; a meta tensor has none).
at::Tensor host_bytes(const PayloadFile& file) {
  if (file.end <= file.begin || file.any.is_meta()) return {};
  at::Tensor flat = file.any.as_strided({file.end - file.begin}, {1}, file.begin);
  if (!flat.device().is_cpu()) flat = flat.to(at::kCPU);
  return flat.contiguous();
}

// `sink_failure` is the failure of the file under the writer, rethrown before each record.
void write(const Pt2Archive& archive, caffe2::serialize::PyTorchStreamWriter& writer,
           const std::string& name, const std::exception_ptr& sink_failure) {
  auto fail = [&](const std::string& what) { throw ConfigError(name + ": " + what); };
  if (archive.model_name.empty() || archive.model_name.find('/') != std::string::npos) {
    fail("model name '" + base::printable(archive.model_name, 60) + "' cannot name models/<name>.json");
  }
  const std::string model_record = "models/" + archive.model_name + ".json";
  // The signature the written text gives (the archive's `program` may be another's).
  const ExportedProgram program =
      parse_exported_program(archive.model_json, name + " (" + model_record + ")");
  std::set<std::string> parameters;
  for (const InputSpec& spec : program.input_specs) {
    if (spec.kind == InputSpec::Kind::kParameter) parameters.insert(spec.target);
  }
  const Payload weights = plan_payload(archive.weights, parameters, "weight_", [&](const std::string& what) {
    fail("weight " + what);
  });
  const Payload constants = plan_payload(archive.constants, {}, "tensor_", [&](const std::string& what) {
    fail("constant " + what);
  });

  writer.setMinVersion(6);  // what torch.export.save's PT2ArchiveWriter sets
  auto record = [&](const std::string& record_name, const void* data, size_t size) {
    if (sink_failure) std::rethrow_exception(sink_failure);
    writer.writeRecord(record_name, data, size);
  };
  auto text = [&](const std::string& record_name, const std::string& bytes) {
    record(record_name, bytes.data(), bytes.size());
  };
  auto files = [&](const Payload& payload, const std::string& directory) {
    for (const PayloadFile& file : payload.files) {
      const at::Tensor bytes = host_bytes(file);
      record(directory + file.path_name, bytes.defined() ? bytes.data_ptr() : nullptr,
             bytes.defined() ? bytes.nbytes() : 0);
    }
  };
  files(weights, "data/weights/");
  text("data/weights/" + archive.model_name + "_weights_config.json",
       json{{"config", weights.config}}.dump());
  files(constants, "data/constants/");
  text("data/constants/" + archive.model_name + "_constants_config.json",
       json{{"config", constants.config}}.dump());
  text(model_record, archive.model_json);
  text("data/sample_inputs/" + archive.model_name + ".pt", "");
  text("archive_format", "pt2");
  text("archive_version", "0");
  writer.writeEndOfFile();
}

// Runs `write` on a writer whose bytes go to `sink`; LibTorch's failures become one line naming
// `name`, the sink's own failure is rethrown as it was. After a failure of the sink the writer's
// bytes are dropped, not refused: the writer's destructor finishes the zip, and a refusal there
// would throw from a destructor.
void write_through(const Pt2Archive& archive, const std::string& name,
                   const std::function<void(const void*, size_t)>& sink) {
  std::exception_ptr sink_failure;
  try {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      if (sink_failure) return size;
      try {
        sink(data, size);
      } catch (...) {
        sink_failure = std::current_exception();
      }
      return size;
    });
    write(archive, writer, name, sink_failure);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    if (sink_failure) throw;
    throw ConfigError(name + ": cannot write the archive: " + torch_support::torch_message(e));
  }
  if (sink_failure) std::rethrow_exception(sink_failure);
}

}  // namespace

void write_pt2_archive(const Pt2Archive& archive, const std::string& path) {
  base::AtomicFileWriter out(path);  // its errors name the path: "PATH: cannot write (...)"
  write_through(archive, path, [&](const void* data, size_t size) { out.write(data, size); });
  out.commit();
}

std::string write_pt2_archive_bytes(const Pt2Archive& archive) {
  std::string bytes;
  write_through(archive, archive.origin, [&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
  });
  return bytes;
}

}  // namespace ravnest::exported
