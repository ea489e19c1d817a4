// The words a job's failure starts its cause with when a connection between two of the job's
// processes was lost (a send to a peer failed, a node stopped answering), as opposed to a failure
// of the job itself (bad data, a NaN, memory, a refused call). The daemons and the requester write
// them here; `ravnest train --elastic` reads them (requester/elastic_resume.h): a job that failed
// on a lost connection while every node answers again is resumed, not failed. Pure; any thread.
#pragma once

#include <string>

namespace ravnest::wire {

// "cannot send to node_1 (10.0.0.2:8081): Connection reset by peer" (a pipeline's transfer, a
// ring's segment).
inline constexpr const char* kCannotSendTo = "cannot send to ";
// "node_1 (10.0.0.2:8081) stopped answering (...)" (a daemon's peer watch, the requester's).
inline constexpr const char* kStoppedAnswering = ") stopped answering";

// Whether `failure`, a job's failure as the requester reports it, names a lost connection.
inline bool is_lost_connection(const std::string& failure) {
  return failure.find(kCannotSendTo) != std::string::npos ||
         failure.find(kStoppedAnswering) != std::string::npos;
}

}  // namespace ravnest::wire
