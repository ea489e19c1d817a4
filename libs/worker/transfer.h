// The messages a stage worker exchanges, under the names the daemon uses: they belong to the wire
// (libs/wire/transfer_message.h, node_report.h, encoded by transfer_codec.h); the worker's
// surroundings are in worker_port.h.
#pragma once

#include "libs/worker/worker_port.h"
#include "libs/wire/node_report.h"
#include "libs/wire/transfer_message.h"

namespace ravnest::worker {

using wire::EventKind;
using wire::MicroBatchTag;
using wire::ProgressEventData;
using wire::TransferKind;
using wire::TransferMessage;

}  // namespace ravnest::worker
