// ExportedProgram: what a torch.export archive's `models/<name>.json` and its payload configs
// (`data/weights/model_weights_config.json`, `data/constants/model_constants_config.json`) say,
// as plain data, read strictly. Pure C++ (no LibTorch): the archive's reader (pt2_archive.h)
// hands the texts here, and the runtime (exported_module.h) resolves the nodes against the
// dispatcher.
//
// The schema is torch/_export/serde/schema.py (SCHEMA_VERSION (8, 20) in torch 2.15): an
// ExportedProgram holds a GraphModule {graph {inputs, outputs, nodes, ...}, signature
// {input_specs, output_specs}} and its schema_version {major, minor}. Only what a run needs is
// kept: the graph's tensor_values and sym_int_values (shapes the export saw) are not.
//
// Every function is stateless and may be called from any thread. Every refusal is a
// base::ConfigError, one line "<origin>: <what>", the node named where one is at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ravnest::exported {

// The newest schema major this reader understands (torch/_export/serde/schema.py's
// SCHEMA_VERSION[0]); a newer major changed the format incompatibly and is refused. A newer minor
// only adds fields, which are ignored.
inline constexpr int kSupportedSchemaMajor = 8;

// What a graph may hold before it is refused without being built: models/<name>.json's bytes,
// its nodes, and the JSON values in it (checked in one pass that keeps nothing, so 10^6 nodes cost
// a scan of the text, not a tree of it). A GPT-2 block is ~60 nodes, resnet50 ~180.
inline constexpr size_t kMaxModelJsonBytes = size_t{256} << 20;
inline constexpr size_t kMaxNodes = 100000;
inline constexpr size_t kMaxJsonValues = 20000000;

// A SymInt argument or size: a value's name (a symbolic int a node computed) or a number.
struct SymIntRef {
  std::string name;  // empty: `value` is the number
  int64_t value = 0;
};

// One serialized Argument (schema.py's union), reduced to the members the runtime reads.
struct Argument {
  enum class Kind {
    kNone,
    kTensor,           // name
    kTensors,          // names
    kOptionalTensor,   // name, "" for None
    kOptionalTensors,  // names, "" for None
    kInt,              // integer
    kInts,             // integers
    kFloat,            // real
    kFloats,           // reals
    kBool,             // integer (0/1)
    kBools,            // integers (0/1)
    kString,           // text
    kStrings,          // strings
    kScalarType,       // integer: schema.py's ScalarType code
    kMemoryFormat,     // integer: schema.py's MemoryFormat code
    kLayout,           // integer: schema.py's Layout code
    kDevice,           // text: the type ("cpu", "cuda"), integer: the index, -1 for none
    kSymInt,           // sym_ints[0]
    kSymInts,          // sym_ints
    kUnsupported,      // text: the union member's name (as_graph, as_custom_obj, as_complex...)
  };
  Kind kind = Kind::kNone;
  std::string name;
  std::vector<std::string> names;
  int64_t integer = 0;
  std::vector<int64_t> integers;
  double real = 0;
  std::vector<double> reals;
  std::string text;
  std::vector<std::string> strings;
  std::vector<SymIntRef> sym_ints;

  // Names of the values this argument reads (tensors and symbolic ints), "" for none left out.
  std::vector<std::string> value_names() const;
};

struct NamedArgument {
  std::string name;  // the operator schema's argument name
  Argument arg;
};

struct Node {
  std::string name;    // the FX node's name ("conv2d", "add_"); may be empty in old archives
  std::string target;  // "torch.ops.aten.conv2d.default", "_operator.mul", ...
  std::vector<NamedArgument> inputs;
  std::vector<Argument> outputs;
  // metadata["nn_module_stack"]: "key,path,class;..." from the root module to the innermost
  // ("L__self__bn,bn,torch.nn.modules.batchnorm.BatchNorm2d"), "" when absent.
  std::string nn_module_stack;

  // "node 'conv2d' (torch.ops.aten.conv2d.default)", for messages.
  std::string label() const;
};

struct InputSpec {
  enum class Kind { kUserInput, kParameter, kBuffer, kTensorConstant, kConstantInput, kUnsupported };
  Kind kind = Kind::kUserInput;
  Argument arg;        // kUserInput: the placeholder; others: a kTensor of the placeholder's name
  std::string target;  // parameter_name, buffer_name, tensor_constant_name; kUnsupported: the kind
  bool persistent = true;  // kBuffer
  Argument constant;       // kConstantInput: its value (kNone, kInt, kFloat, kString, kBool)
};

struct OutputSpec {
  enum class Kind { kUserOutput, kLossOutput, kBufferMutation, kParameterMutation,
                    kUserInputMutation, kUnsupported };
  Kind kind = Kind::kUserOutput;
  Argument arg;
  std::string target;  // buffer_name, parameter_name, user_input_name; kUnsupported: the kind
};

struct ExportedProgram {
  int schema_major = 0;
  int schema_minor = 0;
  std::string torch_version;  // "2.15.0+cu132", "" when absent
  std::vector<Argument> inputs;   // the graph's placeholders, in signature order
  std::vector<Argument> outputs;  // the graph's outputs, in signature order
  std::vector<Node> nodes;        // in execution order
  std::vector<InputSpec> input_specs;
  std::vector<OutputSpec> output_specs;
};

// A tensor's layout in a payload file (schema.py's TensorMeta with every size a number).
struct PayloadTensor {
  std::string path_name;  // the file under data/weights/ or data/constants/
  bool is_param = false;
  bool use_pickle = false;
  int dtype = 0;  // schema.py's ScalarType code
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  bool requires_grad = false;
  std::string device_type;  // "cpu", "cuda"
};

// name (a parameter's, buffer's or constant's fully qualified name) -> its payload.
using PayloadConfig = std::map<std::string, PayloadTensor>;

// models/<name>.json parsed and checked as a graph: the schema version supported, every value
// defined once before it is used (which also rules out cycles), no higher-order op (cond,
// while_loop, map, ...: their subgraphs are not run), the signature matching the placeholders
// and outputs, and the limits above. `origin` names the file in messages ("m.pt2
// (models/model.json)").
ExportedProgram parse_exported_program(const std::string& json_text, const std::string& origin);

// A payload config (weights' or constants'); sizes, strides and offsets must be numbers >= 0.
PayloadConfig parse_payload_config(const std::string& json_text, const std::string& origin);

// The dispatcher's name of a node's target: "torch.ops.aten.conv2d.default" -> {"aten::conv2d",
// ""}, "torch.ops.aten.add_.Tensor" -> {"aten::add_", "Tensor"}; {"", ""} when the target is not
// an operator overload ("_operator.mul", "torch.ops.higher_order.cond").
struct OperatorName {
  std::string name;
  std::string overload;
};
OperatorName operator_name(const std::string& target);

// Whether the target is a higher-order op (torch.ops.higher_order.*).
bool is_higher_order(const std::string& target);

// The innermost module of a node's nn_module_stack: its path ("bn", "layer.norm1") and class
// ("torch.nn.modules.batchnorm.BatchNorm2d"); both empty when the stack is.
struct ModuleFrame {
  std::string path;
  std::string type;
};
ModuleFrame innermost_module(const std::string& nn_module_stack);
// Whether any frame of the stack is of `type_prefix`'s classes.
bool module_stack_has(const std::string& nn_module_stack, const std::string& type_prefix);

// Bytes of one element of schema.py's ScalarType `code`; 0 for an unknown code.
size_t scalar_type_size(int code);

}  // namespace ravnest::exported
