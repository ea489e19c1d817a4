// Reading a TorchScript module file, and saving one so that a reader never sees half of it.
//
// Saving a TorchScript module as a file that a reader never sees half of, and that no stale
// temporary outlives: the module is serialized in memory, then written with
// base::write_file_atomically (temporary file, fsync, rename; a symlink at the target is
// replaced, not followed). A full disk or a file size limit is one line naming the file; nothing
// is left behind then, and the previous file is untouched.
#pragma once

#include <optional>
#include <string>

#include <c10/core/Device.h>

#include <torch/csrc/jit/api/module.h>

namespace ravnest::torch_support {

// The file holds host tensors whatever device the module computes on (a stage trained on a GPU
// is fused and loaded on machines without one). Throws std::runtime_error "PATH: cannot write
// (...): reason" (or "PATH: cannot save: reason" when LibTorch cannot serialize the module).
void save_module_atomically(const torch::jit::Module& module, const std::string& path);

// torch::jit::load(path, device), with a failure as one line naming the file. A file that this
// LibTorch cannot read because a newer PyTorch wrote it (the records only 2.x writes are there,
// and this is the 1.13 build) says so, naming both versions and what to do:
//   "model.pt: written by PyTorch 2.x, which this build's LibTorch 1.13.0 cannot read (Unknown
//    builtin op: aten::scaled_dot_product_attention.): export it with torch 1.13, or build
//    ravnest against your PyTorch (README: Your own LibTorch)"
// Any other failure: "PATH: not a TorchScript model LibTorch 1.13.0 can read (torch.jit.load
// says: ...)". Throws std::runtime_error. A file marked traced (the extra record
// kTracedRecord, traced_mode.h) comes back with follow_training_flag applied: its dropout and
// batch norm follow each module's `training`, as a scripted model's do.
torch::jit::Module load_module(const std::string& path,
                               std::optional<c10::Device> device = std::nullopt);

// Whether the file at `path` is a TorchScript archive, without loading it: a zip archive
// (PyTorch's) of a format version this LibTorch reads, holding the records torch.jit.save writes
// (data.pkl, constants.pkl, code/). Reads the archive's directory only, so checking a stage of
// GB costs no memory (a push checks this; the job's load, which hashes the file first, reads the
// rest). Throws std::runtime_error "NAME: not a TorchScript archive (why)"; `name` stands for the
// file in messages.
void check_module_archive(const std::string& path, const std::string& name);

// The same for a module held in memory; `name` stands for the file in messages.
torch::jit::Module load_module(std::istream& bytes, const std::string& name,
                               std::optional<c10::Device> device = std::nullopt);

}  // namespace ravnest::torch_support
