/* gpucluster dashboard: plain JS, no dependencies. Talks to /api/v1 with the pasted bearer token and polls. */
"use strict";

const POLL_MS = 2000;
const S = { token: localStorage.getItem("gpucluster.token") || "", me: null, page: "overview", inited: {},
  drawer: null, timer: null, busy: false, lastOk: 0, pendingNode: null, range: 1200, alertTab: "firing",
  schema: null, hover: {}, heat: localStorage.getItem("gpucluster.heat") || "alloc" };
const $ = (sel, root) => (root || document).querySelector(sel);
const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

function esc(v) {
  return String(v === null || v === undefined ? "" : v).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const pct = (x, d = 0) => `${(100 * (x || 0)).toFixed(d)}%`;
const num = (x, d = 0) => Number(x || 0).toLocaleString(undefined, { maximumFractionDigits: d });
function dur(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, s);
  if (s < 90) return `${s.toFixed(0)} s`;
  if (s < 5400) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function clockText(t) {
  const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), s = Math.floor(t % 60);
  return `T+${h}h ${String(m).padStart(2, "0")}m ${String(s).padStart(2, "0")}s`;
}
function heat(f) {
  // 0 -> idle slate; then deep teal, green and lime as a device fills up (red is kept for faults)
  if (f <= 0) return "#1c2530";
  const stops = [[0, [22, 78, 99]], [0.5, [14, 159, 110]], [0.8, [118, 185, 0]], [1, [183, 242, 90]]];
  for (let i = 1; i < stops.length; i++) {
    if (f <= stops[i][0]) {
      const [a, ca] = stops[i - 1], [b, cb] = stops[i], k = (f - a) / (b - a);
      return `rgb(${ca.map((c, j) => Math.round(c + k * (cb[j] - c))).join(",")})`;
    }
  }
  return "rgb(183,242,90)";
}
function bar(frac, cls = "") {
  // allocation is not an error: a full GPU is drawn in a neutral colour; warn/crit only when the caller says so
  const f = Math.max(0, Math.min(1, frac || 0));
  const c = cls || (f >= 0.999 ? "full" : "");
  return `<div class="bar ${c}"><span style="width:${(100 * f).toFixed(1)}%"></span></div>`;
}
function sparkline(values, opts = {}) {
  // a small inline SVG line of the non-null values (oldest first)
  const W = opts.width || 90, H = opts.height || 18;
  const pts = values.map((v, i) => [i, v]).filter((p) => p[1] !== null && p[1] !== undefined);
  if (pts.length < 2) return `<svg class="spark" width="${W}" height="${H}"></svg>`;
  const n = values.length - 1 || 1, max = opts.max || Math.max(1e-9, ...pts.map((p) => p[1]));
  const d = pts.map((p, k) => `${k ? "L" : "M"}${(p[0] / n * (W - 2) + 1).toFixed(1)},${(H - 1 - (Math.min(p[1], max) / max) * (H - 2)).toFixed(1)}`).join("");
  return `<svg class="spark" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none"><path d="${d}" fill="none" stroke="${opts.color || "#3fb6ff"}" stroke-width="1.5"/></svg>`;
}
function shareText(d) {
  // a device share: "whole" when the pod holds all of the GPU, else its compute and memory
  return d.whole ? "whole" : `${d.cores}%${d.memory_mib ? ` · ${num(d.memory_mib / 1024, 1)} GiB` : ""}`;
}
const statusPill = (s) => `<span class="status st-${esc(s)}">${esc(s)}</span>`;

