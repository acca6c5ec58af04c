// Tailor's web UI: plain JavaScript over tailord's REST API (daemon/openapi.yaml).
// Served by tailord from /ui with a Content-Security-Policy that allows only
// this file's own origin: no inline script or style, no eval, no third party.
// Signing in posts the token once (POST /v1/session); the browser then keeps
// tailord's HttpOnly, SameSite=Strict session cookie, which this script never
// sees, so the token is neither stored by the page nor put in a URL. Every
// value from the API is written as text.
"use strict";

const FINISHED = new Set(["succeeded", "failed", "cancelled"]);
const COLORS = ["#1f6feb", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#57606a", "#e16f24"];
const POLL_MS = 2000;

// ---- DOM helpers -----------------------------------------------------------

function h(tag, attrs, ...children) {
  const svg = ["svg", "path", "line", "text", "g", "rect", "polyline"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.setAttribute("class", v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i === 0 ? 0 : v < 10 ? 2 : 1)} ${units[i]}`;
}

function number(n, digits = 0) {
  return n === null || n === undefined || Number.isNaN(n) ? "–" : Number(n).toLocaleString("en", {maximumFractionDigits: digits});
}

function when(t) { return t ? t.replace("T", " ").replace(/\.\d+Z$/, "Z") : "–"; }

function stateCell(state) { return h("span", {class: `state state-${state}`}, state); }

// ---- the API ---------------------------------------------------------------

class Unauthorized extends Error {}

async function api(path, {method = "GET", body, type, etag} = {}) {
  const headers = {};
  if (type) headers["Content-Type"] = type;
  if (etag) headers["If-None-Match"] = etag;
  const res = await fetch(path, {method, body, headers, cache: "no-store", credentials: "same-origin"});
  if (res.status === 401) throw new Unauthorized();
  if (res.status === 304) return {status: 304, etag};
  const text = await res.text();
  let data = null;
  const isJson = (res.headers.get("Content-Type") || "").includes("json");
  try { data = isJson && text ? JSON.parse(text) : text; } catch { data = text; }
  return {status: res.status, ok: res.ok, data, etag: res.headers.get("ETag"), headers: res.headers};
}

function apiError(r) {
  return r.data && r.data.message ? r.data.message : `HTTP ${r.status}`;
}

// ---- pages -----------------------------------------------------------------

let stopPage = () => {};  // the current page's timers and streams

// Runs fn now and every `ms` until stopped; stop.now() runs it at once
// (an event arrived), never two at a time.
function repeat(fn, ms = POLL_MS) {
  let live = true, running = false, again = false, timer = null;
  const tick = async () => {
    if (!live) return;
    if (running) { again = true; return; }
    running = true;
    clearTimeout(timer);
    try { await fn(); } catch (e) { if (e instanceof Unauthorized) { live = false; signedIn = false; showLogin(); return; } }
    finally { running = false; }
    if (again) { again = false; tick(); return; }
    if (live) timer = setTimeout(tick, ms);
  };
  tick();
  const stop = () => { live = false; clearTimeout(timer); };
  stop.now = tick;
  return stop;
}

// A server-sent event stream read through fetch (under the session's
// cookie). Calls onEvent with each event's type and data until the server
// ends the stream or `signal` aborts it.
// With `post` (a JSON-able body) the stream is a POST's answer; a refusal
// (a 4xx with tailord's error body) is returned as {status, message}.
async function streamEvents(path, onEvent, signal, post) {
  const init = {signal, cache: "no-store", credentials: "same-origin", headers: {Accept: "text/event-stream"}};
  if (post !== undefined) {
    init.method = "POST";
    init.body = JSON.stringify(post);
    init.headers["Content-Type"] = "application/json";
  }
  const res = await fetch(path, init);
  if (res.status === 401) throw new Unauthorized();
  if (!res.ok || !res.body) {
    let message = `HTTP ${res.status}`;
    try { message = (await res.json()).message || message; } catch { /* not JSON */ }
    return {status: res.status, message};
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    for (let end; (end = buffer.indexOf("\n\n")) >= 0;) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const lines = block.split("\n");
      const type = (lines.find(l => l.startsWith("event:")) || "event: message").slice(6).trim();
      const data = lines.filter(l => l.startsWith("data:")).map(l => l.slice(5).trimStart()).join("\n");
      if (data) { try { onEvent(type, JSON.parse(data)); } catch { /* not JSON: ignored */ } }
    }
  }
}

function page(title, ...children) {
  const main = document.getElementById("main");
  main.replaceChildren(h("h1", {}, title), ...children);
  document.title = `${title} – Tailor`;
  return main;
}

// Jobs: the store's first page, refreshed when any job's event arrives and
// every 5 s (If-None-Match: tailord answers 304 while nothing changed).
// Running jobs' latest loss and tokens/s come from their newest metric row.
function jobsPage() {
  const body = h("tbody");
  const table = h("table", {"aria-label": "Jobs"},
    h("thead", {}, h("tr", {},
      ["Job", "Name", "State", "Step", "Loss", "Tokens/s", "Estimated", "Measured peak", "Created"].map((t, i) =>
        h("th", {scope: "col", class: i >= 3 && i <= 7 ? "num" : undefined}, t)))),
    body);
  const empty = h("p", {class: "muted", hidden: true}, "No jobs yet. ", h("a", {href: "#/submit"}, "Submit one"), ".");
  page("Jobs", table, empty);
  let etag = null;
  const latest = new Map();
  const stop = repeat(async () => {
    const r = await api("/v1/jobs?limit=200", {etag});
    if (r.status === 304) return;
    etag = r.etag;
    const jobs = r.data.jobs.slice().reverse();
    await Promise.all(jobs.filter(j => j.state === "running" && j.last_step).map(async j => {
      const m = await api(`/v1/jobs/${encodeURIComponent(j.id)}/metrics?since_step=${j.last_step}&limit=1`);
      if (m.ok && m.data.metrics.length) latest.set(j.id, m.data.metrics[m.data.metrics.length - 1]);
    }));
    body.replaceChildren(...jobs.map(j => {
      const m = latest.get(j.id) || {};
      return h("tr", {"data-job": j.id},
        h("td", {}, h("a", {href: `#/jobs/${encodeURIComponent(j.id)}`}, j.id)),
        h("td", {}, j.name),
        h("td", {}, stateCell(j.state)),
        h("td", {class: "num"}, number(j.last_step)),
        h("td", {class: "num"}, j.state === "running" ? number(m.loss, 4) : "–"),
        h("td", {class: "num"}, j.state === "running" ? number(m.tokens_per_second) : "–"),
        h("td", {class: "num"}, bytes(j.reserved_bytes)),
        h("td", {class: "num"}, bytes(j.peak_bytes)),
        h("td", {}, when(j.created_at)));
    }));
    empty.hidden = jobs.length > 0;
  }, 5000);
  // Every job's events as they are stored (GET /v1/events?follow=true): a
  // submission, a state change, a checkpoint refreshes the table at once;
  // the 5 s refresh carries the running jobs' loss and tokens/s.
  const streaming = new AbortController();
  streamEvents("/v1/events?follow=true", () => stop.now(), streaming.signal).catch(() => {});
  return () => { streaming.abort(); stop(); };
}

