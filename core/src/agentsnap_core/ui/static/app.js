// agentsnap ui: the snapshot DAG, one snapshot's layers, and per-layer diffs of two snapshots.
// Plain JS, no dependencies. All data comes from the JSON endpoints (docs/UI.md); every string from
// the store is inserted as text, never as HTML.
"use strict";

const TOKEN = document.querySelector('meta[name="agentsnap-token"]').content;
const ROW = 44, LANE = 18, PAGE = 100;
const COLORS = ["#2f6feb", "#1a7f37", "#c2410c", "#8250df", "#bf3989", "#0a7ea4", "#9a6700", "#57606a"];

const state = {
  nodes: [], byId: new Map(), next: 0, filters: {}, selected: null, picked: [], diffMode: "unified",
};

// ------------------------------------------------------------------------------------------ helpers
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}
async function getJSON(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== null && v !== undefined) url.searchParams.set(k, v);
  const r = await fetch(url, { headers: { "X-Agentsnap-Token": TOKEN } });
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
const short = (id) => (id || "").slice(0, 12);
function fmtTime(t) {
  const d = new Date(t * 1000), p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
function fmtBytes(n) {
  if (n === null || n === undefined) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${u[i]}`;
}
function fmtSize(s) {
  const parts = [];
  if (s.files !== null && s.files !== undefined) parts.push(`${s.files} files, ${fmtBytes(s.bytes)}`);
  if (s.messages !== null && s.messages !== undefined) parts.push(`${s.messages} msgs`);
  return parts.join(" · ");
}
const show = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 1));
function status(text, isError) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = isError ? "error" : "muted";
}
function refPills(refs) {
  return (refs || []).map((r) => el("span", { class: `pill ${r.kind}${r.head === "true" ? " head" : ""}`, "data-ref": r.name },
    r.kind === "tag" ? `tag: ${r.name}` : r.head === "true" ? `HEAD → ${r.name}` : r.name));
}

// ------------------------------------------------------------------------------------------ graph
async function loadRefs() {
  const refs = await getJSON("/api/refs");
  document.getElementById("store").textContent = refs.store;
  const sel = document.getElementById("f-branch");
  for (const name of Object.keys(refs.branches).sort()) sel.append(el("option", { value: name }, name));
}

async function loadPage(reset) {
  if (reset) { state.nodes = []; state.byId.clear(); state.next = 0; }
  status("loading…");
  try {
    const page = await getJSON("/api/graph", { limit: PAGE, cursor: state.next, ...state.filters });
    for (const n of page.nodes) if (!state.byId.has(n.id)) { state.nodes.push(n); state.byId.set(n.id, n); }
    state.next = page.next;
    document.getElementById("more").hidden = page.next === null;
    drawGraph();
    status(`${state.nodes.length} snapshot${state.nodes.length === 1 ? "" : "s"}${page.next === null ? "" : " (more below)"}`);
  } catch (e) { status(e.message, true); }
}

// Lanes like `git log --graph`: rows newest first, a lane waits for the parent it will reach next.
function layout(nodes) {
  const lanes = [], pos = new Map(), edges = [], children = new Map();
  const free = () => { let i = lanes.indexOf(null); if (i < 0) { i = lanes.length; lanes.push(null); } return i; };
  nodes.forEach((n, row) => {
    let lane = lanes.indexOf(n.id);
    if (lane < 0) lane = free();
    for (let i = 0; i < lanes.length; i++) if (lanes[i] === n.id) lanes[i] = null;
    pos.set(n.id, { row, lane });
    n.parents.forEach((p, k) => {
      children.set(p, (children.get(p) || 0) + 1);
      let pl = lanes.indexOf(p);
      if (pl < 0) { pl = k === 0 && lanes[lane] === null ? lane : free(); lanes[pl] = p; }
      edges.push({ from: n.id, to: p, lane: pl });
    });
  });
  return { pos, edges, children, width: Math.max(1, lanes.length) };
}

function drawGraph() {
  const { pos, edges, children, width } = layout(state.nodes);
  const lanesEl = document.getElementById("lanes"), rows = document.getElementById("rows");
  const w = width * LANE + 12, h = state.nodes.length * ROW;
  lanesEl.replaceChildren();
  lanesEl.setAttribute("width", w); lanesEl.setAttribute("height", h);
  rows.style.marginLeft = `${w}px`;
  const x = (lane) => 10 + lane * LANE, y = (row) => row * ROW + ROW / 2;
  for (const e of edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    const pts = [[x(a.lane), y(a.row)]];
    if (e.lane !== a.lane) pts.push([x(e.lane), y(a.row + 1) - ROW / 2]);
    if (!b) {
      pts.push([x(e.lane), h]);
      lanesEl.append(svg("path", { class: "edge offpage", d: "M" + pts.map((p) => p.join(" ")).join(" L"), stroke: COLORS[e.lane % COLORS.length] }));
      continue;
    }
    if (b.lane !== e.lane && b.row - 1 > a.row) pts.push([x(e.lane), y(b.row - 1) + ROW / 2]);
    pts.push([x(b.lane), y(b.row)]);
    lanesEl.append(svg("path", { class: "edge", "data-from": e.from, "data-to": e.to, d: "M" + pts.map((p) => p.join(" ")).join(" L"), stroke: COLORS[e.lane % COLORS.length] }));
  }
  rows.replaceChildren();
  state.nodes.forEach((n) => {
    const p = pos.get(n.id);
    const kind = n.parents.length > 1 ? "merge" : (children.get(n.id) || 0) > 1 ? "fork" : "";
    const c = svg("circle", { class: `node ${kind}`, "data-id": n.id, cx: x(p.lane), cy: y(p.row), r: kind ? 6.5 : 5.5, fill: COLORS[p.lane % COLORS.length] });
    c.addEventListener("click", () => select(n.id));
    lanesEl.append(c);
    const picked = state.picked.includes(n.id);
    const row = el("div", {
      class: `node-row${state.selected === n.id ? " selected" : ""}${picked ? " picked" : ""}`, "data-id": n.id,
      "data-kind": kind, title: n.message, onclick: (ev) => { if (ev.target.tagName !== "INPUT") select(n.id); },
    },
    el("input", { type: "checkbox", class: "pick", "aria-label": `compare ${short(n.id)}`, checked: picked, onchange: () => pick(n.id) }),
    el("div", { class: "lines" },
      el("div", { class: "l1" },
        el("span", { class: "sid" }, short(n.id)),
        refPills(n.refs),
        kind === "merge" ? el("span", { class: "pill merge" }, "merge") : null,
        el("span", { class: "msg" }, n.message || "(no message)")),
      el("div", { class: "l2" },
        n.agent ? el("span", { class: "pill agent" }, n.agent) : null,
        n.thread ? el("span", { class: "meta" }, `thread ${n.thread}`) : null,
        el("span", { class: "meta" }, fmtTime(n.time)),
        el("span", { class: "meta size" }, fmtSize(n.size)))));
    rows.append(row);
  });
}

// ------------------------------------------------------------------------------------------ one snapshot
async function select(id) {
  state.selected = id;
  document.querySelectorAll(".node-row").forEach((r) => r.classList.toggle("selected", r.dataset.id === id));
  const box = document.getElementById("detail");
  document.getElementById("hint").hidden = true;
  document.getElementById("diff").hidden = true;
  box.hidden = false;
  box.replaceChildren(el("p", { class: "muted" }, "loading…"));
  try {
    const d = await getJSON(`/api/snapshots/${id}`);
    const names = [...d.layers];
    if (names.includes("world")) names.push("env");
    const tabs = el("div", { class: "tabs" }, names.map((name) => el("button", { class: "layer-tab", "data-layer": name, onclick: () => openLayer(d.id, name) }, name)));
    box.replaceChildren(
      el("h2", {}, d.message || "(no message)"),
      el("div", {}, refPills(d.refs)),
      el("dl", { class: "facts" },
        el("dt", {}, "id"), el("dd", { class: "mono", id: "detail-id" }, d.id),
        el("dt", {}, "parents"), el("dd", {}, d.parents.length ? d.parents.map((p) => [el("a", { class: "sid", onclick: () => select(p) }, short(p)), " "]) : "none (root)"),
        el("dt", {}, "agent"), el("dd", {}, d.agent || "—"),
        el("dt", {}, "author"), el("dd", {}, d.author || "—"),
        d.thread ? [el("dt", {}, "thread"), el("dd", {}, d.thread)] : null,
        el("dt", {}, "time"), el("dd", {}, fmtTime(d.time)),
        el("dt", {}, "size"), el("dd", {}, fmtSize(d.size) || "—")),
      el("h3", {}, "layers"), tabs, el("div", { id: "layer-content" }));
    const first = ["state", "trace", "world"].find((n) => names.includes(n)) || names[0];
    if (first) openLayer(d.id, first);
  } catch (e) { box.replaceChildren(el("p", { class: "error" }, e.message)); }
}

async function openLayer(id, name, offset = 0) {
  document.querySelectorAll(".layer-tab").forEach((b) => b.classList.toggle("on", b.dataset.layer === name));
  const box = document.getElementById("layer-content");
  if (!offset) box.replaceChildren(el("p", { class: "muted" }, "loading…"));
  try {
    const data = await getJSON(`/api/snapshots/${id}/layers/${encodeURIComponent(name)}`, { offset });
    const part = renderLayer(data);
    if (offset) box.querySelector(".more-items")?.remove(); else box.replaceChildren();
    box.dataset.layer = name;
    box.append(part);
    if (data.next !== null && data.next !== undefined) {
      box.append(el("button", { class: "more-items", onclick: () => openLayer(id, name, data.next) }, `Show more (${data.total - data.next} left)`));
    }
  } catch (e) { box.replaceChildren(el("p", { class: "error" }, e.message)); }
}

function message(m, n, cls) {
  if (!m || typeof m !== "object") return el("p", { class: "muted" }, show(m));  // "…N more items"
  return el("div", { class: `msg-item ${cls || ""}` },
    el("span", { class: "n" }, `#${n}`),
    el("span", { class: "role" }, m.role || "?"),
    el("span", { class: "content" }, show(m.content ?? "")),
    m.tool_calls ? el("pre", { class: "mono" }, show(m.tool_calls)) : null);
}

