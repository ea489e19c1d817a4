// A daemon behind NAT (ravnestd --relay: it listens nowhere) as one stage of a pipeline, reached
// through a relay (another daemon's --offer-relay, or this test's own relay that flips a byte):
// the job trains to the weights of one process, as over direct links; a flipped byte is caught
// by TLS and nothing is trained on it; the relaying tracker frozen (SIGSTOP) mid-job: named in
// one line, a push fails in one line, --elastic resumes once it runs again. Daemons on 127.0.0.1,
// every command bounded in time.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <kj/thread.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <future>
#include <memory>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/training/reference_trainer.h"
#include "libs/wire/relay.h"
#include "tests/support/child_process.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;

namespace {

// A port free on 127.0.0.1 now (bound and closed: another process could take it, which the
// daemons' start then reports).
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  socklen_t len = sizeof at;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  ::close(fd);
  return ntohs(at.sin_port);
}

std::string job_text(int max_steps) {
  return "[train]\nepochs = 2\nbatch_size = 32\nmicro_batches = 4\nupdate_frequency = 1\n"
         "seed = 3\nschedule = \"1f1b\"\nmax_steps = " + std::to_string(max_steps) +
         "\n\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() +
         "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\nnum_classes = 10\n"
         "\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"adam\"\nlr = 0.01\n";
}

// The largest difference between the fused trained model and the single-process reference.
double worst_difference(const test::LocalCluster& cluster, const std::filesystem::path& job_path,
                        int steps) {
  auto trained = test::load_state_dict(cluster.dir() / "trained/trained_state_dict.pt");
  auto reference =
      training::train_reference(test::digits_model(), config::load_job(job_path.string()), steps);
  REQUIRE(trained.size() == reference.state.size());
  double worst = 0;
  for (const auto& [name, tensor] : reference.state) {
    REQUIRE(trained.count(name) == 1);
    worst = std::max(worst, (trained[name].to(at::kDouble) - tensor.to(at::kDouble))
                                .abs().max().item<double>());
  }
  return worst;
}

// A wire::Relay on a thread of its own (its own event loop), stopped and joined on destruction.
class RelayThread {
 public:
  explicit RelayThread(wire::Relay::Options::Tamper tamper) {
    std::promise<uint16_t> port;
    auto future = port.get_future();
    thread_ = kj::heap<kj::Thread>([this, &port, tamper]() {
      wire::Relay::Options options;
      options.tamper = tamper;
      options.on_event = [this](const std::string& line) {
        std::lock_guard<std::mutex> lock(mutex_);
        lines_.push_back(line);
      };
      wire::Relay relay("127.0.0.1", 0, options);
      auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = kj::mv(stop.fulfiller);
      }
      port.set_value(relay.port());
      stop.promise.wait(wire::ThreadIo::get()->wait_scope());
    });
    REQUIRE(future.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    port_ = future.get();
  }
  ~RelayThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_.get() != nullptr) stop_->fulfill();
    }
    thread_ = nullptr;
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    for (const auto& line : lines_) out += line + "\n";
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop_;
  kj::Own<kj::Thread> thread_;
  uint16_t port_ = 0;
};

// `ravnest tracker` listening on `tracker` and relaying on `relay` ("" for none), its state in
// the cluster's folder and its output in `log`; returns once it says it relays (or after 30 s:
// the caller checks the log).
std::unique_ptr<test::ChildProcess> start_relaying_tracker(const test::LocalCluster& cluster,
                                                           const std::string& tracker,
                                                           const std::string& relay,
                                                           const std::filesystem::path& log,
                                                           std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {test::binary_dir() + "/apps/ravnest/ravnest", "tracker",
                                   "--listen", tracker, "--offer-relay", relay, "--state-dir",
                                   (cluster.dir() / "tracker-state").string(), "--secret-file",
                                   cluster.secret_file()};
  args.insert(args.end(), extra.begin(), extra.end());
  auto process = std::make_unique<test::ChildProcess>(args, log.string());
  for (int i = 0; i < 300 && test::read_text(log).find("relaying for daemons") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return process;
}

// `ravnest status --tracker`, asked again until it names node_1 (at most 10 s).
test::CommandResult tracker_status(const test::LocalCluster& cluster, const std::string& tracker) {
  const std::string command = test::binary_dir() + "/apps/ravnest/ravnest status --tracker " +
                              tracker + " --secret-file " + cluster.secret_file();
  auto status = test::run_command(command);
  for (int i = 0; i < 50 && status.out.find("node_1") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    status = test::run_command(command);
  }
  return status;
}

}  // namespace