// A series' colour: its own, or (a dashed estimate) the one of the series
// it follows.
function colorOf(series, i) {
  const solid = Math.max(0, series.slice(0, i + 1).filter(s => !s.dashed).length - 1);
  return COLORS[solid % COLORS.length];
}

// A line chart in SVG: series of [x, y] points on shared axes.
function chart(label, series, {unit = (v) => number(v, 3), zero = false} = {}) {
  const W = 420, H = 220, L = 64, R = 10, T = 10, B = 24;
  const pts = series.flatMap(s => s.points);
  const svg = h("svg", {class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label});
  const legend = h("div", {class: "legend"}, series.filter(s => !s.dashed).map(s =>
    h("span", {}, h("span", {class: "swatch", "data-color": colorOf(series, series.indexOf(s))}), s.name)),
    series.some(s => s.dashed) ? h("span", {}, "dashed: the plan's estimate") : "");
  legend.querySelectorAll(".swatch").forEach(el => { el.style.background = el.dataset.color; });
  if (!pts.length) {
    svg.append(h("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no steps yet"));
    return h("div", {}, svg, legend);
  }
  const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (zero) y0 = Math.min(0, y0);
  if (x0 === x1) x1 = x0 + 1;
  if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const Y = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  svg.append(
    h("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#d9dde2"}),
    h("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#d9dde2"}),
    h("text", {x: L - 4, y: T + 8, "text-anchor": "end"}, unit(y1)),
    h("text", {x: L - 4, y: H - B, "text-anchor": "end"}, unit(y0)),
    h("text", {x: L, y: H - 6}, `step ${number(x0)}`),
    h("text", {x: W - R, y: H - 6, "text-anchor": "end"}, `step ${number(x1)}`));
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const d = s.points.map((p, k) => `${k ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    svg.append(h("path", {d, fill: "none", stroke: colorOf(series, i), "stroke-width": 1.6, "data-series": s.name,
      "data-points": s.points.length, "stroke-dasharray": s.dashed ? "4 3" : undefined}));
  });
  return h("div", {}, svg, legend);
}

// Memory by component: one stacked bar per source against the budget. A
// row's total is the plan's (components that never coexist overlap) or the
// measured peak, not the components' sum.
function memoryBars(components, budget, rows) {
  const names = components.filter(c => rows.some(r => (r.values[c] || 0) > 0));
  const wrap = h("div", {});
  for (const r of rows) {
    const sum = names.reduce((a, c) => a + (r.values[c] || 0), 0);
    const total = r.total ?? sum;
    const bar = h("div", {class: "bar", role: "img", "aria-label": `${r.name}: ${bytes(total)} of ${bytes(budget)}`});
    names.forEach((c, i) => {
      const v = r.values[c] || 0;
      if (!v) return;
      const seg = h("span", {title: `${c}: ${bytes(v)}`});
      seg.style.width = `${Math.min(100, v / budget * 100)}%`;
      seg.style.background = COLORS[i % COLORS.length];
      bar.append(seg);
    });
    const note = sum > total ? ` (the components add up to ${bytes(sum)}; ${bytes(sum - total)} of them never coexist)` : "";
    wrap.append(h("p", {}, h("strong", {}, r.name), ` ${bytes(total)} of ${bytes(budget)}`, h("span", {class: "muted"}, note)), bar);
  }
  const legend = h("div", {class: "legend"}, names.map((c, i) => {
    const sw = h("span", {class: "swatch"});
    sw.style.background = COLORS[i % COLORS.length];
    return h("span", {}, sw, c);
  }));
  wrap.append(legend);
  return wrap;
}

// The memory components in the planner's order, as the plan document
// lists them (memory.components); without a plan, the keys the runner's
// memory objects carry.
function memoryComponents(plan, rows = []) {
  const listed = plan && plan.memory && plan.memory.components;
  if (Array.isArray(listed)) return listed.map(c => c.key);
  const keys = [];
  for (const r of rows) {
    for (const k of Object.keys(r || {})) {
      if (!k.endsWith("_bytes") && k !== "total" && k !== "overlap" && !keys.includes(k)) keys.push(k);
    }
  }
  return keys;
}

// Where a job reports besides tailord (its frozen spec's tracking section),
// with the commands that open it: TensorBoard, and W&B through tailor-wandb.
function trackerFacts(plan, job) {
  const t = plan && plan.spec ? plan.spec.tracking : null;
  if (!t) return [];
  const out = [];
  const tb = t.tensorboard, ml = t.mlflow;
  if (tb && tb.enabled) {
    const dir = tb.dir ? `${job.output_dir}/${tb.dir}` : job.output_dir;
    out.push(h("dt", {}, "TensorBoard"), h("dd", {}, h("code", {}, `tensorboard --logdir ${dir}`),
      " · W&B: ", h("code", {}, `tailor-wandb ${dir}`)));
  }
  if (ml && ml.enabled) {
    out.push(h("dt", {}, "MLflow"), h("dd", {}, h("code", {}, ml.uri), ` experiment ${ml.experiment || "Default"}`));
  }
  return out;
}

// One job: facts, actions, curves, memory estimated against measured,
// attempts, events and the runner's log, refreshed while it runs.
function jobPage(id) {
  const enc = encodeURIComponent(id);
  const facts = h("dl", {class: "facts"});
  const actions = h("div", {class: "actions"});
  const message = h("p", {class: "error", role: "alert"});
  const curves = h("div", {class: "grid"});
  const memory = h("div", {class: "card"});
  const attempts = h("tbody");
  const events = h("tbody");
  const log = h("pre", {class: "log", "aria-label": "Runner log"});
  const files = h("ul");
  const talk = h("div", {class: "card", hidden: true});
  const exporter = h("div", {class: "card", hidden: true});
  const answers = h("div", {class: "card", hidden: true});
  const probe = h("div", {class: "card", hidden: true});
  const spec = h("pre", {class: "log", "aria-label": "The job's spec as frozen at submission"});
  page(`Job ${id}`, facts, actions, message, probe, talk, exporter,
    h("h2", {}, "Curves"), curves, answers,
    h("h2", {}, "Memory: the plan's estimate against the runner's measurement"), memory,
    h("h2", {}, "Attempts"), h("table", {}, h("thead", {}, h("tr", {},
      ["Attempt", "Strategy", "Estimated", "Measured peak", "Ended"].map(t => h("th", {scope: "col"}, t)))), attempts),
    h("h2", {}, "Events"), h("table", {}, h("thead", {}, h("tr", {},
      ["Time", "Kind", "Message"].map(t => h("th", {scope: "col"}, t)))), events),
    h("h2", {}, "Files"), files,
    // What re-plans, retries and recovery run: extends: files resolved when
    // the job was submitted, whatever happened to them since.
    h("h2", {}, "Spec, resolved and frozen at submission"), spec,
    h("h2", {}, "Runner log (the newest 64 KiB)"), log);
  const steps = [];
  let etag = null, job = null, plan = null, logOffset = 0, renderTimer = null, actionsFor = null;
  const addStep = (row) => {
    if (row.rank === 0 && (!steps.length || row.step > steps[steps.length - 1].step)) steps.push(row);
  };
  // Curves and memory from `steps`.
  const renderSteps = () => {
    const estimate = plan && plan.memory ? plan.memory.per_gpu : null;
    const components = memoryComponents(plan, steps.map(s => s.memory));
    curves.replaceChildren(
      h("div", {class: "card"}, h("h2", {}, "Loss"), chart("Loss by step", [
        {name: "loss", points: steps.filter(s => s.loss !== null).map(s => [s.step, s.loss])},
        ...(steps.some(s => s.eval_loss != null)
          ? [{name: "eval loss", points: steps.filter(s => s.eval_loss != null).map(s => [s.step, s.eval_loss])}] : [])])),
      // A preference job's (dpo, orpo, simpo, kto) rewards and reward accuracy, under TRL's
      // names, and kto's KL estimate.
      ...(steps.some(s => s["rewards/margins"] != null) ? [
        h("div", {class: "card"}, h("h2", {}, "Rewards"), chart(steps.some(s => s.kl != null)
          ? "Rewards by step: chosen, rejected and their margin, and the KL estimate"
          : "Rewards by step: chosen, rejected and their margin",
          ["rewards/chosen", "rewards/rejected", "rewards/margins", ...(steps.some(s => s.kl != null) ? ["kl"] : [])].map(k => (
            {name: k, points: steps.filter(s => s[k] != null).map(s => [s.step, s[k]])})))),
        h("div", {class: "card"}, h("h2", {}, "Reward accuracy"), chart("Share of pairs ranked right by step", [
          {name: "rewards/accuracies", points: steps.filter(s => s["rewards/accuracies"] != null).map(s => [s.step, s["rewards/accuracies"]])},
          ...(steps.some(s => s["eval_rewards/accuracies"] != null) ? [{name: "eval rewards/accuracies",
            points: steps.filter(s => s["eval_rewards/accuracies"] != null).map(s => [s.step, s["eval_rewards/accuracies"]])}] : [])],
          {zero: true}))] : []),
      // A reward model's scores and the share of pairs it ranks right (TRL's RewardTrainer's names).
      ...(steps.some(s => s.mean_reward != null) ? [
        h("div", {class: "card"}, h("h2", {}, "Scores"), chart("Scores by step: lowest, mean, highest and the chosen's margin",
          ["min_reward", "mean_reward", "max_reward", "margin"].map(k => (
            {name: k, points: steps.filter(s => s[k] != null).map(s => [s.step, s[k]])})))),
        h("div", {class: "card"}, h("h2", {}, "Reward accuracy"), chart("Share of pairs scored right by step", [
          {name: "accuracy", points: steps.filter(s => s.accuracy != null).map(s => [s.step, s.accuracy])},
          ...(steps.some(s => s.eval_accuracy != null) ? [{name: "eval accuracy",
            points: steps.filter(s => s.eval_accuracy != null).map(s => [s.step, s.eval_accuracy])}] : [])],
          {zero: true}))] : []),
      h("div", {class: "card"}, h("h2", {}, "Tokens/s"), chart("Tokens per second by step",
        [{name: "tokens/s", points: steps.filter(s => s.tokens_per_second).map(s => [s.step, s.tokens_per_second])}], {unit: v => number(v)})),
      h("div", {class: "card"}, h("h2", {}, "Peak memory"), chart("Peak memory by step, measured and estimated", [
        {name: "measured peak", points: steps.filter(s => s.memory && s.memory.peak_bytes).map(s => [s.step, s.memory.peak_bytes])},
        {name: "estimated total", points: estimate ? steps.map(s => [s.step, estimate.total]) : []}], {unit: bytes, zero: true})),
      h("div", {class: "card"}, h("h2", {}, "Memory by component"), chart("Measured memory by component and step, with the estimate of each",
        components.filter(c => steps.some(s => s.memory && s.memory[c] > 0)).flatMap(c => [
          {name: c, points: steps.filter(s => s.memory && s.memory[c] !== undefined).map(s => [s.step, s.memory[c]])},
          ...(estimate && estimate[c] ? [{name: `${c} (estimated)`, dashed: true,
            points: steps.map(s => [s.step, estimate[c]])}] : [])]), {unit: bytes, zero: true})));
    const last = steps.length ? steps[steps.length - 1].memory : null;
    const budget = plan && plan.memory ? plan.memory.budget_per_gpu : 0;
    memory.replaceChildren(estimate && budget
      ? memoryBars(components, budget, [{name: "Estimated", values: estimate, total: estimate.total},
        ...(last ? [{name: `Measured at step ${steps[steps.length - 1].step}`, values: last, total: last.peak_bytes}] : [])])
      : h("p", {class: "muted"}, "No plan document."));
  };

  const act = (label, cls, fn) => h("button", {type: "button", class: `action ${cls}`, onclick: async (e) => {
    e.target.disabled = true;
    try {
      const r = await fn();
      message.textContent = r.ok ? "" : apiError(r);
    } finally { e.target.disabled = false; }
  }}, label);

  const stop = repeat(async () => {
    const r = await api(`/v1/jobs/${enc}`, {etag});
    if (r.status === 404) { page("No such job", h("p", {}, `tailord has no job ${id}.`)); throw new Error("gone"); }
    if (r.status !== 304) {
      etag = r.etag;
      job = r.data;
      if (!plan) {
        const p = await api(`/v1/jobs/${enc}/plan`);
        if (p.ok) plan = p.data;
        spec.textContent = plan && plan.spec ? JSON.stringify(plan.spec, null, 2) : "No plan document.";
      }
      const total = plan && plan.spec && plan.spec.training ? plan.spec.training.max_steps : null;
      facts.replaceChildren(
        h("dt", {}, "Name"), h("dd", {}, job.name),
        h("dt", {}, "State"), h("dd", {"data-state": job.state}, stateCell(job.state), job.exit_reason ? ` – ${job.exit_reason}` : ""),
        h("dt", {}, "Progress"), h("dd", {}, `step ${number(job.last_step || 0)}${total ? ` of ${number(total)}` : ""}`),
        h("dt", {}, "Strategy"), h("dd", {}, job.plan && job.plan.summary ? job.plan.summary : "–"),
        h("dt", {}, "Attempts"), h("dd", {}, `${job.attempts} (OOM re-plans ${job.oom_restarts}, failures ${job.failures})`),
        h("dt", {}, "Runs on"), h("dd", {}, runsOn(job)),
        h("dt", {}, "Output folder"), h("dd", {}, h("code", {}, job.output_dir)),
        ...trackerFacts(plan, job),
        h("dt", {}, "Created"), h("dd", {}, when(job.created_at)));
      // Rebuilt only when the state changes: a button replaced under the
      // pointer on every refresh would swallow a click.
      if (job.state !== actionsFor) actions.replaceChildren(...[
        !FINISHED.has(job.state) && act("Cancel", "danger", () => api(`/v1/jobs/${enc}/cancel`, {method: "POST"})),
        job.retryable &&
          act("Retry", "", () => api(`/v1/jobs/${enc}/retry`, {method: "POST"}))].filter(Boolean));
      actionsFor = job.state;
      if (job.state === "succeeded" && talk.hidden) {
        talk.hidden = false;
        talk.replaceChildren(...talkBox(enc, plan));
        exporter.hidden = false;
        exporter.replaceChildren(...exportBox(enc, id));
      }
      attempts.replaceChildren(...(job.attempt_history || []).map(a => h("tr", {},
        h("td", {}, a.attempt), h("td", {}, a.strategy || "–"), h("td", {}, bytes(a.estimated_bytes)),
        h("td", {}, bytes(a.measured_peak_bytes)),
        h("td", {}, a.outcome === "out_of_memory" ? `out of memory at ${bytes(a.oom_at_bytes)}: re-planned` : "–"))));
      const ev = await api(`/v1/jobs/${enc}/events?limit=200`);
      if (ev.ok) {
        // strategy.probe: each candidate's prediction beside its measurement.
        const probed = ev.data.events.filter(e => e.kind === "runner.probe" && e.data);
        if (probed.length) {
          const done = ev.data.events.find(e => e.kind === "runner.probe_done" && e.data);
          const chosen = done ? done.data.chosen : -2;
          probe.hidden = false;
          probe.replaceChildren(h("h2", {}, done ? `Probe: ${probed.length} plans measured in ${done.data.seconds.toFixed(1)} s`
                                                 : "Probing the plans before training"),
            h("table", {}, h("thead", {}, h("tr", {}, ["#", "Plan", "Predicted tokens/s", "Measured tokens/s",
                                                       "Predicted peak", "Measured peak", "Outcome"].map(t => h("th", {scope: "col"}, t)))),
              h("tbody", {}, ...probed.map(e => e.data).map(p => h("tr", {},
                h("td", {}, `${p.index + 1}${p.index === chosen ? " (trained)" : ""}`), h("td", {}, p.summary),
                h("td", {}, number(p.predicted_tokens_per_second)),
                h("td", {}, p.outcome === "fits" ? number(p.tokens_per_second) : "–"),
                h("td", {}, bytes(p.predicted_peak_bytes)), h("td", {}, bytes(p.peak_bytes)),
                h("td", {}, p.outcome === "fits" ? "fits" : `${p.outcome}${p.message ? `: ${p.message}` : ""}`))))));
        }
        // training.eval_prompts: the newest evaluation's answers, beside the curves.
        const generated = ev.data.events.filter(e => e.kind === "runner.generation" && e.data && e.data.answers);
        if (generated.length) {
          const last = generated[generated.length - 1].data;
          answers.hidden = false;
          answers.replaceChildren(h("h2", {}, `Answers to the eval prompts at step ${number(last.step)}`),
            h("table", {}, h("thead", {}, h("tr", {}, ["Prompt", "Answer", "Tokens"].map(t => h("th", {scope: "col"}, t)))),
              h("tbody", {}, ...last.answers.map(a => h("tr", {}, h("td", {}, a.prompt),
                h("td", {}, h("pre", {class: "answer"}, a.text)), h("td", {}, `${a.tokens}${a.stopped ? "" : " (limit)"}`))))));
        }
        events.replaceChildren(...ev.data.events.slice(-50).reverse().map(e => h("tr", {},
          h("td", {}, when(e.time)), h("td", {}, e.kind), h("td", {}, e.message))));
      }
      const fl = await api(`/v1/jobs/${enc}/files`);
      if (fl.ok) {
        // Each folder (adapter/, model/, ...) also as one .tar archive.
        const list = fl.data.files || [];
        const folders = [...new Set(list.filter(f => f.path.includes("/")).map(f => f.path.split("/")[0]))].sort();
        files.replaceChildren(
          ...folders.map(d => h("li", {},
            h("button", {type: "button", class: "action", onclick: () => download(enc, d, `${id}-${d}.tar`)},
              `Download ${d}/ as .tar`),
            ` ${bytes(list.filter(f => f.path.startsWith(d + "/")).reduce((n, f) => n + f.bytes, 0))}`)),
          ...list.map(f => h("li", {},
            h("button", {type: "button", class: "action", onclick: () => download(enc, f.path)}, `Download ${f.path}`),
            ` ${bytes(f.bytes)}`)));
      }
    }
    const since = steps.length ? steps[steps.length - 1].step : 0;
    const m = await api(`/v1/jobs/${enc}/metrics?since_step=${since}&limit=10000`);
    if (m.ok) m.data.metrics.forEach(addStep);
    // The log from where the last read ended; the newest 64 KiB are shown.
    const lg = await api(`/v1/jobs/${enc}/logs?offset=${logOffset}`);
    if (lg.status === 200 && typeof lg.data === "string" && lg.data) {
      log.textContent = (log.textContent + lg.data).slice(-65536);
      logOffset = Number(lg.headers.get("X-Log-Offset") || logOffset);
    }
    renderSteps();
  });
  // The job as it happens, from its event stream: each step extends the
  // curves (redrawn at most twice a second), and anything else (a state
  // change, a checkpoint, a re-plan) refreshes the page at once. The 2 s
  // refresh stays, for what the stream does not carry (files, the log).
  const streaming = new AbortController();
  streamEvents(`/v1/jobs/${enc}/events?follow=true`, (type, data) => {
    if (type === "step") {
      addStep(data);
      if (!renderTimer) renderTimer = setTimeout(() => { renderTimer = null; renderSteps(); }, 500);
    } else if (type !== "job" || !job || data.state !== job.state) {
      stop.now();  // a "job" event comes with every step: only a new state counts
    }
  }, streaming.signal).catch(() => {});
  return () => { streaming.abort(); clearTimeout(renderTimer); stop(); };
}

// Talking to a succeeded job's model (POST /v1/jobs/{id}/generate): a chat
// job's conversation goes through its chat template, any other job's text
// is a plain prompt; the answer is written as its tokens arrive.
function talkBox(enc, plan) {
  const chat = !!(plan && plan.spec && plan.spec.data && plan.spec.data.chat);
  const input = h("textarea", {rows: 3, "aria-label": chat ? "Your message" : "Prompt", placeholder: chat ? "Your message" : "A prompt"});
  const maxTokens = h("input", {type: "number", min: 1, max: 4096, value: 128, "aria-label": "Max tokens"});
  const temperature = h("input", {type: "number", min: 0, max: 100, step: 0.1, value: 0, "aria-label": "Temperature"});
  // The rest of the API's sampling settings, sent only where they differ
  // from their defaults (which leave the tokens as they are).
  const settings = [
    ["top_p", "Top-p", {min: 0.01, max: 1, step: 0.01, value: 1}, 1],
    ["top_k", "Top-k", {min: 0, step: 1, value: 0}, 0],
    ["min_p", "Min-p", {min: 0, max: 1, step: 0.01, value: 0}, 0],
    ["repetition_penalty", "Repetition penalty", {min: 0.01, max: 100, step: 0.05, value: 1}, 1],
    ["presence_penalty", "Presence penalty", {min: -2, max: 2, step: 0.1, value: 0}, 0],
    ["frequency_penalty", "Frequency penalty", {min: -2, max: 2, step: 0.1, value: 0}, 0],
    ["seed", "Seed", {min: 0, step: 1, value: 0}, 0],
  ].map(([key, label, attrs, off]) => ({key, label, off, input: h("input", {type: "number", "aria-label": label, ...attrs})}));
  const sampling = h("details", {}, h("summary", {}, "Sampling"),
    h("p", {class: "muted"}, "Top-k, top-p and min-p apply when the temperature is above 0; the penalties always."),
    h("p", {}, ...settings.flatMap((s) => [h("label", {}, `${s.label} `, s.input), " "])));
  const answer = h("pre", {class: "log", "aria-live": "polite", "aria-label": "The model's answer"});
  const status = h("p", {class: "muted"});
  let running = null;
  const go = h("button", {type: "button", class: "action", onclick: async () => {
    if (running) { running.abort(); return; }
    const body = {max_tokens: Number(maxTokens.value) || 128, temperature: Number(temperature.value) || 0};
    for (const s of settings) {
      if (s.input.value !== "" && Number(s.input.value) !== s.off) body[s.key] = Number(s.input.value);
    }
    if (chat) body.messages = [{role: "user", content: input.value}];
    else body.prompt = input.value;
    answer.textContent = "";
    status.textContent = "Loading the model…";
    running = new AbortController();
    go.textContent = "Stop";
    try {
      const refused = await streamEvents(`/v1/jobs/${enc}/generate`, (type, data) => {
        if (type === "token") { answer.textContent += data.text; status.textContent = "Generating…"; }
        if (type === "done") {
          answer.textContent = data.text;
          status.textContent = `${data.completion_tokens} tokens, ${number(data.tokens_per_second, 1)} tokens/s; ` +
            (data.finish_reason === "stop" ? "the model stopped" : "the length limit");
        }
        if (type === "error") status.textContent = data.message;
      }, running.signal, body);
      if (refused) status.textContent = refused.message;
    } catch (e) {
      if (e instanceof Unauthorized) throw e;
      status.textContent = e.name === "AbortError" ? "Stopped." : String(e);
    } finally {
      running = null;
      go.textContent = "Generate";
    }
  }}, "Generate");
  return [h("h2", {}, "Talk to the model"),
    h("p", {class: "muted"}, chat ? "Rendered with the chat template the job trained with; it stops at the end of its turn."
      : "Plain text; it continues it."),
    input, h("p", {}, h("label", {}, "Max tokens ", maxTokens), " ", h("label", {}, "Temperature ", temperature), " ", go),
    sampling, status, answer];
}

// Exporting a succeeded job's model (POST /v1/jobs/{id}/exports) into the
// job's folder: a GGUF file that llama.cpp loads, or a merged Hugging Face
// folder; what was written downloads as the job's other files do.
function exportBox(enc, id) {
  const kinds = [["gguf:f16", "GGUF, f16"], ["gguf:q8_0", "GGUF, q8_0"], ["gguf:bf16", "GGUF, bf16"],
    ["gguf:f32", "GGUF, f32"], ["safetensors:auto", "Hugging Face folder, the base's dtype"],
    ["safetensors:bf16", "Hugging Face folder, bf16"]];
  const choice = h("select", {"aria-label": "Export as"}, ...kinds.map(([v, t]) => h("option", {value: v}, t)));
  const status = h("p", {class: "muted", "aria-live": "polite"});
  const result = h("p", {});
  const go = h("button", {type: "button", class: "action", onclick: async () => {
    const [format, type] = choice.value.split(":");
    go.disabled = true;
    status.textContent = "Exporting…";
    result.replaceChildren();
    try {
      const res = await api(`/v1/jobs/${enc}/exports`, {method: "POST", type: "application/json",
        body: JSON.stringify(format === "gguf" ? {format, outtype: type} : {format, dtype: type})});
      if (!res.ok) { status.textContent = apiError(res); return; }
      const d = res.data, name = d.path.split("/").pop();
      status.textContent = `Wrote ${d.path} (${bytes(d.bytes)}) in ${number(d.seconds, 1)} s` +
        ((d.warnings || []).length ? `; ${d.warnings.join("; ")}` : "");
      const buttons = [h("button", {type: "button", class: "action",
        onclick: () => format === "gguf" ? download(enc, d.path) : download(enc, d.path, `${id}-${name}.tar`)},
      `Download ${name}`)];
      // Beside a GGUF file, its Ollama Modelfile (ollama create NAME -f it).
      if (d.modelfile) {
        buttons.push(" ", h("button", {type: "button", class: "action", onclick: () => download(enc, d.modelfile)},
          `Download ${d.modelfile.split("/").pop()}`));
      }
      result.replaceChildren(...buttons);
    } finally {
      go.disabled = false;
    }
  }}, "Export");
  return [h("h2", {}, "Export the model"),
    h("p", {class: "muted"}, "Into the job's folder, with an adapter merged: one GGUF file that llama.cpp loads " +
      "(tokenizer and chat template included) and its Ollama Modelfile, or a Hugging Face folder."),
    h("p", {}, choice, " ", go), status, result];
}

// Saved by the browser's own download manager, streamed to disk (a model
// of gigabytes is never held in this page): tailord makes a link that
// needs no sign-in for a few minutes, so nothing secret goes in the URL.
// With `archive` (the name to save it as), the folder at `path` as one tar.
async function download(enc, path, archive) {
  const query = `path=${encodeURIComponent(path)}${archive ? "&archive=true" : ""}`;
  const res = await api(`/v1/jobs/${enc}/files/link?${query}`, {method: "POST"});
  if (!res.ok) return;
  const a = h("a", {href: res.data.url, download: archive || path.split("/").pop()});
  document.body.append(a);
  a.click();
  a.remove();
}

const EXAMPLE = `apiVersion: tailor/v1
kind: TrainingJob
name: my-job
model:
  preset: tiny-llama-byte
  init: random
data:
  train: data/tiny-corpus.txt
  format: text
  seq_len: 128
training:
  global_batch_size: 16
  max_steps: 200
resources:
  gpus: 0
  host_memory: 2GiB
`;

// ---- completion from the spec's JSON Schema ---------------------------------

let specSchema = null;

async function loadSpecSchema() {
  if (!specSchema) {
    const res = await fetch("/v1/spec-schema", {cache: "no-store"});
    specSchema = res.ok ? await res.json() : {};
  }
  return specSchema;
}

// The schema node at a key path ("training", "max_steps"), through anyOf.
function schemaAt(schema, path) {
  let n = schema;
  for (const key of path) {
    const props = n && (n.properties || (n.anyOf || []).map(a => a.properties).find(Boolean));
    n = props ? props[key] : null;
    if (!n) return null;
  }
  return n;
}

// The values a schema node allows, as YAML words: its enums, consts,
// booleans, and its examples (the catalog's model presets and GPU names).
function schemaValues(n) {
  const out = [];
  const walk = (x) => {
    if (!x) return;
    if (x.enum) out.push(...x.enum.map(String));
    if (x.examples) out.push(...x.examples.map(String));
    if (x.const !== undefined) out.push(String(x.const));
    if (x.type === "boolean") out.push("true", "false");
    (x.anyOf || []).forEach(walk);
  };
  walk(n);
  return [...new Set(out)];
}

// What the cursor stands on: a key being written (its parent path, the
// keys its block already has) or a value after "key: " (the key's path).
function cursorContext(text, pos) {
  const lineStart = text.lastIndexOf("\n", pos - 1) + 1;
  // The rest of the word under the cursor is replaced too.
  const wordEnd = pos + text.slice(pos).match(/^[\w.-]*/)[0].length;
  const before = text.slice(lineStart, pos);
  const indent = before.match(/^ */)[0].length;
  const lines = text.split("\n");
  const row = text.slice(0, lineStart).split("\n").length - 1;
  const parents = [];
  let want = indent;
  for (let i = row - 1; i >= 0 && want > 0; i--) {
    const m = lines[i].match(/^( *)([A-Za-z_][\w-]*):\s*(#.*)?$/);
    if (m && m[1].length < want) { parents.unshift(m[2]); want = m[1].length; }
  }
  const value = before.match(/^ *([A-Za-z_][\w-]*): *([\w.-]*)$/);
  if (value) return {kind: "value", path: [...parents, value[1]], word: value[2], from: pos - value[2].length, to: wordEnd};
  const key = before.match(/^ *([A-Za-z_][\w-]*)?$/);
  if (!key) return null;
  // The keys already written at this level of this block.
  const present = new Set();
  for (const step of [-1, 1]) {
    for (let i = row + step; i >= 0 && i < lines.length; i += step) {
      const m = lines[i].match(/^( *)([A-Za-z_][\w-]*):/);
      if (!lines[i].trim() || lines[i].trim().startsWith("#")) continue;
      const ind = lines[i].match(/^ */)[0].length;
      if (ind < indent) break;
      if (m && ind === indent) present.add(m[2]);
    }
  }
  const word = key[1] || "";
  return {kind: "key", path: parents, word, present, from: pos - word.length, to: wordEnd, indent};
}

function completions(schema, ctx) {
  if (!ctx) return [];
  const prefix = ctx.word.toLowerCase();
  if (ctx.kind === "value") {
    return schemaValues(schemaAt(schema, ctx.path)).filter(v => v.toLowerCase().startsWith(prefix) && v !== ctx.word)
      .map(v => ({label: v, insert: v, detail: ""}));
  }
  const n = schemaAt(schema, ctx.path);
  const props = n && n.properties ? n.properties : {};
  return Object.entries(props).filter(([k]) => !ctx.present.has(k) && k.toLowerCase().startsWith(prefix)).map(([k, v]) => {
    const object = v.type === "object" && v.properties;
    return {label: k, detail: v.description || "",
            insert: object ? `${k}:\n${" ".repeat(ctx.indent + 2)}` : `${k}: `};
  });
}

// Wires completion to an editor: Ctrl+Space, or typing a key or a value
// the schema lists, opens a list under the editor; arrows choose, Enter or
// Tab inserts, Escape closes.
function attachCompletion(editor, list) {
  let items = [], active = 0, ctx = null;
  const close = () => { items = []; list.hidden = true; list.replaceChildren(); editor.removeAttribute("aria-activedescendant"); };
  const render = () => {
    list.replaceChildren(...items.map((it, i) => h("li", {id: `completion-${i}`, role: "option",
      "aria-selected": i === active ? "true" : "false", onmousedown: (e) => { e.preventDefault(); accept(i); }},
      h("code", {}, it.label), it.detail ? h("span", {class: "muted"}, ` ${it.detail}`) : "")));
    list.hidden = items.length === 0;
    if (items.length) editor.setAttribute("aria-activedescendant", `completion-${active}`);
  };
  const open = async (explicit) => {
    const schema = await loadSpecSchema();
    ctx = cursorContext(editor.value, editor.selectionStart);
    items = completions(schema, ctx);
    if (!explicit && ctx && ctx.kind === "key" && !ctx.word) items = [];
    active = 0;
    render();
  };
  const accept = (i) => {
    const it = items[i];
    if (!it || !ctx) return;
    editor.setRangeText(it.insert, ctx.from, ctx.to, "end");
    close();
    editor.focus();
    editor.dispatchEvent(new Event("input"));
  };
  editor.addEventListener("keydown", (e) => {
    if (e.key === " " && e.ctrlKey) { e.preventDefault(); open(true); return; }
    if (list.hidden) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      active = (active + (e.key === "ArrowDown" ? 1 : items.length - 1)) % items.length;
      render();
    } else if (e.key === "Enter" || e.key === "Tab") {
      e.preventDefault();
      accept(active);
    } else if (e.key === "Escape") {
      e.preventDefault();
      close();
    }
  });
  editor.addEventListener("input", (e) => { if (e.isTrusted) open(false); });
  editor.addEventListener("blur", close);
  close();
}

// The first examples of data.train as the runner reads them (POST
// /v1/data/preview): the rendered text with the trained text marked, from
// byte ranges into its UTF-8.
function dataView(p) {
  const enc = new TextEncoder(), dec = new TextDecoder();
  return [h("h2", {}, "Data"),
    h("p", {class: "muted"}, `${p.file} · ${p.tokenizer}${p.chat_template ? ` · chat template ${p.chat_template}` : ""}` +
      " · trained text is marked"),
    ...p.examples.map(e => {
      const bytes = enc.encode(e.text);
      const parts = [];
      let at = 0;
      for (const [begin, end] of e.trained_text) {
        parts.push(dec.decode(bytes.slice(at, begin)), h("mark", {}, dec.decode(bytes.slice(begin, end))));
        at = end;
      }
      parts.push(dec.decode(bytes.slice(at)));
      return h("div", {class: "example"},
        h("p", {class: "muted"}, `${e.record} · ${number(e.tokens)} tokens, ${number(e.trained_tokens)} trained` +
          (e.too_long ? ` · longer than seq_len + 1 (${p.seq_len + 1})` : "")),
        h("pre", {class: "example", "aria-label": `Example ${e.record}`}, ...parts));
    })];
}

// Submit: the spec in an editor, planned by tailord as you type (a dry
// run): diagnostics at line:col, the memory bar against the budget, the
// decision trace and the alternatives, and the data's first examples with
// what is trained; then submitted.
function submitPage() {
  const editor = h("textarea", {id: "spec", spellcheck: "false", "aria-label": "Job spec (YAML)"});
  editor.value = sessionStorage.getItem("tailor.draft") || EXAMPLE;
  const diagnostics = h("ul", {class: "diagnostics", "aria-live": "polite"});
  const suggestions = h("ul", {class: "completions", id: "completions", role: "listbox", "aria-label": "Completions"});
  editor.setAttribute("aria-controls", "completions");
  editor.setAttribute("aria-autocomplete", "list");
  const preview = h("div", {class: "card", id: "preview"}, h("p", {class: "muted"}, "Planning…"));
  const data = h("div", {class: "card", id: "data-preview"}, h("p", {class: "muted"}, "Reading the data…"));
  const status = h("p", {role: "status"});
  const submit = h("button", {type: "button", class: "action primary", id: "submit"}, "Submit");
  page("Submit a job", h("div", {class: "editor"},
    h("div", {}, editor, suggestions, h("p", {class: "muted"}, "Ctrl+Space completes keys and values from the spec's schema."),
      diagnostics, h("div", {class: "actions"}, submit), status), preview), data);
  attachCompletion(editor, suggestions);

  const goTo = (line, col) => {
    const lines = editor.value.split("\n");
    let at = 0;
    for (let i = 0; i < line - 1 && i < lines.length; i++) at += lines[i].length + 1;
    at += Math.max(0, col - 1);
    editor.focus();
    editor.setSelectionRange(at, at);
  };
  const showDiagnostics = (r) => {
    const list = r.data && r.data.details && r.data.details.diagnostics;
    diagnostics.replaceChildren(...(list || [{text: apiError(r)}]).map(d => h("li", {},
      d.line ? h("button", {type: "button", onclick: () => goTo(d.line, d.column)}, `${d.line}:${d.column}`) : "",
      ` ${d.path ? d.path + ": " : ""}${d.message || d.text}`)));
  };
  let seq = 0;
  const plan = async () => {
    const mine = ++seq;
    sessionStorage.setItem("tailor.draft", editor.value);
    const r = await api("/v1/jobs?dry_run=true", {method: "POST", body: editor.value, type: "application/yaml"});
    if (mine !== seq) return;
    diagnostics.classList.remove("stale");
    preview.classList.remove("stale");
    if (!r.ok) {
      showDiagnostics(r);
      preview.replaceChildren(h("p", {class: "muted"}, "Fix the spec to see its plan."));
      data.classList.remove("stale");
      data.replaceChildren(h("h2", {}, "Data"), h("p", {class: "muted"}, "Fix the spec to see its data."));
      return;
    }
    diagnostics.replaceChildren();
    preview.replaceChildren(...planView(r.data));
    const d = await api("/v1/data/preview?n=2", {method: "POST", body: editor.value, type: "application/yaml"});
    if (mine !== seq) return;
    data.classList.remove("stale");
    data.replaceChildren(...(d.ok ? dataView(d.data) : [h("h2", {}, "Data"), h("p", {class: "muted"}, apiError(d))]));
  };
  let timer = null;
  editor.addEventListener("input", () => {
    // Until the new plan arrives, what is shown is of the text before.
    diagnostics.classList.add("stale");
    preview.classList.add("stale");
    data.classList.add("stale");
    clearTimeout(timer);
    timer = setTimeout(() => plan().catch(onError), 300);
  });
  submit.addEventListener("click", async () => {
    submit.disabled = true;
    try {
      const r = await api("/v1/jobs", {method: "POST", body: editor.value, type: "application/yaml"});
      if (r.ok) { location.hash = `#/jobs/${encodeURIComponent(r.data.id)}`; return; }
      showDiagnostics(r);
      status.textContent = apiError(r);
    } finally { submit.disabled = false; }
  });
  plan().catch(onError);
  return () => clearTimeout(timer);
}

