#include "libs/config/plan/node_metadata.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/base/json_reader.h"
#include "libs/base/printable.h"
#include "libs/config/pool/tls_fingerprint.h"

namespace ravnest::config {
namespace {

using ordered_json = nlohmann::ordered_json;
using json = nlohmann::json;
using base::JsonReader;

ordered_json input_to_json(const StageInput& input) {
  ordered_json out;
  out["value"] = input.value;
  out["type"] = input.type;
  if (input.model_input) out["model_input"] = *input.model_input;
  if (input.from_node) {
    ordered_json from;
    from["node"] = *input.from_node;
    from["output"] = input.from_output;
    out["from"] = from;
  }
  return out;
}

ordered_json output_to_json(const StageOutput& output) {
  ordered_json out;
  out["value"] = output.value;
  out["type"] = output.type;
  out["to_nodes"] = output.to_nodes;
  return out;
}

ordered_json peer_to_json(const RingPeer& peer) {
  ordered_json p;
  p["node"] = peer.node;
  p["cluster"] = peer.cluster;
  p["address"] = peer.address;
  return p;
}

// Only the neighbours: a node's file stays the same size however many clusters the plan has
// (docs/node-metadata.md#rings). next_node/prev_node repeat next.node/prev.node for readers of
// earlier plans' fields.
ordered_json ring_to_json(const RingMembership& ring) {
  ordered_json out;
  out["id"] = ring.id;
  out["parameters"] = ring.parameters;
  out["size"] = ring.size;
  out["position"] = ring.position;
  out["next"] = peer_to_json(ring.next);
  out["prev"] = peer_to_json(ring.prev);
  out["next_node"] = ring.next.node;
  out["prev_node"] = ring.prev.node;
  return out;
}

// The phases of node_metadata_from_json(), one per group of fields.

// Format, who the node is, its place in its cluster, and its stage file.
void read_identity(const JsonReader& r, const json& root, NodeMetadata* out) {
  NodeMetadata& m = *out;
  m.format = r.string(root, "", "format");
  if (m.format != kNodeMetadataFormat) {
    r.fail("format", "expected \"" + std::string(kNodeMetadataFormat) + "\", got \"" + m.format +
                         "\"");
  }
  m.node_id = r.integer(root, "", "node_id");
  m.name = r.string(root, "", "name");
  m.address = r.string(root, "", "address");
  m.cluster = r.integer(root, "", "cluster");
  m.position = r.integer(root, "", "position");
  m.cluster_size = r.integer(root, "", "cluster_size");
  m.cluster_count = r.integer(root, "", "cluster_count");
  const std::string role = r.string(root, "", "role");
  try {
    m.role = role_from_name(role);
  } catch (const base::ConfigError& error) {
    r.fail("role", error.what());
  }
  m.stage_file = r.string(root, "", "stage_file");
  m.stage_sha256 = r.string(root, "", "stage_sha256");
}

void read_inputs(const JsonReader& r, const json& root, NodeMetadata* m) {
  const json& inputs = r.array(root, "", "inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string path = JsonReader::index("inputs", i);
    const json& in = inputs[i];
    if (!in.is_object()) r.fail(path, "must be an object, got " + JsonReader::kind(in));
    StageInput input;
    input.value = r.string(in, path, "value");
    input.type = r.string(in, path, "type");
    const bool has_model_input = in.contains("model_input");
    const bool has_from = in.contains("from");
    if (has_model_input == has_from) {
      r.fail(path, "needs exactly one of \"model_input\" and \"from\"");
    }
    if (has_model_input) {
      input.model_input = r.integer(in, path, "model_input");
    } else {
      const json& from = r.object(in, path, "from");
      input.from_node = r.integer(from, path + ".from", "node");
      input.from_output = r.integer(from, path + ".from", "output");
    }
    m->inputs.push_back(std::move(input));
  }
}

void read_outputs(const JsonReader& r, const json& root, NodeMetadata* m) {
  const json& outputs = r.array(root, "", "outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string path = JsonReader::index("outputs", i);
    const json& o = outputs[i];
    if (!o.is_object()) r.fail(path, "must be an object, got " + JsonReader::kind(o));
    StageOutput output;
    output.value = r.string(o, path, "value");
    output.type = r.string(o, path, "type");
    output.to_nodes = r.int_list(o, path, "to_nodes");
    m->outputs.push_back(std::move(output));
  }
}

// The cluster around the node: pipeline, addresses, neighbours.
void read_neighbourhood(const JsonReader& r, const json& root, NodeMetadata* m) {
  m->returns_model_output = r.boolean(root, "", "returns_model_output");
  m->pipeline = r.int_list(root, "", "pipeline");
  const json& addresses = r.object(root, "", "addresses");
  for (const auto& [id, address] : addresses.items()) {
    const std::string path = "addresses." + id;
    if (id.empty() || id.size() > 9 || id.find_first_not_of("0123456789") != std::string::npos) {
      r.fail(path, "key must be a node id");  // at most 9 digits: std::stoi never overflows
    }
    if (!address.is_string()) r.fail(path, "must be a string, got " + JsonReader::kind(address));
    m->addresses[std::stoi(id)] = address.get<std::string>();
  }
  m->forward_neighbours = r.int_list(root, "", "forward_neighbours");
  m->backward_neighbours = r.int_list(root, "", "backward_neighbours");
}

// The parameters held, and which of them are shared or tied.
void read_parameters(const JsonReader& r, const json& root, NodeMetadata* m) {
  m->parameters = r.string_list(root, "", "parameters");
  const json& shared = r.object(root, "", "shared_parameters");
  for (const auto& [name, holders] : shared.items()) {
    m->shared_parameters[name] = r.int_list(holders, "shared_parameters." + name);
  }
  const json& tied = r.object(root, "", "tied_parameters");
  for (const auto& [name, canonical] : tied.items()) {
    if (!canonical.is_string()) {
      r.fail("tied_parameters." + name, "must be a string, got " + JsonReader::kind(canonical));
    }
    m->tied_parameters[name] = canonical.get<std::string>();
  }
}

// Absent in plans written before the random stream was chained: every node seeds alone.
void read_random_nodes(const JsonReader& r, const json& root, NodeMetadata* m) {
  if (root.contains("random_nodes")) m->random_nodes = r.int_list(root, "", "random_nodes");
}

// Absent in plans without pinned certificates.
void read_tls_fingerprints(const JsonReader& r, const json& root, NodeMetadata* m) {
  if (!root.contains("tls_fingerprints")) return;
  const json& pins = r.object(root, "", "tls_fingerprints");
  for (const auto& [address, pin] : pins.items()) {
    const std::string path = "tls_fingerprints." + base::printable(address, 80);
    std::optional<std::string> canonical;
    if (pin.is_string()) canonical = canonical_fingerprint(pin.get<std::string>());
    if (!canonical) r.fail(path, "must be the SHA-256 of a certificate (64 hex digits)");
    m->tls_fingerprints[address] = *canonical;
  }
}

RingPeer read_ring_peer(const JsonReader& r, const json& p, const std::string& path) {
  if (!p.is_object()) r.fail(path, "must be an object, got " + JsonReader::kind(p));
  RingPeer peer;
  peer.node = r.integer(p, path, "node");
  peer.cluster = r.integer(p, path, "cluster");
  peer.address = r.string(p, path, "address");
  return peer;
}

// Plans written before ring files were bounded list every member in `peers`; the ring is the
// same, read down to this node's neighbours.
void read_ring_peers(const JsonReader& r, const json& g, const std::string& path, int self,
                     RingMembership* ring) {
  const json& peers = r.array(g, path, "peers");
  if (peers.empty()) r.fail(path + ".peers", "must not be empty");
  const int n = static_cast<int>(peers.size());
  ring->size = n;
  ring->position = r.integer(g, path, "position");
  if (ring->position < 0 || ring->position >= n) {
    r.fail(path + ".position", "must index peers (0 to " + std::to_string(n - 1) + "), got " +
                                   std::to_string(ring->position));
  }
  auto at = [&](int k) {
    return read_ring_peer(r, peers[static_cast<size_t>(k)], JsonReader::index(path + ".peers", k));
  };
  for (int k = 0; k < n; ++k) at(k);  // every member well formed, as before
  if (at(ring->position).node != self) {
    r.fail(path + ".position",
           "must be the index of this node (node_id " + std::to_string(self) + ") in peers");
  }
  ring->next = at((ring->position + 1) % n);
  ring->prev = at((ring->position + n - 1) % n);
}

void read_rings(const JsonReader& r, const json& root, NodeMetadata* m) {
  const json& rings = r.array(root, "", "rings");
  for (size_t i = 0; i < rings.size(); ++i) {
    const std::string path = JsonReader::index("rings", i);
    const json& g = rings[i];
    if (!g.is_object()) r.fail(path, "must be an object, got " + JsonReader::kind(g));
    RingMembership ring;
    ring.id = r.integer(g, path, "id");
    ring.parameters = r.string_list(g, path, "parameters");
    if (g.contains("peers")) {
      read_ring_peers(r, g, path, m->node_id, &ring);
    } else {
      ring.size = r.integer(g, path, "size");
      if (ring.size < 1) {
        r.fail(path + ".size", "must be at least 1, got " + std::to_string(ring.size));
      }
      ring.position = r.integer(g, path, "position");
      // The daemon's ring runs the all-reduce from `position` among `size` (ring_member.cpp).
      if (ring.position < 0 || ring.position >= ring.size) {
        r.fail(path + ".position", "must be below size (0 to " + std::to_string(ring.size - 1) +
                                       "), got " + std::to_string(ring.position));
      }
      ring.next = read_ring_peer(r, r.member(g, path, "next"), path + ".next");
      ring.prev = read_ring_peer(r, r.member(g, path, "prev"), path + ".prev");
      if (ring.size == 1 && (ring.next.node != m->node_id || ring.prev.node != m->node_id)) {
        r.fail(path, "a ring of one member must have this node (node_id " +
                         std::to_string(m->node_id) + ") as next and prev");
      }
    }
    m->rings.push_back(std::move(ring));
  }
}

// Absent in pipeline plans.
void read_parameter_server(const JsonReader& r, const json& root, NodeMetadata* m) {
  if (!root.contains("parameter_server")) return;
  const json& ps = r.object(root, "", "parameter_server");
  auto peer = [&](const json& p, const std::string& path) {
    if (!p.is_object()) r.fail(path, "must be an object, got " + JsonReader::kind(p));
    PsPeer out;
    out.node = r.integer(p, path, "node");
    out.address = r.string(p, path, "address");
    return out;
  };
  ParameterServerPlan& plan = m->parameter_server;
  const json& servers = r.array(ps, "parameter_server", "servers");
  for (size_t i = 0; i < servers.size(); ++i) {
    const std::string path = JsonReader::index("parameter_server.servers", i);
    const PsPeer p = peer(servers[i], path);
    plan.servers.push_back({p.node, p.address, r.string_list(servers[i], path, "tensors")});
  }
  if (plan.servers.empty()) r.fail("parameter_server.servers", "must not be empty");
  const json& workers = r.array(ps, "parameter_server", "workers");
  for (size_t i = 0; i < workers.size(); ++i) {
    plan.workers.push_back(peer(workers[i], JsonReader::index("parameter_server.workers", i)));
  }
  if (plan.workers.empty()) r.fail("parameter_server.workers", "must not be empty");
  if (ps.contains("evaluator")) {
    plan.evaluator = peer(ps.at("evaluator"), "parameter_server.evaluator");
  }
  if (ps.contains("sparse_tables")) {
    const json& tables = r.array(ps, "parameter_server", "sparse_tables");
    for (size_t i = 0; i < tables.size(); ++i) {
      const std::string path = JsonReader::index("parameter_server.sparse_tables", i);
      SparseTable table;
      table.weight = r.string(tables[i], path, "weight");
      table.server = r.integer(tables[i], path, "server");
      table.index_input = r.integer(tables[i], path, "index_input");
      const json& shape = r.array(tables[i], path, "shape");
      for (size_t d = 0; d < shape.size(); ++d) {
        table.shape.push_back(r.int64(shape[d], JsonReader::index(path + ".shape", d)));
        if (table.shape.back() < 1) r.fail(JsonReader::index(path + ".shape", d), "must be >= 1");
      }
      if (table.shape.size() < 2) r.fail(path + ".shape", "must have at least 2 dimensions");
      if (table.index_input < 0) r.fail(path + ".index_input", "must be >= 0");
      const auto server = std::find_if(plan.servers.begin(), plan.servers.end(),
                                       [&](const PsServer& s) { return s.node == table.server; });
      if (server == plan.servers.end() ||
          std::find(server->tensors.begin(), server->tensors.end(), table.weight) ==
              server->tensors.end()) {
        r.fail(path + ".server", "must be a server whose tensors include " + table.weight);
      }
      plan.sparse_tables.push_back(std::move(table));
    }
    if (plan.evaluator) r.fail("parameter_server.evaluator", "a hybrid plan has no evaluator");
  }
  const bool server = m->role == Role::kServer, worker = m->role == Role::kWorker,
             evaluator = m->role == Role::kEvaluator;
  if (!server && !worker && !evaluator) {
    r.fail("role", "must be server, worker or evaluator in a parameter-server plan");
  }
  if (worker && (m->cluster < 0 || static_cast<size_t>(m->cluster) >= plan.workers.size() ||
                 plan.workers[static_cast<size_t>(m->cluster)].node != m->node_id)) {
    r.fail("cluster", "must be this worker's index in parameter_server.workers");
  }
}

void read_estimates(const JsonReader& r, const json& root, NodeMetadata* m) {
  const json& estimates = r.object(root, "", "estimates");
  m->estimates.parameter_count = r.int64(estimates, "estimates", "parameter_count");
  m->estimates.parameter_bytes = r.int64(estimates, "estimates", "parameter_bytes");
  m->estimates.memory_bytes = r.number(estimates, "estimates", "memory_bytes");
  m->estimates.step_seconds = r.number(estimates, "estimates", "step_seconds");
  m->estimates.forward_bytes_per_sample =
      r.number(estimates, "estimates", "forward_bytes_per_sample");
  // Measured memory: absent from plans written before it was measured.
  for (auto [key, field] : {std::pair{"peak_memory_bytes", &StageEstimates::peak_memory_bytes},
                            std::pair{"daemon_baseline_bytes",
                                      &StageEstimates::daemon_baseline_bytes},
                            std::pair{"node_ram_bytes", &StageEstimates::node_ram_bytes},
                            std::pair{"device_peak_memory_bytes",
                                      &StageEstimates::device_peak_memory_bytes},
                            std::pair{"node_gpu_memory_bytes",
                                      &StageEstimates::node_gpu_memory_bytes}}) {
    if (!estimates.contains(key)) continue;
    const int64_t value = r.int64(estimates, "estimates", key);
    if (value < 0) r.fail(std::string("estimates.") + key, "must not be negative");
    m->estimates.*field = value;
  }
  if (m->estimates.daemon_baseline_bytes > m->estimates.peak_memory_bytes) {
    r.fail("estimates.daemon_baseline_bytes", "exceeds estimates.peak_memory_bytes");
  }
}

}  // namespace

std::string node_name(int id) { return "node_" + std::to_string(id); }

std::string role_name(Role role) {
  switch (role) {
    case Role::kRoot: return "root";
    case Role::kStem: return "stem";
    case Role::kLeaf: return "leaf";
    case Role::kRootLeaf: return "root+leaf";
    case Role::kServer: return "server";
    case Role::kWorker: return "worker";
    case Role::kEvaluator: return "evaluator";
  }
  return "root+leaf";
}

Role role_from_name(const std::string& name) {
  if (name == "root") return Role::kRoot;
  if (name == "stem") return Role::kStem;
  if (name == "leaf") return Role::kLeaf;
  if (name == "root+leaf") return Role::kRootLeaf;
  if (name == "server") return Role::kServer;
  if (name == "worker") return Role::kWorker;
  if (name == "evaluator") return Role::kEvaluator;
  throw base::ConfigError("unknown role \"" + name +
                    "\" (expected root, stem, leaf, root+leaf, server, worker or evaluator)");
}

std::map<int, std::string> peer_addresses(const NodeMetadata& m) {
  std::map<int, std::string> out = m.addresses;
  const auto& ps = m.parameter_server;
  for (const auto& s : ps.servers) out.emplace(s.node, s.address);
  for (const auto& w : ps.workers) out.emplace(w.node, w.address);
  if (ps.evaluator) out.emplace(ps.evaluator->node, ps.evaluator->address);
  out.emplace(m.node_id, m.address);
  return out;
}

std::string to_json(const NodeMetadata& m) {
  ordered_json out;
  out["format"] = m.format;
  out["node_id"] = m.node_id;
  out["name"] = m.name;
  out["address"] = m.address;
  out["cluster"] = m.cluster;
  out["position"] = m.position;
  out["cluster_size"] = m.cluster_size;
  out["cluster_count"] = m.cluster_count;
  out["role"] = role_name(m.role);
  out["stage_file"] = m.stage_file;
  out["stage_sha256"] = m.stage_sha256;
  ordered_json inputs = ordered_json::array();
  for (const auto& input : m.inputs) inputs.push_back(input_to_json(input));
  out["inputs"] = inputs;
  ordered_json outputs = ordered_json::array();
  for (const auto& output : m.outputs) outputs.push_back(output_to_json(output));
  out["outputs"] = outputs;
  out["returns_model_output"] = m.returns_model_output;
  out["pipeline"] = m.pipeline;
  ordered_json addresses = ordered_json::object();
  for (const auto& [id, address] : m.addresses) addresses[std::to_string(id)] = address;
  out["addresses"] = addresses;
  out["forward_neighbours"] = m.forward_neighbours;
  out["backward_neighbours"] = m.backward_neighbours;
  out["parameters"] = m.parameters;
  ordered_json shared = ordered_json::object();
  for (const auto& [name, holders] : m.shared_parameters) shared[name] = holders;
  out["shared_parameters"] = shared;
  ordered_json tied = ordered_json::object();
  for (const auto& [name, canonical] : m.tied_parameters) tied[name] = canonical;
  out["tied_parameters"] = tied;
  out["random_nodes"] = m.random_nodes;
  ordered_json rings = ordered_json::array();
  for (const auto& ring : m.rings) rings.push_back(ring_to_json(ring));
  out["rings"] = rings;
  if (!m.tls_fingerprints.empty()) {
    ordered_json pins = ordered_json::object();
    for (const auto& [address, pin] : m.tls_fingerprints) pins[address] = pin;
    out["tls_fingerprints"] = pins;
  }
  if (!m.parameter_server.empty()) {
    auto peer = [](const PsPeer& p) {
      ordered_json o;
      o["node"] = p.node;
      o["address"] = p.address;
      return o;
    };
    ordered_json ps;
    ordered_json servers = ordered_json::array();
    for (const auto& s : m.parameter_server.servers) {
      ordered_json o = peer({s.node, s.address});
      o["tensors"] = s.tensors;
      servers.push_back(o);
    }
    ps["servers"] = servers;
    ordered_json workers = ordered_json::array();
    for (const auto& w : m.parameter_server.workers) workers.push_back(peer(w));
    ps["workers"] = workers;
    if (m.parameter_server.evaluator) ps["evaluator"] = peer(*m.parameter_server.evaluator);
    if (m.parameter_server.hybrid()) {
      ordered_json tables = ordered_json::array();
      for (const auto& t : m.parameter_server.sparse_tables) {
        ordered_json o;
        o["weight"] = t.weight;
        o["server"] = t.server;
        o["index_input"] = t.index_input;
        o["shape"] = t.shape;
        tables.push_back(o);
      }
      ps["sparse_tables"] = tables;
    }
    out["parameter_server"] = ps;
  }
  ordered_json estimates;
  estimates["parameter_count"] = m.estimates.parameter_count;
  estimates["parameter_bytes"] = m.estimates.parameter_bytes;
  estimates["memory_bytes"] = m.estimates.memory_bytes;
  estimates["step_seconds"] = m.estimates.step_seconds;
  estimates["forward_bytes_per_sample"] = m.estimates.forward_bytes_per_sample;
  if (m.estimates.peak_memory_bytes > 0) {
    estimates["peak_memory_bytes"] = m.estimates.peak_memory_bytes;
    estimates["daemon_baseline_bytes"] = m.estimates.daemon_baseline_bytes;
  }
  if (m.estimates.node_ram_bytes > 0) estimates["node_ram_bytes"] = m.estimates.node_ram_bytes;
  if (m.estimates.device_peak_memory_bytes > 0) {
    estimates["device_peak_memory_bytes"] = m.estimates.device_peak_memory_bytes;
  }
  if (m.estimates.node_gpu_memory_bytes > 0) {
    estimates["node_gpu_memory_bytes"] = m.estimates.node_gpu_memory_bytes;
  }
  out["estimates"] = estimates;
  return out.dump(2) + "\n";
}

NodeMetadata node_metadata_from_json(const std::string& text, const std::string& origin) {
  const JsonReader r(origin);
  const json root = r.parse_object(text);

  // In the order of the file, so that the first field in error is the one reported.
  NodeMetadata m;
  read_identity(r, root, &m);
  read_inputs(r, root, &m);
  read_outputs(r, root, &m);
  read_neighbourhood(r, root, &m);
  read_parameters(r, root, &m);
  read_random_nodes(r, root, &m);
  read_rings(r, root, &m);
  read_tls_fingerprints(r, root, &m);
  read_parameter_server(r, root, &m);
  read_estimates(r, root, &m);
  const bool ps_role =
      m.role == Role::kServer || m.role == Role::kWorker || m.role == Role::kEvaluator;
  if (ps_role && m.parameter_server.empty()) {
    r.fail("parameter_server", "a " + role_name(m.role) + " needs the plan's parameter_server");
  }
  return m;
}

NodeMetadata load_node_metadata(const std::string& path) {
  return node_metadata_from_json(base::read_file(path), path);
}

}  // namespace ravnest::config
