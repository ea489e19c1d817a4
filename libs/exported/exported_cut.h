// Cutting an exported program (exported_program.h) into pipeline stages: the program read as a
// sequence of units for the planner, where it may be cut, how the stages of a cut are wired, and
// each stage's models/model.json. Pure C++ on plain data; mirrors what libs/graph does for
// TorchScript (model_graph.h: units, liveness, cut rules; stage_builder.h: wire_stages).
//
// Units: every node of the graph is a unit, in graph order (unit i = program.nodes[i]); a stage is
// a contiguous range of units. Values are the user inputs and the nodes' outputs (tensors and
// symbolic ints); parameters, buffers, tensor constants and constant inputs are state: never
// carried, each stage holds the ones its nodes read.
//
// Cut rules (model_graph.h's, on the serialized graph): a cut after unit i is allowed when
//  - every value crossing it can be carried (every serialized value can: tensors, symbolic ints);
//  - no node after it writes in place to what a value defined before it (a crossing value, a user
//    input) is or views: the consumer would write to its own copy, a received autograd leaf;
//  - no state that the program writes (a buffer's add_, batch_norm's running statistics, a
//    BUFFER_MUTATION output) is touched by nodes on both sides of it.
// A parameter read on both sides is allowed (tied weights: each stage holds it and the caller sums
// the gradients). The operator's schema is not at hand without LibTorch, so writes are known by
// name: an operator whose name ends in '_' (aten::add_, relu_, copy_, the in-place dunders
// __iand__...) writes its first argument, an argument named `out` is written, and the batch-norm
// family (batch_norm, native_batch_norm, _native_batch_norm_legit, _batch_norm_with_update,
// cudnn_batch_norm, miopen_batch_norm, instance_norm) writes running_mean and running_var unless
// its training (use_input_stats) argument is false. What a value views is known by name too: the
// output of an in-place op is its target, and view-like ops (view, reshape, flatten, transpose,
// permute, select, slice, split, chunk, unbind, expand, squeeze, unsqueeze, detach, alias,
// contiguous, to, dropout, ...: those that may return their input or a view of it) pass on what
// their first tensor argument views.
//
// Every function is stateless and may be called from any thread. stage_model_json and
// user_input_batches throw base::ConfigError, one line "<origin>: <what>", when the whole JSON is
// not the program's; wire_program_stages throws std::invalid_argument for ranges that are not a
// cover of the units at allowed cuts (the caller's mistake, not the file's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "libs/exported/exported_program.h"

namespace ravnest::exported {

// A value units pass on: a user input or a node's output.
struct ProgramValue {
  std::string name;
  std::string kind;       // "Tensor" or "int" (a symbolic int: aten.sym_size.int, arithmetic on it)
  int defined_at = -1;    // -1: a user input; else the unit whose node defines it
  int last_used_at = -1;  // the last unit reading it; units when the model returns it as a user
                          // output; defined_at when nothing reads it (a value written back as a
                          // mutation stays in the stage defining it)
};

struct ProgramUnits {
  // "aten::conv2d layer1.0.conv1": the operator (the target when it is no operator) and the
  // innermost module of the node's nn_module_stack, when it has one.
  std::vector<std::string> labels;
  // Size max(units - 1, 0): whether a cut after unit i is allowed (the rules above).
  std::vector<bool> cut_allowed;
  // User inputs with a name (signature order), then node outputs (graph order).
  std::vector<ProgramValue> values;
  std::unordered_map<std::string, size_t> value_index;  // name -> index into values
  // Per boundary (a cut after unit i, size as cut_allowed): indices into values of those crossing
  // it (defined at or before unit i, read after it), in definition order.
  std::vector<std::vector<size_t>> crossing;
  // Per unit: the state (parameters', buffers', tensor constants' fully qualified names) this unit
  // is the first to read.
  std::vector<std::vector<std::string>> first_state;
  // Fully qualified names of the state the program writes, in signature order.
  std::vector<std::string> mutated_state;