function toast(msg, err = false) {
  const t = $("#toast");
  t.textContent = msg;
  t.className = "toast" + (err ? " err" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.add("hidden"), 4000);
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? (body.where ? `${body.where}: ${body.error}` : body.error) : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}
async function api(method, path, body) {
  const opts = { method, headers: { Authorization: `Bearer ${S.token}` } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const data = await r.json().catch(() => ({}));
  if (r.status === 401) { logout("Your token was not accepted; sign in again."); }
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

async function jobSchema() {
  // the POST /jobs body's schema (to send only the fields this server takes); fetched once per sign-in
  if (S.schema === null) {
    try {
      const r = await fetch("/openapi.json");
      const doc = await r.json();
      S.schema = ((doc.components || {}).schemas || {}).JobIn || {};
    } catch (e) { S.schema = {}; }
  }
  return S.schema;
}

/* ------------------------------------------------------------------ charts (SVG) */
const CHARTS = {};
let chartSeq = 0;
function lineChart(series, opts) {
  // a line chart with labelled axes; hovering shows every series' value at the nearest time (wireChart)
  const W = opts.width || 640, H = opts.height || 200;
  const P = { l: opts.ylabel ? 52 : 38, r: 10, t: 10, b: opts.xlabel ? 36 : 22 };
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  if (!xs.length) return `<div class="empty">No data yet</div>`;
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const ymax = opts.ymax || Math.max(1e-9, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const X = (x) => P.l + ((x - x0) / (x1 - x0)) * (W - P.l - P.r);
  const Y = (y) => H - P.b - (y / ymax) * (H - P.t - P.b);
  let g = "";
  for (let i = 0; i <= 4; i++) {
    const y = (ymax * i) / 4;
    g += `<line x1="${P.l}" x2="${W - P.r}" y1="${Y(y)}" y2="${Y(y)}" stroke="#2a3340" stroke-width="1"/>`;
    g += `<text x="${P.l - 6}" y="${Y(y) + 4}" text-anchor="end">${opts.yfmt ? opts.yfmt(y) : y.toFixed(1)}</text>`;
  }
  const xt = opts.xlabel ? H - P.b + 14 : H - 4;
  g += `<text x="${P.l}" y="${xt}">${esc(opts.xfmt ? opts.xfmt(x0) : x0)}</text>`;
  g += `<text x="${W - P.r}" y="${xt}" text-anchor="end">${esc(opts.xfmt ? opts.xfmt(x1) : x1)}</text>`;
  if (opts.xlabel) g += `<text class="axis-label" data-testid="x-axis-label" x="${(P.l + W - P.r) / 2}" y="${H - 4}" text-anchor="middle">${esc(opts.xlabel)}</text>`;
  if (opts.ylabel) g += `<text class="axis-label" data-testid="y-axis-label" transform="translate(12,${(P.t + H - P.b) / 2}) rotate(-90)" text-anchor="middle">${esc(opts.ylabel)}</text>`;
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    if (s.fill) {
      g += `<path d="${d}L${X(s.points[s.points.length - 1][0])},${Y(0)}L${X(s.points[0][0])},${Y(0)}Z" fill="${s.color}" opacity=".12"/>`;
    }
    g += `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="5 3"` : ""}/>`;
  }
  const id = `chart-${++chartSeq}`;
  CHARTS[id] = { series, opts, W, H, P, x0, x1, X, Y };
  g += `<line class="hover-line hidden" x1="0" x2="0" y1="${P.t}" y2="${H - P.b}" stroke="#e6edf3" stroke-opacity=".5"/>`;
  g += `<rect class="hover-area" data-testid="chart-hover" x="${P.l}" y="${P.t}" width="${W - P.l - P.r}" height="${H - P.t - P.b}" fill="transparent"/>`;
  const legend = series.map((s) => `<span><i style="background:${s.color}"></i>${esc(s.name)}</span>`).join("");
  return `<div class="chart" data-chart="${id}"><svg viewBox="0 0 ${W} ${H}" width="100%" preserveAspectRatio="none" style="height:${H}px">${g}</svg>
    <div class="chart-tip hidden" data-testid="chart-tip"></div></div>
    <div class="chart-legend">${legend}</div>`;
}
function wireChart(root) {
  // hover values: the nearest time's value of every series, in a tooltip beside the pointer
  for (const el of $$(".chart[data-chart]", root)) {
    const c = CHARTS[el.dataset.chart];
    if (!c) continue;
    for (const k of Object.keys(CHARTS)) if (k !== el.dataset.chart && !document.querySelector(`[data-chart="${k}"]`)) delete CHARTS[k];
    const svg = $("svg", el), tip = $(".chart-tip", el), line = $(".hover-line", el);
    const show = (clientX) => {
      const box = svg.getBoundingClientRect();
      const vx = ((clientX - box.left) / box.width) * c.W;
      const t = c.x0 + ((vx - c.P.l) / (c.W - c.P.l - c.P.r)) * (c.x1 - c.x0);
      const rows = c.series.filter((s) => s.points.length).map((s) => {
        let best = s.points[0];
        for (const p of s.points) if (Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p;
        return [s, best];
      });
      if (!rows.length) return;
      const at = rows[0][1][0];
      line.setAttribute("x1", c.X(at)); line.setAttribute("x2", c.X(at));
      line.classList.remove("hidden");
      tip.innerHTML = `<div class="muted">${esc(c.opts.xfmt ? c.opts.xfmt(at) : at)}</div>` + rows.map(([s, p]) =>
        `<div><i style="background:${s.color}"></i>${esc(s.name)} <b>${esc(c.opts.yfmt ? c.opts.yfmt(p[1], true) : p[1])}</b></div>`).join("");
      tip.classList.remove("hidden");
      const left = clientX - box.left;
      tip.style.left = `${Math.min(Math.max(0, left + 12), Math.max(0, box.width - tip.offsetWidth))}px`;
      S.hover[el.parentElement.id] = clientX;
    };
    $(".hover-area", el).addEventListener("mousemove", (e) => show(e.clientX));
    $(".hover-area", el).addEventListener("mouseleave", () => {
      tip.classList.add("hidden"); line.classList.add("hidden"); delete S.hover[el.parentElement.id];
    });
    const last = S.hover[el.parentElement.id];
    if (last !== undefined) show(last);  // the chart was redrawn under a resting pointer
  }
}

/* ------------------------------------------------------------------ pages */
const pages = {};
const RANGES = [[300, "5 min"], [900, "15 min"], [1200, "20 min"], [3600, "1 h"], [21600, "6 h"], [86400, "24 h"]];
function rangePicker(id) {
  // the time range of a chart, in runtime-clock seconds (shared by every chart)
  return `<label class="range">range <select id="${id}" data-testid="${id}">${RANGES.map(([s, l]) =>
    `<option value="${s}"${s === S.range ? " selected" : ""}>${l}</option>`).join("")}</select></label>`;
}

pages.overview = {
  title: "Overview",
  init(el) {
    el.innerHTML = `<div id="ov-kpis" class="grid kpis"></div>
      <div class="grid cols2 section">
        <div class="card"><div class="card-head"><h3>Allocation and utilisation over time</h3>${rangePicker("ov-range")}</div><div id="ov-chart" data-testid="ov-chart"></div></div>
        <div class="card"><h3>By GPU model</h3><div id="ov-models"></div><h3 style="margin-top:16px">Jobs</h3><div id="ov-jobs"></div></div>
      </div>
      <div class="card section" data-testid="ov-idle-card"><div class="card-head"><h3>Allocated but idle</h3>
        <span class="muted small" id="ov-idle-sum"></span></div><div id="ov-idle"></div></div>
      <div class="grid cols2e section">
        <div class="card"><h3>Firing alerts</h3><div id="ov-alerts"></div></div>
        <div class="card"><h3>Recent remediation</h3><div id="ov-remed"></div></div>
      </div>`;
    $("#ov-range").addEventListener("change", (e) => { S.range = parseFloat(e.target.value); this.refresh(); });
  },
  async refresh() {
    const [o, a, h] = await Promise.all([api("GET", "/api/v1/overview"), api("GET", "/api/v1/alerts"),
      api("GET", `/api/v1/history?range_s=${S.range}`)]);
    const k = (label, value, sub, b, id) => `<div class="card kpi" data-testid="${id}"><h3>${label}</h3>
      <div class="value">${value}</div><div class="sub">${sub}</div>${b || ""}</div>`;
    const known = (x) => x !== null && x !== undefined;
    const idleN = o.allocated_idle_gpus;
    $("#ov-kpis").innerHTML = [
      k("GPU compute allocated", pct(o.gpu_alloc, 1), `${num(o.devices_in_use)} of ${num(o.devices)} GPUs in use`, bar(o.gpu_alloc), "kpi-alloc"),
      k("GPU utilisation", known(o.gpu_utilisation) ? pct(o.gpu_utilisation, 1) : "–",
        known(o.gpu_utilisation) ? `SM busy, vs ${pct(o.gpu_alloc, 0)} allocated` : "no device metrics on this backend",
        bar(o.gpu_utilisation || 0, "util"), "kpi-util"),
      k("Allocated but idle", known(idleN) ? num(idleN) : "–", known(idleN) ? `GPUs with a pod, under ${num(o.idle_util_pct || 5)}% busy` : "no device metrics",
        "", "kpi-idle"),
      k("GPU memory allocated", pct(o.gpu_mem_alloc, 1), known(o.gpu_memory_used_fraction) ? `${pct(o.gpu_memory_used_fraction, 1)} in use (framebuffer)` : "HAMi vGPU memory", bar(o.gpu_mem_alloc, "blue"), "kpi-mem"),
      k("Fragmentation", pct(o.fragmentation, 1), "free compute on partly used GPUs", bar(o.fragmentation, o.fragmentation > 0.5 ? "warn" : "blue"), "kpi-frag"),
      k("Queue", num(o.queue), `${num(o.user_jobs.pending)} user · ${num(o.jobs.running)} jobs running`, "", "kpi-queue"),
      k("Nodes", num(o.nodes), `${o.nodes_cordoned} cordoned · ${o.devices_unhealthy} GPUs unhealthy`, "", "kpi-nodes"),
      k("Alerts", num(o.alerts_firing), o.alerts_firing ? "firing now" : "all clear", "", "kpi-alerts"),
    ].join("");
    $("[data-testid=kpi-idle]").classList.toggle("warn-card", (idleN || 0) > 0);
    const hist = h.points || [];
    const series = [
      { name: "GPU compute allocated", color: "#76b900", fill: true, points: hist.map((p) => [p.t, p.gpu_alloc]) },
      { name: "GPU utilisation", color: "#e8590c", points: hist.filter((p) => known(p.gpu_utilisation)).map((p) => [p.t, p.gpu_utilisation]) },
      { name: "GPU memory allocated", color: "#3fb6ff", points: hist.map((p) => [p.t, p.mem_alloc]) },
      { name: "GPU memory in use", color: "#a78bfa", dash: true, points: hist.filter((p) => known(p.gpu_memory_used_fraction)).map((p) => [p.t, p.gpu_memory_used_fraction]) },
      { name: "fragmentation", color: "#f0b429", points: hist.map((p) => [p.t, p.fragmentation]) },
    ].filter((x) => x.points.length);  // no utilisation lines where the backend has no device metrics
    const chart = $("#ov-chart");
    chart.innerHTML = lineChart(series, { ymax: 1, yfmt: (y, exact) => pct(y, exact ? 1 : 0), xfmt: clockText, height: 220,
      width: Math.max(280, Math.round(chart.clientWidth || 760)), xlabel: "runtime clock", ylabel: "% of cluster GPUs" });
    wireChart(chart);
    const idle = o.allocated_idle || [];
    $("#ov-idle-sum").textContent = known(idleN) ? `${num(idleN)} GPU(s) hold a pod but are under ${num(o.idle_util_pct || 5)}% busy${idleN > idle.length ? ` · emptiest ${idle.length} listed` : ""}` : "";
    $("#ov-idle").innerHTML = !known(idleN) ? `<div class="empty">This backend reports no device metrics.</div>` : idle.length ? `<div class="table-scroll"><table data-testid="ov-idle-table"><thead><tr><th>GPU</th><th>Util</th><th>Job</th><th>Tenant</th></tr></thead><tbody>${idle.map((x) =>
      `<tr class="clickable" data-node="${esc(x.node)}" data-testid="idle-row"><td class="mono">${esc(x.node)}/gpu${x.gpu}</td><td>${num(x.util_pct, 1)}%</td><td>${esc(x.job_name || x.pod)}${x.job ? ` <span class="muted mono">${esc(x.job)}</span>` : ""}</td><td>${esc(x.tenant || "")}</td></tr>`).join("")}</tbody></table></div>`
      : `<div class="empty">Every allocated GPU is busy.</div>`;
    $$("tr[data-node]", $("#ov-idle")).forEach((r) => r.addEventListener("click", () => {
      S.pendingNode = r.dataset.node;
      location.hash = "#racks";
    }));
    $("#ov-models").innerHTML = Object.entries(o.models).map(([m, v]) => `<div style="margin:8px 0">
      <div style="display:flex;justify-content:space-between"><span>${esc(m)}</span><span class="muted">${num(v.devices)} GPUs · ${pct(v.alloc)}</span></div>
      ${bar(v.alloc)}</div>`).join("");
    const js = o.user_jobs;
    $("#ov-jobs").innerHTML = `<div class="kv" style="grid-template-columns:1fr auto">
      ${["pending", "running", "succeeded", "cancelled", "failed"].map((s) => `<div>${statusPill(s)}</div><div>${num(js[s])}</div>`).join("")}
      </div><div class="muted small">your jobs · plus ${num(o.jobs.running - js.running)} background jobs running</div>`;
    const firing = a.alerts.filter((x) => x.state === "firing" && !x.silenced);
    $("#ov-alerts").innerHTML = firing.length ? alertTable(firing.slice(0, 6)) : `<div class="empty">No alerts firing</div>`;
    $("#ov-remed").innerHTML = a.remediations.length ? remedList(a.remediations.slice(0, 6), []) : `<div class="empty">Nothing to remediate yet</div>`;
    return o;
  },
};

pages.racks = {
  title: "Racks & nodes",
  init(el) {
    el.innerHTML = `<div class="toolbar">
        <div><label for="rk-model">GPU model</label><select id="rk-model"><option value="">all</option></select></div>
        <div><label for="rk-find">Find node</label><input id="rk-find" placeholder="train-0012"></div>
        <div><label>Colour by</label><div class="seg" role="radiogroup" data-testid="heat-switch">${HEAT_METRICS.map(([k, l]) =>
          `<button type="button" role="radio" class="seg-btn${k === S.heat ? " active" : ""}" data-metric="${k}" aria-checked="${k === S.heat}">${l}</button>`).join("")}</div></div>
        <div class="legend" data-testid="heat-legend"><span id="rk-lo"></span><span class="ramp" id="rk-ramp"></span><span id="rk-hi"></span>
          <span style="margin-left:12px;outline:2px solid var(--crit);width:12px;height:10px;display:inline-block"></span><span>unhealthy GPU</span></div>
      </div>
      <div id="rk-body"></div>`;
    $$("[data-testid=heat-switch] .seg-btn", el).forEach((b) => b.addEventListener("click", () => {
      S.heat = b.dataset.metric;
      localStorage.setItem("gpucluster.heat", S.heat);
      $$("[data-testid=heat-switch] .seg-btn", el).forEach((x) => {
        x.classList.toggle("active", x === b);
        x.setAttribute("aria-checked", String(x === b));
      });
      this.render();
    }));
    $("#rk-model").addEventListener("change", () => this.render());
    $("#rk-find").addEventListener("input", () => this.render());
  },
  async refresh() {
    this.data = await api("GET", "/api/v1/nodes");
    const sel = $("#rk-model");
    const models = [...new Set(this.data.nodes.map((n) => n.model))].sort();
    if (sel.options.length !== models.length + 1) {
      sel.innerHTML = `<option value="">all</option>` + models.map((m) => `<option>${esc(m)}</option>`).join("");
    }
    this.render();
  },
  render() {
    if (!this.data) return;
    const model = $("#rk-model").value, find = $("#rk-find").value.trim();
    const metric = HEAT_METRICS.find(([k]) => k === S.heat) || HEAT_METRICS[0];
    $("#rk-lo").textContent = metric[2];
    $("#rk-hi").textContent = metric[3];
    $("#rk-ramp").className = `ramp${S.heat === "temp" ? " warm" : ""}`;
    $("#rk-body").dataset.metric = S.heat;
    const leaves = {};
    for (const n of this.data.nodes) {
      if (model && n.model !== model) continue;
      if (find && !n.name.includes(find)) continue;
      ((leaves[n.leaf] ||= {})[n.rack] ||= []).push(n);
    }
    const noMetrics = S.heat !== "alloc" && !this.data.nodes.some((n) => (n.dev_util || []).length);
    let html = noMetrics ? `<div class="muted small" data-testid="heat-nodata">This backend reports no device metrics: cells show no data.</div>` : "";
    for (const leaf of Object.keys(leaves).sort()) {
      const racks = leaves[leaf];
      const all = Object.values(racks).flat();
      const used = all.reduce((s, n) => s + n.dev_core_used.reduce((a, b) => a + b, 0), 0);
      const cap = all.reduce((s, n) => s + 1000 * n.gpus, 0) || 1;
      const utils = all.flatMap((n) => (n.dev_util || []).filter((u) => u !== null));
      const util = utils.length ? ` · ${pct(utils.reduce((a, b) => a + b, 0) / utils.length / 100)} utilised` : "";
      // one row of racks per leaf: as many columns as the leaf has racks (never a lone rack on a second row)
      html += `<div class="leaf-title"><b>${esc(leaf)}</b><span>${Object.keys(racks).length} racks · ${all.length} nodes · ${pct(used / cap)} allocated${util}</span></div>
        <div class="racks" data-testid="leaf-${esc(leaf)}" style="grid-template-columns:repeat(${Object.keys(racks).length},minmax(128px,1fr))">`;
      for (const rack of Object.keys(racks).sort()) {
        const nodes = racks[rack];
        html += `<div class="rack"><div class="rack-head"><span>${esc(rack)}</span><span>${nodes.length}</span></div>`;
        for (const n of nodes) {
          const cells = n.dev_core_used.map((c, i) => {
            const u = (n.dev_util || [])[i], fb = (n.dev_fb_pct || [])[i], tc = (n.dev_temp || [])[i];
            const v = heatValue(S.heat, c, n.dev_mem_pct[i], u, fb, tc);
            const tip = `GPU ${i}: ${(c / 10).toFixed(0)}% compute, ${n.dev_mem_pct[i]}% memory allocated` +
              (u === undefined || u === null ? "" : ` · ${num(u)}% utilised, ${num(fb)}% memory in use, ${num(tc)} °C`);
            const colour = v === null ? "" : `background:${S.heat === "temp" ? warm(v) : heat(v)}`;
            return `<div class="cell${n.dev_healthy[i] ? "" : " bad"}${v === null ? " nodata" : ""}" style="${colour}" data-v="${v === null ? "" : v.toFixed(3)}" title="${tip}"></div>`;
          }).join("");
          const cls = (n.schedulable ? "" : " cordoned") + (S.drawer === n.name ? " selected" : "");
          html += `<div class="node-row${cls}" data-node="${esc(n.name)}" data-testid="node-${esc(n.name)}" title="${esc(n.name)} · ${esc(n.model)}"><span class="nname">${esc(n.name)}</span><div class="cells">${cells}</div></div>`;
        }
        html += `</div>`;
      }
      html += `</div>`;
    }
    $("#rk-body").innerHTML = html || `<div class="empty">No nodes match</div>`;
    $$(".node-row", $("#rk-body")).forEach((r) => r.addEventListener("click", () => openNode(r.dataset.node)));
  },
};
const HEAT_METRICS = [["alloc", "Allocation", "idle", "full"], ["util", "Utilisation", "0%", "100% busy"],
  ["mem", "Memory", "empty", "full (in use)"], ["temp", "Temperature", "30 °C", "90 °C"]];
function heatValue(metric, core, memPct, util, fbPct, temp) {
  // 0..1 for a cell's colour; null when the backend has no such figure for the device
  const known = (x) => x !== null && x !== undefined;
  if (metric === "util") return known(util) ? Math.min(1, util / 100) : null;
  if (metric === "mem") return known(fbPct) ? Math.min(1, fbPct / 100) : null;
  if (metric === "temp") return known(temp) ? Math.max(0, Math.min(1, (temp - 30) / 60)) : null;
  return Math.max(core / 1000, (memPct || 0) / 100);
}
function warm(f) {
  // temperature: cool blue -> amber -> red
  const stops = [[0, [28, 60, 90]], [0.5, [240, 180, 41]], [1, [255, 92, 92]]];
  for (let i = 1; i < stops.length; i++) {
    if (f <= stops[i][0]) {
      const [a, ca] = stops[i - 1], [b, cb] = stops[i], k = (f - a) / (b - a);
      return `rgb(${ca.map((c, j) => Math.round(c + k * (cb[j] - c))).join(",")})`;
    }
  }
  return "rgb(255,92,92)";
}

async function openNode(name) {
  S.drawer = name;
  S.drawerKind = "node";
  $("#drawer").classList.remove("hidden");
  $("#drawer-title").textContent = name;
  await refreshDrawer();
}
async function refreshDrawer() {
  if (!S.drawer) return;
  if (S.drawerKind === "job") return refreshJobDrawer();
  const name = S.drawer;
  const [n, u] = await Promise.all([api("GET", `/api/v1/nodes/${encodeURIComponent(name)}`),
    api("GET", `/api/v1/nodes/${encodeURIComponent(name)}/usage`).catch(() => ({ available: false, devices: [] }))]);
  if (S.drawer !== name || S.drawerKind !== "node") return;  // closed or replaced meanwhile
  const use = {};
  for (const d of u.devices || []) use[d.index] = d;
  const state = n.schedulable ? "schedulable" : "cordoned";
  const col = (d, k) => (d && d.history ? d.history.points.map((p) => p[k]) : []);
  const usage = (d) => {
    if (!u.available || !d) return `<div class="muted small">no device metrics on this backend</div>`;
    if (!d.reporting) return `<div class="usage bad-text">not reporting (fell off the bus?)</div>`;
    return `<div class="usage" data-testid="usage">
      <div class="row"><span>util</span>${sparkline(col(d, 0), { max: 100, color: "#76b900" })}<span data-testid="util">${num(d.util_pct)}%</span></div>
      <div class="row"><span>memory</span>${sparkline(col(d, 1), { max: d.mem_total_mib || undefined })}<span>${num((d.mem_used_mib || 0) / 1024, 1)} GiB</span></div>
      <div class="row"><span>temp</span>${sparkline(col(d, 2), { max: 100, color: "#f0b429" })}<span>${num(d.temp_c)} °C</span></div>
      <div class="row"><span>power</span>${sparkline(col(d, 3), { color: "#e8590c" })}<span>${num(d.power_w)} W</span></div>
      <div class="row"><span>XID</span><span class="${d.xid ? "bad-text" : "muted"}" data-testid="xid">${d.xid ? `XID ${d.xid}` : "none"}</span><span></span></div>
    </div>`;
  };
  const devs = n.devices.map((d) => {
    const du = use[d.index];
    const full = d.core_used >= d.core_cap || d.memory_used_mib >= d.memory_mib;
    const head = d.healthy ? (d.nvlink_domain >= 0 ? `NVLink ${d.nvlink_domain}` : "PCIe") : `unhealthy${du && du.xid ? ` · XID ${du.xid}` : ""}`;
    return `<div class="device${d.healthy ? "" : " bad"}" data-testid="device-${d.index}">
    <div class="dhead"><span>GPU ${d.index}${full ? ` <span class="tag full-tag">full</span>` : ""}</span><span class="muted">${head}</span></div>
    <div class="subhead muted">allocated</div>
    <div class="row"><span>compute</span>${bar(d.core_used / d.core_cap)}<span>${(d.core_used / 10).toFixed(0)}%</span></div>
    <div class="row"><span>memory</span>${bar(d.memory_used_mib / d.memory_mib, d.memory_used_mib >= d.memory_mib ? "" : "blue")}<span>${num(d.memory_used_mib / 1024, 1)} GiB</span></div>
    <div class="row"><span>tasks</span><span>${d.tasks} / ${d.max_tasks}</span><span></span></div>
    <div class="subhead muted">in use (collector)</div>${usage(du)}
    ${d.pods.length ? `<ul>${d.pods.map((p) => `<li><span class="mono">${esc(p.job_name || p.pod)}</span> · ${esc(p.tenant)} · <span data-testid="share">${esc(shareText(p))}</span></li>`).join("")}</ul>` : `<div class="muted" style="margin-top:6px">idle</div>`}
  </div>`;
  }).join("");
  const admin = S.me && S.me.role === "admin";
  const ask = S.confirm && S.confirm.node === name ? S.confirm.action : null;
  const what = { cordon: `No new pods land on ${name}; the ${n.pods} running stay where they are.`,
    uncordon: `${name} takes new pods again.`,
    drain: `Cordon ${name} and evict its ${n.pods} pod(s): their jobs go back to the queue and restart elsewhere (a gang restarts whole).` };
  const actions = admin ? `<div class="node-actions" data-testid="node-actions">
      ${n.schedulable ? `<button data-node-action="cordon" data-testid="node-cordon">Cordon</button>` : `<button data-node-action="uncordon" data-testid="node-uncordon">Uncordon</button>`}
      <button class="danger" data-node-action="drain" data-testid="node-drain">Drain</button></div>
      ${ask ? `<div class="confirm" data-testid="node-confirm"><b>${esc(ask[0].toUpperCase() + ask.slice(1))} ${esc(name)}?</b> ${esc(what[ask])}
        <div class="buttons"><button class="${ask === "drain" ? "danger" : "primary"}" data-node-confirm="${ask}" data-testid="node-confirm-yes">${esc(ask[0].toUpperCase() + ask.slice(1))} node</button>
        <button class="ghost" data-node-confirm="" data-testid="node-confirm-no">Keep as is</button></div></div>` : ""}` : "";
  $("#drawer-body").innerHTML = `${actions}<div class="kv">
      <div>Model</div><div>${esc(n.model)} × ${n.gpus}</div>
      <div>Rack / leaf</div><div>${esc(n.rack)} · ${esc(n.leaf)} · ${esc(n.spine)}</div>
      <div>State</div><div data-testid="node-state">${state}</div>
      <div>CPU</div><div data-testid="node-cpu">${num(n.cpu_used_milli / 1000)} of ${num(n.cpu_milli / 1000)} cores requested by its pods</div>
      <div>Memory</div><div data-testid="node-memory">${num(n.memory_used_mib / 1024)} of ${num(n.memory_mib / 1024)} GiB requested by its pods</div>
      <div>Pods</div><div>${n.pods}</div></div>
    <div class="devices" data-testid="node-devices">${devs}</div>`;
}
async function nodeAction(e) {
  // the node drawer's cordon / uncordon / drain: a first click asks, the second (confirm) acts
  const b = e.target.closest("button");
  if (!b || S.drawerKind !== "node" || !S.drawer) return;
  const name = S.drawer;
  if (b.dataset.nodeAction) { S.confirm = { node: name, action: b.dataset.nodeAction }; await refreshDrawer(); return; }
  if (b.dataset.nodeConfirm === undefined) return;
  const action = b.dataset.nodeConfirm;
  S.confirm = null;
  if (action) {
    b.disabled = true;
    try {
      const r = await api("POST", `/api/v1/nodes/${encodeURIComponent(name)}/${action}`);
      toast(r && r.message ? r.message : `${name}: ${action} done`);
    } catch (err) { toast(err.message, true); }
  }
  await refreshDrawer();
  if (S.page === "racks" && pages.racks.refresh) pages.racks.refresh().catch(() => {});
}
function closeDrawer() {
  S.confirm = null;
  S.drawer = null;
  S.drawerKind = null;
  $("#drawer").classList.add("hidden");
  $$(".node-row.selected").forEach((r) => r.classList.remove("selected"));
}

pages.topology = {
  title: "Topology",
  async refresh(el) {
    const t = await api("GET", "/api/v1/topology");
    const leaves = t.spines.flatMap((s) => s.leaves.map((l) => ({ ...l, spine: s.name })));
    const colW = 150, W = Math.max(900, leaves.length * colW + 40), rackH = 24;
    const maxRacks = Math.max(...leaves.map((l) => l.racks.length), 1);
    const H = 170 + maxRacks * (rackH + 6) + 20;
    let g = "";
    const spineY = 30, leafY = 110, rackY = 170;
    const spines = t.spines;
    spines.forEach((s, si) => {
      const sx = (W / (spines.length + 1)) * (si + 1);
      g += `<rect x="${sx - 110}" y="${spineY - 18}" width="220" height="36" rx="8" fill="#1c232d" stroke="#3fb6ff"/>
        <text x="${sx}" y="${spineY + 4}" text-anchor="middle" style="fill:#e6edf3;font-weight:600">${esc(s.name)} (spine)</text>`;
    });
    leaves.forEach((l, i) => {
      const x = 20 + i * colW + colW / 2;
      const si = spines.findIndex((s) => s.name === l.spine);
      const sx = (W / (spines.length + 1)) * (si + 1);
      g += `<line x1="${sx}" y1="${spineY + 18}" x2="${x}" y2="${leafY - 16}" stroke="#3fb6ff" stroke-opacity=".5"/>`;
      const nodes = l.racks.flatMap((r) => r.nodes);
      const alloc = nodes.reduce((s, n) => s + n.alloc, 0) / Math.max(nodes.length, 1);
      g += `<rect x="${x - 62}" y="${leafY - 16}" width="124" height="32" rx="7" fill="#1c232d" stroke="#76b900"/>
        <text x="${x}" y="${leafY + 4}" text-anchor="middle" style="fill:#e6edf3">${esc(l.name)}</text>
        <text x="${x}" y="${leafY + 30}" text-anchor="middle">${nodes.length} nodes · ${pct(alloc)}</text>`;
      if (l.racks.length) g += `<line x1="${x}" y1="${leafY + 36}" x2="${x}" y2="${rackY + (l.racks.length - 1) * (rackH + 6)}" stroke="#2a3340" stroke-width="2"/>`;
      l.racks.forEach((r, j) => {
        const y = rackY + j * (rackH + 6);
        const ra = r.nodes.reduce((s, n) => s + n.alloc, 0) / Math.max(r.nodes.length, 1);
        const bad = r.nodes.some((n) => !n.schedulable);
        g += `<rect x="${x - 62}" y="${y}" width="124" height="${rackH}" rx="5" fill="${heat(ra)}" stroke="${bad ? "#ff5c5c" : "#2a3340"}" stroke-width="${bad ? 2 : 1}"><title>${esc(r.name)}: ${r.nodes.map((n) => n.name).join(", ")} · ${pct(ra)} allocated</title></rect>
          <text x="${x}" y="${y + 16}" text-anchor="middle" style="fill:${ra > 0.6 ? "#0b1400" : "#e6edf3"}">${esc(r.name)} · ${r.nodes.length}×${esc((r.nodes[0] || {}).model ? r.nodes[0].model.split("-")[0] : "")}</text>`;
      });
    });
    const models = {};
    for (const l of leaves) for (const r of l.racks) for (const n of r.nodes) models[n.model] ||= n;
    const nv = Object.values(models).map((n) => {
      let cells = "", idx = 0;
      const groups = n.nvlink_domains.length ? n.nvlink_domains : [];
      const boxes = groups.map((size) => {
        let c = "";
        for (let k = 0; k < size; k++, idx++) c += `<rect x="${12 + idx * 34}" y="30" width="28" height="28" rx="4" fill="#76b900" fill-opacity=".8"/><text x="${26 + idx * 34}" y="48" text-anchor="middle" style="fill:#0b1400">${idx}</text>`;
        return { c, start: idx - size, size };
      });
      for (const b of boxes) cells += `<rect x="${6 + b.start * 34}" y="22" width="${b.size * 34 + 4}" height="44" rx="7" fill="none" stroke="#3fb6ff" stroke-dasharray="4 3"/>${b.c}`;
      for (let k = 0; k < n.pcie_only; k++, idx++) cells += `<rect x="${12 + idx * 34}" y="30" width="28" height="28" rx="4" fill="#3fb6ff" fill-opacity=".55"/><text x="${26 + idx * 34}" y="48" text-anchor="middle" style="fill:#fff">${idx}</text>`;
      const label = n.nvlink_domains.length ? `${n.nvlink_domains.length} NVLink domain(s) of ${n.nvlink_domains.join(", ")} GPUs (NVSwitch)` : "PCIe only, no NVLink";
      return `<div style="margin-bottom:12px"><div><b>${esc(n.model)}</b> <span class="muted">· ${label}</span></div>
        <svg viewBox="0 0 ${Math.max(300, idx * 34 + 24)} 74" width="${Math.max(300, idx * 34 + 24)}" height="74">${cells}</svg></div>`;
    }).join("");
    el.innerHTML = `<div class="card"><h3>Compute fabric · ${esc(t.fabric.type)} · ${t.fabric.link_gbps} Gb/s per port · oversubscription ${t.fabric.oversubscription}:1</h3>
        <div style="overflow-x:auto"><svg viewBox="0 0 ${W} ${H}" width="100%" style="min-width:900px" data-testid="topology-svg">${g}</svg></div>
        <div class="legend" style="margin-top:8px"><span>rack colour = GPU allocation</span><span class="ramp"></span><span>red outline = a cordoned node</span></div></div>
      <div class="card section"><h3>NVLink domains inside a node · ${num(t.fabric.nvlink_gbps_per_gpu / 8)} GB/s per GPU</h3>${nv}</div>`;
  },
};

