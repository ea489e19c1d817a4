// The follower's marker (libs/requester/following_marker.h): what `ravnest replace` reads to
// know that a requester follows the job and which clusters it dropped.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "libs/requester/following_marker.h"
#include "tests/support/test_env.h"

using namespace ravnest;

TEST_CASE("following marker: read back while its process runs, not after", "[rejoin]") {
  test::TempDir dir;
  const std::string plan = dir.path().string();
  CHECK(!requester::read_following(plan));  // none
  requester::write_following(plan, {::getpid(), 42, {2, 5}});
  auto read = requester::read_following(plan);
  REQUIRE(read);
  CHECK(read->pid == ::getpid());
  CHECK(read->job_id == 42);
  CHECK(read->dropped == std::set<int>{2, 5});
  requester::write_following(plan, {::getpid(), 43, {}});
  read = requester::read_following(plan);
  REQUIRE(read);
  CHECK(read->job_id == 43);
  CHECK(read->dropped.empty());

  // A follower killed before it removed its marker: its pid runs no more.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  requester::write_following(plan, {child, 44, {1}});
  CHECK(!requester::read_following(plan));

  test::write_text(requester::following_path(plan), "not a marker\n");
  CHECK(!requester::read_following(plan));
  requester::remove_following(plan);
  CHECK(!std::filesystem::exists(requester::following_path(plan)));
  requester::remove_following(plan);  // twice: nothing to remove
}