  size_t size() const { return labels.size(); }
};

ProgramUnits program_units(const ExportedProgram& program);

struct StageSource {
  int model_input = -1;  // root only: the index among the program's user inputs
  int stage = -1;        // producer stage index within the cut
  int output = -1;       // index into the producer's outputs
};

struct ProgramStage {
  size_t first_unit = 0;
  size_t end_unit = 0;
  bool is_leaf = false;
  // The root: every user input of the program, in signature order (a user input the export made a
  // constant has name "" and its kind: "int", "float", "bool", "None", "str"); other stages: the
  // values they read from earlier stages, in definition order. Types are ProgramValue::kind.
  std::vector<std::string> inputs;
  std::vector<std::string> input_types;
  std::vector<StageSource> input_sources;
  // Non-leaf: the values later stages read, in definition order, with the stages reading each
  // (ascending); the leaf has none (it returns the program's user outputs).
  std::vector<std::string> outputs;
  std::vector<std::string> output_types;
  std::vector<std::vector<int>> output_consumers;
  // Fully qualified names of the parameters, buffers and tensor constants the stage holds, in the
  // program's signature order: those its nodes read, those it writes back (BUFFER_MUTATION), the
  // leaf's returned ones, and for the root also those nothing reads (so that the stages' state
  // dicts together hold the whole program's).
  std::vector<std::string> state;
};

// `ranges`: consecutive [first, end) unit ranges covering every unit, in pipeline order, each cut
// allowed (end > first unless the program has no nodes). The wiring of stage_builder.h's
// wire_stages: the root takes every user input and passes on what later stages read; every value
// a stage reads from an earlier one arrives directly from the stage that defines it (a skip
// connection from stage 0 to stage 2 is an output of stage 0 and an input of stage 2, not relayed
// by stage 1); the leaf returns the program's user outputs.
std::vector<ProgramStage> wire_program_stages(const ExportedProgram& program,
                                              const ProgramUnits& units,
                                              const std::vector<std::pair<size_t, size_t>>& ranges);

// The stage's models/model.json: the whole program's JSON (the text `program` was parsed from)
// with
//  - graph.nodes: the stage's nodes;
//  - graph.inputs and signature.input_specs: the parameters, buffers, tensor constants and
//    constant inputs the stage's nodes read (stage.state, in the whole signature's order), then
//    its user inputs (stage.inputs: the root keeps the program's user inputs as they are);
//  - graph.outputs and signature.output_specs: the mutations written back by the stage's nodes
//    (BUFFER_MUTATION, PARAMETER_MUTATION, USER_INPUT_MUTATION, in the whole's order), then the
//    leaf's program user outputs or a non-leaf's stage.outputs as user outputs;
//  - tensor_values, sym_int_values, sym_float_values, sym_bool_values, custom_obj_values: the
//    entries of the values the stage names;
//  - module_call_graph: the root entry's in_spec and forward_arg_names kept by the root and
//    otherwise a flat tuple of the stage's inputs, its out_spec kept by the leaf and otherwise a
//    tuple of the stage's outputs; entries of submodules without a signature kept, those with one
//    (preserve_module_call_signature) dropped, as they name values of the whole;
//  - range_constraints: those of the symbols the kept values' sizes are expressions of;
//  - everything else (schema_version, opset_version, verifiers, torch_version, metadata) as in
//    the whole.
// The result parses with parse_exported_program and, written into an archive with the stage's
// payloads, loads with torch.export.load. `origin` names the whole file in messages.
std::string stage_model_json(const std::string& whole_model_json, const ExportedProgram& program,
                             const ProgramStage& stage, const std::string& origin);

// Each tensor user input's dimension 0 as the export saw it: symbolic (the export had a batch Dim
// in dynamic_shapes) or a number; clusterize refuses a static batch that micro-batches would
// change. Signature order; user inputs that are not tensors are left out.
struct InputBatch {
  std::string name;
  bool dynamic = false;  // dim 0 is symbolic
  int64_t size = -1;     // the static size, or the export's example size (the symbol's hint) when
                         // dynamic; -1 for a 0-dimensional tensor or a symbol without a hint
};
std::vector<InputBatch> user_input_batches(const std::string& whole_model_json,
                                           const ExportedProgram& program,
                                           const std::string& origin);

}  // namespace ravnest::exported