function effectsTable(items, cols) {
  return el("table", { class: "effects" },
    el("tr", {}, cols.map(([, label]) => el("th", {}, label))),
    items.map((r) => el("tr", {}, cols.map(([k]) => {
      const v = r[k];
      const isStatus = ["status", "a", "b", "now"].includes(k);
      return el("td", { class: isStatus && v ? `status st-${v}` : "mono" }, v === null || v === undefined ? "—" : String(v));
    }))));
}

function renderLayer(d) {
  if (d.kind === "files") {
    return el("table", { class: "files" },
      d.offset ? null : el("tr", {}, el("th", {}, `path (${d.total})`), el("th", {}, "kind"), el("th", {}, "mode"), el("th", {}, "size")),
      d.items.map((f) => el("tr", {}, el("td", { class: "mono" }, f.path + (f.target ? ` → ${f.target}` : "")), el("td", {}, f.kind), el("td", { class: "mono" }, f.mode), el("td", {}, f.kind === "f" ? fmtBytes(f.size) : ""))));
  }
  if (d.kind === "messages") {
    return el("div", { class: "timeline" }, d.offset ? null : el("p", { class: "muted" }, `${d.total} messages`), d.items.map((m, i) => message(m, d.offset + i + 1)));
  }
  if (d.kind === "effects") {
    if (!d.items.length) return el("p", { class: "muted" }, "no effects recorded when this snapshot was taken");
    return effectsTable(d.items, [["key", "key"], ["tool", "tool"], ["class", "class"], ["status", "status"]]);
  }
  return el("pre", { class: "value" }, JSON.stringify(d.value, null, 2));
}

