#include "libs/config/daemon/memory_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "libs/base/read_all.h"

namespace ravnest::config {

namespace {

// The words of `line` split at spaces.
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string word;
  while (in >> word) out.push_back(word);
  return out;
}

// A whole non-negative decimal number, surrounding white space allowed; nullopt otherwise.
std::optional<int64_t> whole_number(const std::string& text) {
  const char* begin = text.c_str();
  while (*begin == ' ' || *begin == '\t' || *begin == '\n') ++begin;
  if (*begin < '0' || *begin > '9') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(begin, &end, 10);
  if (errno != 0) return std::nullopt;  // beyond INT64_MAX
  while (*end == ' ' || *end == '\t' || *end == '\n') ++end;
  if (*end != '\0') return std::nullopt;
  return static_cast<int64_t>(value);
}

// mountinfo writes space, tab, newline and backslash in paths as \ooo.
std::string unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string octal = field.substr(i + 1, 3);
      if (octal.size() == 3 && octal.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::strtol(octal.c_str(), nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

bool has_option(const std::string& options, const std::string& wanted) {
  std::istringstream in(options);
  std::string option;
  while (std::getline(in, option, ',')) {
    if (option == wanted) return true;
  }
  return false;
}

// The text of a small file (/proc, /sys), nullopt when it cannot be read.
std::optional<std::string> read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  const int error = base::read_all(fd, &text, 1 << 20);
  ::close(fd);
  if (error != 0) return std::nullopt;
  return text;
}

// `root` joined with an absolute path.
std::string under(const std::string& root, const std::string& path) {
  std::string base = root;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + (path.empty() || path.front() != '/' ? "/" : "") + path;
}

}  // namespace

std::optional<CgroupPlace> parse_proc_cgroup(const std::string& text) {
  std::optional<CgroupPlace> unified;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-ID:controller-list:path"; the path may itself hold ':'.
    const auto first = line.find(':');
    if (first == std::string::npos) continue;
    const auto second = line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (path.empty() || path.front() != '/') continue;
    if (has_option(controllers, "memory")) return CgroupPlace{1, path};
    if (id == "0" && controllers.empty()) unified = CgroupPlace{2, path};
  }
  return unified;
}

std::optional<CgroupMount> parse_cgroup_mount(const std::string& mountinfo, int version) {
  std::istringstream lines(mountinfo);
  std::string line;
  while (std::getline(lines, line)) {
    // "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS"
    const auto fields = words(line);
    size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 7 || dash + 1 >= fields.size()) continue;
    const std::string& type = fields[dash + 1];
    const std::string super_options = dash + 3 < fields.size() ? fields[dash + 3] : "";
    const bool match = version == 1 ? type == "cgroup" && has_option(super_options, "memory")
                                    : type == "cgroup2";
    if (match) return CgroupMount{unescape(fields[3]), unescape(fields[4])};
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_dir(const CgroupMount& mount, const CgroupPlace& place) {
  std::string below;
  if (mount.root == "/") {
    below = place.path;
  } else if (place.path == mount.root) {
    below = "/";
  } else if (place.path.rfind(mount.root + "/", 0) == 0) {
    below = place.path.substr(mount.root.size());
  } else {
    return std::nullopt;  // the process's cgroup is not under what is mounted
  }
  std::string dir = mount.mount_point;
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  if (below != "/") dir += below;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.empty() ? "/" : dir;
}

std::optional<int64_t> parse_cgroup_limit(const std::string& text) {
  const auto value = whole_number(text);
  // v1 writes "no limit" as LONG_MAX rounded down to a page: 9223372036854771712.
  if (!value || *value >= (int64_t{1} << 62)) return std::nullopt;
  return value;
}

std::optional<int64_t> parse_memory_stat(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto fields = words(line);
    if (fields.size() == 2 && fields[0] == key) return whole_number(fields[1]);
  }
  return std::nullopt;
}

int64_t parse_mem_total(const std::string& meminfo) {
  return parse_meminfo_bytes(meminfo, "MemTotal");
}

int64_t parse_meminfo_bytes(const std::string& meminfo, const std::string& key) {
  std::istringstream lines(meminfo);
  std::string line;
  while (std::getline(lines, line)) {
    const auto fields = words(line);
    // "MemTotal:       24684084 kB"
    if (fields.size() >= 2 && fields[0] == key + ":") {
      const auto kib = whole_number(fields[1]);
      return kib ? *kib * 1024 : 0;
    }
  }
  return 0;
}