pages.jobs = {
  title: "Jobs",
  init(el) {
    const admin = S.me && S.me.role === "admin";
    el.innerHTML = `<div class="card"><h3>Submit a job</h3>
      <form id="job-form" class="form-grid" data-testid="job-form">
        <div><label for="jf-name">Name</label><input id="jf-name" required pattern="[a-z0-9]([a-z0-9\\-]*[a-z0-9])?" value="train-${Math.random().toString(36).slice(2, 6)}"></div>
        ${admin ? `<div><label for="jf-tenant">Tenant</label><input id="jf-tenant" value="default"></div>` : ""}
        <div><label for="jf-replicas">Replicas (gang)</label><input id="jf-replicas" type="number" min="1" max="256" value="1"></div>
        <div><label for="jf-type">GPU type</label><select id="jf-type" data-testid="jf-type"><option value="">any</option></select></div>
        <div><label for="jf-priority">Priority</label><input id="jf-priority" type="number" min="0" max="1000" value="0"></div>
        <div><label for="jf-gpus">GPUs per replica</label><input id="jf-gpus" type="number" min="0" max="16" value="1"></div>
        <div><label for="jf-cores">Compute % per GPU</label><input id="jf-cores" type="number" min="1" max="100" value="100"></div>
        <div><label for="jf-mem">GPU memory MiB (opt.)</label><input id="jf-mem" type="number" min="1" placeholder="whole GPU"></div>
        <div><label for="jf-duration">Duration s (opt.)</label><input id="jf-duration" type="number" min="1" step="any" value="120"></div>
        <div><label for="jf-kind">Kind</label><select id="jf-kind" data-testid="jf-kind"><option value="train">train</option><option value="infer">infer</option></select></div>
        <div><label for="jf-ref-gpu">Reference GPU (opt.)</label><input id="jf-ref-gpu" data-testid="jf-ref-gpu" maxlength="64" placeholder="V100, A100, H100 ..." title="GPU model the duration is measured on: elsewhere the job runs its work at the speed model's speed"></div>
        <div><label for="jf-preemptible"><input id="jf-preemptible" type="checkbox" checked> Preemptible</label></div>
        <div><button class="primary" type="submit" id="jf-submit">Submit</button></div>
        <details class="span-all" id="jf-container" data-testid="jf-container"><summary>Container (what runs on Kubernetes; the simulated cluster ignores it)</summary>
          <div class="form-grid">
            <div><label for="jf-image">Image</label><input id="jf-image" maxlength="512" placeholder="registry/path:tag"></div>
            <div><label for="jf-command">Command</label><input id="jf-command" placeholder='python -m train or ["sh", "-c", "..."]'></div>
            <div><label for="jf-args">Args</label><input id="jf-args" placeholder="--epochs 3"></div>
            <div><label for="jf-workdir">Working directory</label><input id="jf-workdir" placeholder="/workspace"></div>
            <div><label for="jf-sa">Service account</label><input id="jf-sa" placeholder="default"></div>
            <div class="span-2"><label for="jf-env">Environment, one a line</label><textarea id="jf-env" rows="3" placeholder="MODE=fast&#10;TOKEN=secret:hf-token/token&#10;LR=configmap:hparams/lr&#10;configmap:common (every key)"></textarea></div>
            <div class="span-2"><label for="jf-volumes">Volumes, one a line</label><textarea id="jf-volumes" rows="3" placeholder="/data=pvc:datasets:ro&#10;/etc/cfg=configmap:train-cfg&#10;/secrets=secret:ssh-key"></textarea></div>
            <div class="span-2"><label for="jf-tolerations">Tolerations, one a line</label><textarea id="jf-tolerations" rows="2" placeholder="nvidia.com/gpu:Exists:NoSchedule&#10;dedicated=ml:NoExecute"></textarea></div>
          </div></details>
      </form><div id="jf-error" class="error-text"></div></div>
      <div class="card section">
        <div class="toolbar">
          <div><label for="jl-status">Status</label><select id="jl-status"><option value="">any</option>
            ${["pending", "running", "succeeded", "cancelled", "failed"].map((s) => `<option>${s}</option>`).join("")}</select></div>
          ${admin ? `<div><label for="jl-tenant">Tenant</label><input id="jl-tenant" placeholder="all"></div>` : ""}
          <div><label for="jl-q">Search</label><input id="jl-q" placeholder="name or id"></div>
          ${admin ? `<label class="check"><input type="checkbox" id="jl-synth"> background workload</label>` : ""}
        </div>
        <div id="jl-table"></div></div>`;
    $("#job-form").addEventListener("submit", (e) => { e.preventDefault(); this.submit(); });
    this.gpuTypes();
    for (const id of ["#jl-status", "#jl-tenant", "#jl-q", "#jl-synth"]) {
      const x = $(id);
      if (x) x.addEventListener(x.tagName === "INPUT" && x.type !== "checkbox" ? "input" : "change", () => this.refresh());
    }
  },
  async gpuTypes() {
    // GPU types the cluster has; the field is sent only when this server's API takes it (its OpenAPI schema says)
    const schema = await jobSchema();
    const prop = schema && schema.properties && schema.properties.gpu_type;
    const sel = $("#jf-type");
    let types = [];
    if (prop && Array.isArray(prop.enum)) types = prop.enum;
    else {
      const o = await api("GET", "/api/v1/overview").catch(() => ({ models: {} }));
      types = Object.keys(o.models || {}).sort();
    }
    sel.innerHTML = `<option value="">any</option>` + types.map((m) => `<option>${esc(m)}</option>`).join("");
    sel.disabled = !prop;
    sel.title = prop ? "Run on this GPU model only" : "This server does not take a GPU type yet: the job may land on any model";
  },
  async submit() {
    const v = (id) => ($(id) ? $(id).value.trim() : "");
    const res = { "nvidia.com/gpu": parseInt(v("#jf-gpus") || "0", 10) };
    if (res["nvidia.com/gpu"] > 0) {
      res["nvidia.com/gpucores"] = parseInt(v("#jf-cores") || "100", 10);
      if (v("#jf-mem")) res["nvidia.com/gpumem"] = parseInt(v("#jf-mem"), 10);
    } else {
      delete res["nvidia.com/gpu"];
      res.cpu = "1";
    }
    const body = { name: v("#jf-name"), replicas: parseInt(v("#jf-replicas") || "1", 10), resources: res };
    if (v("#jf-tenant")) body.tenant = v("#jf-tenant");
    if (v("#jf-duration")) body.duration_s = parseFloat(v("#jf-duration"));
    if (v("#jf-priority") && parseInt(v("#jf-priority"), 10) > 0) body.priority = parseInt(v("#jf-priority"), 10);
    if (v("#jf-type") && !$("#jf-type").disabled) body.gpu_type = v("#jf-type");
    const schema = await jobSchema();  // kind and preemptible only where this server's API takes them
    const props = (schema && schema.properties) || {};
    if (props.kind && v("#jf-kind") && v("#jf-kind") !== "train") body.kind = v("#jf-kind");
    if (props.preemptible && $("#jf-preemptible") && !$("#jf-preemptible").checked) body.preemptible = false;
    if (props.ref_gpu && v("#jf-ref-gpu")) body.ref_gpu = v("#jf-ref-gpu");
    $("#jf-error").textContent = "";
    try {
      if (props.image) Object.assign(body, containerFields(v));
    } catch (e) {
      $("#jf-error").textContent = e.message;
      return;
    }
    try {
      const job = await api("POST", "/api/v1/jobs", body);
      toast(`Submitted ${job.name} (${job.id})`);
      $("#jf-name").value = `train-${Math.random().toString(36).slice(2, 6)}`;
      await this.refresh();
    } catch (e) {
      $("#jf-error").textContent = e.message;
    }
  },
  async refresh() {
    const p = new URLSearchParams({ limit: "200" });
    const st = $("#jl-status").value, q = $("#jl-q").value.trim(), t = $("#jl-tenant") ? $("#jl-tenant").value.trim() : "";
    if (st) p.set("status", st);
    if (q) p.set("q", q);
    if (t) p.set("tenant", t);
    if ($("#jl-synth") && $("#jl-synth").checked) p.set("include_synthetic", "true");
    const d = await api("GET", `/api/v1/jobs?${p}`);
    const now = d.t;
    const rows = d.jobs.map((j) => {
      const age = j.status === "running" && j.started_t !== null ? `ran ${dur(now - j.started_t)}` :
        j.finished_t !== null && j.started_t !== null ? `took ${dur(j.finished_t - j.started_t)}` : j.status === "pending" ? `waiting ${dur(now - j.submitted_t)}` : "";
      const nodes = [...new Set(j.placements.map((x) => x.node))];
      return `<tr class="clickable" data-job="${esc(j.id)}" data-testid="job-row-${esc(j.name)}">
        <td><b>${esc(j.name)}</b><div class="muted mono">${esc(j.id)}</div></td><td>${esc(j.tenant)}</td>
        <td>${j.replicas}</td><td>${num(j.gpus, 2)}</td>
        <td class="job-status" data-status="${esc(j.status)}">${statusPill(j.status)}</td>
        <td class="muted">${age}</td><td class="mono">${esc(nodes.slice(0, 2).join(", "))}${nodes.length > 2 ? " …" : ""}</td>
        <td class="muted small" style="max-width:340px">${esc(j.message)}</td></tr>`;
    }).join("");
    $("#jl-table").innerHTML = d.jobs.length ? `<table><thead><tr><th>Job</th><th>Tenant</th><th>Replicas</th><th>GPUs</th><th>Status</th><th>Time</th><th>Nodes</th><th>Message</th></tr></thead><tbody>${rows}</tbody></table>
      <div class="muted small" style="margin-top:8px">${d.total} job(s)${d.total > d.jobs.length ? `, newest ${d.jobs.length} shown` : ""}</div>` : `<div class="empty">No jobs yet: submit one above.</div>`;
    $$("tr[data-job]", $("#jl-table")).forEach((r) => r.addEventListener("click", () => openJob(r.dataset.job)));
  },
};