// ------------------------------------------------------------------------------------------ two snapshots
function pick(id) {
  const i = state.picked.indexOf(id);
  if (i >= 0) state.picked.splice(i, 1);
  else { state.picked.push(id); if (state.picked.length > 2) state.picked.shift(); }
  document.querySelectorAll(".node-row").forEach((r) => {
    const on = state.picked.includes(r.dataset.id);
    r.classList.toggle("picked", on);
    r.querySelector("input.pick").checked = on;
  });
  const pair = document.getElementById("pair");
  if (state.picked.length === 2) {
    // older snapshot on the left (A), newer on the right (B)
    const [a, b] = [...state.picked].sort((x, y) => (state.byId.get(x)?.time ?? 0) - (state.byId.get(y)?.time ?? 0));
    pair.replaceChildren("Comparing ", el("code", {}, short(a)), " → ", el("code", {}, short(b)));
    loadDiff(a, b);
  } else {
    pair.replaceChildren(state.picked.length ? `Picked ${short(state.picked[0])}; tick one more to compare.` : "Tick two snapshots to compare them.");
  }
}

async function loadDiff(a, b) {
  const box = document.getElementById("diff");
  document.getElementById("hint").hidden = true;
  document.getElementById("detail").hidden = true;
  box.hidden = false;
  box.replaceChildren(el("p", { class: "muted" }, "comparing…"));
  try {
    const d = await getJSON(`/api/diff/${a}/${b}`);
    state.lastDiff = d;
    renderDiff(d);
  } catch (e) { box.replaceChildren(el("p", { class: "error" }, e.message)); }
}

