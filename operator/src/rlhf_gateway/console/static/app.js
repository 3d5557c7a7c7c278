// The RLHF console: the tenant's jobs and one job's curves, checkpoints and events, from the
// gateway's API with the tenant's own token (kept in this tab's sessionStorage only).
// Data is always inserted as text (textContent), never as HTML.
"use strict";

const CURVES = ["reward", "kl", "response_length", "loss", "eval/greedy_reward", "eval/mean_reward"];
const $ = (id) => document.getElementById(id);
let timer = null;

function token() { return sessionStorage.getItem("rlhf-token") || ""; }

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: `Bearer ${token()}`, "Content-Type": "application/json" },
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error((body.error && body.error.message) || response.statusText);
    error.status = response.status;
    throw error;
  }
  return body;
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  row.appendChild(td);
  return td;
}

function age(seconds) {
  const s = Math.max(0, Math.floor(Date.now() / 1000 - seconds));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

function fixed(value) { return typeof value === "number" ? value.toFixed(3) : ""; }

function show(section) {
  for (const id of ["login", "jobs", "job"]) $(id).hidden = id !== section;
}

async function renderJobs() {
  const list = await api("/v1/console/jobs");
  const body = $("job-table").querySelector("tbody");
  body.replaceChildren();
  for (const job of list.data) {
    const row = document.createElement("tr");
    row.className = "job";
    row.dataset.id = job.id;
    cell(row, job.id);
    cell(row, job.status).className = "status";
    cell(row, job.progress || (job.step ? String(job.step) : ""));
    cell(row, fixed(job.reward));
    cell(row, job.gpus);
    cell(row, job.fine_tuned_model || job.model);
    cell(row, age(job.created_at));
    row.addEventListener("click", () => { location.hash = `#/jobs/${job.id}`; });
    body.appendChild(row);
  }
  $("no-jobs").hidden = list.data.length > 0;
}

function curve(name, points) {
  const width = 320, height = 140, pad = 24;
  const svgNs = "http://www.w3.org/2000/svg";
  const steps = points.map((p) => p[0]), values = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  const [y0, y1] = [Math.min(...values), Math.max(...values)];
  const x = (s) => pad + ((s - x0) / (x1 - x0 || 1)) * (width - 2 * pad);
  const y = (v) => height - pad - ((v - y0) / (y1 - y0 || 1)) * (height - 2 * pad);
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  const line = document.createElementNS(svgNs, "polyline");
  line.setAttribute("points", points.map((p) => `${x(p[0])},${y(p[1])}`).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#2f6fdb");
  line.setAttribute("stroke-width", "2");
  svg.appendChild(line);
  const figure = document.createElement("figure");
  figure.className = "curve";
  figure.dataset.metric = name;
  figure.appendChild(svg);
  const caption = document.createElement("figcaption");
  const last = values[values.length - 1];
  caption.textContent = `${name}: ${fixed(last)} at step ${steps[steps.length - 1]} ` +
    `(min ${fixed(y0)}, max ${fixed(y1)})`;
  figure.appendChild(caption);
  return figure;
}

async function renderJob(id) {
  const [job, metrics, events, checkpoints] = await Promise.all([
    api(`/v1/console/jobs/${id}`),
    api(`/v1/fine_tuning/jobs/${id}/metrics`),
    api(`/v1/fine_tuning/jobs/${id}/events?limit=200`),
    api(`/v1/fine_tuning/jobs/${id}/checkpoints?limit=100`),
  ]);
  $("job-title").textContent = `${job.id}: ${job.status}`;
  $("job-summary").textContent = [
    `model ${job.fine_tuned_model || job.model}`,
    job.progress ? `step ${job.progress}` : null,
    job.reward !== null ? `reward ${fixed(job.reward)}` : null,
    job.gpus !== null ? `${job.gpus} GPUs` : null,
    job.restarts ? `${job.restarts} restarts` : null,
    job.message,
  ].filter(Boolean).join(" · ");
  const curves = $("curves");
  curves.replaceChildren();
  const names = Object.keys(metrics.metrics).sort(
    (a, b) => (CURVES.indexOf(a) + 1 || 99) - (CURVES.indexOf(b) + 1 || 99));
  for (const name of names) curves.appendChild(curve(name, metrics.metrics[name]));
  const rows = $("checkpoints").querySelector("tbody");
  rows.replaceChildren();
  for (const c of checkpoints.data) {
    const row = document.createElement("tr");
    cell(row, c.step_number);
    cell(row, Object.entries(c.metrics).filter(([k]) => k !== "step")
      .map(([k, v]) => `${k}=${fixed(v)}`).join(", "));
    cell(row, c.location);
    rows.appendChild(row);
  }
  const list = $("events");
  list.replaceChildren();
  for (const e of events.data) {
    const item = document.createElement("li");
    item.className = `level-${e.level}`;
    item.textContent = `${new Date(e.created_at * 1000).toISOString()} ${e.message}`;
    list.appendChild(item);
  }
}

async function route() {
  clearTimeout(timer);
  if (!token()) { show("login"); return; }
  const match = location.hash.match(/^#\/jobs\/([a-z0-9-]+)$/);
  try {
    if (match) { await renderJob(match[1]); show("job"); } else { await renderJobs(); show("jobs"); }
    $("who").textContent = "signed in";
  } catch (error) {
    if (error.status === 401) {
      sessionStorage.removeItem("rlhf-token");
      $("login-error").textContent = error.message;
      show("login");
      return;
    }
    $("action-error").textContent = error.message;
  }
  timer = setTimeout(route, 5000);
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("rlhf-token", $("token").value.trim());
  $("login-error").textContent = "";
  route();
});

for (const button of document.querySelectorAll(".actions button")) {
  button.addEventListener("click", async () => {
    const match = location.hash.match(/^#\/jobs\/([a-z0-9-]+)$/);
    if (!match) return;
    $("action-error").textContent = "";
    try {
      await api(`/v1/fine_tuning/jobs/${match[1]}/${button.dataset.action}`, { method: "POST" });
    } catch (error) {
      $("action-error").textContent = error.message;
    }
    route();
  });
}

window.addEventListener("hashchange", route);
route();
