// Fuzz target: the program of a torch.export archive (exported::parse_exported_program, what
// models/<name>.json holds) and its payload configs (parse_payload_config), as a .pt2 from
// anyone hands them to the reader. Errors: ConfigError, one line. A program that is accepted
// must hold what the runtime relies on without checking again: every value a node reads defined
// by an input or an earlier node, no higher-order op, a signature as long as the graph's inputs
// and outputs.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "libs/base/config_error.h"
#include "libs/exported/exported_program.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest::exported;
using ravnest::base::ConfigError;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "accepted program breaks: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = ravnest::fuzz::text_of(data, size);
  try {
    const ExportedProgram p = parse_exported_program(text, "m.pt2 (models/model.json)");
    if (p.schema_major > kSupportedSchemaMajor) broken("a schema too new");
    if (p.nodes.size() > kMaxNodes) broken("too many nodes");
    if (p.input_specs.size() != p.inputs.size() || p.output_specs.size() != p.outputs.size()) {
      broken("a signature of another length than the graph");
    }
    std::set<std::string> defined;
    for (const Argument& input : p.inputs) {
      for (const std::string& name : input.value_names()) defined.insert(name);
    }
    for (const Node& node : p.nodes) {
      if (is_higher_order(node.target)) broken("a higher-order op");
      for (const NamedArgument& input : node.inputs) {
        if (input.arg.kind == Argument::Kind::kUnsupported) broken("an argument kind not run");
        for (const std::string& name : input.arg.value_names()) {
          if (!name.empty() && !defined.count(name)) broken("a value read before it is defined");
        }
      }
      for (const Argument& output : node.outputs) {
        for (const std::string& name : output.value_names()) defined.insert(name);
      }
    }
  } catch (const ConfigError& e) {
    ravnest::fuzz::check_one_line(e.what());
  }
  try {
    for (const auto& [name, t] : parse_payload_config(text, "m.pt2 (data/weights/model_weights_config.json)")) {
      if (t.sizes.size() != t.strides.size()) broken("sizes and strides of different lengths");
      for (size_t d = 0; d < t.sizes.size(); ++d) {
        if (t.sizes[d] < 0 || t.strides[d] < 0) broken("a negative size or stride");
      }
      if (t.storage_offset < 0) broken("a negative storage offset");
      if (!t.use_pickle && scalar_type_size(t.dtype) == 0) broken("an unknown dtype");
    }
  } catch (const ConfigError& e) {
    ravnest::fuzz::check_one_line(e.what());
  }
  return 0;
}