pages.history = {
  // every stored job, the ones the retention policy pruned from memory included (GET /api/v1/jobs?include=pruned):
  // newest submitted first, a page at a time; "Older" follows the page's next cursor (keyset: a page never shifts
  // as jobs arrive), "Newer" goes back through the cursors seen. A tenant's token lists its own jobs only.
  title: "Job history",
  init(el) {
    const admin = S.me && S.me.role === "admin";
    this.cursors = [];  // the before of each page shown after the first, in order
    this.next = null;
    this.seq = 0;
    el.innerHTML = `<div class="card">
        <div class="toolbar">
          <div><label for="hs-status">Status</label><select id="hs-status" data-testid="hs-status"><option value="">any</option>
            ${["pending", "running", "succeeded", "cancelled", "failed"].map((s) => `<option>${s}</option>`).join("")}</select></div>
          ${admin ? `<div><label for="hs-tenant">Tenant</label><input id="hs-tenant" data-testid="hs-tenant" placeholder="all"></div>` : ""}
          <div><label for="hs-q">Search</label><input id="hs-q" data-testid="hs-q" placeholder="name or id"></div>
          <div><label for="hs-limit">Per page</label><select id="hs-limit" data-testid="hs-limit">${[10, 25, 50, 100, 200].map((n) =>
            `<option${n === 50 ? " selected" : ""}>${n}</option>`).join("")}</select></div>
        </div>
        <div id="hs-table" data-testid="hs-table"></div>
        <div class="toolbar" style="margin-top:8px">
          <button type="button" class="ghost" id="hs-newest" data-testid="hs-newest">Newest</button>
          <button type="button" class="ghost" id="hs-newer" data-testid="hs-newer">‹ Newer</button>
          <button type="button" class="ghost" id="hs-older" data-testid="hs-older">Older ›</button>
          <span id="hs-info" class="muted small" data-testid="hs-info"></span>
        </div></div>`;
    const restart = () => { this.cursors = []; this.refresh(); };
    for (const id of ["#hs-status", "#hs-tenant", "#hs-q", "#hs-limit"]) {
      const x = $(id);
      if (x) x.addEventListener(x.tagName === "INPUT" ? "input" : "change", restart);
    }
    $("#hs-newest").addEventListener("click", restart);
    $("#hs-newer").addEventListener("click", () => { this.cursors.pop(); this.refresh(); });
    $("#hs-older").addEventListener("click", () => {
      if (!this.next) return;
      this.cursors.push(this.next);
      this.refresh();
    });
  },
  async refresh() {
    const seq = ++this.seq;  // a newer request (a click, a filter) wins over one still in flight
    // the shown page's cursor belongs to the filters it was read with: until this page arrives there is no
    // "Older" (clicked meanwhile it would ask the new filters for the page after the old page's last job)
    this.next = null;
    $("#hs-older").disabled = true;
    const p = new URLSearchParams({ include: "pruned", limit: $("#hs-limit").value });
    const st = $("#hs-status").value, q = $("#hs-q").value.trim(), t = $("#hs-tenant") ? $("#hs-tenant").value.trim() : "";
    if (st) p.set("status", st);
    if (q) p.set("q", q);
    if (t) p.set("tenant", t);
    const before = this.cursors.length ? this.cursors[this.cursors.length - 1] : null;
    if (before) p.set("before", before);
    let d;
    try {
      d = await api("GET", `/api/v1/jobs?${p}`);
    } catch (e) {
      if (seq === this.seq) $("#hs-info").textContent = e.message;
      throw e;
    }
    if (seq !== this.seq) return;
    this.next = d.next;
    const rows = d.jobs.map((j) => {
      const took = j.finished_t !== null && j.started_t !== null ? dur(j.finished_t - j.started_t) : "–";
      return `<tr class="clickable" data-job="${esc(j.id)}" data-testid="history-row-${esc(j.name)}" data-pruned="${j.pruned ? "true" : "false"}">
        <td><b>${esc(j.name)}</b><div class="muted mono">${esc(j.id)}</div></td><td>${esc(j.tenant)}</td>
        <td>${j.replicas}</td><td>${num(j.gpus, 2)}</td>
        <td class="job-status" data-status="${esc(j.status)}">${statusPill(j.status)}${j.pruned ? ` <span class="tag" title="finished and left memory under the retention policy: read back from the store">pruned</span>` : ""}</td>
        <td class="muted">${j.submitted_at ? esc(new Date(j.submitted_at * 1000).toLocaleString()) : "–"}</td>
        <td class="muted">${took}</td>
        <td class="muted small" style="max-width:340px">${esc(j.message)}</td></tr>`;
    }).join("");
    const page = this.cursors.length + 1;
    $("#hs-table").innerHTML = d.jobs.length ? `<table><thead><tr><th>Job</th><th>Tenant</th><th>Replicas</th><th>GPUs</th><th>Status</th><th>Submitted</th><th>Ran</th><th>Message</th></tr></thead><tbody>${rows}</tbody></table>`
      : `<div class="empty">No stored job matches.</div>`;
    $("#hs-info").textContent = `${num(d.total)} job(s) · page ${page}${d.next ? "" : " (the last)"}`;
    $("#hs-older").disabled = !d.next;
    $("#hs-newer").disabled = page === 1;
    $("#hs-newest").disabled = page === 1;
    $$("tr[data-job]", $("#hs-table")).forEach((r) => r.addEventListener("click", () => openJob(r.dataset.job)));
  },
};

