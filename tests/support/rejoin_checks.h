// Checks the elastic and churn tests share about a cluster that came back (a replaced node, a
// dropped cluster that rejoins): its first loss, and the fused weights against the reference of
// the drops and rejoins (drop_reference.h). They are Catch2 assertions: call them from a test
// case of a Catch2 binary, on the test's thread.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "tests/support/drop_reference.h"

namespace ravnest::test {

// The numbers, one a line, of the newest file named `name` under `dir` (recursively); none when
// there is no such file.
std::vector<double> numbers_of_newest(const std::filesystem::path& dir, const std::string& name);

// A cluster that rejoined after update `rejoined_at` of a job of `steps` updates took its
// source's state then: the losses its node logged since (the newest losses.txt under
// `rejoined_dir`: one an update from the rejoin on) start near the survivor's at that update (under
// `survivor_dir`: one an update of the whole job), and well below the untrained first loss.
// Returns the three losses in words, for the test's WARN.
std::string check_rejoined_losses(const std::filesystem::path& rejoined_dir,
                                  const std::filesystem::path& survivor_dir, int steps,
                                  int rejoined_at);

// The fused weights `trained` against `reference` (drop_reference's answer): at most 1e-5 apart.
// No reference (no single one fixes the weights): a warning with `why`.
void check_against_reference(const std::optional<DropReference>& reference, const std::string& why,
                             const std::map<std::string, at::Tensor>& trained);

}  // namespace ravnest::test
