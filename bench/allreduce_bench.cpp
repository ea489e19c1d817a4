// All-reduce benchmark: Gloo (c10d::ProcessGroupGloo, N processes over loopback) against our
// ring algorithm (RingAllReduce over LocalRing threads in one process: the algorithm's ceiling,
// no network). Both sum a float32 tensor of --size bytes, once to warm up, then --reps times;
// rank 0 (member 0) times each rep from a barrier to the end of its own all-reduce and prints
// one JSON line:
//   {"bench":"allreduce","mode":...,"nodes":N,"bytes":B,"reps":R,"seconds":[...],
//    "median_s":..,"min_s":..,"algbw_GBps":B/median,"busbw_GBps":B/median*2(N-1)/N,
//    "algbw_GBps_per_rep":[...],"busbw_GBps_per_rep":[...],"ok":true}
// GB = 1e9 bytes. "ok" says the last result was checked (every element == N).
//
//   bench_allreduce gloo  --nodes N --size 64MiB --reps R [--threads T]
//   bench_allreduce local --nodes N --size 64MiB --reps R [--segment 1MiB] [--capacity 8MiB]
#include <ATen/ATen.h>

#if __has_include(<gloo/algorithm.h>)
#define RAVNEST_BENCH_HAVE_GLOO 1
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#else
#define RAVNEST_BENCH_HAVE_GLOO 0
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "libs/ring/ring_allreduce.h"
#include "libs/ring/ring_local.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode;
  int nodes = 2;
  size_t bytes = 64u << 20;
  int reps = 5;
  int threads = 0;  // gloo: 0 = ProcessGroupGloo's default
  size_t segment = 1u << 20;
  size_t capacity = 8u << 20;
  int timeout_s = 300;
};

size_t parse_size(const std::string& text) {
  size_t pos = 0;
  const double value = std::stod(text, &pos);
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "gb") mult = 1e9;
  else throw std::invalid_argument("unknown size unit in '" + text + "'");
  if (value < 0) throw std::invalid_argument("negative size '" + text + "'");
  return static_cast<size_t>(value * mult);
}

[[noreturn]] void usage(const std::string& error) {
  std::cerr << "error: " << error << "\n"
            << "usage: bench_allreduce gloo|local --nodes N --size 64MiB --reps R\n"
            << "         [--threads T] (gloo) [--segment 1MiB] [--capacity 8MiB] (local)\n"
            << "         [--timeout SECONDS]\n";
  std::exit(2);
}

Args parse(int argc, char** argv) {
  if (argc < 2) usage("missing mode");
  Args a;
  a.mode = argv[1];
  if (a.mode != "gloo" && a.mode != "local") usage("mode must be gloo or local");
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value for " + flag);
    const std::string value = argv[++i];
    try {
      if (flag == "--nodes") a.nodes = std::stoi(value);
      else if (flag == "--size") a.bytes = parse_size(value);
      else if (flag == "--reps") a.reps = std::stoi(value);
      else if (flag == "--threads") a.threads = std::stoi(value);
      else if (flag == "--segment") a.segment = parse_size(value);
      else if (flag == "--capacity") a.capacity = parse_size(value);
      else if (flag == "--timeout") a.timeout_s = std::stoi(value);
      else usage("unknown flag " + flag);
    } catch (const std::invalid_argument& e) {
      usage("bad value '" + value + "' for " + flag);
    }
  }
  if (a.nodes < 1) usage("--nodes must be >= 1");
  if (a.reps < 1) usage("--reps must be >= 1");
  if (a.bytes < 4) usage("--size must be at least 4 bytes");
  if (a.segment < 4) usage("--segment must be at least 4 bytes");
  return a;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string json_array(const std::vector<double>& v) {
  std::ostringstream out;
  out.precision(6);
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
  out << "]";
  return out.str();
}

void print_result(const Args& a, const std::vector<double>& secs, bool ok, const std::string& extra) {
  const size_t bytes = (a.bytes / 4) * 4;
  const double bus = a.nodes > 1 ? 2.0 * (a.nodes - 1) / a.nodes : 0.0;
  std::vector<double> sorted = secs, alg, busbw;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                          : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  for (double s : secs) {
    alg.push_back(bytes / s / 1e9);
    busbw.push_back(bytes / s / 1e9 * bus);
  }
  std::ostringstream out;
  out.precision(6);
  out << "{\"bench\":\"allreduce\",\"mode\":\"" << a.mode << "\",\"nodes\":" << a.nodes
      << ",\"bytes\":" << bytes << ",\"dtype\":\"float32\",\"reps\":" << a.reps
      << ",\"seconds\":" << json_array(secs) << ",\"median_s\":" << median
      << ",\"min_s\":" << sorted.front() << ",\"algbw_GBps\":" << bytes / median / 1e9
      << ",\"busbw_GBps\":" << bytes / median / 1e9 * bus
      << ",\"algbw_GBps_per_rep\":" << json_array(alg) << ",\"busbw_GBps_per_rep\":" << json_array(busbw)
      << extra << ",\"ok\":" << (ok ? "true" : "false") << "}";
  std::cout << out.str() << std::endl;
}

// ---------------------------------------------------------------- local: threads, LocalRing

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    const uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0;
  uint64_t gen_ = 0;
};

