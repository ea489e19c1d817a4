// What a node reports (node_report.h: its status and its progress events) <-> their schema types
// (schemas/ravnest.capnp: NodeStatus, ProgressEvent): the one place where their fields are
// copied. No torch: a requester, and the fuzz targets, decode them without LibTorch.
//
// Decoding throws WireError for an enum value this build does not know.
#pragma once

#include "libs/wire/node_report.h"
#include "libs/wire/wire_error.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

void encode_event(const NodeEvent& event, schema::ProgressEvent::Builder out);
NodeEvent decode_event(schema::ProgressEvent::Reader event);

void encode_status(const NodeStatusData& status, schema::NodeStatus::Builder out);
NodeStatusData decode_status(schema::NodeStatus::Reader status);

}  // namespace ravnest::wire