function renderDiff(d) {
  const box = document.getElementById("diff");
  const side = (n, label) => el("div", {}, el("b", {}, `${label} `), el("a", { class: "sid", onclick: () => select(n.id) }, short(n.id)), " ", refPills(n.refs), " ", n.message, n.agent ? [" ", el("span", { class: "pill agent" }, n.agent)] : null);
  box.replaceChildren(el("h2", {}, "Diff"), side(d.a, "A"), side(d.b, "B"));
  const L = d.layers;
  const order = ["world", "trace", "state", "effects", ...Object.keys(L).filter((k) => !["world", "trace", "state", "effects", "env"].includes(k)).sort(), "env"];
  for (const name of order) {
    const x = L[name];
    if (!x) continue;
    const sec = el("section", { class: `layer-diff ${x.kind}`, "data-layer": name }, el("h3", {}, name));
    if (x.kind === "files") sec.append(...filesDiff(x));
    else if (x.kind === "timeline") sec.append(traceDiff(x, d));
    else if (x.kind === "keys") sec.append(keysDiff(x));
    else if (x.kind === "effects") sec.append(x.items.length ? effectsTable(x.items, [["key", "key"], ["tool", "tool"], ["class", "class"], ["a", "at A"], ["b", "at B"], ["now", "now"]]) : el("p", { class: "muted" }, "no effects in either snapshot"));
    else if (x.kind === "names") sec.append(namesDiff(x));
    else if (x.kind === "note") sec.append(el("p", { class: "muted" }, x.text));
    else sec.append(x.equal ? el("p", { class: "muted" }, "same") : el("div", { class: "forks" }, el("pre", { class: "value" }, JSON.stringify(x.a, null, 2)), el("pre", { class: "value" }, JSON.stringify(x.b, null, 2))));
    box.append(sec);
  }
}

function filesDiff(x) {
  const out = [];
  const counts = `${x.added.length} added · ${x.modified.length} modified · ${x.deleted.length} deleted` + (x.mode.length ? ` · ${x.mode.length} mode` : "");
  out.push(el("div", { class: "tabs" },
    el("span", { class: "muted" }, counts), " ",
    el("button", { class: `mode-unified${state.diffMode === "unified" ? " on" : ""}`, onclick: () => { state.diffMode = "unified"; renderDiff(state.lastDiff); } }, "Unified"),
    el("button", { class: `mode-sbs${state.diffMode === "sbs" ? " on" : ""}`, onclick: () => { state.diffMode = "sbs"; renderDiff(state.lastDiff); } }, "Side by side")));
  const mark = (p) => (x.added.includes(p) ? "A" : x.deleted.includes(p) ? "D" : "M");
  for (const path of Object.keys(x.patches).sort()) {
    const text = x.patches[path];
    out.push(el("div", { class: "file", "data-path": path }, el("div", { class: "fname" }, `${mark(path)}  ${path}`), state.diffMode === "sbs" ? sideBySide(text) : unified(text)));
  }
  for (const p of x.mode) out.push(el("div", { class: "file" }, el("div", { class: "fname" }, `mode changed: ${p}`)));
  if (x.truncated) out.push(el("p", { class: "muted" }, "more files changed than are shown"));
  if (!out.length || (!Object.keys(x.patches).length && !x.mode.length)) out.push(el("p", { class: "muted" }, "no file changes"));
  return out;
}

function unified(text) {
  return el("pre", { class: "unified" }, text.split("\n").filter((l, i, all) => l || i < all.length - 1).map((l) => {
    const cls = l.startsWith("+++") || l.startsWith("---") ? "l-meta" : l.startsWith("@@") ? "l-hunk" : l.startsWith("+") ? "l-add" : l.startsWith("-") ? "l-del" : l.startsWith("\\") ? "l-meta" : "";
    return el("span", { class: cls }, l || " ");
  }));
}