// ---- the submit form's container fields -> the job body's image, command, env, volumes ... (only those given)
function words(text, what) {
  // a JSON list, or words split on white space
  if (!text) return [];
  if (text.startsWith("[")) {
    let list;
    try { list = JSON.parse(text); } catch (e) { throw new Error(`${what}: not a JSON list of strings`); }
    if (!Array.isArray(list) || list.some((x) => typeof x !== "string")) throw new Error(`${what}: not a JSON list of strings`);
    return list;
  }
  return text.split(/\s+/).filter(Boolean);
}
function lines(id) { return ($(id).value || "").split("\n").map((x) => x.trim()).filter(Boolean); }
function objectRef(text, where) {
  // "secret:NAME" or "configmap:NAME" -> ["secret" | "config_map", NAME]
  const m = /^(secret|configmap|config_map|pvc):(.+)$/.exec(text);
  if (!m) throw new Error(`${where}: expected secret:NAME, configmap:NAME${where.startsWith("volume") ? " or pvc:NAME" : ""}`);
  return [m[1] === "configmap" ? "config_map" : m[1], m[2]];
}
function containerFields(v) {
  const out = {};
  if (v("#jf-image")) out.image = v("#jf-image");
  const cmd = words(v("#jf-command"), "command"), args = words(v("#jf-args"), "args");
  if (cmd.length) out.command = cmd;
  if (args.length) out.args = args;
  if (v("#jf-workdir")) out.working_dir = v("#jf-workdir");
  if (v("#jf-sa")) out.service_account = v("#jf-sa");
  const env = [], envFrom = [];
  lines("#jf-env").forEach((line, i) => {
    const eq = line.indexOf("=");
    if (eq < 0) { const [kind, name] = objectRef(line, `environment line ${i + 1}`); envFrom.push({ [kind]: name }); return; }
    const name = line.slice(0, eq), value = line.slice(eq + 1);
    const ref = /^(secret|configmap):([^/]+)\/(.+)$/.exec(value);
    if (ref) env.push({ name, [ref[1] === "configmap" ? "config_map" : "secret"]: ref[2], key: ref[3] });
    else env.push({ name, value });
  });
  if (env.length) out.env = env;
  if (envFrom.length) out.env_from = envFrom;
  const volumes = lines("#jf-volumes").map((line, i) => {
    const eq = line.indexOf("=");
    if (eq < 0) throw new Error(`volume line ${i + 1}: expected /mount/path=pvc:NAME (add :ro for read-only)`);
    let ref = line.slice(eq + 1);
    const ro = ref.endsWith(":ro");
    if (ro) ref = ref.slice(0, -3);
    const [kind, name] = objectRef(ref, `volume line ${i + 1}`);
    return Object.assign({ mount_path: line.slice(0, eq), [kind]: name }, ro ? { read_only: true } : {});
  });
  if (volumes.length) out.volumes = volumes;
  const tols = lines("#jf-tolerations").map((line) => {
    // key=value:Effect, key:Exists[:Effect], :Exists (every taint)
    const [kv, ...rest] = line.split(":");
    const t = {};
    if (rest[0] === "Exists") { t.operator = "Exists"; rest.shift(); if (kv) t.key = kv; }
    else { const eq = kv.indexOf("="); t.key = eq < 0 ? kv : kv.slice(0, eq); if (eq >= 0) t.value = kv.slice(eq + 1); }
    if (rest[0]) t.effect = rest[0];
    return t;
  });
  if (tols.length) out.tolerations = tols;
  return out;
}

