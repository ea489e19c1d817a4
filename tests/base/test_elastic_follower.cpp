// What `train --elastic`'s follower reads and writes without processes
// (libs/requester/elastic_follower.h): the node a graceful stop was for, and elastic.csv's rows.
#include <catch2/catch.hpp>

#include "libs/requester/elastic_follower.h"

using namespace ravnest;

TEST_CASE("elastic follower: the node and signal of a graceful stop, nothing for other words",
          "[elastic]") {
  auto leave = requester::graceful_leave("node_3 was stopped (SIGTERM)");
  REQUIRE(leave);
  CHECK(leave->node == "node_3");
  CHECK(leave->signal == "SIGTERM");
  auto interrupted = requester::graceful_leave("node_12 was stopped (SIGINT); every node of ...");
  REQUIRE(interrupted);
  CHECK(interrupted->node == "node_12");
  CHECK(interrupted->signal == "SIGINT");
  CHECK(!requester::graceful_leave(""));
  CHECK(!requester::graceful_leave("the requester was interrupted"));
  CHECK(!requester::graceful_leave("worker_3 was stopped (SIGTERM)"));
}

TEST_CASE("elastic follower: an elastic.csv row quotes its line as CSV does", "[elastic]") {
  CHECK(requester::elastic_csv_row(1795866841.3721, 42, "replace", "node_2", "node_3", 2,
                                   "elastic: node_2 lost (no heartbeat for 3 s); node_3 takes") ==
        "1795866841.372,42,replace,node_2,node_3,2,"
        "\"elastic: node_2 lost (no heartbeat for 3 s); node_3 takes\"\n");
  CHECK(requester::elastic_csv_row(1, 7, "join", "", "node_4;node_5", 3, "say \"x\", then y") ==
        "1.000,7,join,,node_4;node_5,3,\"say \"\"x\"\", then y\"\n");
}
