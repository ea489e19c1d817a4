#include "libs/torch_support/module_file.h"

#include <exception>
#include <fstream>
#include <sstream>
#include <streambuf>
#include <vector>
#include <stdexcept>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import.h>

#include "libs/torch_support/torch_compat.h"
#include "libs/base/atomic_file.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/torch_support/traced_mode.h"

namespace ravnest::torch_support {

namespace {

// Whether the archive holds records that PyTorch 2.x writes and 1.13 does not: the byte order
// and the serialization id (PyTorch 2.1 on). False for anything that is no readable archive.
bool written_by_torch2(std::istream& bytes) {
  try {
    bytes.clear();
    bytes.seekg(0);
    caffe2::serialize::PyTorchStreamReader reader(&bytes);
    return reader.hasRecord("byteorder") || reader.hasRecord(".data/serialization_id");
  } catch (const std::exception&) {
    return false;
  }
}

[[noreturn]] void refuse(std::istream& bytes, const std::string& name, const std::exception& e) {
  const std::string said = torch_message(e);
  if (torch_support::kTorchMajor < 2 && written_by_torch2(bytes)) {
    throw std::runtime_error(name + ": written by PyTorch 2.x, which this build's LibTorch " +
                             torch_support::kTorchVersion + " cannot read (" + said +
                             "): export it with torch " + std::to_string(torch_support::kTorchMajor) +
                             "." + std::to_string(torch_support::kTorchMinor) +
                             ", or build ravnest against your PyTorch (README: Your own LibTorch)");
  }
  throw std::runtime_error(name + ": not a TorchScript model LibTorch " + torch_support::kTorchVersion +
                           " can read (torch.jit.load says: " + said + ")");
}

}  // namespace

torch::jit::Module load_module(std::istream& bytes, const std::string& name,
                               std::optional<c10::Device> device) {
  c10::optional<c10::Device> on;  // c10::optional is not std::optional in 1.13
  if (device) on = *device;
  try {
    // A record the archive lacks keeps the value given: whatever the marker holds, "" included.
    const std::string absent = "<absent>";
    torch::jit::ExtraFilesMap extra{{kTracedRecord, absent}};
    torch::jit::Module module = torch::jit::load(bytes, on, extra);
    if (extra[kTracedRecord] != absent) follow_training_flag(module);
    return module;
  } catch (const std::exception& e) {
    refuse(bytes, name, e);
  }
}

void check_module_archive(const std::string& path, const std::string& name) {
  std::vector<std::string> records;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    records = reader.getAllRecords();
  } catch (const std::exception& e) {
    throw std::runtime_error(name + ": not a TorchScript archive (" + torch_message(e) + ")");
  }
  bool data = false, constants = false, code = false;
  for (const auto& record : records) {
    data = data || record == "data.pkl";
    constants = constants || record == "constants.pkl";
    code = code || record.rfind("code/", 0) == 0;
  }
  if (!data || !constants || !code) {
    throw std::runtime_error(name + ": not a TorchScript archive (no " +
                             std::string(!data ? "data.pkl" : !constants ? "constants.pkl" : "code/") +
                             " record: torch.save's file rather than torch.jit.save's?)");
  }
}

torch::jit::Module load_module(const std::string& path, std::optional<c10::Device> device) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot open");
  return load_module(file, path, device);
}

namespace {

// An ostream's bytes handed to an AtomicFileWriter as they come: Module::save writes its archive
// sequentially, so a stage is saved without its whole file in memory (an ostringstream held it
// twice: its buffer while growing, then the copy str() returns). A failed write must not throw
// inside LibTorch's writer (its destructor writes the archive's end again, and a second throw
// there terminates the process): the first failure is kept, the rest discarded, and rethrown
// once save() has returned.
class WriterBuffer final : public std::streambuf {
 public:
  explicit WriterBuffer(base::AtomicFileWriter& out) : out_(out) {}
  void rethrow() const {
    if (failure_) std::rethrow_exception(failure_);
  }

 protected:
  std::streamsize xsputn(const char* data, std::streamsize size) override {
    put(data, static_cast<size_t>(size));
    return size;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char byte = traits_type::to_char_type(c);
    put(&byte, 1);
    return c;
  }

 private:
  void put(const char* data, size_t size) {
    if (failure_) return;
    try {
      out_.write(data, size);
    } catch (...) {
      failure_ = std::current_exception();
    }
  }

  base::AtomicFileWriter& out_;
  std::exception_ptr failure_;
};

}  // namespace

void save_module_atomically(const torch::jit::Module& module, const std::string& path) {
  bool on_host = true;
  for (const auto& p : module.parameters()) on_host = on_host && p.device().is_cpu();
  for (const auto& b : module.buffers()) on_host = on_host && b.device().is_cpu();
  base::AtomicFileWriter out(path);  // its errors name the path: "PATH: cannot write (...)"
  WriterBuffer buffer(out);
  std::ostream stream(&buffer);
  try {
    if (on_host) {
      module.save(stream);
    } else {
      // Read back mapped to the CPU and written again: the module itself stays on its device
      // and the device needs no memory for a copy.
      std::ostringstream bytes;
      module.save(bytes);
      std::istringstream written(bytes.str());
      bytes = std::ostringstream();
      torch::jit::Module host = torch::jit::load(written, c10::Device(c10::kCPU));
      host.save(stream);
    }
    stream.flush();
  } catch (const std::exception& e) {
    buffer.rethrow();  // the file's failure, when that is what stopped LibTorch
    throw std::runtime_error(path + ": cannot save: " + torch_message(e));
  }
  buffer.rethrow();
  out.commit();
}

}  // namespace ravnest::torch_support
