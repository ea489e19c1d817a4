#include "libs/daemon/in_process_node.h"

#include <asio/post.hpp>

#include "libs/daemon/node_endpoint.h"
#include "libs/torch_support/eager_numerics.h"
#include "libs/wire/transport_security.h"

namespace ravnest::daemon {

InProcessNode::InProcessNode(const std::filesystem::path& data_dir, const std::string& node,
                             const config::DaemonLimits& limits)
    : io_(wire::ThreadIo::get()),
      store_((std::filesystem::create_directories(data_dir), data_dir), node),
      work_(asio::make_work_guard(compute_)),
      compute_thread_([this]() {
        torch_support::EagerNumerics eager;
        compute_.run();
      }),
      pipe_(kj::newTwoWayPipe()) {
  service_ = kj::heap<NodeService>(store_, wire::make_transport_security("", /*insecure=*/true),
                                   compute_, limits, /*threads=*/1, "cpu",
                                   /*shared_memory=*/false);
  service_->set_rpc_executor(kj::getCurrentThreadExecutor(), io_->timer(), io_->low_level());
  schema::Node::Client endpoint = kj::heap<NodeEndpoint>(*service_, "in-process");
  server_ = kj::heap<capnp::TwoPartyServer>(kj::mv(endpoint));
  server_->accept(kj::mv(pipe_.ends[0]));
  client_ = kj::heap<capnp::TwoPartyClient>(*pipe_.ends[1]);
  node_ = client_->bootstrap().castAs<schema::Node>();
}

InProcessNode::~InProcessNode() noexcept(false) {
  node_ = nullptr;
  client_ = nullptr;
  server_ = nullptr;
  // As run_daemon: the compute thread finishes what it does, then the job is dropped there.
  auto done = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto* fulfiller = done.fulfiller.get();
  asio::post(compute_, [this, fulfiller]() {
    service_->abandon_job();
    fulfiller->fulfill();
  });
  done.promise.wait(io_->wait_scope());
  work_.reset();
  compute_.stop();
  compute_thread_.join();
  service_ = nullptr;
}

}  // namespace ravnest::daemon
