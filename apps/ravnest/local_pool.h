// `ravnest local`'s decisions, pure and unit-tested (tests/integration/test_local.cpp): the pool
// file it writes, whether it may overwrite one, the --gpus list, and the secret's text.
// No processes, no files: local.cpp does those.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ravnest::cli {

// Ravnest's node_configs.json for daemons on 127.0.0.1 at `ports` (node i is key "i"), each
// declaring `ram_gb` and `bandwidth_mbps`:
//   {"0": {"IP": "127.0.0.1:4001", "benchmarks": {"ram": 8, "bandwidth": 1000}}, ...}
std::string local_pool_json(const std::vector<int>& ports, double ram_gb, double bandwidth_mbps);

// Whether `ravnest local` may write the pool file: it is absent (`existing` empty), or its text is
// what the last `ravnest local` wrote (`ours`, the copy it kept), or `force`. Otherwise the file
// is the user's (a real pool): overwriting it would lose it.
bool may_write_pool(const std::optional<std::string>& existing,
                    const std::optional<std::string>& ours, bool force);

// "0,1" -> {0, 1}; empty -> {}. Throws std::invalid_argument naming --gpus on anything else
// (a negative or non-numeric entry, an empty item).
std::vector<int> parse_gpu_list(const std::string& text);

// The --device of daemon i: "cuda:<gpus[i % gpus.size()]>", or "" (the daemon's default) when
// no --gpus.
std::string device_for_node(size_t i, const std::vector<int>& gpus);

// Standard base64 with padding (RFC 4648), for the secret's 32 random bytes.
std::string base64(const std::string& bytes);

}  // namespace ravnest::cli