async function openJob(id) {
  S.drawer = id;
  S.drawerKind = "job";
  $("#drawer").classList.remove("hidden");
  await refreshJobDrawer();
}
async function refreshJobDrawer() {
  const j = await api("GET", `/api/v1/jobs/${encodeURIComponent(S.drawer)}`);
  $("#drawer-title").innerHTML = `${esc(j.name)} ${statusPill(j.status)}`;
  const res = Object.entries(j.resources).map(([k, v]) => `<code>${esc(k)}: ${esc(v)}</code>`).join(" ");
  const pl = j.placements.map((p) => `<tr><td class="mono">${esc(p.pod)}</td><td><a href="#racks" data-node="${esc(p.node)}">${esc(p.node)}</a></td>
    <td data-testid="placement-devices">${p.devices.map((d) => `GPU ${d.index} (${esc(shareText(d))})`).join(", ")}</td></tr>`).join("");
  // a repeated event is one row with its count and its first and last time (as kubectl describe shows them)
  const ev = (j.events || []).map((e) => {
    const n = e.count || 1;
    const since = n > 1 ? `<div class="small">since ${clockText(e.first_t)}</div>` : "";
    return `<li data-testid="job-event" data-kind="${esc(e.kind)}"><span class="muted">${clockText(e.t)}${since}</span>` +
      `<span><span class="tag">${esc(e.kind)}</span>${n > 1 ? ` <span class="tag count-tag" data-testid="event-count" title="reported ${n} times">×${n}</span>` : ""}</span>` +
      `<span>${esc(e.message)}</span></li>`;
  }).join("");
  $("#drawer-body").innerHTML = `<div class="kv">
    <div>ID</div><div class="mono">${esc(j.id)}</div><div>Tenant</div><div>${esc(j.tenant)}</div>
    <div>Replicas</div><div>${j.replicas} (placed all-or-nothing)</div><div>Resources</div><div>${res}</div>
    <div>Duration</div><div>${j.duration_s ? dur(j.duration_s) : "until cancelled"}</div>
    ${j.image ? `<div>Image</div><div class="mono" data-testid="job-image">${esc(j.image)}</div>` : ""}
    ${(j.command || []).length || (j.args || []).length ? `<div>Command</div><div class="mono">${esc([...(j.command || []), ...(j.args || [])].join(" "))}</div>` : ""}
    ${(j.volumes || []).length ? `<div>Volumes</div><div>${j.volumes.map((x) => `<code>${esc(x.mount_path)} ← ${esc(x.pvc ? `pvc ${x.pvc}` : x.secret ? `secret ${x.secret}` : `configmap ${x.config_map}`)}</code>`).join(" ")}</div>` : ""}
    <div>Message</div><div>${esc(j.message)}</div></div>
    ${["pending", "running"].includes(j.status) ? `<button class="danger" id="job-cancel">Cancel job</button>` : ""}
    ${pl ? `<h3 class="muted" style="margin-top:16px">Placement</h3><table><tbody>${pl}</tbody></table>` : ""}
    ${ev ? `<h3 class="muted" style="margin-top:16px">Events</h3><ul class="timeline">${ev}</ul>` : ""}`;
  const c = $("#job-cancel");
  if (c) c.addEventListener("click", async () => {
    try { await api("DELETE", `/api/v1/jobs/${encodeURIComponent(j.id)}`); toast(`Cancelled ${j.name}`); await refreshJobDrawer(); }
    catch (e) { toast(e.message, true); }
  });
  $$("a[data-node]", $("#drawer-body")).forEach((a) => a.addEventListener("click", (e) => {
    e.preventDefault();
    S.pendingNode = a.dataset.node;  // opened by route() once the racks page is shown
    if (location.hash === "#racks") route(); else location.hash = "#racks";
  }));
}

pages.tenants = {
  title: "Tenants",
  init(el) {
    const admin = S.me && S.me.role === "admin";
    el.innerHTML = `<div class="card"><h3>Quota and fair share</h3><div id="tn-table"></div>
      <div class="muted small" style="margin-top:8px">Fair share = tenant weight / total weight × cluster GPUs. GPU figures are GPU-equivalents (a 50% share counts 0.5).</div></div>
      ${admin ? `<div class="card section"><h3>Create or update a tenant</h3><form id="tn-form" class="form-grid">
        <div><label for="tn-name">Name</label><input id="tn-name" required placeholder="team-a"></div>
        <div><label for="tn-quota">GPU quota (opt.)</label><input id="tn-quota" type="number" min="0" step="any"></div>
        <div><label for="tn-weight">Weight</label><input id="tn-weight" type="number" min="0.01" step="any" value="1"></div>
        <div><button class="primary" type="submit">Save &amp; issue token</button></div></form>
        <div id="tn-error" class="error-text"></div><div id="tn-token"></div></div>` : ""}`;
    const f = $("#tn-form");
    if (f) f.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = { name: $("#tn-name").value.trim(), weight: parseFloat($("#tn-weight").value || "1") };
      if ($("#tn-quota").value) body.quota_gpus = parseFloat($("#tn-quota").value);
      $("#tn-error").textContent = "";
      try {
        const t = await api("POST", "/api/v1/tenants", body);
        $("#tn-token").innerHTML = `<p>Token for <b>${esc(t.name)}</b> (shown once):</p><div class="token-box" data-testid="tenant-token">${esc(t.token)}</div>`;
        await this.refresh();
      } catch (err) { $("#tn-error").textContent = err.message; }
    });
  },
  async refresh() {
    const d = await api("GET", "/api/v1/tenants");
    const rows = d.tenants.map((t) => `<tr><td><b>${esc(t.name)}</b></td>
      <td>${t.quota_gpus === null ? `<span class="muted">none</span>` : num(t.quota_gpus, 2)}</td><td>${num(t.weight, 2)}</td>
      <td>${num(t.fair_share_gpus, 1)}</td>
      <td style="min-width:200px"><div style="display:flex;justify-content:space-between"><span>${num(t.gpus, 2)} GPUs</span><span class="muted">${pct(t.share_used)} of share</span></div>${bar(t.share_used, t.share_used > 1 ? "warn" : "")}</td>
      <td>${t.running}</td><td>${t.pending}${t.pending_gpus ? ` <span class="muted">(${num(t.pending_gpus, 1)} GPUs)</span>` : ""}</td></tr>`).join("");
    $("#tn-table").innerHTML = `<table><thead><tr><th>Tenant</th><th>Quota</th><th>Weight</th><th>Fair share</th><th>Using</th><th>Running</th><th>Pending</th></tr></thead><tbody>${rows}</tbody></table>`;
  },
};

function alertTable(items, actions = false) {
  // every row says its state (firing, pending, resolved) and whether it is silenced
  return `<table data-testid="alert-table"><thead><tr><th>State</th><th>Severity</th><th>Alert</th><th>Target</th><th>Summary</th><th>Since</th>${actions ? "<th></th>" : ""}</tr></thead><tbody>${items.map((a) => `<tr data-alert="${esc(a.name)}" data-target="${esc(a.target)}">
    <td><span class="state st-${esc(a.state)}" data-testid="alert-state">${esc(a.state)}</span>${a.silenced ? ` <span class="tag" title="silenced">silenced</span>` : ""}</td>
    <td><span class="sev sev-${esc(a.severity)}">${esc(a.severity)}</span></td>
    <td><b>${esc(a.name)}</b></td><td class="mono">${esc(a.target)}</td><td>${esc(a.summary)}</td>
    <td class="muted">${clockText(a.since)}${a.resolved ? ` → ${clockText(a.resolved)}` : ""}</td>
    ${actions ? `<td>${a.silenced ? `<button class="ghost small-btn" data-unsilence="${esc(a.silence)}">unsilence</button>` : a.state !== "resolved" ? `<button class="small-btn" data-silence="1">silence</button>` : ""}</td>` : ""}</tr>`).join("")}</tbody></table>`;
}
function remedList(items, planned, decide = false) {
  // decide: the admin's approve / dismiss buttons on each planned action that has an id (the server's API has them)
  const keys = new Set((planned || []).map((r) => `${r.t}|${r.action}|${r.target}`));
  return `<ul class="timeline">${items.map((r) => {
    const isPlanned = r.outcome === "dry-run";
    const pending = keys.has(`${r.t}|${r.action}|${r.target}`);
    const buttons = decide && r.id ? `<div class="decide"><button class="primary small-btn" data-approve="${esc(r.id)}" data-testid="approve-${esc(r.id)}">approve</button>
      <button class="ghost small-btn" data-dismiss="${esc(r.id)}" data-testid="dismiss-${esc(r.id)}">dismiss</button></div>` : "";
    return `<li class="${isPlanned ? "planned" : ""}" ${r.id ? `data-remediation="${esc(r.id)}"` : ""}><span class="muted">${clockText(r.t)}</span><span><span class="tag">${esc(r.action)}</span> <span class="mono">${esc(r.target)}</span>${isPlanned ? ` <span class="tag plan-tag" title="not carried out: this action is not switched on">${pending ? "planned" : "dry run"}</span>` : ""}</span><span>${esc(r.detail)}${buttons}</span></li>`;
  }).join("")}</ul>`;
}
const ALERT_TABS = [["firing", "Firing"], ["pending", "Pending"], ["resolved", "Resolved"], ["silenced", "Silenced"]];
function alertTab(a, tab) {
  if (tab === "silenced") return a.silenced;
  return a.state === tab && !a.silenced;
}