int run_local(const Args& a) {
  const int n = a.nodes;
  const int64_t numel = static_cast<int64_t>(a.bytes / 4);
  ravnest::ring::LocalRingOptions ring_options;
  ring_options.timeout = std::chrono::seconds(a.timeout_s);
  ring_options.capacity_bytes = a.capacity;
  ravnest::ring::LocalRing ring(n, ring_options);
  ravnest::ring::RingAllReduceOptions options;
  options.segment_bytes = a.segment;
  options.average = false;  // a sum, as Gloo's
  std::vector<std::unique_ptr<ravnest::ring::RingAllReduce>> reducers;
  std::vector<std::vector<at::Tensor>> tensors(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    reducers.push_back(std::make_unique<ravnest::ring::RingAllReduce>(ring.member(i), i, n, options));
    tensors[static_cast<size_t>(i)] = {at::ones({numel}, at::kFloat)};
  }
  Barrier barrier(n);
  std::vector<double> secs;
  std::vector<std::string> errors(static_cast<size_t>(n));
  bool ok = true;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto& mine = tensors[static_cast<size_t>(i)];
      try {
        for (int rep = 0; rep <= a.reps; ++rep) {  // rep 0: warm-up
          mine[0].fill_(1.0f);
          barrier.wait();
          const auto t0 = Clock::now();
          reducers[static_cast<size_t>(i)]->run(static_cast<uint64_t>(rep), mine);
          const auto t1 = Clock::now();
          if (i == 0 && rep > 0) secs.push_back(seconds(t1 - t0));
        }
        barrier.wait();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
        ring.abort("member " + std::to_string(i) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    if (!errors[static_cast<size_t>(i)].empty()) {
      std::cerr << "member " << i << " failed: " << errors[static_cast<size_t>(i)] << "\n";
      return 1;
    }
    ok = ok && at::all(tensors[static_cast<size_t>(i)][0] == static_cast<float>(n)).item<bool>();
  }
  print_result(a, secs, ok,
               ",\"segment_bytes\":" + std::to_string(a.segment) + ",\"capacity_bytes\":" + std::to_string(a.capacity));
  return ok ? 0 : 1;
}

// ---------------------------------------------------------------- gloo: processes, TCPStore

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("could not find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

#if RAVNEST_BENCH_HAVE_GLOO
int gloo_rank(const Args& a, int rank, uint16_t port) {
  const int n = a.nodes;
  c10d::TCPStoreOptions store_options;
  store_options.port = port;
  store_options.isServer = rank == 0;
  store_options.numWorkers = static_cast<size_t>(n);
  store_options.waitWorkers = true;
  store_options.timeout = std::chrono::seconds(a.timeout_s);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);

  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(a.timeout_s));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  if (a.threads > 0) options->threads = a.threads;
  const int threads = options->threads;
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, n, options);

  std::vector<at::Tensor> tensors = {at::ones({static_cast<int64_t>(a.bytes / 4)}, at::kFloat)};
  std::vector<double> secs;
  for (int rep = 0; rep <= a.reps; ++rep) {  // rep 0: warm-up
    tensors[0].fill_(1.0f);
    pg->barrier()->wait();
    const auto t0 = Clock::now();
    pg->allreduce(tensors)->wait();
    const auto t1 = Clock::now();
    if (rep > 0) secs.push_back(seconds(t1 - t0));
  }
  const bool ok = at::all(tensors[0] == static_cast<float>(n)).item<bool>();
  pg->barrier()->wait();
  if (rank == 0) print_result(a, secs, ok, ",\"gloo_threads\":" + std::to_string(threads));
  return ok ? 0 : 1;
}
#endif

int run_gloo(const Args& a) {
#if !RAVNEST_BENCH_HAVE_GLOO
  (void)a;
  std::cerr << "bench_allreduce was built without Gloo's headers (Debian package libgloo-dev)\n";
  return 2;
#else
  const uint16_t port = free_port();
  std::cout.flush();
  std::vector<pid_t> children;
  for (int rank = 0; rank < a.nodes; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t c : children) ::kill(c, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      int rc = 1;
      try {
        rc = gloo_rank(a, rank, port);
      } catch (const std::exception& e) {
        std::cerr << "rank " << rank << " failed: " << e.what() << "\n";
      }
      std::cout.flush();
      std::fflush(nullptr);
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  // Waits for every rank; past the deadline, or when one fails, the others are killed.
  const auto deadline = Clock::now() + std::chrono::seconds(a.timeout_s + 30);
  int failed = 0;
  std::vector<bool> done(children.size(), false);
  size_t remaining = children.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t i = 0; i < children.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t r = ::waitpid(children[i], &status, WNOHANG);
      if (r == children[i]) {
        done[i] = true;
        --remaining;
        progressed = true;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          std::cerr << "rank " << i << " exited abnormally (status " << status << ")\n";
          ++failed;
        }
      }
    }
    if (remaining == 0) break;
    if (failed > 0 || Clock::now() > deadline) {
      if (failed == 0) std::cerr << "ranks did not finish within the deadline\n";
      for (size_t i = 0; i < children.size(); ++i)
        if (!done[i]) ::kill(children[i], SIGKILL);
      for (size_t i = 0; i < children.size(); ++i)
        if (!done[i]) ::waitpid(children[i], nullptr, 0);
      return 1;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failed ? 1 : 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return a.mode == "gloo" ? run_gloo(a) : run_local(a);
  } catch (const std::exception& e) {
    std::cerr << "bench_allreduce: " << e.what() << "\n";
    return 1;
  }
}