function planView(p) {
  const out = [h("h2", {}, p.fits ? "Fits" : "Does not fit"), h("p", {}, p.summary || "")];
  if (p.memory && p.memory.per_gpu) {
    out.push(memoryBars(memoryComponents(p, [p.memory.per_gpu]), p.memory.budget_per_gpu,
      [{name: "Per device", values: p.memory.per_gpu, total: p.memory.per_gpu.total}]));
  }
  if (p.throughput) out.push(h("p", {class: "muted"}, `about ${number(p.throughput.tokens_per_second)} tokens/s (an estimate for ranking)`));
  if (p.decisions) {
    out.push(h("h2", {}, "Decisions"), h("ol", {class: "decisions"}, p.decisions.map(d =>
      h("li", {}, h("strong", {}, d.question), h("br"), d.answer, d.action ? ` → ${d.action}` : ""))));
  }
  if (p.alternatives && p.alternatives.length) {
    out.push(h("h2", {}, "Alternatives"), h("table", {},
      h("thead", {}, h("tr", {}, ["Strategy", "Per device", "Tokens/s", "Fits"].map(t => h("th", {scope: "col"}, t)))),
      h("tbody", {}, p.alternatives.slice(0, 8).map(a => h("tr", {},
        h("td", {}, a.summary), h("td", {}, bytes(a.total_per_gpu)), h("td", {}, number(a.tokens_per_second)),
        h("td", {}, a.fits ? "yes" : "no"))))));
  }
  return out;
}

