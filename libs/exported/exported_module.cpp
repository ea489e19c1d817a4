// Long because: one runtime in three steps that share the Impl's plan types (Source, Sink,
// Step): each node resolved against its operator's schema (resolve: every argument kind), the
// slots laid out once (build), and the steps run (run).
#include "libs/exported/exported_module.h"

#include <chrono>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include "libs/base/config_error.h"
#include "libs/base/printable.h"
#include "libs/exported/pt2_archive.h"
#include "libs/exported/scalar_types.h"

namespace ravnest::exported {
// The plan of a run (named, not anonymous: ExportedModule::Impl holds them).
namespace module_plan {

using base::ConfigError;
using Kind = Argument::Kind;

// How one argument of an operator is made at each run.
struct Source {
  enum class Type { kConstant, kValue, kTensorList, kOptionalTensorList, kIntList };
  Type type = Type::kConstant;
  c10::IValue constant;
  int slot = -1;
  std::vector<int> slots;      // list elements; -1: None (tensors) or ints[i] (int lists)
  std::vector<int64_t> ints;   // kIntList: the numbers where slots[i] is -1
};

// Where one return of an operator goes.
struct Sink {
  enum class Type { kSkip, kValue, kList };
  Type type = Type::kSkip;
  int slot = -1;
  std::vector<int> slots;
};

enum class SymOp { kNone, kAdd, kSub, kMul, kFloorDiv, kMod, kNeg, kGetitem };

struct Step {
  std::optional<c10::OperatorHandle> op;
  SymOp sym = SymOp::kNone;
  std::vector<Source> args;
  std::vector<Sink> outputs;
  std::string label;
  int mode_arg = -1;          // batch_norm's training, dropout's and lstm's train: false in eval
  int attention_dropout = -1; // scaled_dot_product_attention's dropout_p inside MultiheadAttention
  int eval_alias = -1;        // BatchNorm's num_batches_tracked.add_(1): skipped in eval, its
                              // output the buffer itself (this slot)
  std::vector<int> release;   // slots read for the last time here
  std::vector<size_t> device_args;  // arguments naming a device (arange(..., device=cpu)): to()
                                    // moves those naming the module's device with it
};

struct Placeholder {
  enum class Type { kTensor, kUser, kConstant };
  Type type = Type::kTensor;
  int slot = -1;       // -1: not read by the graph
  size_t index = 0;    // kTensor: into tensors; kUser: into the user inputs
  c10::IValue constant;
  bool sym_int = false;  // kUser: a SymInt (a size computed upstream), bound as an int
};

struct Mutation {
  int slot = -1;
  bool user_input = false;
  size_t index = 0;  // into tensors, or the user inputs
};

const std::unordered_map<std::string, SymOp>& sym_ops() {
  static const std::unordered_map<std::string, SymOp> ops = {
      {"_operator.add", SymOp::kAdd},       {"_operator.sub", SymOp::kSub},
      {"_operator.mul", SymOp::kMul},       {"_operator.floordiv", SymOp::kFloorDiv},
      {"_operator.mod", SymOp::kMod},       {"_operator.neg", SymOp::kNeg},
      {"_operator.getitem", SymOp::kGetitem}};
  return ops;
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace module_plan

using namespace module_plan;

struct ExportedModule::Impl {
  std::string origin;
  // What the module was loaded from, for to_archive; shared by clones (a weight stash clones a
  // stage often, and these do not change).
  std::string model_name;
  std::shared_ptr<const std::string> model_json;
  std::shared_ptr<const ExportedProgram> source_program;
  std::vector<at::Tensor> tensors;  // parameters, buffers, constants: each tensor once
  // Every tensor of the archive under its name (weights, constants) -> tensors index.
  std::vector<std::pair<std::string, size_t>> weight_names;
  std::vector<std::pair<std::string, size_t>> constant_names;
  std::vector<std::pair<std::string, size_t>> parameters;  // name -> tensors index
  std::vector<std::pair<std::string, size_t>> buffers;
  std::vector<Placeholder> placeholders;
  std::vector<std::string> input_names;
  std::vector<Step> steps;
  std::vector<Source> outputs;  // user outputs
  std::vector<Mutation> mutations;
  size_t slot_count = 0;
  bool training = true;
  bool training_behaviour = false;
  c10::Device device = c10::Device("cpu");
  torch::jit::Stack stack;

  [[noreturn]] void fail(const std::string& what) const { throw ConfigError(origin + ": " + what); }

  void build(Pt2Archive archive);
  // forward's loop; `observe(step, seconds, outputs)` after each step when kObserved.
  template <bool kObserved, typename Observer>
  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs, const Observer& observe);
  Step resolve(const Node& node, const std::unordered_map<std::string, int>& slots,
               const std::unordered_map<std::string, std::string>& buffer_of);
  c10::IValue value_of(const Source& source, const std::vector<c10::IValue>& values) const;
};

namespace {

int slot_of(const std::unordered_map<std::string, int>& slots, const std::string& name) {
  const auto it = slots.find(name);
  return it == slots.end() ? -1 : it->second;
}

// The type an argument takes, Optional[T] as T.
c10::TypePtr unwrapped(const c10::TypePtr& type) {
  if (auto optional = type->cast<c10::OptionalType>()) return optional->getElementType();
  return type;
}

bool is_float_type(const c10::TypePtr& type) {
  return unwrapped(type)->kind() == c10::TypeKind::FloatType;
}

bool is_optional_tensor_list(const c10::TypePtr& type) {
  const auto list = unwrapped(type)->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::OptionalType;
}

// Operators whose training behaviour is an argument: (name, overload) -> the argument.
const char* mode_argument(const std::string& name) {
  static const std::unordered_map<std::string, const char*> args = {
      {"aten::batch_norm", "training"},
      {"aten::dropout", "train"},           {"aten::dropout_", "train"},
      {"aten::feature_dropout", "train"},   {"aten::feature_dropout_", "train"},
      {"aten::alpha_dropout", "train"},     {"aten::alpha_dropout_", "train"},
      {"aten::feature_alpha_dropout", "train"}, {"aten::feature_alpha_dropout_", "train"},
      {"aten::lstm", "train"},              {"aten::gru", "train"},
      {"aten::rnn_tanh", "train"},          {"aten::rnn_relu", "train"}};
  const auto it = args.find(name);
  return it == args.end() ? nullptr : it->second;
}

// A SymInt user input (a size a stage upstream computed): an int, or a tensor of one integer
// (what travels between daemons), as the int.
c10::IValue sym_int_input(const c10::IValue& value, const std::string& origin,
                          const std::string& name) {
  if (value.isInt()) return value;
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (t.numel() == 1 && !t.is_floating_point() && !t.is_complex()) return t.item<int64_t>();
  }
  throw std::invalid_argument(origin + ": input '" + name +
                              "' is a SymInt: an int or a one-element integer tensor, not a " +
                              value.tagKind());
}

}  // namespace

Step ExportedModule::Impl::resolve(const Node& node,
                                   const std::unordered_map<std::string, int>& slots,
                                   const std::unordered_map<std::string, std::string>& buffer_of) {
  Step step;
  step.label = node.label();
  auto refuse = [&](const std::string& what) { fail(step.label + ": " + what); };
  auto value_slot = [&](const std::string& name) {
    const int slot = slot_of(slots, name);
    if (slot < 0) refuse("uses '" + base::printable(name, 100) + "', which no node defines");
    return slot;
  };

  const auto sym = sym_ops().find(node.target);
  if (sym != sym_ops().end()) {
    step.sym = sym->second;
    const size_t arity = step.sym == SymOp::kNeg ? 1 : 2;
    if (node.inputs.size() != arity || node.outputs.size() != 1) {
      refuse("takes " + std::to_string(arity) + " inputs and one output");
    }
    for (const NamedArgument& input : node.inputs) {
      Source source;
      const Argument& a = input.arg;
      if ((a.kind == Kind::kSymInt && !a.sym_ints[0].name.empty()) || a.kind == Kind::kTensor) {
        source.type = Source::Type::kValue;
        source.slot = value_slot(a.kind == Kind::kTensor ? a.name : a.sym_ints[0].name);
      } else if (a.kind == Kind::kSymInt || a.kind == Kind::kInt) {
        source.constant = a.kind == Kind::kInt ? a.integer : a.sym_ints[0].value;
      } else {
        refuse("argument '" + base::printable(input.name, 60) + "' must be an integer");
      }
      step.args.push_back(std::move(source));
    }
    const Argument& out = node.outputs[0];
    const std::vector<std::string> names = out.value_names();
    Sink sink;
    if (names.size() == 1) {
      sink.type = Sink::Type::kValue;
      sink.slot = slot_of(slots, names[0]);
    }
    step.outputs.push_back(sink);
    return step;
  }

  const OperatorName name = operator_name(node.target);
  if (name.name.empty()) {
    refuse(is_higher_order(node.target) ? "higher-order ops (cond, while_loop, ...) are not run"
                                        : "not an operator this runtime runs");
  }
  step.op = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
  if (!step.op) {
    refuse("operator " + name.name + (name.overload.empty() ? "" : "." + name.overload) +
           " is not registered in LibTorch " + TORCH_VERSION +
           " (a custom op needs its library loaded)");
  }
  const c10::FunctionSchema& schema = step.op->schema();
  std::unordered_map<std::string, const Argument*> given;
  for (const NamedArgument& input : node.inputs) {
    if (!given.emplace(input.name, &input.arg).second) {
      refuse("argument '" + base::printable(input.name, 60) + "' given twice");
    }
  }
  const char* mode = mode_argument(name.name);
  // Attention's dropout is written `dropout_p if self.training else 0` (nn.MultiheadAttention,
  // nanoGPT, Hugging Face's attention classes): an export in training mode bakes the first.
  const bool in_attention = name.name == "aten::scaled_dot_product_attention";
  for (const c10::Argument& formal : schema.arguments()) {
    const auto it = given.find(formal.name());
    Source source;
    const std::string arg_label = "argument '" + formal.name() + "'";
    if (it == given.end()) {
      if (!formal.default_value()) refuse(arg_label + " is missing");
      source.constant = *formal.default_value();
      step.args.push_back(std::move(source));
      continue;
    }
    const Argument& a = *it->second;
    given.erase(it);
    const c10::TypePtr& type = formal.type();
    switch (a.kind) {
      case Kind::kNone: break;
      case Kind::kTensor:
        source.type = Source::Type::kValue;
        source.slot = value_slot(a.name);
        break;
      case Kind::kOptionalTensor:
        if (!a.name.empty()) {
          source.type = Source::Type::kValue;
          source.slot = value_slot(a.name);
        }
        break;
      case Kind::kTensors:
      case Kind::kOptionalTensors:
        source.type = (a.kind == Kind::kOptionalTensors || is_optional_tensor_list(type))
                          ? Source::Type::kOptionalTensorList
                          : Source::Type::kTensorList;
        for (const std::string& n : a.names) {
          if (n.empty() && source.type == Source::Type::kTensorList) refuse(arg_label + ": None in a Tensor[]");
          source.slots.push_back(n.empty() ? -1 : value_slot(n));
        }
        break;
      case Kind::kInt:
        if (is_float_type(type)) {
          source.constant = static_cast<double>(a.integer);
        } else {
          source.constant = a.integer;
        }
        break;
      case Kind::kInts: source.constant = c10::List<int64_t>(a.integers); break;
      case Kind::kFloat: source.constant = a.real; break;
      case Kind::kFloats: source.constant = c10::List<double>(a.reals); break;
      case Kind::kBool: source.constant = a.integer != 0; break;
      case Kind::kBools: {
        c10::List<bool> list;
        for (int64_t b : a.integers) list.push_back(b != 0);
        source.constant = list;
        break;
      }
      case Kind::kString: source.constant = a.text; break;
      case Kind::kStrings: source.constant = c10::List<std::string>(a.strings); break;
      case Kind::kScalarType: source.constant = to_scalar_type(static_cast<int>(a.integer)); break;
      case Kind::kMemoryFormat: source.constant = to_memory_format(static_cast<int>(a.integer)); break;
      case Kind::kLayout: source.constant = to_layout(static_cast<int>(a.integer)); break;
      case Kind::kDevice:
        try {
          source.constant = c10::Device(a.text + (a.integer >= 0 ? ":" + std::to_string(a.integer) : ""));
        } catch (const std::exception&) {
          refuse(arg_label + ": device '" + base::printable(a.text, 40) + "' is unknown");
        }
        step.device_args.push_back(step.args.size());
        break;
      case Kind::kSymInt:
        if (!a.sym_ints[0].name.empty()) {
          source.type = Source::Type::kValue;
          source.slot = value_slot(a.sym_ints[0].name);
        } else {
          source.constant = a.sym_ints[0].value;
        }
        break;
      case Kind::kSymInts: {
        bool symbolic = false;
        for (const SymIntRef& s : a.sym_ints) symbolic = symbolic || !s.name.empty();
        if (!symbolic) {
          std::vector<int64_t> numbers;
          for (const SymIntRef& s : a.sym_ints) numbers.push_back(s.value);
          source.constant = c10::List<int64_t>(numbers);
          break;
        }
        source.type = Source::Type::kIntList;
        for (const SymIntRef& s : a.sym_ints) {
          source.slots.push_back(s.name.empty() ? -1 : value_slot(s.name));
          source.ints.push_back(s.value);
        }
        break;
      }
      case Kind::kUnsupported:
        refuse(arg_label + " is of kind " + a.text + ", which is not run");
    }
    // A number where the schema takes a Tensor (add_(x, 1)): Python's argument parser makes it a
    // wrapped-number tensor, which type promotion treats as a scalar; so is it here.
    if (source.type == Source::Type::kConstant && unwrapped(type)->kind() == c10::TypeKind::TensorType &&
        (a.kind == Kind::kInt || a.kind == Kind::kFloat || a.kind == Kind::kBool)) {
      const c10::Scalar number = a.kind == Kind::kFloat  ? c10::Scalar(a.real)
                                 : a.kind == Kind::kBool ? c10::Scalar(a.integer != 0)
                                                         : c10::Scalar(a.integer);
      at::Tensor wrapped = c10::scalar_to_tensor(number);
      wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
      source.constant = wrapped;
    }
    const size_t index = step.args.size();
    if (mode && formal.name() == mode && a.kind == Kind::kBool) {
      step.mode_arg = static_cast<int>(index);
      training_behaviour = training_behaviour || a.integer != 0;
    }
    if (in_attention && formal.name() == "dropout_p" && a.kind == Kind::kFloat && a.real != 0) {
      step.attention_dropout = static_cast<int>(index);
      training_behaviour = true;
    }
    step.args.push_back(std::move(source));
  }
  if (!given.empty()) {
    refuse("argument '" + base::printable(given.begin()->first, 60) + "' is not one of " +
           name.name + "'s");
  }

  // BatchNorm's num_batches_tracked.add_(1), which model.eval() does not run.
  if (name.name == "aten::add_" && name.overload == "Tensor" && !step.args.empty() &&
      step.args[0].type == Source::Type::kValue) {
    const Argument* self = nullptr;
    for (const NamedArgument& input : node.inputs) {
      if (input.name == "self") self = &input.arg;
    }
    const ModuleFrame frame = innermost_module(node.nn_module_stack);
    const auto buffer = self ? buffer_of.find(self->name) : buffer_of.end();
    if (buffer != buffer_of.end() &&
        frame.type.rfind("torch.nn.modules.batchnorm.", 0) == 0 &&
        buffer->second == (frame.path.empty() ? "" : frame.path + ".") + "num_batches_tracked") {
      step.eval_alias = step.args[0].slot;
      training_behaviour = true;
    }
  }

  const auto& returns = schema.returns();
  if (node.outputs.size() != returns.size()) {
    refuse(std::to_string(node.outputs.size()) + " outputs where " + name.name + " returns " +
           std::to_string(returns.size()));
  }
  for (const Argument& out : node.outputs) {
    Sink sink;
    if (out.kind == Kind::kTensor || (out.kind == Kind::kSymInt && !out.sym_ints[0].name.empty())) {
      sink.type = Sink::Type::kValue;
      sink.slot = slot_of(slots, out.kind == Kind::kTensor ? out.name : out.sym_ints[0].name);
    } else if (out.kind == Kind::kTensors) {
      sink.type = Sink::Type::kList;
      for (const std::string& n : out.names) sink.slots.push_back(slot_of(slots, n));
    } else if (out.kind == Kind::kOptionalTensor && !out.name.empty()) {
      sink.type = Sink::Type::kValue;
      sink.slot = slot_of(slots, out.name);
    }
    step.outputs.push_back(std::move(sink));
  }
  return step;
}

void ExportedModule::Impl::build(Pt2Archive archive) {
  origin = archive.origin;
  const ExportedProgram& program = archive.program;
  std::unordered_map<std::string, int> slots;
  auto define = [&](const std::string& name) {
    if (!name.empty() && !slots.count(name)) slots.emplace(name, static_cast<int>(slots.size()));
  };
  for (const Argument& input : program.inputs) {
    for (const std::string& name : input.value_names()) define(name);
  }
  for (const Node& node : program.nodes) {
    for (const Argument& output : node.outputs) {
      for (const std::string& name : output.value_names()) define(name);
    }
  }
  slot_count = slots.size();

  // Placeholders: parameters, buffers, constants, user inputs.
  std::unordered_map<const c10::TensorImpl*, size_t> tensor_index;
  auto keep = [&](const at::Tensor& t) {
    const auto [it, added] = tensor_index.emplace(t.unsafeGetTensorImpl(), tensors.size());
    if (added) tensors.push_back(t);
    return it->second;
  };
  for (const auto& [name, t] : archive.weights) weight_names.emplace_back(name, keep(t));
  for (const auto& [name, t] : archive.constants) constant_names.emplace_back(name, keep(t));
  std::unordered_map<std::string, std::string> buffer_of;  // placeholder -> buffer name
  std::unordered_map<std::string, size_t> user_input_index;
  for (size_t i = 0; i < program.input_specs.size(); ++i) {
    const InputSpec& spec = program.input_specs[i];
    const Argument& graph_input = program.inputs[i];
    const std::vector<std::string> names = graph_input.value_names();
    Placeholder placeholder;
    placeholder.slot = names.size() == 1 ? slot_of(slots, names[0]) : -1;
    auto tensor = [&](const std::map<std::string, at::Tensor>& first,
                      const std::map<std::string, at::Tensor>& second, const char* what) {
      auto it = first.find(spec.target);
      if (it == first.end()) it = second.find(spec.target);
      if (it == second.end()) {
        fail(std::string(what) + " '" + base::printable(spec.target, 100) +
             "' of the signature has no tensor in the archive");
      }
      return keep(it->second);
    };
    switch (spec.kind) {
      case InputSpec::Kind::kParameter:
        placeholder.index = tensor(archive.weights, archive.constants, "parameter");
        parameters.emplace_back(spec.target, placeholder.index);
        break;
      case InputSpec::Kind::kBuffer:
        placeholder.index = tensor(archive.weights, archive.constants, "buffer");
        buffers.emplace_back(spec.target, placeholder.index);
        if (!names.empty()) buffer_of.emplace(names[0], spec.target);
        break;
      case InputSpec::Kind::kTensorConstant:
        placeholder.index = tensor(archive.constants, archive.weights, "tensor constant");
        break;
      case InputSpec::Kind::kConstantInput:
        placeholder.type = Placeholder::Type::kConstant;
        switch (spec.constant.kind) {
          case Kind::kNone: break;
          case Kind::kInt: placeholder.constant = spec.constant.integer; break;
          case Kind::kFloat: placeholder.constant = spec.constant.real; break;
          case Kind::kBool: placeholder.constant = spec.constant.integer != 0; break;
          case Kind::kString: placeholder.constant = spec.constant.text; break;
          default: fail("constant input '" + base::printable(names.empty() ? "?" : names[0], 100) + "' of a kind not run");
        }
        break;
      case InputSpec::Kind::kUserInput:
        placeholder.type = Placeholder::Type::kUser;
        placeholder.sym_int = graph_input.kind == Kind::kSymInt;
        placeholder.index = input_names.size();
        input_names.push_back(names.empty() ? "" : names[0]);
        if (!names.empty()) user_input_index.emplace(names[0], placeholder.index);
        break;
      case InputSpec::Kind::kUnsupported:
        fail("an input of kind " + spec.target + " (custom objects and tokens are not run)");
    }
    placeholders.push_back(std::move(placeholder));
  }

  for (const Node& node : program.nodes) steps.push_back(resolve(node, slots, buffer_of));

  // Outputs: the user's, and the mutations the graph returns rather than does in place.
  for (size_t i = 0; i < program.output_specs.size(); ++i) {
    const OutputSpec& spec = program.output_specs[i];
    const Argument& out = program.outputs[i];
    const std::vector<std::string> names = out.value_names();
    switch (spec.kind) {
      case OutputSpec::Kind::kUserOutput:
      case OutputSpec::Kind::kLossOutput: {
        Source source;
        if (out.kind == Kind::kTensor || (out.kind == Kind::kSymInt && names.size() == 1) ||
            (out.kind == Kind::kOptionalTensor && names.size() == 1 && !names[0].empty())) {
          source.type = Source::Type::kValue;
          source.slot = slot_of(slots, names[0]);
        } else if (out.kind == Kind::kInt || out.kind == Kind::kSymInt) {
          source.constant = out.kind == Kind::kInt ? out.integer : out.sym_ints[0].value;
        } else if (out.kind == Kind::kFloat) {
          source.constant = out.real;
        } else if (out.kind == Kind::kBool) {
          source.constant = out.integer != 0;
        } else if (out.kind == Kind::kString) {
          source.constant = out.text;
        } else if (out.kind == Kind::kTensors) {
          source.type = Source::Type::kTensorList;
          for (const std::string& n : names) source.slots.push_back(slot_of(slots, n));
        } else if (out.kind != Kind::kNone && out.kind != Kind::kOptionalTensor) {
          fail("output " + std::to_string(i) + " is of a kind not returned");
        }
        outputs.push_back(std::move(source));
        break;
      }
      case OutputSpec::Kind::kBufferMutation:
      case OutputSpec::Kind::kParameterMutation: {
        const auto& named = spec.kind == OutputSpec::Kind::kBufferMutation ? buffers : parameters;
        Mutation m;
        m.slot = slot_of(slots, spec.arg.name);
        bool found = false;
        for (const auto& [n, index] : named) {
          if (n == spec.target) {
            m.index = index;
            found = true;
          }
        }
        if (!found) fail("the graph mutates '" + base::printable(spec.target, 100) + "', which is no input");
        mutations.push_back(m);
        break;
      }
      case OutputSpec::Kind::kUserInputMutation: {
        const auto it = user_input_index.find(spec.target);
        if (it == user_input_index.end()) fail("the graph mutates input '" + base::printable(spec.target, 100) + "', which is no input");
        mutations.push_back({slot_of(slots, spec.arg.name), true, it->second});
        break;
      }
      case OutputSpec::Kind::kUnsupported:
        fail("an output of kind " + spec.target + " (gradients and tokens are not run)");
    }
  }

  // Each slot let go after its last reader, so a forward keeps what autograd keeps and no more.
  std::vector<int> last_use(slot_count, -1);
  auto read = [&](int slot, int step) {
    if (slot >= 0) last_use[slot] = std::max(last_use[slot], step);
  };
  const int end = static_cast<int>(steps.size());
  for (int s = 0; s < end; ++s) {
    for (const Source& arg : steps[s].args) {
      read(arg.slot, s);
      for (int slot : arg.slots) read(slot, s);
    }
    read(steps[s].eval_alias, s);
    for (const Sink& sink : steps[s].outputs) {
      read(sink.slot, s);
      for (int slot : sink.slots) read(slot, s);
    }
  }
  for (const Source& out : outputs) {
    read(out.slot, end);
    for (int slot : out.slots) read(slot, end);
  }
  for (const Mutation& m : mutations) read(m.slot, end);
  for (int slot = 0; slot < static_cast<int>(slot_count); ++slot) {
    if (last_use[slot] >= 0 && last_use[slot] < end) steps[last_use[slot]].release.push_back(slot);
  }
  model_name = std::move(archive.model_name);
  model_json = std::make_shared<const std::string>(std::move(archive.model_json));
  source_program = std::make_shared<const ExportedProgram>(std::move(archive.program));
}

c10::IValue ExportedModule::Impl::value_of(const Source& source,
                                           const std::vector<c10::IValue>& values) const {
  switch (source.type) {
    case Source::Type::kConstant: return source.constant;
    case Source::Type::kValue: return values[source.slot];
    case Source::Type::kTensorList: {
      c10::List<at::Tensor> list;
      list.reserve(source.slots.size());
      for (int slot : source.slots) list.push_back(values[slot].toTensor());
      return list;
    }
    case Source::Type::kOptionalTensorList: {
      c10::List<std::optional<at::Tensor>> list;
      list.reserve(source.slots.size());
      for (int slot : source.slots) {
        if (slot < 0 || values[slot].isNone()) {
          list.push_back(std::nullopt);
        } else {
          list.push_back(values[slot].toTensor());
        }
      }
      return list;
    }
    case Source::Type::kIntList: {
      std::vector<int64_t> numbers(source.slots.size());
      for (size_t i = 0; i < numbers.size(); ++i) {
        numbers[i] = source.slots[i] < 0 ? source.ints[i] : values[source.slots[i]].toInt();
      }
      return c10::List<int64_t>(numbers);
    }
  }
  return {};
}

ExportedModule::ExportedModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExportedModule::ExportedModule(ExportedModule&&) noexcept = default;
ExportedModule& ExportedModule::operator=(ExportedModule&&) noexcept = default;
ExportedModule::~ExportedModule() = default;

ExportedModule ExportedModule::load(const std::string& path) {
  return from_archive(read_pt2_archive(path));
}

ExportedModule ExportedModule::from_archive(Pt2Archive archive) {
  auto impl = std::make_unique<Impl>();
  impl->build(std::move(archive));
  return ExportedModule(std::move(impl));
}

template <bool kObserved, typename Observer>
std::vector<c10::IValue> ExportedModule::Impl::run(std::vector<c10::IValue> inputs,
                                                   const Observer& observe) {
  Impl& m = *this;
  if (inputs.size() != m.input_names.size()) {
    std::string names;
    for (const std::string& n : m.input_names) names += (names.empty() ? "" : ", ") + n;
    throw std::invalid_argument(m.origin + ": forward takes " + std::to_string(m.input_names.size()) +
                                " inputs (" + names + "), got " + std::to_string(inputs.size()));
  }
  std::vector<c10::IValue> values(m.slot_count);
  for (const Placeholder& p : m.placeholders) {
    if (p.slot < 0) continue;
    switch (p.type) {
      case Placeholder::Type::kTensor: values[p.slot] = m.tensors[p.index]; break;
      case Placeholder::Type::kUser:
        values[p.slot] = p.sym_int
                             ? sym_int_input(inputs[p.index], m.origin, m.input_names[p.index])
                             : inputs[p.index];
        break;
      case Placeholder::Type::kConstant: values[p.slot] = p.constant; break;
    }
  }
  // A device's kernels run asynchronously: an observed run waits for each, so that its time is
  // the kernel's, not its launch's.
  const c10::impl::DeviceGuardImplInterface* device_guard =
      kObserved && !m.device.is_cpu() ? c10::impl::getDeviceGuardImpl(m.device.type()) : nullptr;
  auto synchronize = [&] {
    if (device_guard) device_guard->synchronizeDevice(m.device.index() < 0 ? 0 : m.device.index());
  };
  synchronize();
  std::vector<c10::IValue> observed;
  auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  torch::jit::Stack& stack = m.stack;
  for (size_t index = 0; index < m.steps.size(); ++index) {
    const Step& step = m.steps[index];
    std::chrono::steady_clock::time_point start;
    if constexpr (kObserved) {
      observed.clear();
      start = std::chrono::steady_clock::now();
    }
    if (step.eval_alias >= 0 && !m.training) {
      if (step.outputs[0].slot >= 0) values[step.outputs[0].slot] = values[step.eval_alias];
      if constexpr (kObserved) observed.push_back(values[step.eval_alias]);
    } else if (step.sym != SymOp::kNone) {
      const c10::IValue a = m.value_of(step.args[0], values);
      c10::IValue result;
      if (step.sym == SymOp::kGetitem) {
        const int64_t i = m.value_of(step.args[1], values).toInt();
        const auto list = a.isList() ? a.toListRef() : a.toTupleRef().elements();
        result = list.at(static_cast<size_t>(i < 0 ? i + static_cast<int64_t>(list.size()) : i));
      } else if (step.sym == SymOp::kNeg) {
        result = -a.toInt();
      } else {
        const int64_t x = a.toInt();
        const int64_t y = m.value_of(step.args[1], values).toInt();
        switch (step.sym) {
          case SymOp::kAdd: result = x + y; break;
          case SymOp::kSub: result = x - y; break;
          case SymOp::kMul: result = x * y; break;
          case SymOp::kFloorDiv:
          case SymOp::kMod:
            if (y == 0) throw std::invalid_argument(m.origin + ": " + step.label + ": division by zero");
            result = step.sym == SymOp::kFloorDiv ? floor_div(x, y) : x - floor_div(x, y) * y;
            break;
          default: break;
        }
      }
      if constexpr (kObserved) observed.push_back(result);
      if (step.outputs[0].slot >= 0) values[step.outputs[0].slot] = std::move(result);
    } else {
      stack.clear();
      for (size_t i = 0; i < step.args.size(); ++i) {
        if (!m.training && static_cast<int>(i) == step.mode_arg) {
          stack.emplace_back(false);
        } else if (!m.training && static_cast<int>(i) == step.attention_dropout) {
          stack.emplace_back(0.0);
        } else {
          stack.push_back(m.value_of(step.args[i], values));
        }
      }
      if constexpr (kObserved) start = std::chrono::steady_clock::now();
      step.op->callBoxed(stack);
      if constexpr (kObserved) {
        synchronize();
        observe(index, seconds_since(start), std::vector<c10::IValue>(stack.begin(), stack.end()));
      }
      for (size_t i = 0; i < step.outputs.size() && i < stack.size(); ++i) {
        const Sink& sink = step.outputs[i];
        if (sink.type == Sink::Type::kValue) {
          if (sink.slot >= 0) values[sink.slot] = std::move(stack[i]);
        } else if (sink.type == Sink::Type::kList) {
          const c10::List<at::Tensor> list = stack[i].toTensorList();
          for (size_t j = 0; j < sink.slots.size() && j < list.size(); ++j) {
            if (sink.slots[j] >= 0) values[sink.slots[j]] = list.get(j);
          }
        }
      }
      for (int slot : step.release) values[slot] = c10::IValue();
      continue;
    }
    if constexpr (kObserved) {
      observe(index, seconds_since(start), observed);
    }
    for (int slot : step.release) values[slot] = c10::IValue();
  }
  stack.clear();
  for (const Mutation& mutation : m.mutations) {
    const at::Tensor value = values[mutation.slot].toTensor();
    at::Tensor target = mutation.user_input ? inputs[mutation.index].toTensor() : m.tensors[mutation.index];
    if (!value.is_same(target)) {
      at::NoGradGuard no_grad;
      target.copy_(value);
    }
  }
  std::vector<c10::IValue> out;
  out.reserve(m.outputs.size());
  for (const Source& source : m.outputs) out.push_back(m.value_of(source, values));
  return out;
}

std::vector<c10::IValue> ExportedModule::forward(std::vector<c10::IValue> inputs) {
  return impl_->run<false>(std::move(inputs), [](size_t, double, const std::vector<c10::IValue>&) {});
}

std::vector<c10::IValue> ExportedModule::forward_observed(std::vector<c10::IValue> inputs,
                                                          const NodeObserver& observer) {
  return impl_->run<true>(std::move(inputs), observer);
}

ExportedModule ExportedModule::clone() const {
  auto impl = std::make_unique<Impl>(*impl_);
  impl->stack.clear();
  for (at::Tensor& t : impl->tensors) {
    at::Tensor copy = t.detach().clone();
    if (t.requires_grad()) copy.requires_grad_(true);
    t = std::move(copy);
  }
  return ExportedModule(std::move(impl));
}

Pt2Archive ExportedModule::to_archive() const {
  const Impl& m = *impl_;
  std::vector<at::Tensor> host(m.tensors.size());
  auto host_tensor = [&](size_t index) {
    if (!host[index].defined()) {
      const at::Tensor& t = m.tensors[index];
      at::Tensor h = t.detach();
      if (!h.device().is_cpu()) h = h.to(at::kCPU);
      if (t.requires_grad()) h.requires_grad_(true);
      host[index] = std::move(h);
    }
    return host[index];
  };
  Pt2Archive archive;
  archive.origin = m.origin;
  archive.model_name = m.model_name;
  archive.model_json = *m.model_json;
  archive.program = *m.source_program;
  for (const auto& [name, index] : m.weight_names) {
    archive.weights.emplace(name, host_tensor(index));
  }
  for (const auto& [name, index] : m.constant_names) {
    archive.constants.emplace(name, host_tensor(index));
  }
  return archive;
}

std::vector<std::pair<std::string, at::Tensor>> ExportedModule::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_set<size_t> seen;
  for (const auto& [name, index] : impl_->parameters) {
    if (seen.insert(index).second) out.emplace_back(name, impl_->tensors[index]);
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> ExportedModule::named_buffers() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, index] : impl_->buffers) out.emplace_back(name, impl_->tensors[index]);
  return out;
}

void ExportedModule::train(bool on) { impl_->training = on; }
bool ExportedModule::is_training() const { return impl_->training; }

void ExportedModule::to(const c10::Device& device) {
  for (Step& step : impl_->steps) {
    for (size_t arg : step.device_args) {
      c10::IValue& named = step.args[arg].constant;
      if (named.toDevice() == impl_->device) named = device;
    }
  }
  impl_->device = device;
  for (at::Tensor& t : impl_->tensors) {
    if (t.device() == device) continue;
    const bool leaf_with_grad = t.requires_grad();
    at::Tensor moved = t.detach().to(device);
    if (leaf_with_grad) moved.requires_grad_(true);
    t = moved;
  }
}

const std::vector<std::string>& ExportedModule::input_names() const { return impl_->input_names; }
size_t ExportedModule::output_count() const { return impl_->outputs.size(); }
bool ExportedModule::has_training_behaviour() const { return impl_->training_behaviour; }
const std::string& ExportedModule::model_json() const { return *impl_->model_json; }

const std::string& ExportedModule::origin() const { return impl_->origin; }

}  // namespace ravnest::exported
