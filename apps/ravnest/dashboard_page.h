// `ravnest dashboard`'s page: one HTML document with its style and script inline (no CDN, no
// other asset), served from the binary. The script polls /api/state once a second and draws the
// cluster map, each node's figures, the loss curves (SVG) and validation rounds per cluster,
// the bytes on the wire and the job's recipe. Elements tests look for: #nodes[data-node-count],
// .node[data-name][data-state], .last-loss[data-cluster], .curve[data-cluster], #job.
#pragma once

namespace ravnest::cli {

const char* dashboard_page();

}  // namespace ravnest::cli
