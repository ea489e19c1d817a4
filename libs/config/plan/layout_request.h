// LayoutRequest: the layout a user asks `ravnest clusterize` for, from `--stages K --clusters C`
// or from a [plan] block in a TOML file passed with `--plan-file F` (docs/planner.md#layout-on-
// request):
//
//   [plan]
//   stages = 3     # every cluster 3 stages (DeepSpeed's num_stages)
//   clusters = 2   # 2 copies of the model, data-parallel (torchrun's world size / stages)
//
// Either may be left out (the planner chooses). Other tables of the file are not read, so the
// block may sit in a file that holds other things. Pure C++.
#pragma once

#include <string>

namespace ravnest::config {

struct LayoutRequest {
  int stages = 0;    // 0: the planner's choice
  int clusters = 0;  // 0: the planner's choice
};

// Throws base::ConfigError, one line naming the file and the field: a syntax error, a [plan]
// that is not a table, an unknown key in it (num_stages is pointed to stages), a value that is
// not a whole number from 1 to 1,000,000.
LayoutRequest parse_layout_request(const std::string& text, const std::string& origin);
LayoutRequest load_layout_request(const std::string& path);

}  // namespace ravnest::config
