#include "libs/daemon/daemon.h"

#include <csignal>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <capnp/ez-rpc.h>
#include <kj/async-io.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "libs/config/secret.h"
#include "libs/config/systemd_notify.h"
#include "libs/daemon/node_service.h"
#include "libs/daemon/node_store.h"
#include "libs/graph/eager_numerics.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/rpc_connection.h"

namespace ravnest::runtime {

namespace {

void open_log(const config::DaemonConfig& config) {
  std::shared_ptr<spdlog::logger> logger;
  if (config.log_file.empty()) {
    logger = spdlog::stderr_color_mt("ravnestd");
  } else {
    logger = spdlog::basic_logger_mt("ravnestd", config.log_file);
  }
  spdlog::drop("ravnestd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ " + config.node + ": %v");
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace

int run_daemon(const config::DaemonConfig& config) {
  // A write past a file size limit (or to a closed socket) fails that write with an error the
  // daemon reports; by default these signals would kill it.
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  open_log(config);
  NodeStore store(config.data_dir, config.node);
  std::string secret;
  if (!config.secret_file.empty()) {
    bool readable_by_others = false;
    secret = config::read_secret(config.secret_file, &readable_by_others);
    if (readable_by_others) {
      spdlog::warn("{} is readable by other users; chmod 600 it", config.secret_file);
    }
  } else {
    spdlog::warn("no shared secret configured: every requester is trusted");
  }
  std::string listen = config.listen;
  if (listen.empty() && store.has_stage()) listen = store.metadata().address;
  if (listen.empty()) {
    throw std::runtime_error("no listen address: give --listen or push a stage first");
  }

  asio::io_context compute;
  auto work = asio::make_work_guard(compute);
  // Registered before the port is opened: a SIGTERM that arrives as soon as the daemon accepts
  // connections waits for the handler below instead of killing the process.
  asio::signal_set signals(compute, SIGTERM, SIGINT, SIGHUP);
  // Stages compute as eager PyTorch does (eager_numerics.h); the setting is per thread.
  std::thread compute_thread([&compute]() {
    graph::EagerNumerics eager;
    compute.run();
  });
  // However this function ends, the compute thread ends first.
  struct Joiner {
    asio::io_context& compute;
    std::thread& thread;
    decltype(work)& guard;
    ~Joiner() {
      guard.reset();
      compute.stop();
      if (thread.joinable()) thread.join();
    }
  } joiner{compute, compute_thread, work};

  // The server creates this thread's KJ event loop; promises exist only after it.
  auto service = kj::heap<NodeService>(store, secret, compute);
  NodeService* service_ptr = service.get();
  capnp::EzRpcServer server(kj::mv(service), listen, 0, wire::rpc_reader_options());
  auto& wait_scope = server.getWaitScope();
  service_ptr->set_rpc_executor(kj::getCurrentThreadExecutor(),
                               server.getIoProvider().getTimer());
  unsigned port = 0;
  try {
    port = server.getPort().wait(wait_scope);
  } catch (const kj::Exception& e) {
    throw std::runtime_error("cannot listen on " + listen + ": " + wire::kj_reason(e));
  }

  auto shutdown = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto* fulfiller = shutdown.fulfiller.get();
  std::function<void(const std::error_code&, int)> on_signal = [&](const std::error_code& error,
                                                                    int signal) {
    if (error) return;
    if (signal == SIGHUP) {
      spdlog::info("SIGHUP: reopening the log");
      open_log(config);
      signals.async_wait(on_signal);
      return;
    }
    spdlog::info("signal {}: stopping", signal);
    fulfiller->fulfill();
  };
  signals.async_wait(on_signal);

  spdlog::info("serving {} on {} (port {})", config.node, listen, port);
  config::notify_ready();
  config::notify_status("serving on " + listen);

  shutdown.promise.wait(wait_scope);
  config::notify_stopping();
  // Let the compute thread finish what it is doing (a stage being written), then drop the job.
  auto done = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto* done_fulfiller = done.fulfiller.get();
  asio::post(compute, [&]() {
    signals.cancel();
    service_ptr->abandon_job();
    done_fulfiller->fulfill();
  });
  done.promise.wait(wait_scope);
  // Nothing may run on the compute thread once the service is gone.
  work.reset();
  compute.stop();
  compute_thread.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace ravnest::runtime