TEST_CASE("a stage behind NAT trains through a relay to the weights of one process",
          "[daemon][relay]") {
  // node_0 relays; node_1, behind NAT, holds its port on node_0's relay; node_2 is direct.
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)},
                             {"32x1x8x8"});
  const std::string relay = "127.0.0.1:" + std::to_string(free_port());
  cluster.set_daemon_flags(0, {"--offer-relay", relay});
  cluster.set_daemon_flags(1, {"--relay", relay});
  cluster.start(0);
  cluster.start(1);  // waits until its port, which the relay holds, answers
  cluster.start(2);
  INFO(cluster.log(0) << cluster.log(1));
  CHECK(cluster.log(1).find("behind NAT: listening nowhere; reached through the relay " + relay +
                            " at 127.0.0.1:" + std::to_string(cluster.port(1))) !=
        std::string::npos);
  // The relay, not node_1, holds node_1's port.
  CHECK(cluster.log(0).find("relay: holds port " + std::to_string(cluster.port(1))) !=
        std::string::npos);
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text(20));
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  REQUIRE(cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string()).exit_code == 0);
  const double worst = worst_difference(cluster, job_path, 20);
  INFO("largest difference " << worst);
  CHECK(worst <= 1e-5);
  // Activations and gradients crossed the relay both ways: node_1 received and sent.
  auto status = cluster.ravnest("status");
  INFO(status.out);
  CHECK(status.exit_code == 0);
}

TEST_CASE("a relay that flips or drops bytes is caught: the job stops in a line or trains exactly",
          "[daemon][relay]") {
  // From byte 5,000 of every session towards the node behind NAT: past the TLS handshake, in the
  // gate's or the first calls' records (the stage pushed, a micro-batch's activations).
  using Kind = wire::Relay::Options::Tamper::Kind;
  const std::vector<std::pair<wire::Relay::Options::Tamper, std::string>> cases = {
      {{Kind::flip, 5000, 1}, "towards the node flipped"},
      {{Kind::drop, 5000, 300}, "300 bytes from byte 5000 towards the node dropped"}};
  for (const auto& [tamper, said] : cases) {
    DYNAMIC_SECTION(said) {
      RelayThread relay(tamper);
      test::LocalCluster cluster(test::digits_model(),
                                 {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                                 {"32x1x8x8"});
      cluster.set_daemon_flags(1, {"--relay", relay.address()});
      cluster.start_all();
      const auto push = cluster.ravnest("push", "", 120);
      INFO(push.out << push.err << relay.lines() << cluster.log(1));
      const auto job_path = cluster.dir() / "job.toml";
      test::write_text(job_path, job_text(10));
      CHECK(relay.lines().find(said) != std::string::npos);
      if (push.exit_code != 0) {
        // The altered record: one line naming the node, nothing stored.
        CHECK(push.err.find("node_1") != std::string::npos);
        CHECK(push.err.find("altered on the way") != std::string::npos);
        CHECK(std::count(push.err.begin(), push.err.end(), '\n') <= 3);
        CHECK(cluster.log(1).find("stored stage") == std::string::npos);
        continue;
      }
      // Should the stage have crossed whole, training may not: it stops, or trains exactly.
      auto train = cluster.ravnest("train", job_path.string(), 180);
      INFO(train.out << train.err);
      if (train.exit_code != 0) continue;
      REQUIRE(cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string()).exit_code == 0);
      CHECK(worst_difference(cluster, job_path, 10) <= 1e-5);
    }
  }
}

