// The [plan] block of `clusterize --plan-file` (libs/config/plan/layout_request.h).
#include <catch2/catch.hpp>

#include "libs/base/config_error.h"
#include "libs/config/plan/layout_request.h"

using ravnest::base::ConfigError;
using ravnest::config::parse_layout_request;

TEST_CASE("a [plan] block sets stages and clusters; either may be left out", "[config][layout]") {
  auto both = parse_layout_request("[plan]\nstages = 3\nclusters = 2\n", "plan.toml");
  CHECK(both.stages == 3);
  CHECK(both.clusters == 2);
  auto stages = parse_layout_request("[other]\nx = 1\n[plan]\nstages = 4\n", "plan.toml");
  CHECK(stages.stages == 4);
  CHECK(stages.clusters == 0);
}

TEST_CASE("a bad [plan] block is refused in one line naming the file and the field",
          "[config][layout]") {
  CHECK_THROWS_WITH(parse_layout_request("stages = 3\n", "p.toml"),
                    "p.toml: plan: missing (a [plan] block with stages = K and/or clusters = C)");
  CHECK_THROWS_WITH(parse_layout_request("plan = 3\n", "p.toml"),
                    "p.toml: plan: must be a table ([plan])");
  CHECK_THROWS_WITH(parse_layout_request("[plan]\nnum_stages = 3\n", "p.toml"),
                    "p.toml: plan.num_stages: unknown key (DeepSpeed's num_stages is stages here)");
  CHECK_THROWS_WITH(parse_layout_request("[plan]\nstages = 0\n", "p.toml"),
                    "p.toml: plan.stages: must be a whole number from 1 to 1000000");
  CHECK_THROWS_WITH(parse_layout_request("[plan]\nclusters = 2.5\n", "p.toml"),
                    "p.toml: plan.clusters: must be a whole number from 1 to 1000000");
  CHECK_THROWS_WITH(parse_layout_request("[plan]\nstages = \"3\"\n", "p.toml"),
                    "p.toml: plan.stages: must be a whole number from 1 to 1000000");
  CHECK_THROWS_AS(parse_layout_request("[plan\n", "p.toml"), ConfigError);
}