pages.alerts = {
  title: "Alerts",
  init(el) {
    const admin = S.me && S.me.role === "admin";
    el.innerHTML = `<div class="card"><div class="card-head"><div class="tabs" id="al-tabs" role="tablist">${ALERT_TABS.map(([k, l]) =>
        `<button class="tab${k === S.alertTab ? " active" : ""}" data-tab="${k}" role="tab" data-testid="tab-${k}">${l} <span class="count" data-count="${k}">0</span></button>`).join("")}</div>
        ${admin ? `<label class="range">silence for <select id="al-for"><option value="3600">1 h</option><option value="14400">4 h</option><option value="86400">24 h</option></select></label>` : ""}</div>
        <div id="al-table"></div><div id="al-sil"></div></div>
      <div class="grid cols2e section"><div class="card"><h3>Automatic remediation</h3><div id="al-modes"></div><h3 style="margin-top:14px">Planned, not carried out</h3><div id="al-planned"></div>
        <h3 style="margin-top:14px">Log</h3><div id="al-remed"></div></div>
      ${admin ? `<div class="card"><h3>Fault drill</h3><p class="muted">Make a GPU report XID 79 (fallen off the bus) and watch the alert fire and the
        remediation cordon the node (and drain it, when drains are switched on), then reset it ten clock-minutes later.</p>
        <form id="al-form" class="form-grid"><div><label for="al-node">Node</label><input id="al-node" value="train-0000"></div>
        <div><label for="al-dev">GPU</label><input id="al-dev" type="number" min="0" value="0"></div>
        <div><button class="danger" type="submit">Inject XID 79</button></div></form><div id="al-error" class="error-text"></div></div>` : ""}</div>`;
    $$("#al-tabs .tab").forEach((b) => b.addEventListener("click", () => { S.alertTab = b.dataset.tab; this.render(); }));
    $("#al-table").addEventListener("click", async (e) => {
      const b = e.target.closest("button");
      if (!b) return;
      try {
        if (b.dataset.unsilence) {
          await api("DELETE", `/api/v1/silences/${encodeURIComponent(b.dataset.unsilence)}`);
          toast("Silence ended");
        } else if (b.dataset.silence) {
          const tr = b.closest("tr");
          await api("POST", "/api/v1/silences", { alert: tr.dataset.alert, target: tr.dataset.target,
            duration_s: parseFloat($("#al-for").value), comment: "from the dashboard" });
          toast(`Silenced ${tr.dataset.alert} on ${tr.dataset.target}`);
        }
        await this.refresh();
      } catch (err) { toast(err.message, true); }
    });
    $("#al-planned").addEventListener("click", async (e) => {
      // approve: carry the planned action out now (as `up --remediate` would); dismiss: drop it
      const b = e.target.closest("button[data-approve], button[data-dismiss]");
      if (!b) return;
      const id = b.dataset.approve || b.dataset.dismiss, verb = b.dataset.approve ? "approve" : "dismiss";
      $$("button", b.parentElement).forEach((x) => { x.disabled = true; });
      try {
        const d = await api("POST", `/api/v1/remediations/${encodeURIComponent(id)}/${verb}`);
        toast(`${d.action} ${d.target}: ${d.decision}${d.outcome && d.outcome !== d.decision ? ` (${d.outcome})` : ""}`, d.outcome === "failed");
      } catch (err) { toast(err.message, true); }
      await this.refresh();
    });
    const f = $("#al-form");
    if (f) f.addEventListener("submit", async (e) => {
      e.preventDefault();
      $("#al-error").textContent = "";
      try {
        const r = await api("POST", `/api/v1/nodes/${encodeURIComponent($("#al-node").value.trim())}/devices/${parseInt($("#al-dev").value, 10)}/fault`);
        toast(`Fault injected; ${r.evicted_user_jobs} user job(s) evicted`);
        await this.refresh();
      } catch (err) { $("#al-error").textContent = err.message; }
    });
  },
  async refresh() {
    const [a, r, s] = await Promise.all([api("GET", "/api/v1/alerts"), api("GET", "/api/v1/remediations"),
      api("GET", "/api/v1/silences")]);
    this.data = a;
    this.silences = s.silences;
    this.render();
    const modes = Object.entries(r.modes || {});
    $("#al-modes").innerHTML = modes.length ? `<div class="modes" data-testid="remediation-modes">${modes.map(([k, m]) =>
      `<span class="mode mode-${esc(m)}" data-action="${esc(k)}">${esc(k)}: <b>${m === "on" ? "on" : m === "dry-run" ? "planned only" : "off"}</b></span>`).join("")}</div>
      ${modes.some(([, m]) => m === "dry-run") ? `<div class="muted small" style="margin-top:6px">Disruptive actions are opt-in: <code>gpucluster up --remediate drain,defragment</code> carries them out.</div>` : ""}`
      : `<div class="muted">This backend does not remediate on its own.</div>`;
    const admin = S.me && S.me.role === "admin";
    $("#al-planned").innerHTML = r.planned.length ? remedList(r.planned, r.planned, admin) : `<div class="empty">Nothing planned</div>`;
    $("#al-remed").innerHTML = r.log.length ? remedList(r.log.slice(0, 60), r.planned) : `<div class="empty">No remediation actions yet</div>`;
  },
  render() {
    const a = this.data;
    if (!a) return;
    const admin = S.me && S.me.role === "admin";
    for (const [k] of ALERT_TABS) {
      const n = a.alerts.filter((x) => alertTab(x, k)).length;
      const c = $(`#al-tabs [data-count="${k}"]`);
      if (c) c.textContent = n;
    }
    $$("#al-tabs .tab").forEach((b) => b.classList.toggle("active", b.dataset.tab === S.alertTab));
    const shown = a.alerts.filter((x) => alertTab(x, S.alertTab));
    $("#al-table").innerHTML = shown.length ? alertTable(shown, admin) : `<div class="empty">No ${S.alertTab} alerts</div>`;
    const sil = this.silences || [];
    $("#al-sil").innerHTML = sil.length ? `<div class="muted small" style="margin-top:10px" data-testid="silences">Active silences: ${sil.map((x) =>
      `<span class="tag">${esc(x.alert || "any alert")} on ${esc(x.target || "any target")} until ${clockText(x.ends_t)}</span>`).join(" ")}</div>` : "";
  },
};

pages.queue = {
  title: "Queue",
  init(el) {
    const admin = S.me && S.me.role === "admin";
    el.innerHTML = `<div class="card"><div class="card-head"><h3>Pending jobs, in the order they will be tried</h3>
      ${admin ? `<label class="check"><input type="checkbox" id="q-synth"> background workload</label>` : ""}</div>
      <div id="q-table"></div>
      <div class="muted small" style="margin-top:8px">Estimated start: when enough GPU-equivalents free up as running jobs with a duration end, handed out in queue order
      (shapes and fragmentation ignored); "unknown" when jobs without a duration hold the rest.</div></div>`;
    const x = $("#q-synth");
    if (x) x.addEventListener("change", () => this.refresh());
  },
  async refresh() {
    const synth = $("#q-synth") && $("#q-synth").checked;
    const q = await api("GET", `/api/v1/queue${synth ? "?include_synthetic=true" : ""}`);
    const now = q.t;
    const rows = q.jobs.map((j) => `<tr class="clickable" data-job="${esc(j.id)}" data-testid="queue-row-${esc(j.name)}">
      <td data-testid="queue-pos">${j.position}</td><td><b>${esc(j.name)}</b><div class="muted mono">${esc(j.id)}</div></td><td>${esc(j.tenant)}</td>
      <td>${num(j.gpus, 2)}</td><td>${j.priority}</td><td class="muted">${dur(j.waiting_s)}</td>
      <td data-testid="queue-est">${j.est_start_t === null ? `<span class="muted">unknown</span>` : j.est_wait_s < 1 ? "now" : `in ${dur(j.est_wait_s)} <span class="muted">(${clockText(j.est_start_t)})</span>`}</td>
      <td class="small" data-testid="queue-why" style="max-width:420px">${esc(j.why)}</td></tr>`).join("");
    $("#q-table").innerHTML = q.jobs.length ? `<table><thead><tr><th>#</th><th>Job</th><th>Tenant</th><th>GPUs</th><th>Priority</th><th>Waiting</th><th>Est. start</th><th>Why it waits</th></tr></thead><tbody>${rows}</tbody></table>
      <div class="muted small" style="margin-top:8px">${q.total} pending job(s) in the whole queue · ${num(q.free_gpus, 1)} GPU-equivalents free now · clock ${clockText(now)}</div>`
      : `<div class="empty">Nothing is waiting.</div>`;
    $$("tr[data-job]", $("#q-table")).forEach((r) => r.addEventListener("click", () => openJob(r.dataset.job)));
  },
};