TEST_CASE("a cluster behind NAT averages over a ring whose data channel crosses the relay",
          "[daemon][relay][data-parallel]") {
  // Two one-node clusters: node_0 relays, node_1 is behind it; segments through the
  // connections (no shared memory), so node_0's data channel to node_1 is a relayed session.
  test::LocalCluster cluster(test::digits_model(), {{}, {}}, {"32x1x8x8"});
  const std::string relay = "127.0.0.1:" + std::to_string(free_port());
  cluster.set_daemon_flags(0, {"--offer-relay", relay, "--no-shared-memory"});
  cluster.set_daemon_flags(1, {"--relay", relay, "--no-shared-memory"});
  cluster.start(0);
  cluster.start(1);
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(
      job_path,
      "[train]\nepochs = 1\nbatch_size = 32\nmicro_batches = 2\nseed = 5\nschedule = \"1f1b\"\n"
      "reduce = \"gradients\"\nmax_steps = 12\n\n[data]\nformat = \"csv\"\ntrain = \"" +
          (test::digits_dir() / "digits_train.csv").string() +
          "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
          "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\n"
          "name = \"adam\"\nlr = 0.01\n");
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err << cluster.log(0) << cluster.log(1));
  REQUIRE(train.exit_code == 0);
  auto reference = training::train_reference_clusters(
      test::digits_model(), config::load_job(job_path.string()), 2, 12);
  for (int c = 0; c < 2; ++c) {
    const auto out = cluster.dir() / ("trained_" + std::to_string(c));
    auto fuse = cluster.ravnest("fuse", "--cluster " + std::to_string(c) + " --out " + out.string());
    INFO(fuse.out << fuse.err);
    REQUIRE(fuse.exit_code == 0);
    auto trained = test::load_state_dict(out / "trained_state_dict.pt");
    std::string where;
    const double diff = test::largest_difference(reference.state, trained, &where);
    INFO("cluster " << c << ": largest difference " << diff << " in " << where);
    CHECK(diff <= 1e-5);
  }
  // The relay spliced sessions to node_1 beyond the requester's: node_0's own, for the ring.
  const std::string log0 = cluster.log(0);
  CHECK(log0.find("through shared memory") == std::string::npos);
  // node_0 -> node_1 is the link through the relay: its segments over a data channel spliced
  // there, not fallen back to RPC calls.
  CHECK(log0.find("segments to node_1 over a data channel") != std::string::npos);
  CHECK(log0.find("no data channel to node_1") == std::string::npos);
  CHECK(log0.find("relay: holds port " + std::to_string(cluster.port(1))) != std::string::npos);
}

TEST_CASE("the tracker relays: a stage behind NAT registers and trains through it",
          "[daemon][relay][tracker]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  const std::string tracker = "127.0.0.1:" + std::to_string(free_port());
  const std::string relay = "127.0.0.1:" + std::to_string(free_port());
  const auto log = cluster.dir() / "tracker.log";
  auto tracker_process = start_relaying_tracker(cluster, tracker, relay, log);
  INFO(test::read_text(log));
  REQUIRE(test::read_text(log).find("relaying for daemons behind NAT on 127.0.0.1") !=
          std::string::npos);
  cluster.set_daemon_flags(1, {"--relay", relay, "--tracker", tracker});
  cluster.start_all();
  // node_1 registered the address peers reach it at: the relay's host, its port.
  const auto status = tracker_status(cluster, tracker);
  INFO(status.out << status.err << cluster.log(1));
  CHECK(status.out.find("127.0.0.1:" + std::to_string(cluster.port(1))) != std::string::npos);
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text(10));
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  REQUIRE(cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string()).exit_code == 0);
  CHECK(worst_difference(cluster, job_path, 10) <= 1e-5);
  CHECK(test::read_text(log).find("relay: holds port " + std::to_string(cluster.port(1))) !=
        std::string::npos);
}