function sideBySide(text) {
  const rows = [];
  let ln = 0, rn = 0, dels = [], adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) {
      const dl = dels[i], ad = adds[i];
      rows.push(el("tr", {},
        el("td", { class: "no" }, dl ? dl[0] : ""), el("td", { class: dl ? "del" : "" }, dl ? dl[1] : ""),
        el("td", { class: "no" }, ad ? ad[0] : ""), el("td", { class: ad ? "add" : "" }, ad ? ad[1] : "")));
    }
    dels = []; adds = [];
  };
  for (const l of text.split("\n")) {
    if (l.startsWith("+++") || l.startsWith("---") || l.startsWith("\\")) continue;
    const h = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(l);
    if (h) { flush(); ln = +h[1]; rn = +h[2]; rows.push(el("tr", {}, el("td", { class: "no" }, "⋯"), el("td", { class: "l-hunk", colspan: 3 }, l))); continue; }
    if (l.startsWith("-")) dels.push([ln++, l.slice(1)]);
    else if (l.startsWith("+")) adds.push([rn++, l.slice(1)]);
    else if (l.startsWith(" ")) { flush(); rows.push(el("tr", {}, el("td", { class: "no" }, ln++), el("td", {}, l.slice(1)), el("td", { class: "no" }, rn++), el("td", {}, l.slice(1)))); }
    else if (!h && l && !l.startsWith("@@")) rows.push(el("tr", {}, el("td", { class: "l-meta", colspan: 4 }, l)));
  }
  flush();
  return el("table", { class: "sbs" }, el("colgroup", {}, el("col", { class: "no" }), el("col"), el("col", { class: "no" }), el("col")), rows);
}

function traceDiff(x, d) {
  const box = el("div", { class: "timeline" });
  if (x.context_start > 0) box.append(el("p", { class: "muted" }, `… ${x.context_start} earlier messages in common`));
  x.context.forEach((m, i) => box.append(message(m, x.context_start + i + 1, "common")));
  const same = !x.only_a.length && !x.only_b.length;
  box.append(el("div", { class: "divergence", "data-common": x.common }, same ? `identical traces (${x.common} messages)` : `⟂ divergence after message #${x.common}`));
  if (!same) {
    box.append(el("div", { class: "forks" },
      el("div", { class: "fork-a" }, el("b", {}, `only in A ${short(d.a.id)} (${x.only_a.length})`), x.only_a.map((m, i) => message(m, x.common + i + 1, "a"))),
      el("div", { class: "fork-b" }, el("b", {}, `only in B ${short(d.b.id)} (${x.only_b.length})`), x.only_b.map((m, i) => message(m, x.common + i + 1, "b")))));
  }
  return box;
}

function keysDiff(x) {
  if (!x.rows.length) return el("p", { class: "muted" }, `no key changed (${x.unchanged} the same)`);
  return el("div", {},
    el("table", { class: "keydiff" },
      el("tr", {}, el("th", {}, "key"), el("th", {}, ""), el("th", {}, "A"), el("th", {}, "B")),
      x.rows.map((r) => el("tr", { class: r.op, "data-key": r.key },
        el("td", { class: "mono" }, r.key), el("td", {}, r.op),
        el("td", { class: "mono" }, "a" in r ? show(r.a) : ""), el("td", { class: "mono" }, "b" in r ? show(r.b) : "")))),
    el("p", { class: "muted" }, `${x.unchanged} key(s) unchanged`));
}

function namesDiff(x) {
  const any = (x.added || []).length + (x.removed || []).length + (x.changed || []).length;
  if (!any) return el("p", { class: "muted" }, "no change");
  return el("table", { class: "keydiff" }, ["added", "removed", "changed"].flatMap((op) => (x[op] || []).map((k) => el("tr", { class: op }, el("td", { class: "mono" }, k), el("td", {}, op)))));
}

// ------------------------------------------------------------------------------------------ start
document.getElementById("filters").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.filters = {
    branch: document.getElementById("f-branch").value,
    agent: document.getElementById("f-agent").value.trim(),
    thread: document.getElementById("f-thread").value.trim(),
  };
  loadPage(true);
});
document.getElementById("more").addEventListener("click", () => loadPage(false));
loadRefs().then(() => loadPage(true)).catch((e) => status(e.message, true));
