#include "apps/ravnest/dashboard_page.h"

namespace ravnest::cli {

const char* dashboard_page() {
  return R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ravnest dashboard</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: #f5f6f8; color: #1d2330; }
  header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 24px;
           align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header .meta { color: #b8c0d0; }
  main { padding: 16px 20px; display: grid; grid-template-columns: minmax(560px, 1.2fr) 1fr; gap: 16px; }
  section { background: #fff; border-radius: 6px; padding: 12px 16px; box-shadow: 0 1px 2px #0002; }
  section h2 { font-size: 15px; margin: 0 0 8px; }
  .cluster { display: flex; align-items: stretch; gap: 6px; margin: 8px 0; overflow-x: auto; }
  .cluster .label { min-width: 64px; font-weight: 600; align-self: center; }
  .node { border: 1px solid #c9d0dc; border-radius: 5px; padding: 6px 8px; min-width: 120px;
          font-size: 12px; background: #fbfcfd; white-space: nowrap; flex: 0 0 auto; }
  .node .name { font-weight: 600; font-size: 13px; }
  .node[data-state="training"] { border-color: #2f7de1; background: #eef5ff; }
  .node[data-state="finished"] { border-color: #2d9d5a; background: #effaf3; }
  .node[data-state="failed"], .node[data-state="unreachable"], .node[data-state="refused"] {
    border-color: #d0453a; background: #fdf0ef; }
  .arrow { align-self: center; color: #8a93a5; }
  .state { display: inline-block; padding: 0 5px; border-radius: 3px; background: #e4e8ef; }
  table { border-collapse: collapse; width: 100%; font-size: 12px; }
  th, td { text-align: right; padding: 3px 6px; border-bottom: 1px solid #eceff4; white-space: nowrap; }
  th:first-child, td:first-child { text-align: left; }
  pre { background: #f5f6f8; padding: 8px; overflow: auto; max-height: 320px; font-size: 12px; }
  svg text { font-size: 11px; fill: #4a5368; }
  .wide { grid-column: 1 / span 2; }
  .error { color: #b3362c; }
</style>
</head>
<body>
<header><h1>ravnest</h1><span class="meta" id="plan-dir"></span><span class="meta" id="updated">connecting...</span></header>
<main>
  <section class="wide"><h2>Cluster map</h2><div id="nodes" data-node-count="0"></div><div id="rings"></div></section>
  <section><h2>Loss per cluster</h2><div id="curves"></div></section>
  <section><h2>Clusters</h2><table id="cluster-table"><thead><tr><th>cluster</th><th>batches</th><th>last loss</th><th>validation loss</th><th>accuracy</th></tr></thead><tbody></tbody></table></section>
  <section class="wide"><h2>Bytes on the wire</h2><table id="traffic"><thead><tr><th>node</th><th>activations</th><th>gradients</th><th>rings</th><th>weights</th><th>other</th><th>sent</th><th>received</th></tr></thead><tbody></tbody></table></section>
  <section class="wide" id="tracker-section" hidden><h2>Live pool <span class="meta" id="tracker-meta"></span></h2><table id="tracker"><thead><tr><th>node</th><th>address</th><th>memory</th><th>GPU memory</th><th>GFLOP/s</th><th>Mbit/s</th><th>heard</th></tr></thead><tbody></tbody></table></section>
  <section class="wide"><h2>Job <span class="meta" id="job-path"></span></h2><pre id="job">(no job trained with this plan yet)</pre></section>
</main>
<script>
"use strict";
const colours = ["#2f7de1", "#e1762f", "#2d9d5a", "#9b3fd1", "#d0453a", "#1b9aaa", "#8a6d1b", "#5b6372"];
function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i + 1 < units.length) { n /= 1000; ++i; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}
function fixed(x, d) { return x === null || x === undefined ? "-" : Number(x).toFixed(d); }
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}
function drawNodes(state) {
  const byName = {};
  for (const n of state.nodes) byName[n.name] = n;
  const box = document.getElementById("nodes");
  box.replaceChildren();
  box.setAttribute("data-node-count", state.plan.node_count);
  const rows = state.plan.clusters.map(c => ({label: "cluster " + c.id, nodes: c.nodes}));
  if (state.plan.servers.length) rows.push({label: "servers", nodes: state.plan.servers});
  for (const row of rows) {
    const line = el("div", {class: "cluster"});
    line.appendChild(el("div", {class: "label"}, row.label));
    row.nodes.forEach((p, i) => {
      if (i) line.appendChild(el("div", {class: "arrow"}, "\u2192"));
      const n = byName[p.name] || {state: "unknown"};
      const card = el("div", {class: "node", "data-name": p.name, "data-state": n.state});
      card.appendChild(el("div", {class: "name"}, p.name + " \u00b7 " + p.role));
      card.appendChild(el("div", {}, p.address));
      const st = el("div", {});
      st.appendChild(el("span", {class: "state"}, n.state));
      if (n.batches !== undefined) st.appendChild(document.createTextNode(" " + n.batches +
          (n.total_batches !== null && n.total_batches !== undefined ? "/" + n.total_batches : "") + " batches"));
      card.appendChild(st);
      const figures = [];
      if (n.samples_per_second !== null && n.samples_per_second !== undefined) figures.push(fixed(n.samples_per_second, 0) + " samples/s");
      if (n.loss !== null && n.loss !== undefined) figures.push("loss " + fixed(n.loss, 4));
      if (n.busy !== null && n.busy !== undefined) figures.push("busy " + fixed(100 * n.busy, 0) + "%");
      if (n.resident_bytes) figures.push(bytes(n.resident_bytes) + " RSS");
      card.appendChild(el("div", {}, figures.join(" \u00b7 ")));
      if (n.error) card.appendChild(el("div", {class: "error"}, n.error));
      line.appendChild(card);
    });
    box.appendChild(line);
  }
  const rings = document.getElementById("rings");
  rings.replaceChildren();
  for (const r of state.plan.rings) {
    rings.appendChild(el("div", {class: "ring"}, "ring " + r.id + ": " +
        r.nodes.map(id => "node_" + id).join(" \u2194 ")));
  }
}
function drawCurves(state) {
  const box = document.getElementById("curves");
  box.replaceChildren();
  const W = 560, H = 240, L = 48, B = 24;
  const svg = svgEl("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H});
  let maxX = 1, maxY = 0;
  for (const c of state.clusters) {
    for (const [x, y] of c.losses) { if (y !== null) { maxX = Math.max(maxX, x); maxY = Math.max(maxY, y); } }
  }
  if (maxY <= 0) maxY = 1;
  const sx = x => L + (W - L - 10) * x / maxX, sy = y => H - B - (H - B - 10) * y / maxY;
  svg.appendChild(svgEl("line", {x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#8a93a5"}));
  svg.appendChild(svgEl("line", {x1: L, y1: 10, x2: L, y2: H - B, stroke: "#8a93a5"}));
  for (const f of [0, 0.5, 1]) {
    const t = svgEl("text", {x: 4, y: sy(f * maxY) + 4}); t.textContent = (f * maxY).toFixed(2); svg.appendChild(t);
  }
  const xt = svgEl("text", {x: W - 90, y: H - 6}); xt.textContent = maxX + " batches"; svg.appendChild(xt);
  state.clusters.forEach((c, i) => {
    const colour = colours[i % colours.length];
    const pts = c.losses.filter(p => p[1] !== null).map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1));
    svg.appendChild(svgEl("polyline", {class: "curve", "data-cluster": c.id, points: pts.join(" "),
                                       fill: "none", stroke: colour, "stroke-width": 1.2}));
    const perUpdate = c.batches && c.validation.length ? c.batches / c.validation[c.validation.length - 1].updates : 1;
    for (const v of c.validation) {
      if (v.loss === null) continue;
      svg.appendChild(svgEl("circle", {class: "validation", "data-cluster": c.id, r: 4,
          cx: sx(Math.min(maxX, v.updates * perUpdate)), cy: sy(Math.min(maxY, v.loss)),
          fill: "#fff", stroke: colour, "stroke-width": 2}));
    }
    const key = svgEl("text", {x: W - 120, y: 20 + 14 * i, fill: colour}); key.textContent = c.label;
    key.setAttribute("style", "fill:" + colour); svg.appendChild(key);
  });
  box.appendChild(svg);
  if (!state.clusters.length) box.appendChild(el("div", {}, "no losses yet"));
  const body = document.querySelector("#cluster-table tbody");
  body.replaceChildren();
  for (const c of state.clusters) {
    const last = c.validation.length ? c.validation[c.validation.length - 1] : null;
    const tr = el("tr", {});
    tr.appendChild(el("td", {}, c.label));
    tr.appendChild(el("td", {}, String(c.batches)));
    tr.appendChild(el("td", {class: "last-loss", "data-cluster": c.id}, fixed(c.last_loss, 4)));
    tr.appendChild(el("td", {class: "validation-loss", "data-cluster": c.id}, last ? fixed(last.loss, 4) : "-"));
    tr.appendChild(el("td", {class: "accuracy", "data-cluster": c.id}, last ? fixed(last.accuracy, 4) : "-"));
    body.appendChild(tr);
  }
}
function drawTraffic(state) {
  const body = document.querySelector("#traffic tbody");
  body.replaceChildren();
  for (const n of state.nodes) {
    const tr = el("tr", {"data-name": n.name});
    tr.appendChild(el("td", {}, n.name));
    for (const k of ["activations", "gradients", "rings", "weights", "other"]) {
      const t = n.traffic && n.traffic[k];
      tr.appendChild(el("td", {}, t ? bytes(t[0]) + " / " + bytes(t[1]) : "-"));
    }
    tr.appendChild(el("td", {}, bytes(n.bytes_sent)));
    tr.appendChild(el("td", {}, bytes(n.bytes_received)));
    body.appendChild(tr);
  }
}
function drawTracker(state) {
  const t = state.tracker;
  document.getElementById("tracker-section").hidden = !t;
  if (!t) return;
  const body = document.querySelector("#tracker tbody");
  body.replaceChildren();
  if (t.error) {
    document.getElementById("tracker-meta").textContent = t.address + ": " + t.error;
    return;
  }
  document.getElementById("tracker-meta").textContent =
      t.address + ", epoch " + t.epoch + ", " + t.nodes.length + " node(s) live";
  for (const n of t.nodes) {
    const tr = el("tr", {"data-name": n.name});
    tr.appendChild(el("td", {}, n.name));
    tr.appendChild(el("td", {}, n.address));
    tr.appendChild(el("td", {}, bytes(n.memory_bytes)));
    tr.appendChild(el("td", {}, n.gpu_memory_bytes.length ? n.gpu_memory_bytes.map(bytes).join(", ") : "-"));
    tr.appendChild(el("td", {}, fixed(n.gflops, 1)));
    tr.appendChild(el("td", {}, fixed(n.bandwidth_mbps, 0)));
    tr.appendChild(el("td", {}, fixed(n.seconds_since_heartbeat, 0) + " s ago"));
    body.appendChild(tr);
  }
}
async function poll() {
  try {
    const response = await fetch("/api/state", {cache: "no-store"});
    if (!response.ok) throw new Error(await response.text());
    const state = await response.json();
    document.getElementById("plan-dir").textContent = "plan " + state.plan.dir;
    drawNodes(state);
    drawCurves(state);
    drawTraffic(state);
    drawTracker(state);
    if (state.job) {
      document.getElementById("job").textContent = state.job;
      document.getElementById("job-path").textContent = state.job_path;
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.setAttribute("data-loaded", "1");
  } catch (e) {
    document.getElementById("updated").textContent = "not updated: " + e.message;
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
)html";
}

}  // namespace ravnest::cli