TEST_CASE("--relay auto: the tracker dials each daemon back; one it cannot reach holds its port on "
          "the relay the tracker names and trains through it",
          "[daemon][relay][tracker]") {
  // node_1 listens on 127.0.0.2 but reaches the tracker from 127.0.0.1, which is where the
  // tracker dials it back (the host a call comes from): nothing listens there, as behind a NAT.
  // node_0 listens where it calls from: reached, it registers its own address.
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  const std::string tracker = "127.0.0.1:" + std::to_string(free_port());
  const auto log = cluster.dir() / "tracker.log";
  // The tracker relays on 127.0.0.1 (not every interface: its ports there would take node_1's
  // on 127.0.0.2 too).
  auto tracker_process =
      start_relaying_tracker(cluster, tracker, "127.0.0.1:0", log, {"--log-level", "debug"});
  REQUIRE(test::read_text(log).find("relaying for daemons") != std::string::npos);
  cluster.set_daemon_flags(0, {"--relay", "auto", "--tracker", tracker});
  cluster.set_daemon_flags(1, {"--relay", "auto", "--tracker", tracker, "--listen",
                               "127.0.0.2:" + std::to_string(cluster.port(1))});
  cluster.start_all();  // node_1's: until its port on 127.0.0.1, which the relay holds, answers
  INFO(test::read_text(log) << cluster.log(0) << cluster.log(1));
  CHECK(cluster.log(0).find("reachable: the tracker " + tracker + " dialled port " +
                            std::to_string(cluster.port(0)) + " back") != std::string::npos);
  CHECK(cluster.log(1).find("behind NAT: the tracker " + tracker + " cannot dial port " +
                            std::to_string(cluster.port(1)) + " back") != std::string::npos);
  CHECK(test::read_text(log).find("relay: holds port " + std::to_string(cluster.port(1))) !=
        std::string::npos);
  // Both registered where peers reach them: node_0 its own address, node_1 the relay's host
  // (127.0.0.1, not the 127.0.0.2 it listens on).
  const auto status = tracker_status(cluster, tracker);
  INFO(status.out << status.err);
  CHECK(status.out.find(cluster.address(0)) != std::string::npos);
  CHECK(status.out.find("127.0.0.1:" + std::to_string(cluster.port(1))) != std::string::npos);
  CHECK(status.out.find("127.0.0.2") == std::string::npos);
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text(10));
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  REQUIRE(cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string()).exit_code == 0);
  CHECK(worst_difference(cluster, job_path, 10) <= 1e-5);
}

TEST_CASE("--relay auto without a tracker is refused in one line naming the flag", "[daemon][relay]") {
  const auto run = test::run_command(test::binary_dir() +
                                     "/apps/ravnestd/ravnestd --node node_1 --listen 127.0.0.1:1 "
                                     "--data-dir /nonexistent --relay auto");
  INFO(run.out << run.err);
  CHECK(run.exit_code != 0);
  CHECK(run.err.find("relay: \"auto\" asks the tracker whether this daemon can be reached: it "
                     "needs a tracker (--tracker)") != std::string::npos);
}

TEST_CASE("the relaying tracker killed with -9 mid-job and started again: the node behind it "
          "holds its port again, train --elastic resumes, the job ends as one process",
          "[daemon][relay][tracker]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  const std::string tracker = "127.0.0.1:" + std::to_string(free_port());
  const std::string relay = "127.0.0.1:" + std::to_string(free_port());
  const auto log = cluster.dir() / "tracker.log";
  auto tracker_process = start_relaying_tracker(cluster, tracker, relay, log);
  cluster.set_daemon_flags(1, {"--relay", relay, "--tracker", tracker});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const int steps = 300;
  const auto job_path = cluster.dir() / "job.toml";
  // A checkpoint every 5 updates: the resume reruns at most 5.
  std::string text = job_text(steps);
  text.replace(text.find("[train]\n"), 8, "[train]\nsave_every = 5\n");
  test::write_text(job_path, text);
  auto restarter = std::thread([&] {
    cluster.wait_for_batches(1, 20);
    tracker_process->kill(SIGKILL);
    tracker_process.reset();
    std::filesystem::remove(log);
    tracker_process = start_relaying_tracker(cluster, tracker, relay, log);
  });
  // The relayed connections end with the relay: the job fails on a lost connection while every
  // node lives, and --elastic resumes it with the same nodes once node_1 answers again.
  auto train = cluster.ravnest(
      "train", job_path.string() + " --elastic --tracker " + tracker, 300);
  restarter.join();
  INFO(train.out << train.err << cluster.log(1) << test::read_text(log));
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  CHECK(said.find("failed on a lost connection") != std::string::npos);
  CHECK(said.find("it resumes from the newest checkpoint every node holds (1 of at most 3)") !=
        std::string::npos);
  CHECK(cluster.log(1).find("relay " + relay + ": reached at") !=
        cluster.log(1).rfind("relay " + relay + ": reached at"));  // held twice
  REQUIRE(cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string()).exit_code == 0);
  CHECK(worst_difference(cluster, job_path, steps) <= 1e-5);
}