pages.design = {
  title: "Design calculator",
  init(el) {
    el.innerHTML = `<div class="card"><h3>Requirements</h3><form id="dz-form" class="form-grid">
        <div><label for="dz-mode">Start from</label><select id="dz-mode"><option value="custom">my numbers</option>
          <option value="dgx-h100-superpod">DGX H100 SuperPOD</option><option value="dgx-b200-superpod">DGX B200 SuperPOD</option></select></div>
        <div class="dz-preset hidden"><label for="dz-su">Scalable units</label><input id="dz-su" type="number" min="1" max="64" value="4"></div>
        <div class="dz-custom"><label for="dz-gpu">GPU</label><input id="dz-gpu" value="H100" list="dz-gpus"><datalist id="dz-gpus">
          <option>H100</option><option>H800</option><option>A100</option><option>A800</option><option>L40S</option><option>B200</option></datalist></div>
        <div class="dz-custom"><label for="dz-servers">Servers</label><input id="dz-servers" type="number" min="1" value="208"></div>
        <div class="dz-custom"><label for="dz-fabric">Fabric</label><select id="dz-fabric"><option value="infiniband">InfiniBand</option><option value="roce">RoCEv2</option></select></div>
        <div class="dz-custom"><label for="dz-psu">PSUs per server</label><input id="dz-psu" value="auto" title="auto: the vendor platform's PSUs (what the CLI picks); or COUNTxWATTS[:ACTIVE+REDUNDANT], e.g. 6x3300:4+2"></div>
        <div><button class="primary" type="submit" id="dz-run">Design it</button></div></form>
        <div id="dz-error" class="error-text"></div><div id="dz-progress"></div></div>
      <div id="dz-result"></div>`;
    $("#dz-mode").addEventListener("change", () => {
      const preset = $("#dz-mode").value !== "custom";
      $$(".dz-preset").forEach((x) => x.classList.toggle("hidden", !preset));
      $$(".dz-custom").forEach((x) => x.classList.toggle("hidden", preset));
    });
    $("#dz-form").addEventListener("submit", (e) => { e.preventDefault(); this.run(); });
  },
  async run() {
    const mode = $("#dz-mode").value;
    const body = mode === "custom" ? { requirements: { name: "my-cluster", gpu: $("#dz-gpu").value.trim(), servers: parseInt($("#dz-servers").value, 10),
      fabric: { type: $("#dz-fabric").value }, power: { psu: $("#dz-psu").value.trim() } } } : { preset: mode, scalable_units: parseInt($("#dz-su").value, 10) };
    $("#dz-error").textContent = "";
    try {
      const t = await api("POST", "/api/v1/design", body);
      await pollTask(`/api/v1/design/${t.id}`, $("#dz-progress"), (task) => this.show(task));
    } catch (e) { $("#dz-error").textContent = e.message; }
  },
  async show(task) {
    if (task.status === "failed") { $("#dz-error").textContent = `${task.error.where}: ${task.error.why}`; return; }
    const d = task.result;
    const k = (label, value, sub) => `<div class="card kpi"><h3>${label}</h3><div class="value">${value}</div><div class="sub">${sub || ""}</div></div>`;
    const warn = (d.warnings || d.power.warnings || []).concat(d.power.psu_sufficient ? [] : [`PSU ${d.power.psu} is not enough`]);
    $("#dz-result").innerHTML = `<div class="grid kpis section" data-testid="design-kpis">
        ${k("GPUs", num(d.gpus), `${num(d.servers)} servers × ${d.gpus_per_server} ${esc(d.gpu.model)}`)}
        ${k("Racks", num(d.racks), `${d.racks_detail.servers_per_rack} servers/rack (${esc(d.racks_detail.limited_by)}-limited)`)}
        ${k("Fabric", `${d.network.tiers}-tier`, `${d.network.leaf_switches} leaf · ${d.network.spine_switches} spine · ${d.network.core_switches} core`)}
        ${k("Facility power", `${num(d.power.facility_kw)} kW`, `IT ${num(d.power.it_kw)} kW · PUE ${d.power.pue}`)}
        ${k("Capex", `$${num(d.cost.capex_usd / 1e6, 1)}M`, `power $${num(d.cost.power_usd_per_year / 1e6, 2)}M/yr`)}
        ${k("Per-server PSU", d.power.psu_sufficient ? "OK" : "too small", `${esc(d.power.psu)} for ${num(d.power.server_max_w)} W`)}
      </div>
      ${warn.length ? `<div class="card section"><h3>Warnings</h3><ul>${warn.map((w) => `<li>${esc(w)}</li>`).join("")}</ul></div>` : ""}
      <div class="card section"><h3>Topology</h3><img id="dz-diagram" class="diagram" alt="topology diagram"></div>
      <div class="card section"><div class="card-head"><h3>Files</h3></div><div class="downloads">
        <a href="#" data-file="cables.csv" data-testid="dl-cables">Cable list (CSV)</a>
        <a href="#" data-file="cluster-spec.yaml" data-testid="dl-spec">Cluster spec (YAML)</a>
        <a href="#" data-file="topology.svg" data-testid="dl-svg">Topology (SVG)</a></div></div>
      <div class="card section"><h3>Report</h3>${d.report_html ? `<div class="report md" data-testid="design-report">${d.report_html}</div>` : `<div class="report">${esc(d.report_md)}</div>`}</div>`;
    $$("[data-file]", $("#dz-result")).forEach((a) => a.addEventListener("click", async (e) => {
      e.preventDefault();  // the files need the bearer token: fetch, then save the blob under its name
      const name = a.dataset.file;
      const r = await fetch(`/api/v1/design/${task.id}/${name}`, { headers: { Authorization: `Bearer ${S.token}` } });
      if (!r.ok) { toast(`${name}: HTTP ${r.status}`, true); return; }
      const link = document.createElement("a");
      link.href = URL.createObjectURL(await r.blob());
      link.download = name;
      document.body.appendChild(link);
      link.click();
      link.remove();
    }));
    const r = await fetch(`/api/v1/design/${task.id}/topology.svg`, { headers: { Authorization: `Bearer ${S.token}` } });
    if (r.ok) $("#dz-diagram").src = URL.createObjectURL(await r.blob());
  },
};

async function pollTask(url, el, done) {
  for (;;) {
    const t = await api("GET", url);
    el.innerHTML = `<div class="progress"><span style="width:${(100 * t.progress).toFixed(0)}%"></span></div><div class="muted small">${esc(t.stage)} · ${pct(t.progress)}</div>`;
    if (t.status === "done" || t.status === "failed") { await done(t); return t; }
    await new Promise((r) => setTimeout(r, 400));
  }
}

pages.experiments = {
  title: "Experiments",
  init(el) {
    el.innerHTML = `<div class="card"><h3>Placement sweep</h3>
      <p class="muted">Place the same stream of synthetic jobs (shapes after published GPU-trace statistics) on a fresh copy of the cluster under each
      policy until it is full; compare how much of the cluster each fills and how fragmented the free capacity becomes.</p>
      <form id="ex-form" class="form-grid"><div><label for="ex-jobs">Jobs</label><input id="ex-jobs" type="number" min="10" max="20000" value="3000"></div>
      <div><label for="ex-seed">Seed</label><input id="ex-seed" type="number" value="0"></div>
      <label class="check"><input type="checkbox" id="ex-stranding-fgd" checked> stranding-fgd (default)</label>
      <label class="check"><input type="checkbox" id="ex-binpack" checked> binpack</label>
      <label class="check"><input type="checkbox" id="ex-spread" checked> spread</label>
      <div><button class="primary" type="submit">Run experiment</button></div></form>
      <div id="ex-error" class="error-text"></div><div id="ex-progress"></div></div><div id="ex-result"></div>`;
    $("#ex-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const policies = ["stranding-fgd", "binpack", "spread"].filter((p) => $(`#ex-${p}`).checked);
      $("#ex-error").textContent = "";
      try {
        const t = await api("POST", "/api/v1/experiments", { policies, jobs: parseInt($("#ex-jobs").value, 10), seed: parseInt($("#ex-seed").value, 10) });
        await pollTask(`/api/v1/experiments/${t.id}`, $("#ex-progress"), (task) => this.show(task));
      } catch (err) { $("#ex-error").textContent = err.message; }
    });
  },
  async refresh() {
    if (this.shown) return;
    const d = await api("GET", "/api/v1/experiments");
    const last = d.experiments.find((x) => x.status === "done");
    if (last) this.show(last);
  },
  show(task) {
    if (task.status === "failed") { $("#ex-error").textContent = `${task.error.where}: ${task.error.why}`; return; }
    this.shown = true;
    const r = task.result, colors = { "stranding-fgd": "#e8590c", binpack: "#76b900", spread: "#3fb6ff" };
    const pol = Object.entries(r.policies);
    const rows = pol.map(([p, v]) => `<tr><td><b>${esc(p)}</b></td><td>${num(v.placed)}</td><td>${num(v.rejected)}</td><td>${v.first_rejection || "–"}</td><td>${pct(v.gpu_alloc, 1)}</td><td>${pct(v.fragmentation, 1)}</td></tr>`).join("");
    $("#ex-result").innerHTML = `<div class="grid cols2e section">
      <div class="card"><h3>GPU compute allocated vs jobs offered</h3>${lineChart(pol.map(([p, v]) => ({ name: p, color: colors[p] || "#f0b429", points: v.series.map((s) => [s.jobs, s.gpu_alloc]) })), { ymax: 1, yfmt: (y) => pct(y), xfmt: (x) => `${num(x)} jobs`, width: 520 })}</div>
      <div class="card"><h3>Fragmentation vs jobs offered</h3>${lineChart(pol.map(([p, v]) => ({ name: p, color: colors[p] || "#f0b429", points: v.series.map((s) => [s.jobs, s.fragmentation]) })), { ymax: 1, yfmt: (y) => pct(y), xfmt: (x) => `${num(x)} jobs`, width: 520 })}</div></div>
      <div class="card section"><h3>Summary · ${num(r.jobs)} jobs, seed ${r.seed}, ${esc(r.cluster)}</h3><table data-testid="experiment-table"><thead><tr><th>Policy</th><th>Placed</th><th>Rejected</th><th>First rejection (job #)</th><th>GPU allocated</th><th>Fragmentation</th></tr></thead><tbody>${rows}</tbody></table></div>`;
  },
};

/* ------------------------------------------------------------------ shell */
function route() {
  const p = (location.hash || "#overview").slice(1);
  S.page = pages[p] ? p : "overview";
  closeDrawer();  // a drawer belongs to the page it was opened on
  $$("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === S.page));
  $$(".page").forEach((s) => s.classList.toggle("hidden", s.id !== `page-${S.page}`));
  $("#page-title").textContent = pages[S.page].title;
  const el = $(`#page-${S.page}`);
  if (!S.inited[S.page] && pages[S.page].init) pages[S.page].init(el);
  S.inited[S.page] = true;
  if (S.pendingNode) {
    const node = S.pendingNode;
    S.pendingNode = null;
    openNode(node);
  }
  tick();
}

async function tick() {
  if (!S.me) return;
  if (S.busy) { S.again = true; return; }  // a page switched meanwhile: refresh once this tick is done
  S.busy = true;
  S.again = false;
  try {
    const h = await fetch("/healthz").then((r) => r.json());
    $("#clock").textContent = `${clockText(h.t)} · x${S.me.speed}`;
    const page = pages[S.page];
    if (page.refresh) await page.refresh($(`#page-${S.page}`));
    if (S.drawer) await refreshDrawer().catch(() => {});
    const a = await api("GET", "/api/v1/alerts");
    const b = $("#alert-badge");
    b.textContent = a.firing;
    b.classList.toggle("hidden", !a.firing);
    S.lastOk = Date.now();
    $("#live").classList.remove("stale");
  } catch (e) {
    $("#live").classList.add("stale");
    if (!(e instanceof ApiError)) console.warn(e);
  } finally {
    S.busy = false;
    if (S.again) setTimeout(tick, 0);
  }
}

async function login(token) {
  S.token = token;
  try {
    S.me = await api("GET", "/api/v1/whoami");
  } catch (e) {
    S.me = null;
    return e.status === 401 ? "That token is not known to this control plane." : e.message;
  }
  localStorage.setItem("gpucluster.token", token);
  $("#login").classList.add("hidden");
  $("#app").classList.remove("hidden");
  $("#who").innerHTML = S.me.role === "admin" ? `signed in as <b>admin</b> · ${esc(S.me.backend)}` : `tenant <b>${esc(S.me.tenant)}</b> · ${esc(S.me.backend)}`;
  S.inited = {};
  S.schema = null;
  route();
  clearInterval(S.timer);
  S.timer = setInterval(tick, POLL_MS);
  return null;
}

function logout(msg) {
  localStorage.removeItem("gpucluster.token");
  S.token = ""; S.me = null;
  clearInterval(S.timer);
  closeDrawer();
  $("#app").classList.add("hidden");
  $("#login").classList.remove("hidden");
  $("#login-error").textContent = msg || "";
}

document.addEventListener("DOMContentLoaded", async () => {
  $("#login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const err = await login($("#token-input").value.trim());
    if (err) $("#login-error").textContent = err;
  });
  $("#logout").addEventListener("click", (e) => { e.preventDefault(); logout(); });
  $("#drawer-close").addEventListener("click", closeDrawer);
  $("#drawer-body").addEventListener("click", nodeAction);
  $("#nav-toggle").addEventListener("click", () => {  // the phone layout's folded navigation
    const open = !$("#sidebar").classList.contains("open");
    $("#sidebar").classList.toggle("open", open);
    $("#nav-toggle").setAttribute("aria-expanded", String(open));
  });
  $$("#nav a").forEach((a) => a.addEventListener("click", () => {
    $("#sidebar").classList.remove("open");
    $("#nav-toggle").setAttribute("aria-expanded", "false");
  }));
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeDrawer(); });
  window.addEventListener("hashchange", route);
  if (S.token && !(await login(S.token))) return;
  logout();
});
