#include "libs/daemon/rings/shared_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "libs/wire/node_credentials.h"

namespace ravnest::daemon {
namespace {

constexpr size_t kHeaderBytes = 4096;  // the nonce; slots start on a page of their own

std::string system_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

bool within_limits(uint64_t slots, uint64_t slot_bytes) {
  return slots > 0 && slots <= kMaxSharedSlots && slot_bytes > 0 &&
         slot_bytes <= kMaxSharedBytes / slots;
}

// Where slot `index` starts: after the nonce's page. Slot `slots` (one past the last) is where
// the file ends.
size_t slot_offset(uint32_t index, uint64_t slot_bytes) {
  return kHeaderBytes + static_cast<size_t>(index) * slot_bytes;
}

// Whether process `pid` of this host shares this process's network namespace; false when it
// cannot be told (no such process here: another host).
bool same_network_namespace(uint32_t pid) {
  struct stat mine {}, theirs {};
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  if (stat("/proc/self/ns/net", &mine) != 0 || stat(path.c_str(), &theirs) != 0) return false;
  return mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

}  // namespace

SharedSegmentsWriter::SharedSegmentsWriter(uint32_t slots, uint64_t slot_bytes) {
  if (!within_limits(slots, slot_bytes)) {
    throw std::runtime_error("shared ring memory: " + std::to_string(slots) + " slots of " +
                             std::to_string(slot_bytes) + " bytes is beyond the limits");
  }
  fd_ = memfd_create("ravnest-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) throw std::runtime_error(system_error("shared ring memory: memfd_create"));
  mapped_ = slot_offset(slots, slot_bytes);
  const auto nonce = wire::fresh_nonce();
  if (ftruncate(fd_, static_cast<off_t>(mapped_)) != 0 ||
      fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const std::string reason = system_error("shared ring memory: sizing and sealing");
    close(fd_);
    throw std::runtime_error(reason);
  }
  void* base = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (base == MAP_FAILED) {
    const std::string reason = system_error("shared ring memory: mmap");
    close(fd_);
    throw std::runtime_error(reason);
  }
  base_ = static_cast<uint8_t*>(base);
  std::memcpy(base_, nonce.data(), nonce.size());
  offer_.pid = static_cast<uint32_t>(getpid());
  offer_.fd = static_cast<uint32_t>(fd_);
  offer_.nonce.assign(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  offer_.slots = slots;
  offer_.slot_bytes = slot_bytes;
}

SharedSegmentsWriter::~SharedSegmentsWriter() {
  munmap(base_, mapped_);
  close(fd_);
}

uint8_t* SharedSegmentsWriter::slot(uint32_t index) const {
  return base_ + slot_offset(index, offer_.slot_bytes);
}

std::shared_ptr<const SharedSegmentsReader> SharedSegmentsReader::open(
    const SharedSegmentsOffer& offer, std::string& refusal) {
  if (!within_limits(offer.slots, offer.slot_bytes) || offer.nonce.size() < 16 ||
      offer.nonce.size() > kHeaderBytes) {
    refusal = "the offer breaks the limits";
    return nullptr;
  }
  // Two daemons in different network namespaces of one machine stand for two hosts (as the
  // tests and `ravnest bench --hosts` run them): their segments go over the network, which is
  // what such a pair meets between real hosts, even though /proc would let them share memory.
  if (!same_network_namespace(offer.pid)) {
    refusal = "it runs in another network namespace (another host)";
    return nullptr;
  }
  const std::string path =
      "/proc/" + std::to_string(offer.pid) + "/fd/" + std::to_string(offer.fd);
  // O_PATH first: whatever the path names on this host (a device, a FIFO), looking at it has no
  // effect; only a regular file of this user and of the offered size is then opened for reading.
  const int path_fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (path_fd < 0) {
    refusal = system_error(path.c_str());  // another host, or another user
    return nullptr;
  }
  const size_t size = slot_offset(offer.slots, offer.slot_bytes);
  struct stat st {};
  if (fstat(path_fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) != size) {
    refusal = path + " is not the memory offered";
    close(path_fd);
    return nullptr;
  }
  const std::string reopen = "/proc/self/fd/" + std::to_string(path_fd);
  const int fd = ::open(reopen.c_str(), O_RDONLY | O_CLOEXEC);
  close(path_fd);
  if (fd < 0) {
    refusal = system_error(path.c_str());
    return nullptr;
  }
  // Sealed first, then sized: the size seen after the seal is the size for good.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || fstat(fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) != size) {
    refusal = path + " is not the sealed memory offered";
    close(fd);
    return nullptr;
  }
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the memory
  if (base == MAP_FAILED) {
    refusal = system_error("mmap");
    return nullptr;
  }
  if (std::memcmp(base, offer.nonce.data(), offer.nonce.size()) != 0) {
    munmap(base, size);
    refusal = path + " holds another nonce";
    return nullptr;
  }
  return std::shared_ptr<const SharedSegmentsReader>(new SharedSegmentsReader(
      static_cast<const uint8_t*>(base), size, offer.slots, offer.slot_bytes));
}

SharedSegmentsReader::~SharedSegmentsReader() {
  munmap(const_cast<uint8_t*>(base_), mapped_);
}

const uint8_t* SharedSegmentsReader::slot(uint32_t index) const {
  return base_ + slot_offset(index, slot_bytes_);
}

}  // namespace ravnest::daemon