TEST_CASE("the relaying tracker frozen (SIGSTOP) mid-job: train names node_1 in one line within "
          "seconds; a push while it is frozen fails in one line; continued, every daemon serves",
          "[daemon][relay][tracker]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  const std::string tracker = "127.0.0.1:" + std::to_string(free_port());
  const std::string relay = "127.0.0.1:" + std::to_string(free_port());
  const auto log = cluster.dir() / "tracker.log";
  auto tracker_process = start_relaying_tracker(cluster, tracker, relay, log);
  cluster.set_daemon_flags(1, {"--relay", relay, "--tracker", tracker});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text(100000));
  // Every connection through the relay stays open and carries nothing: the frozen process's
  // sockets still accept what their buffers hold.
  std::chrono::steady_clock::time_point frozen_at;
  auto freezer = std::thread([&] {
    cluster.wait_for_batches(1, 20);
    frozen_at = std::chrono::steady_clock::now();
    ::kill(tracker_process->pid(), SIGSTOP);
  });
  auto train = cluster.ravnest("train", job_path.string(), 120);
  const auto train_ended = std::chrono::steady_clock::now();
  freezer.join();
  const double train_seconds = std::chrono::duration<double>(train_ended - frozen_at).count();
  INFO(train.out << train.err << cluster.log(0) << cluster.log(1));
  INFO("train ended " << train_seconds << " s after the freeze");
  CHECK(train.exit_code != 0);
  CHECK(train.err.find("node_1") != std::string::npos);
  CHECK(train.err.find("stopped answering") != std::string::npos);
  CHECK(train_seconds < 30);
  // A push while the relay is frozen: node_1's stage cannot travel.
  const auto push_started = std::chrono::steady_clock::now();
  const auto push = cluster.ravnest("push", "", 120);
  const double push_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - push_started).count();
  INFO(push.out << push.err);
  INFO("push ended after " << push_seconds << " s");
  CHECK(push.exit_code != 0);
  CHECK(push.err.find("node_1") != std::string::npos);
  CHECK(std::count(push.err.begin(), push.err.end(), '\n') <= 1);
  CHECK(push.err.find("in 10 s (connect and TLS handshake)") != std::string::npos);
  CHECK(push_seconds < 30);
  // Continued: every daemon answers, node_1 through the relay again, the job over everywhere.
  ::kill(tracker_process->pid(), SIGCONT);
  auto status = cluster.ravnest("status", "", 60);
  for (int i = 0; i < 20 && status.exit_code != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    status = cluster.ravnest("status", "", 60);
  }
  INFO(status.out << status.err);
  CHECK(status.exit_code == 0);
  CHECK(status.out.find("running") == std::string::npos);
}

TEST_CASE("the relaying tracker frozen (SIGSTOP) mid-job and continued: train --elastic resumes "
          "with the same nodes, the job ends as one process",
          "[daemon][relay][tracker]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  const std::string tracker = "127.0.0.1:" + std::to_string(free_port());
  const std::string relay = "127.0.0.1:" + std::to_string(free_port());
  const auto log = cluster.dir() / "tracker.log";
  auto tracker_process = start_relaying_tracker(cluster, tracker, relay, log);
  cluster.set_daemon_flags(1, {"--relay", relay, "--tracker", tracker});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const int steps = 300;
  const auto job_path = cluster.dir() / "job.toml";
  std::string text = job_text(steps);
  text.replace(text.find("[train]\n"), 8, "[train]\nsave_every = 5\n");
  test::write_text(job_path, text);
  // Frozen for 15 s: past the 6 s of silence that fail the job (and the lines that say so),
  // within the 30 s the follower asks a silent tracker again.
  auto freezer = std::thread([&] {
    cluster.wait_for_batches(1, 20);
    ::kill(tracker_process->pid(), SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(15));
    ::kill(tracker_process->pid(), SIGCONT);
  });
  auto train = cluster.ravnest(
      "train", job_path.string() + " --elastic --tracker " + tracker, 300);
  freezer.join();
  INFO(train.out << train.err << cluster.log(1) << test::read_text(log));
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  CHECK(said.find("node_1") != std::string::npos);
  CHECK(said.find("failed on a lost connection") != std::string::npos);
  CHECK(said.find("it resumes from the newest checkpoint every node holds") != std::string::npos);
  REQUIRE(cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string()).exit_code == 0);
  CHECK(worst_difference(cluster, job_path, steps) <= 1e-5);
}
