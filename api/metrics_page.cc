// The live page of the metrics endpoint: one HTML document with its style and script inline (no
// CDN, no build step, nothing fetched but /api/snapshot from the same endpoint). Every second it
// fetches the snapshot and shows per stream the message rate (over the last 10 snapshots, with a
// 2-minute chart of each second's), gaps,
// losses and NAKs; per poller the controller's state over the same 2 minutes; and the
// percentiles of the application's latency histograms. Hand-written for Pollux (its license).
// Stable hooks for tests and scripts: tr.stream[data-topic][data-direction] > td.rate holds the
// messages per second, #status the time of the last update.
#include "api/metrics.h"

namespace pollux::detail::metrics {

namespace {
constexpr char kPage[] = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Pollux</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#1d2330;background:#fafbfc}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.4em 0 .4em}
table{border-collapse:collapse;min-width:60em}th,td{padding:.25em .7em;border-bottom:1px solid #e2e5ea;text-align:right}
th{background:#eef1f5;font-weight:600}td.l,th.l{text-align:left}
canvas{vertical-align:middle;background:#fff;border:1px solid #e2e5ea}
.busy{color:#c0392b}.spin{color:#d68910}.interrupt{color:#1e8449}#status{color:#5b6577}
.legend span{margin-right:1em}.err{color:#c0392b;font-weight:600}
</style></head><body>
<h1>Pollux</h1><div id="status">loading...</div>
<h2>Streams</h2>
<table id="streams"><thead><tr><th class="l">process</th><th class="l">topic</th><th>stream</th><th class="l">direction</th>
<th class="l">transport</th><th>msg/s (10 s)</th><th>last 2 min</th><th>messages</th><th>gaps</th><th>lost</th><th>NAKs</th>
<th>back-pressure</th></tr></thead><tbody></tbody></table>
<h2>Pollers (controller state, last 2 min)</h2>
<div class="legend"><span class="busy">&#9632; busy</span><span class="spin">&#9632; spin</span><span class="interrupt">&#9632; interrupt (asleep)</span></div>
<table id="pollers"><thead><tr><th class="l">process</th><th>poller</th><th class="l">state</th><th>state over time</th><th>mode switches</th>
<th>busy s</th><th>spin s</th><th>asleep s</th></tr></thead><tbody></tbody></table>
<h2>Latency (application histograms)</h2>
<table id="latency"><thead><tr><th class="l">process</th><th class="l">scope</th><th class="l">histogram</th><th>count</th><th>p50</th><th>p90</th>
<th>p99</th><th>p99.9</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const HISTORY = 120, WINDOW = 10, MODES = ["busy", "spin", "interrupt"], COLORS = {busy: "#c0392b", spin: "#d68910", interrupt: "#1e8449"};
const prev = new Map(), rates = new Map(), states = new Map();
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
function fmtRate(r) { return r >= 1e6 ? (r / 1e6).toFixed(2) + "M" : r >= 1e3 ? (r / 1e3).toFixed(1) + "k" : r.toFixed(0); }
function fmtTime(s) { return s >= 1 ? s.toFixed(3) + " s" : s >= 1e-3 ? (s * 1e3).toFixed(3) + " ms" : s >= 1e-6 ? (s * 1e6).toFixed(2) + " us" : (s * 1e9).toFixed(0) + " ns"; }
function push(map, key, v) { let a = map.get(key); if (!a) { a = []; map.set(key, a); } a.push(v); if (a.length > HISTORY) a.shift(); return a; }
function spark(values) {
  const c = el("canvas"); c.width = 240; c.height = 28; const g = c.getContext("2d");
  const max = Math.max(1, ...values); g.strokeStyle = "#2e6fd8"; g.beginPath();
  values.forEach((v, i) => { const x = (HISTORY - values.length + i) * c.width / HISTORY, y = c.height - 2 - v / max * (c.height - 4); i ? g.lineTo(x, y) : g.moveTo(x, y); });
  g.stroke(); return c;
}
function strip(modes) {
  const c = el("canvas"); c.width = 240; c.height = 16; const g = c.getContext("2d"), w = c.width / HISTORY;
  modes.forEach((m, i) => { g.fillStyle = COLORS[MODES[m]] || "#999"; g.fillRect((HISTORY - modes.length + i) * w, 0, Math.ceil(w), c.height); });
  return c;
}
function row(cells) { const tr = el("tr"); for (const [cls, v] of cells) { const td = el("td", cls); if (v instanceof Node) td.appendChild(v); else td.textContent = v; tr.appendChild(td); } return tr; }
function render(snap) {
  const sb = document.querySelector("#streams tbody"), pb = document.querySelector("#pollers tbody"), lb = document.querySelector("#latency tbody");
  const srows = [], prows = [], lrows = [];
  for (const p of snap.processes) {
    const pname = p.name + " (" + p.pid + ")";
    for (const s of p.streams) {
      const key = p.pid + "/" + s.direction + "/" + s.stream + "/" + s.topic, c = s.counters, msgs = c.messages || 0;
      // The rate shown is over the last WINDOW snapshots (up to 10 s), the chart's per snapshot.
      const seen = prev.get(key) || [], last = seen[seen.length - 1];
      if (!last || p.snapshot_ns > last.t) {
        if (last) push(rates, key, Math.max(0, msgs - last.m) * 1e9 / (p.snapshot_ns - last.t));
        seen.push({t: p.snapshot_ns, m: msgs}); if (seen.length > WINDOW + 1) seen.shift(); prev.set(key, seen);
      }
      // The endpoint's own rate when it gives one (it samples at every client's request, so it
      // is known at the first fetch), else this page's.
      const first = seen[0], newest = seen[seen.length - 1];
      const rate = s.rate !== undefined ? s.rate
                 : newest.t > first.t ? Math.max(0, newest.m - first.m) * 1e9 / (newest.t - first.t) : 0;
      const shown = (rates.get(key) || []);
      const bp = (c.back_pressure_log_full || 0) + (c.back_pressure_ring_full || 0) + (c.back_pressure_no_slot || 0) + (c.back_pressure_transport || 0);
      const tr = row([["l", pname], ["l", s.topic], ["", s.stream], ["l", s.direction], ["l", s.transport],
                      ["rate", fmtRate(rate)], ["", spark(shown)], ["", msgs],
                      ["", c.gaps || 0], ["", c.messages_lost || 0], ["", s.naks], ["", bp]]);
      tr.className = "stream"; tr.dataset.topic = s.topic; tr.dataset.direction = s.direction;
      tr.querySelector(".rate").dataset.value = String(rate);
      srows.push(tr);
    }
    for (const q of p.pollers) {
      const c = q.counters, key = p.pid + "/" + q.poller;
      const modes = c.mode === undefined ? [] : push(states, key, c.mode);
      const name = c.mode === undefined ? "-" : MODES[c.mode] || "?";
      const tr = row([["l", pname], ["", q.poller], ["l " + name, name], ["", strip(modes)], ["", c.mode_switches || 0],
                      ["", ((c.time_busy_ns || 0) / 1e9).toFixed(1)], ["", ((c.time_spin_ns || 0) / 1e9).toFixed(1)],
                      ["", ((c.time_interrupt_ns || 0) / 1e9).toFixed(1)]]);
      tr.className = "poller"; prows.push(tr);
    }
    for (const h of p.histograms) {
      const tr = row([["l", pname], ["l", h.scope], ["l", h.name], ["", h.count], ["", fmtTime(h.p50_s)], ["", fmtTime(h.p90_s)],
                      ["", fmtTime(h.p99_s)], ["", fmtTime(h.p999_s)]]);
      tr.className = "histogram"; lrows.push(tr);
    }
  }
  sb.replaceChildren(...srows); pb.replaceChildren(...prows); lb.replaceChildren(...lrows);
  const n = snap.processes.length;
  const st = document.getElementById("status"); st.className = "";
  st.textContent = n + " process" + (n === 1 ? "" : "es") + ", updated " + new Date().toLocaleTimeString();
}
async function tick() {
  try {
    const r = await fetch("api/snapshot", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    const s = document.getElementById("status"); s.textContent = "no data: " + e.message; s.className = "err";
  }
  setTimeout(tick, 1000);
}
tick();
</script></body></html>
)html";
}  // namespace

std::string_view page_html() noexcept { return {kPage, sizeof(kPage) - 1}; }

}  // namespace pollux::detail::metrics