// Hardware: what tailord schedules on, and what runs where.
function hardwarePage() {
  const facts = h("dl", {class: "facts"});
  const gpus = h("tbody");
  const running = h("tbody");
  page("Hardware", facts,
    h("h2", {}, "GPUs"), h("table", {}, h("thead", {}, h("tr", {}, ["GPU", "Name", "Memory"].map(t => h("th", {scope: "col"}, t)))), gpus),
    h("h2", {}, "Running"), h("table", {}, h("thead", {}, h("tr", {},
      ["Job", "Name", "GPUs", "Reserved", "Measured peak"].map(t => h("th", {scope: "col"}, t)))), running));
  return repeat(async () => {
    const hw = await api("/v1/hardware");
    if (hw.ok) {
      const d = hw.data;
      facts.replaceChildren(
        h("dt", {}, "Devices"), h("dd", {}, d.cpu_only ? "CPU only" : `${d.gpus.length} GPU(s)`),
        h("dt", {}, "Host memory"), h("dd", {}, bytes(d.host_memory_bytes)),
        h("dt", {}, "Budget for CPU jobs"), h("dd", {}, bytes(d.memory_budget_bytes)),
        h("dt", {}, "Runner"), h("dd", {}, h("code", {}, d.runner)),
        h("dt", {}, "Spec root"), h("dd", {}, h("code", {}, d.spec_root)),
        h("dt", {}, "Default executor"), h("dd", {}, d.executors ? d.executors.default : "local"),
        h("dt", {}, "Slurm"), h("dd", {}, slurmStatus(d.executors && d.executors.slurm)));
      gpus.replaceChildren(...(d.gpus || []).map((g, i) => h("tr", {},
        h("td", {}, g.index ?? i), h("td", {}, g.name), h("td", {}, bytes(g.memory_bytes ?? g.memory)))));
    }
    const r = await api("/v1/jobs?state=running&limit=200");
    if (r.ok) {
      running.replaceChildren(...r.data.jobs.map(j => h("tr", {},
        h("td", {}, h("a", {href: `#/jobs/${encodeURIComponent(j.id)}`}, j.id)), h("td", {}, j.name),
        h("td", {}, j.executor && j.executor.kind === "slurm" ? runsOn(j) : j.gpus || "host"),
        h("td", {}, bytes(j.reserved_bytes)), h("td", {}, bytes(j.peak_bytes)))));
    }
  }, 5000);
}

