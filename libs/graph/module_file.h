// Saving a TorchScript module as a file that a reader never sees half of, and that no stale
// temporary outlives: the module is serialized in memory, then written with
// config::write_file_atomically (temporary file, fsync, rename; a symlink at the target is
// replaced, not followed). A full disk or a file size limit is one line naming the file; nothing
// is left behind then, and the previous file is untouched.
#pragma once

#include <string>

#include <torch/csrc/jit/api/module.h>

namespace ravnest::graph {

// Throws std::runtime_error "PATH: cannot write (...): reason" (or "PATH: cannot save: reason"
// when LibTorch cannot serialize the module).
void save_module_atomically(const torch::jit::Module& module, const std::string& path);

}  // namespace ravnest::graph