std::optional<CgroupMemory> read_cgroup_memory(const std::string& root) {
  const auto cgroup_text = read_small(under(root, "/proc/self/cgroup"));
  const auto mountinfo = read_small(under(root, "/proc/self/mountinfo"));
  if (!cgroup_text || !mountinfo) return std::nullopt;
  const auto place = parse_proc_cgroup(*cgroup_text);
  if (!place) return std::nullopt;
  const auto mount = parse_cgroup_mount(*mountinfo, place->version);
  if (!mount) return std::nullopt;
  const auto dir = cgroup_dir(*mount, *place);
  if (!dir) return std::nullopt;
  const bool v1 = place->version == 1;
  auto file = [&](const std::string& in, const std::string& name) {
    return read_small(under(root, in + "/" + name));
  };
  const auto usage = file(*dir, v1 ? "memory.usage_in_bytes" : "memory.current");
  if (!usage || !whole_number(*usage)) return std::nullopt;

  CgroupMemory memory;
  memory.version = place->version;
  memory.dir = *dir;
  memory.usage_bytes = *whole_number(*usage);
  if (const auto stat = file(*dir, "memory.stat")) {
    memory.inactive_file_bytes =
        parse_memory_stat(*stat, v1 ? "total_inactive_file" : "inactive_file").value_or(0);
  }
  if (const auto peak = file(*dir, v1 ? "memory.max_usage_in_bytes" : "memory.peak")) {
    memory.peak_bytes = whole_number(*peak).value_or(0);
  }
  // A parent's limit binds its children: the smallest from here up to the mount.
  std::string at = *dir;
  std::string top = mount->mount_point;
  while (top.size() > 1 && top.back() == '/') top.pop_back();
  for (;;) {
    if (const auto text = file(at, v1 ? "memory.limit_in_bytes" : "memory.max")) {
      const auto limit = parse_cgroup_limit(*text);
      if (limit && (!memory.limit || *limit < *memory.limit)) memory.limit = limit;
    }
    if (at.size() <= top.size()) break;
    const auto slash = at.rfind('/');
    if (slash == std::string::npos || slash < top.size()) break;
    at = at.substr(0, slash);
  }
  return memory;
}

MemoryBudget choose_budget(int64_t memory_limit, const std::optional<CgroupMemory>& cgroup,
                           int64_t mem_total) {
  MemoryBudget budget;
  auto consider = [&](int64_t bytes, const char* source) {
    if (bytes > 0 && (budget.bytes == 0 || bytes < budget.bytes)) budget = {bytes, source};
  };
  consider(memory_limit, "memory_limit");
  if (cgroup && cgroup->limit) {
    consider(*cgroup->limit, cgroup->version == 1 ? "cgroup memory.limit_in_bytes"
                                                  : "cgroup memory.max");
  }
  consider(mem_total, "MemTotal");
  return budget;
}

MemoryUse memory_use(const MemoryBudget& budget, const std::optional<CgroupMemory>& cgroup,
                     const base::ProcessMemory& process) {
  if (budget.from_cgroup() && cgroup) {
    MemoryUse use;
    use.used_bytes = std::max<int64_t>(0, cgroup->usage_bytes - cgroup->inactive_file_bytes);
    use.peak_bytes = cgroup->peak_bytes > 0 ? cgroup->peak_bytes : process.peak_resident_bytes;
    return use;
  }
  return {process.resident_bytes, process.peak_resident_bytes};
}

MemoryReading read_memory(int64_t memory_limit, const std::string& root) {
  const auto cgroup = read_cgroup_memory(root);
  const auto meminfo = read_small(under(root, "/proc/meminfo"));
  const auto status = read_small(under(root, "/proc/self/status"));
  const base::ProcessMemory process = status ? base::parse_proc_status(*status) : base::ProcessMemory{};
  MemoryReading reading;
  reading.budget = choose_budget(memory_limit, cgroup, meminfo ? parse_mem_total(*meminfo) : 0);
  reading.use = memory_use(reading.budget, cgroup, process);
  return reading;
}

}  // namespace ravnest::config
