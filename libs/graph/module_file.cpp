#include "libs/graph/module_file.h"

#include <sstream>
#include <stdexcept>

#include "libs/config/atomic_file.h"
#include "libs/graph/torch_errors.h"

namespace ravnest::graph {

void save_module_atomically(const torch::jit::Module& module, const std::string& path) {
  std::ostringstream bytes;
  try {
    module.save(bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": cannot save: " + torch_message(e));
  }
  config::write_file_atomically(path, bytes.str());
}

}  // namespace ravnest::graph
