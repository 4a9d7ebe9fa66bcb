// The step-through page write_html fills in: one HTML file with its style and script inline
// (nothing is fetched), reading the graph from the JSON at @ADJOINT_GRAPH_DATA@. Its own
// layered layout, so the page needs no Graphviz. #step=N opens it at step N; #autotest clicks
// through every step and writes what it showed into <pre id="autotest-result">: what tests
// read back.
#pragma once

namespace adjoint::debug {

inline constexpr const char* kHtmlPage = R"ADJOINT_PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>adjoint: autograd graph</title>
<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 0; color: #222; }
header { padding: 8px 16px; background: #f5f5f5; border-bottom: 1px solid #ddd; }
header h1 { font-size: 18px; margin: 0 12px 0 0; display: inline; }
#controls { padding: 8px 16px; border-bottom: 1px solid #ddd; }
#controls button { font-size: 14px; margin-right: 4px; }
#slider { width: 320px; vertical-align: middle; }
main { display: flex; align-items: flex-start; }
#graph { flex: 1; overflow: auto; padding: 8px; }
#info { width: 380px; padding: 8px 16px; border-left: 1px solid #ddd; font-size: 13px; }
#info h2 { font-size: 15px; margin: 4px 0; }
#info .tensor { font-family: monospace; word-break: break-all; }
#note { padding: 4px 16px; color: #666; white-space: pre-wrap; }
.node rect { fill: #eeeeee; stroke: #888; stroke-width: 1; rx: 6; }
.node.leaf rect { fill: #cfe2f3; }
.node.output rect { fill: #f4cccc; }
.node.fwd-done rect { stroke: #3c78d8; stroke-width: 2; }
.node.bwd-done rect { stroke: #cc0000; stroke-width: 2; }
.node.current rect { stroke: #ff9900; stroke-width: 4; }
.node text { font-size: 11px; text-anchor: middle; pointer-events: none; }
.edge path { fill: none; stroke: #999; stroke-width: 1.2; }
.edge.fwd path { stroke: #3c78d8; stroke-width: 2.5; }
.edge.bwd path { stroke: #cc0000; stroke-width: 2.5; }
.edge text { font-size: 10px; font-family: monospace; }
.edge.fwd text { fill: #3c78d8; }
.edge.bwd text { fill: #cc0000; }
</style>
</head>
<body>
<header><h1>adjoint: autograd graph</h1><span id="summary"></span></header>
<div id="controls">
  <button id="btn-first" title="back to the start (Home)">|&#x25C0;</button>
  <button id="btn-prev" title="one step back (left arrow)">&#x25C0; step</button>
  <button id="btn-play" title="play or pause (space)">&#x25B6; play</button>
  <button id="btn-next" title="one step on (right arrow)">step &#x25B6;</button>
  <button id="btn-last" title="to the end (End)">&#x25B6;|</button>
  <input type="range" id="slider" min="0" value="0">
  <span id="step-label"></span>
  <label>speed <select id="speed"><option value="1200">slow</option>
  <option value="600" selected>normal</option><option value="250">fast</option></select></label>
</div>
<main><div id="graph"></div>
<aside id="info"><div id="status" data-step="0" data-phase="start" data-node=""></div>
<div id="detail"></div></aside></main>
<pre id="note"></pre>
<script type="application/json" id="adjoint-graph">@ADJOINT_GRAPH_DATA@</script>
<script>
"use strict";
const G = JSON.parse(document.getElementById("adjoint-graph").textContent);
const SVGNS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

// ---- numbers and tensors as text (4 significant digits, as in the DOT labels) ----
function num(v) {
  const x = Number(v);
  if (!Number.isFinite(x)) return String(x);
  return String(parseFloat(x.toPrecision(4)));
}
function tensorText(t) {
  if (!t) return "\u2014";
  if (t.shape.length === 0 && t.values.length === 1) return num(t.values[0]);
  const shown = t.values.slice(0, 8).map(num);
  let s = "[" + shown.join(", ") + (t.numel > shown.length ? ", ...]" : "]");
  if (t.numel > shown.length) s += " (" + t.numel + " values, norm " + num(t.norm) + ")";
  return s;
}
function nodeTitle(n) {
  if (n.leaf) return n.name || "leaf";
  return n.name ? n.name + " = " + n.op : n.op;
}
function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

// ---- what is drawn: one box per node, or per module when the graph is large ----
const forwardOrder = G.steps.filter((s) => s.phase === "forward").map((s) => s.node);
const unitOf = new Array(G.nodes.length);
const units = [];  // {id, title, sub, nodes, leaf, output}
if (G.grouped) {
  const byGroup = new Map();
  for (const i of forwardOrder) {
    const g = G.nodes[i].group || "(top level)";
    if (!byGroup.has(g)) {
      byGroup.set(g, units.length);
      units.push({id: "g" + units.length, title: g, nodes: [], leaf: false, output: false});
    }
    unitOf[i] = byGroup.get(g);
    units[unitOf[i]].nodes.push(i);
  }
  for (const u of units) {
    u.sub = u.nodes.length + " nodes";
    u.output = u.nodes.some((i) => G.nodes[i].output >= 0);
  }
} else {
  for (const i of forwardOrder) {
    const n = G.nodes[i];
    unitOf[i] = units.length;
    units.push({id: n.id, title: nodeTitle(n), sub: (n.shape + " " + n.dtype).trim(),
                nodes: [i], leaf: n.leaf, output: n.output >= 0});
  }
}

// ---- layered layout: a unit one layer below its latest input ----
const layer = new Array(units.length).fill(0);
const unitEdges = new Map();  // "a>b" -> [edge indices]
G.edges.forEach((e, k) => {
  const a = unitOf[e.from], b = unitOf[e.to];
  if (a === b) return;
  const key = a + ">" + b;
  if (!unitEdges.has(key)) unitEdges.set(key, []);
  unitEdges.get(key).push(k);
});
const pairs = [...unitEdges.keys()].map((key) => key.split(">").map(Number));
for (let u = 0; u < units.length; u++)
  for (const [a, b] of pairs) if (b === u && a < u) layer[u] = Math.max(layer[u], layer[a] + 1);
// Units nothing feeds (leaves) sit just above their first consumer, not all in the top row.
for (let u = 0; u < units.length; u++) {
  if (pairs.some(([a, b]) => b === u)) continue;
  const below = pairs.filter(([a, b]) => a === u).map(([a, b]) => layer[b]);
  if (below.length) layer[u] = Math.max(0, Math.min(...below) - 1);
}
const W = 170, H = 44, GAPX = 40, GAPY = 70;
const perLayer = [];
units.forEach((u, i) => { (perLayer[layer[i]] = perLayer[layer[i]] || []).push(i); });
const widest = Math.max(...perLayer.map((l) => (l ? l.length : 0)));
const pos = new Array(units.length);
perLayer.forEach((l, d) => {
  if (!l) return;
  const offset = (widest - l.length) * (W + GAPX) / 2;
  l.forEach((u, k) => {
    const across = offset + k * (W + GAPX) + 20, along = d * (H + GAPY) + 20;
    pos[u] = G.left_to_right ? {x: along, y: across} : {x: across, y: along};
  });
});
const svg = document.createElementNS(SVGNS, "svg");
const extentX = Math.max(...pos.map((p) => p.x)) + W + 60;
const extentY = Math.max(...pos.map((p) => p.y)) + H + 60;
svg.setAttribute("width", extentX);
svg.setAttribute("height", extentY);
svg.innerHTML = '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" ' +
  'markerWidth="7" markerHeight="7" orient="auto-start-reverse">' +
  '<path d="M 0 0 L 10 5 L 0 10 z" fill="#777"/></marker></defs>';
$("graph").appendChild(svg);

function el(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent.appendChild(e);
  return e;
}
const edgeEls = new Map();  // "a>b" -> {g, label}
for (const [key] of unitEdges) {
  const [a, b] = key.split(">").map(Number);
  const p = pos[a], q = pos[b];
  let d;
  if (G.left_to_right) {
    const x1 = p.x + W, y1 = p.y + H / 2, x2 = q.x, y2 = q.y + H / 2, m = (x1 + x2) / 2;
    d = `M ${x1} ${y1} C ${m} ${y1}, ${m} ${y2}, ${x2} ${y2}`;
  } else {
    const x1 = p.x + W / 2, y1 = p.y + H, x2 = q.x + W / 2, y2 = q.y, m = (y1 + y2) / 2;
    d = `M ${x1} ${y1} C ${x1} ${m}, ${x2} ${m}, ${x2} ${y2}`;
  }
  const g = el("g", {class: "edge", "data-from": units[a].id, "data-to": units[b].id}, svg);
  el("path", {d, "marker-end": "url(#arrow)"}, g);
  // Labels a third of the way from the input, so those of edges into one node stay apart.
  const f = 0.33, lx = G.left_to_right ? p.x + W + f * (q.x - p.x - W) : p.x + W / 2 + f * (q.x - p.x) + 6;
  const ly = G.left_to_right ? p.y + H / 2 + f * (q.y - p.y) - 4 : p.y + H + f * (q.y - p.y - H) + 4;
  const label = el("text", {x: lx, y: ly}, g);
  edgeEls.set(key, {g, label});
}
const unitEls = units.map((u, i) => {
  const g = el("g", {class: "node" + (u.leaf ? " leaf" : "") + (u.output ? " output" : ""),
                     "data-id": u.id, transform: `translate(${pos[i].x},${pos[i].y})`}, svg);
  el("rect", {width: W, height: H}, g);
  el("text", {x: W / 2, y: 18}, g).textContent = u.title;
  el("text", {x: W / 2, y: 34, fill: "#555"}, g).textContent = u.sub;
  const tip = el("title", {}, g);
  tip.textContent = u.nodes.map((i) => G.nodes[i].backward_name).join(", ");
  return g;
});

// ---- stepping ----
let step = 0;  // 0: nothing run yet; k: steps[0..k-1] done, steps[k-1] current
let timer = null;
const nF = G.num_forward, nB = G.num_backward;
$("slider").max = G.steps.length;
$("summary").textContent = `${G.nodes.length} nodes, ${G.edges.length} edges; ` +
  `${nF} forward and ${nB} backward steps` + (G.grouped ? " (grouped by module)" : "");
$("note").textContent = G.note || "";

function edgeLabel(key, text, cls) {
  const e = edgeEls.get(key);
  if (!e) return;
  e.g.classList.add(cls);
  e.label.textContent = text;
}
function render() {
  const done = new Set(), bwd = new Set();
  for (let k = 0; k < step; k++) (G.steps[k].phase === "forward" ? done : bwd).add(unitOf[G.steps[k].node]);
  unitEls.forEach((g, u) => {
    g.classList.toggle("fwd-done", done.has(u));
    g.classList.toggle("bwd-done", bwd.has(u));
    g.classList.remove("current");
  });
  for (const e of edgeEls.values()) {
    e.g.classList.remove("fwd", "bwd");
    e.label.textContent = "";
  }
  $("slider").value = step;
  const st = $("status"), detail = $("detail");
  if (step === 0) {
    st.dataset.step = "0"; st.dataset.phase = "start"; st.dataset.node = "";
    $("step-label").textContent = `0 / ${G.steps.length}`;
    st.innerHTML = "<h2>Ready</h2>";
    detail.innerHTML = "<p>Step through the forward pass node by node, then the backward pass " +
      "in the order the engine ran it.</p>";
    return;
  }
  const s = G.steps[step - 1], n = G.nodes[s.node], u = unitOf[s.node];
  unitEls[u].classList.add("current");
  st.dataset.step = String(step); st.dataset.phase = s.phase; st.dataset.node = n.id;
  $("step-label").textContent = `${step} / ${G.steps.length}`;
  const inEdges = G.edges.filter((e) => e.to === s.node);
  let h = "";
  if (s.phase === "forward") {
    const k = step;
    st.innerHTML = `<h2>Forward ${k} of ${nF}: ${esc(nodeTitle(n))}</h2>`;
    h += `<p>${esc(n.leaf ? "a leaf (input or parameter)" : "op " + n.op + " (" + n.backward_name + ")")}` +
         `, ${esc(n.shape)} ${esc(n.dtype)}</p>`;
    if (inEdges.length) {
      h += "<p>inputs:</p><ul>";
      for (const e of inEdges) {
        const from = G.nodes[e.from];
        h += `<li>${esc(nodeTitle(from))}: <span class="tensor">${esc(tensorText(from.value))}</span></li>`;
        edgeLabel(unitOf[e.from] + ">" + u, tensorText(from.value), "fwd");
      }
      h += "</ul>";
    }
    h += `<p>value: <span id="value" class="tensor">${esc(tensorText(n.value))}</span></p>`;
    if (n.num_saved) h += `<p>saves ${n.num_saved} tensor(s), ${n.saved_bytes} bytes, for backward` +
                          (n.saved_freed ? " (freed since)" : "") + "</p>";
  } else {
    const k = step - nF;
    st.innerHTML = `<h2>Backward ${k} of ${nB}: ${esc(nodeTitle(n))}</h2>`;
    const gin = s.grads_in.length === 1 ? tensorText(s.grads_in[0])
                                        : s.grads_in.map(tensorText).join("; ");
    h += `<p>${n.leaf ? "gradient accumulated into .grad" : "gradient arriving"}: ` +
         `<span id="grad-in" class="tensor">${esc(gin)}</span></p>`;
    if (!n.leaf) {
      h += `<p>local VJP of ${esc(n.op)} sends:</p><ul>`;
      for (const v of s.vjp) {
        const to = G.nodes[v.to];
        h += `<li class="vjp" data-to="${to.id}">to ${esc(nodeTitle(to))}: ` +
             `<span class="vjp-grad tensor">${esc(tensorText(v.grad))}</span></li>`;
        edgeLabel(unitOf[v.to] + ">" + u, tensorText(v.grad), "bwd");
      }
      h += "</ul>";
      if (s.vjp_error) h += `<p>VJP not shown: ${esc(s.vjp_error)}</p>`;
    }
  }
  if (G.grouped) h += `<p>module: ${esc(units[u].title)}</p>`;
  detail.innerHTML = h;
}
function go(k) { step = Math.max(0, Math.min(G.steps.length, k)); render(); }
function pause() { if (timer) clearInterval(timer); timer = null; $("btn-play").innerHTML = "&#x25B6; play"; }
function play() {
  if (step >= G.steps.length) go(0);
  timer = setInterval(() => { if (step >= G.steps.length) pause(); else go(step + 1); },
                      Number($("speed").value));
  $("btn-play").innerHTML = "&#x2759;&#x2759; pause";
}
$("btn-first").onclick = () => { pause(); go(0); };
$("btn-prev").onclick = () => { pause(); go(step - 1); };
$("btn-next").onclick = () => { pause(); go(step + 1); };
$("btn-last").onclick = () => { pause(); go(G.steps.length); };
$("btn-play").onclick = () => (timer ? pause() : play());
$("slider").oninput = () => { pause(); go(Number($("slider").value)); };
document.addEventListener("keydown", (ev) => {
  if (ev.key === "ArrowRight") $("btn-next").click();
  else if (ev.key === "ArrowLeft") $("btn-prev").click();
  else if (ev.key === " ") { ev.preventDefault(); $("btn-play").click(); }
  else if (ev.key === "Home") $("btn-first").click();
  else if (ev.key === "End") $("btn-last").click();
});
// #step=N opens the page at step N (a link to one moment of the run).
const at = /^#step=(\d+)$/.exec(location.hash);
go(at ? Number(at[1]) : 0);

// ---- #autotest: press step through the whole run and report what was shown ----
if (location.hash === "#autotest") {
  const shown = [];
  $("btn-first").click();
  for (let k = 0; k < G.steps.length; k++) {
    $("btn-next").click();
    const st = $("status"), cur = document.querySelector("#graph .current");
    const text = (id) => ($(id) ? $(id).textContent : null);
    shown.push({step: Number(st.dataset.step), phase: st.dataset.phase, node: st.dataset.node,
                highlighted: cur ? cur.getAttribute("data-id") : null,
                value: text("value"), grad_in: text("grad-in"),
                vjp: [...document.querySelectorAll("#detail .vjp")].map((li) => (
                  {to: li.dataset.to, grad: li.querySelector(".vjp-grad").textContent}))});
  }
  const pre = document.createElement("pre");
  pre.id = "autotest-result";
  pre.textContent = JSON.stringify(shown);
  document.body.appendChild(pre);
}
</script>
</body>
</html>
)ADJOINT_PAGE";

}  // namespace adjoint::debug
