#include "tests/support/rejoin_checks.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "tests/support/digits.h"
#include "tests/support/test_env.h"

namespace ravnest::test {

std::vector<double> numbers_of_newest(const std::filesystem::path& dir, const std::string& name) {
  std::filesystem::path newest;
  std::filesystem::file_time_type when{};
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename() == name && (newest.empty() || e.last_write_time() > when)) {
      newest = e.path();
      when = e.last_write_time();
    }
  }
  std::vector<double> numbers;
  if (newest.empty()) return numbers;
  std::istringstream in(read_text(newest));
  double x = 0;
  while (in >> x) numbers.push_back(x);
  return numbers;
}

std::string check_rejoined_losses(const std::filesystem::path& rejoined_dir,
                                  const std::filesystem::path& survivor_dir, int steps,
                                  int rejoined_at) {
  const auto rejoined = numbers_of_newest(rejoined_dir, "losses.txt");
  const auto survivor = numbers_of_newest(survivor_dir, "losses.txt");
  REQUIRE(rejoined_at >= 0);
  REQUIRE(rejoined.size() == static_cast<size_t>(steps - rejoined_at));
  REQUIRE(survivor.size() == static_cast<size_t>(steps));
  REQUIRE(!rejoined.empty());
  std::ostringstream words;
  words << "first losses: untrained " << survivor[0] << ", survivor after update " << rejoined_at
        << " " << survivor[static_cast<size_t>(rejoined_at)] << ", rejoined " << rejoined[0];
  INFO(words.str());
  CHECK(rejoined[0] < survivor[0] - 0.5);
  CHECK(std::abs(rejoined[0] - survivor[static_cast<size_t>(rejoined_at)]) < 0.5);
  return words.str();
}

void check_against_reference(const std::optional<DropReference>& reference, const std::string& why,
                             const std::map<std::string, at::Tensor>& trained) {
  if (!reference) {
    WARN("no single reference: " << why);
    return;
  }
  std::string where;
  const double diff = largest_difference(reference->state, trained, &where);
  INFO(reference->events << ": " << diff << " from the reference in " << where);
  CHECK(diff <= 1e-5);
  WARN(reference->events << ": " << diff << " from the reference");
}

}  // namespace ravnest::test