// Where a job runs: this machine, or a Slurm job and what Slurm last said.
function runsOn(job) {
  const e = job.executor || {kind: "local"};
  if (e.kind !== "slurm") return "this machine";
  return `Slurm job ${e.job_id || "(not yet submitted)"}${e.state ? `: ${e.state}` : ""}`;
}

function slurmStatus(s) {
  if (!s || !s.configured) return "not configured (tailord --executor slurm|auto)";
  return `${s.available ? "available" : "unavailable"}: ${s.status}`;
}

// ---- sign-in and routing ----------------------------------------------------

function showLogin(error) {
  const dialog = document.getElementById("login");
  document.getElementById("login-error").textContent = error || "";
  document.getElementById("logout").hidden = true;
  if (!dialog.open) dialog.showModal();
  document.getElementById("token").focus();
}

function onError(e) {
  if (e instanceof Unauthorized) { signedIn = false; showLogin("Signed out: the session ended or its token was rotated."); }
}

let signedIn = false;  // the session cookie works (GET /v1/session answered)

async function route() {
  stopPage();
  stopPage = () => {};
  if (!signedIn) {
    try {
      signedIn = (await api("/v1/session")).ok;
    } catch (e) {
      if (!(e instanceof Unauthorized)) throw e;
    }
    if (!signedIn) { showLogin(); return; }
  }
  document.getElementById("logout").hidden = false;
  const hash = location.hash || "#/jobs";
  const [, view, arg] = hash.match(/^#\/([a-z]+)(?:\/(.+))?$/) || [null, "jobs"];
  document.querySelectorAll("nav a").forEach(a => {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  });
  if (view === "jobs" && arg) stopPage = jobPage(decodeURIComponent(arg));
  else if (view === "submit") stopPage = submitPage();
  else if (view === "hardware") stopPage = hardwarePage();
  else stopPage = jobsPage();
  document.getElementById("main").focus({preventScroll: true});
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = document.getElementById("token").value.trim();
    try {
      const r = await api("/v1/session", {method: "POST", body: JSON.stringify({token}), type: "application/json"});
      if (!r.ok) throw new Error(apiError(r));
      document.getElementById("token").value = "";
      document.getElementById("login").close();
      signedIn = true;
      route();
    } catch (err) {
      showLogin(err instanceof Unauthorized ? "That token was refused." : String(err.message || err));
    }
  });
  document.getElementById("logout").addEventListener("click", async () => {
    signedIn = false;
    stopPage();
    try { await api("/v1/session", {method: "DELETE"}); } catch { /* signed out either way */ }
    showLogin();
  });
  window.addEventListener("hashchange", route);
  route();
});
