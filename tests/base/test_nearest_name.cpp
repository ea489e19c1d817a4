// nearest_name: the "did you mean" of `ravnest trian` and of unknown options.
#include <catch2/catch.hpp>

#include "libs/base/nearest_name.h"

using namespace ravnest::base;

TEST_CASE("edit_distance counts a swap of neighbours as one edit", "[nearest_name]") {
  CHECK(edit_distance("train", "train") == 0);
  CHECK(edit_distance("trian", "train") == 1);
  CHECK(edit_distance("trai", "train") == 1);
  CHECK(edit_distance("trainn", "train") == 1);
  CHECK(edit_distance("tрain", "train") > 0);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("nearest_name names a close known name and nothing for another word",
          "[nearest_name]") {
  const std::vector<std::string> commands{"clusterize", "push",   "train", "resume",
                                          "replace",    "status", "losses", "stop"};
  CHECK(nearest_name("trian", commands) == std::optional<std::string>("train"));
  CHECK(nearest_name("clusterise", commands) == std::optional<std::string>("clusterize"));
  CHECK(nearest_name("stauts", commands) == std::optional<std::string>("status"));
  CHECK_FALSE(nearest_name("foo", commands).has_value());
  CHECK_FALSE(nearest_name("deploy", commands).has_value());
  CHECK(nearest_name("--wiht", {"--with", "--nodes", "--plan"}) ==
        std::optional<std::string>("--with"));
  CHECK_FALSE(nearest_name("x", {}).has_value());
  // A tie goes to the first listed.
  CHECK(nearest_name("stap", {"stop", "step"}) == std::optional<std::string>("stop"));
  // A job file's keys and names: case ignored ("AdamW" is the key "adamw" written as its class),
  // a word is not its own suggestion.
  CHECK(nearest_name("epoch", {"batch_size", "epochs"}) == std::optional<std::string>("epochs"));
  CHECK(nearest_name("AdamW", {"adam", "adamw"}) == std::optional<std::string>("adamw"));
  CHECK_FALSE(nearest_name("pipedream", {"gpipe", "1f1b", "async"}));
  CHECK_FALSE(nearest_name("epochs", {"epochs"}));
}

TEST_CASE("did_you_mean ends a message with the nearest name or says nothing", "[nearest_name]") {
  CHECK(did_you_mean("lsiten", {"node", "listen"}) == "; did you mean \"listen\"?");
  CHECK(did_you_mean("idle", {"idle_seconds", "connections"}).empty());
}
