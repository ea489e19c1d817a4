#include "libs/requester/following_marker.h"

#include <errno.h>
#include <signal.h>

#include <filesystem>
#include <sstream>

#include "libs/base/atomic_file.h"

namespace ravnest::requester {

std::string following_path(const std::string& plan_dir) {
  return (std::filesystem::path(plan_dir) / ".following").string();
}

void write_following(const std::string& plan_dir, const Following& following) {
  std::string text = "ravnest.following/1\npid " + std::to_string(following.pid) + "\njob " +
                     std::to_string(following.job_id) + "\ndropped";
  for (int c : following.dropped) text += " " + std::to_string(c);
  base::write_file_atomically(following_path(plan_dir), text + "\n");
}

void remove_following(const std::string& plan_dir) {
  std::error_code ignored;
  std::filesystem::remove(following_path(plan_dir), ignored);
}

std::optional<Following> read_following(const std::string& plan_dir) {
  std::string text;
  try {
    text = base::read_file(following_path(plan_dir));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::istringstream in(text);
  std::string format, word;
  Following f;
  if (!(in >> format) || format != "ravnest.following/1") return std::nullopt;
  if (!(in >> word >> f.pid) || word != "pid") return std::nullopt;
  if (!(in >> word >> f.job_id) || word != "job") return std::nullopt;
  if (!(in >> word) || word != "dropped") return std::nullopt;
  int c = 0;
  while (in >> c) f.dropped.insert(c);
  if (f.pid <= 0 || (::kill(f.pid, 0) != 0 && errno != EPERM)) return std::nullopt;
  return f;
}

}  // namespace ravnest::requester
