// kforge status page: hash-routed views over the JSON API (docs/API.md).
// Every server-provided string reaches the DOM as a text node, never as HTML.
'use strict';

const TOKEN_KEY = 'kforge-token';
const GPU_BACKENDS = ['cuda', 'rocm'];
const BACKENDS = ['cpu', ...GPU_BACKENDS];
const PHASES = ['queued', 'compiling', 'benchmarking', 'done', 'failed'];
const COLORS = { ok: '#4878d0', current: '#2e9d5b', failed: '#d65f5f', vendor: '#555', hit: '#2e9d5b' };
const EXAMPLE_REQUEST = JSON.stringify({
  backend: 'cpu', arch: 'native',
  source: '#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility("default")))\n' +
    'extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) ' +
    '{ if (workspace_size) { *workspace_size = 0; return 0; } for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i]; return 0; }',
});

// ---- DOM and formatting helpers

function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) { if (dv != null) el.dataset[dk] = dv; }
    else el.setAttribute(k, v === true ? '' : v);
  }
  el.append(...children.flat(Infinity).filter((c) => c != null && c !== false)
    .map((c) => (c instanceof Node ? c : String(c))));
  return el;
}

const badge = (text) => h('span', { class: `badge badge-${text}` }, text);
const empty = (text) => h('p', { class: 'empty' }, text);
const firstLine = (s) => (s ?? '').split('\n')[0];
const tensorText = (t) => `${t.name} [${(t.sizes ?? []).join(', ')}] ${t.dtype}`;
const summarize = (params) => Object.entries(params ?? {}).map(([k, v]) => `${k}=${v}`);

const fmt = {
  bytes(n) {
    if (n == null) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
    return `${i ? n.toFixed(1) : n} ${units[i]}`;
  },
  pct: (x) => (x == null ? '—' : `${(100 * x).toFixed(1)} %`),
  ms: (x) => (x == null ? '—' : `${x < 10 ? x.toFixed(4) : x.toFixed(1)} ms`),
  clock: (t) => new Date(t * 1000).toLocaleTimeString(),
  duration(s) {
    if (s == null) return '—';
    if (s < 60) return `${s.toFixed(1)} s`;
    const parts = [];
    for (const [unit, name] of [[86400, 'd'], [3600, 'h'], [60, 'min'], [1, 's']]) {
      const n = Math.floor(s / unit);
      s -= n * unit;
      if (n > 0 || parts.length) parts.push(`${n} ${name}`);
    }
    return parts.slice(0, 2).join(' ');
  },
  shell: (argv) => (argv ?? []).map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`)).join(' '),
  cell: (v) => (v == null ? '—' : v instanceof Node ? v : typeof v === 'object' ? JSON.stringify(v) : v),
};

function table(columns, rows, cls) {
  return h('table', { class: cls },
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, columns.map((c) => h('td', { class: `col-${c}` }, fmt.cell(r[c])))))));
}

function panel(name, title, ...content) {
  return h('section', { class: 'panel', data: { section: name } }, h('h3', {}, title), content);
}

function codeBlock(text, cls) {
  const code = h('code', { class: `language-cpp ${cls}` }, text);
  if (window.hljs) (hljs.highlightElement ?? hljs.highlightBlock).call(hljs, code);
  return h('pre', {}, code);
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch { // no clipboard API outside secure contexts
    const area = h('textarea', { class: 'offscreen', readonly: true });
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand('copy');
    area.remove();
    return ok;
  }
}

function copyable(name, text) {
  const button = h('button', { type: 'button', class: 'copy' }, 'copy');
  button.addEventListener('click', async () => {
    button.textContent = (await copyText(text)) ? 'copied' : 'copy failed';
    setTimeout(() => { button.textContent = 'copy'; }, 1500);
  });
  return h('div', { class: 'copyable', data: { wrapper: name } }, h('h4', {}, name, ' ', button), h('pre', {}, h('code', {}, text)));
}

// ---- API access, with a bearer token asked for once when the server answers 401

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let tokenPrompt = null;
let tokenDeclined = false;

function askToken() {
  if (tokenDeclined) return Promise.resolve(false);
  tokenPrompt ??= new Promise((resolve) => {
    const dialog = document.getElementById('token-dialog');
    const input = dialog.querySelector('input');
    input.value = '';
    dialog.addEventListener('close', () => {
      const token = input.value.trim();
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      tokenDeclined = !token;
      tokenPrompt = null;
      resolve(Boolean(token));
    }, { once: true });
    dialog.showModal();
  });
  return tokenPrompt;
}

async function problemText(res) {
  const text = await res.text();
  try {
    const p = JSON.parse(text);
    return [p.title, p.detail].filter(Boolean).join(': ') || text;
  } catch {
    return text || `${res.status} ${res.statusText}`;
  }
}

async function api(path, as = 'json') {
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const res = await fetch(path, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
    if (res.status === 401) {
      const current = sessionStorage.getItem(TOKEN_KEY);
      if (current && current !== token) continue; // a new token arrived while this call was out
      sessionStorage.removeItem(TOKEN_KEY);
      if (await askToken()) continue;
    }
    if (!res.ok) throw new HttpError(res.status, `${path}: ${await problemText(res)}`);
    return as === 'text' ? res.text() : res.json();
  }
}

function showError(error) {
  const banner = document.getElementById('error');
  banner.hidden = !error;
  banner.textContent = error ? `${error instanceof HttpError ? '' : 'server unreachable: '}${error.message}` : '';
}

// ---- Routing; each view's polls and charts end when the route changes

let generation = 0;
let charts = [];

function poll(ms, fn) {
  const gen = generation;
  const tick = async () => {
    if (gen !== generation) return;
    try {
      await fn();
      showError(null);
    } catch (e) {
      showError(e);
    }
    if (gen === generation) setTimeout(tick, ms);
  };
  tick();
}

function drawChart(canvas, config) {
  if (!window.Chart || !canvas.isConnected) return;
  const chart = Chart.getChart(canvas);
  if (chart) {
    chart.data = config.data;
    chart.options = config.options;
    chart.update('none');
  } else {
    charts.push(new Chart(canvas, config));
  }
}

const routes = [
  [/^#?\/?$/, 'overview', renderOverview],
  [/^#\/jobs$/, 'jobs', renderJobs],
  [/^#\/jobs\/([^/?]+)$/, 'jobs', renderJob],
  [/^#\/kernels(?:\?(.*))?$/, 'kernels', renderKernelList],
  [/^#\/kernels\/([^/?]+)$/, 'kernels', renderKernel],
];

function route() {
  generation++;
  charts.forEach((c) => c.destroy());
  charts = [];
  showError(null);
  const view = document.getElementById('view');
  view.replaceChildren();
  for (const [pattern, nav, render] of routes) {
    const m = location.hash.match(pattern);
    if (!m) continue;
    document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', a.dataset.nav === nav));
    return render(view, ...m.slice(1));
  }
  view.append(empty('no such page'));
}

// ---- Overview (#/)

function stat(name, label, value, note) {
  return h('div', { class: 'stat', data: { stat: name } }, h('dt', {}, label), h('dd', {}, value ?? '—'), note && h('small', {}, note));
}

function overviewFigures(s) {
  const c = s.cache ?? {};
  const q = s.queue ?? {};
  return [
    stat('version', 'version', s.version),
    stat('uptime', 'uptime', fmt.duration(s.uptime_s)),
    stat('sandbox', 'sandbox', s.sandbox?.mode, s.sandbox?.reason),
    stat('cache-entries', 'cache entries', c.entries),
    stat('cache-bytes', 'cache size', fmt.bytes(c.bytes)),
    stat('cache-limit', 'cache limit', c.max_bytes == null ? 'unbounded' : fmt.bytes(c.max_bytes)),
    stat('hit-rate', 'hit rate', fmt.pct(c.hit_rate),
      `${c.hits} hits · ${c.misses} misses · ${c.joins} joined · ${c.evictions} evicted`),
    stat('queue', 'queue', `${q.depth} / ${q.max}`),
    stat('workers', 'busy workers', `${q.busy} / ${q.workers}`),
    stat('rpm', 'requests / min', s.requests_per_minute?.toFixed(1)),
    stat('hits-served', 'hits served', String(s.hits?.total ?? 0), `${s.hits?.kernels ?? 0} kernels since start`),
  ];
}

// Hits are counted, not listed as jobs: by route and by client, since this instance started.
function hitsSection(s) {
  const hits = s.hits ?? {};
  const routes = Object.entries(hits.by_route ?? {}).sort((a, b) => b[1] - a[1]);
  const clients = hits.top_clients ?? [];
  if (!routes.length) return [];
  return [h('h2', {}, 'Hits'),
    h('div', { class: 'hits' },
      h('table', { class: 'hits-by-route' },
        h('thead', {}, h('tr', {}, h('th', {}, 'route'), h('th', {}, 'hits'))),
        h('tbody', {}, ...routes.map(([r, n]) => h('tr', { data: { route: r } }, h('td', {}, r), h('td', {}, String(n)))))),
      h('table', { class: 'hits-by-client' },
        h('thead', {}, h('tr', {}, ...['client', 'hits', 'last hit'].map((t) => h('th', {}, t)))),
        h('tbody', {}, ...clients.map((c) => h('tr', { data: { client: c.client } },
          h('td', {}, c.client), h('td', {}, String(c.hits)), h('td', {}, fmt.clock(c.last_at)))))))];
}

function backendCard(name, b = {}) {
  const dev = b.device ?? {};
  const toolchain = b.available
    ? h('dl', { class: 'toolchain' },
      h('dt', {}, 'compiler'), h('dd', {}, b.compiler),
      h('dt', {}, 'version'), h('dd', {}, firstLine(b.version)),
      h('dt', {}, 'native arch'), h('dd', {}, b.native ?? `none: ${b.native_reason}`))
    : h('p', { class: 'reason' }, `compiler unavailable: ${b.reason ?? 'not found'}`);
  const device = dev.available
    ? `device: ${dev.name}${dev.threads ? ` (${dev.threads} threads)` : ''}`
    : `${GPU_BACKENDS.includes(name) ? 'no GPU on this host' : 'no benchmark device'}: ${dev.reason ?? 'unknown'}`;
  // What the backend can do here: a compiler alone compiles; with a device it also runs
  // (benchmarks, autotunes).
  const can = !b.available ? 'unavailable' : dev.available ? 'compile and run' : 'compile only';
  const cls = !b.available ? 'unavailable' : dev.available ? 'run' : 'compile';
  return h('section', { class: 'backend', data: { backend: name, available: String(Boolean(b.available)), device: dev.available ? 'available' : 'unavailable', can } },
    h('h3', {}, name, ' ', h('span', { class: `badge badge-${cls}`, title: 'what this host can do with the backend' }, can)),
    toolchain,
    h('p', { class: `device ${dev.available ? '' : 'unavailable'}` }, device));
}

function emptyCacheHint() {
  return h('div', { class: 'banner hint', hidden: true, data: { state: 'empty-cache' } },
    h('p', {}, 'no kernels yet — try:'),
    h('pre', {}, `curl -s ${location.origin}/kernels -H 'Content-Type: application/json' -d '${EXAMPLE_REQUEST}'`));
}

function lastHourAxis(now) {
  const clock = (v) => new Date(v * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  return { type: 'linear', min: now - 3600, max: now, ticks: { stepSize: 600, callback: clock } };
}

function drawSeries(compileCanvas, hitCanvas, s) {
  const now = s.started_at + s.uptime_s; // the server's clock, not the browser's
  const compiles = s.series?.compile_seconds ?? [];
  const base = { animation: false, responsive: true, maintainAspectRatio: false, plugins: { legend: { display: false } } };
  drawChart(compileCanvas, {
    type: 'scatter',
    data: { datasets: [{ data: compiles.map((p) => ({ x: p.t, y: p.seconds })), backgroundColor: COLORS.ok }] },
    options: {
      ...base,
      scales: { x: lastHourAxis(now), y: { beginAtZero: true, title: { display: true, text: 'seconds' } } },
      onClick: (_, points) => { if (points.length) location.hash = `#/kernels/${compiles[points[0].index].key}`; },
    },
  });
  const buckets = (s.series?.hit_rate ?? []).filter((b) => b.hits + b.misses > 0);
  drawChart(hitCanvas, {
    type: 'line',
    data: { datasets: [{ data: buckets.map((b) => ({ x: b.t, y: (100 * b.hits) / (b.hits + b.misses) })), borderColor: COLORS.hit, backgroundColor: COLORS.hit }] },
    options: { ...base, scales: { x: lastHourAxis(now), y: { min: 0, max: 100, title: { display: true, text: '% hits' } } } },
  });
}

function chartFigure(caption, canvas) {
  return h('figure', {}, h('figcaption', {}, caption), h('div', { class: 'chart-box' }, canvas));
}

// The cluster (kforge serve --redis): the shared tier and every registered instance.
function clusterSection(s) {
  if (!s.cluster) return [];
  const tier = s.cluster.shared_tier ?? {};
  const rows = (s.cluster.instances ?? []).sort((a, b) => a.id.localeCompare(b.id)).map((i) =>
    h('tr', { class: 'instance', data: { instance: i.id } },
      h('td', {}, i.id === s.instance?.id ? h('strong', {}, i.id) : i.id),
      h('td', {}, i.url ?? ''), h('td', {}, i.version ?? ''),
      h('td', {}, `${i.queue?.depth ?? 0} / ${i.queue?.max ?? 0}`),
      h('td', {}, `${i.queue?.busy ?? 0} / ${i.queue?.workers ?? 0}`),
      h('td', {}, String(i.cache?.hits ?? 0)), h('td', {}, String(i.cache?.misses ?? 0)),
      h('td', {}, fmt.duration(i.uptime_s ?? 0))));
  return [h('h2', {}, 'Cluster'),
    h('p', { class: 'shared-tier' }, `Shared tier ${tier.url ?? ''}: `, badge(tier.up ? 'up' : 'down'),
      ` hits ${tier.counters?.hits ?? 0}, misses ${tier.counters?.misses ?? 0}, shared ${tier.counters?.puts ?? 0},`
      + ` corrupt ${tier.counters?.corrupt ?? 0}, lease waits ${tier.counters?.lease_waits ?? 0}`),
    h('table', { class: 'instances' },
      h('thead', {}, h('tr', {}, ...['instance', 'url', 'version', 'queue', 'busy', 'hits', 'misses', 'up'].map((t) => h('th', {}, t)))),
      h('tbody', {}, ...rows))];
}

function renderOverview(view) {
  const figures = h('dl', { class: 'figures' });
  const hint = emptyCacheHint();
  const backends = h('div', { class: 'backends' });
  const cluster = h('section', { class: 'cluster' });
  const hits = h('section', { class: 'hits-section' });
  const compileCanvas = h('canvas', { id: 'chart-compile' });
  const hitCanvas = h('canvas', { id: 'chart-hit-rate' });
  view.append(figures, hint, cluster, hits, h('h2', {}, 'Backends'), backends,
    h('div', { class: 'charts' },
      chartFigure('Compile time, last hour', compileCanvas),
      chartFigure('Cache hit rate per minute, last hour', hitCanvas)));
  poll(5000, async () => {
    const s = await api('/status');
    figures.replaceChildren(...overviewFigures(s));
    hint.hidden = s.cache?.entries !== 0;
    backends.replaceChildren(...BACKENDS.map((name) => backendCard(name, s.backends?.[name])));
    cluster.replaceChildren(...clusterSection(s));
    hits.replaceChildren(...hitsSection(s));
    drawSeries(compileCanvas, hitCanvas, s);
  });
  renderJobs(view);
}

// ---- Jobs (#/jobs, and below the overview)

function jobRow(j) {
  const phases = PHASES.filter((p) => j.phases?.[p] != null)
    .map((p) => h('span', { class: `phase phase-${p}` }, `${p} +${(j.phases[p] - j.created_at).toFixed(2)} s`));
  if (j.kind === 'prefetch') return prefetchRow(j, phases);
  const what = j.kind === 'autotune' ? `autotune ${j.template}` : j.template ?? 'source';
  return h('tr', { class: `job state-${j.state}`, data: { jobId: j.id, state: j.state, kind: j.kind, cache: j.cache ?? 'none', key: j.key } },
    h('td', { class: 'job-id' }, h('a', { href: `#/jobs/${j.id}` }, j.id), h('small', {}, fmt.clock(j.created_at))),
    h('td', { class: 'job-what' }, what, h('small', {}, j.key ? h('a', { href: `#/kernels/${j.key}`, class: 'kernel-link' }, j.kernel_name ?? j.key) : j.kernel_name,
      j.prefetch_job && ` (prefetch ${j.prefetch_job})`)),
    h('td', { class: 'job-target' }, j.backend, ' ', (j.archs ?? []).join(', ')),
    h('td', { class: 'job-state' }, badge(j.state), h('span', { class: 'phases' }, phases),
      j.error && h('div', { class: 'job-error' }, j.error.detail ?? j.error.title)),
    h('td', { class: 'job-cache' }, j.cache ?? '—'),
    h('td', { class: 'job-client' }, j.client));
}

// ---- Prefetch jobs (POST /prefetch): a row with its progress, and #/jobs/{id} per entry

const prefetchCounts = (p) => `${p.done}/${p.total} · hit ${p.hit} · built ${p.built} · failed ${p.failed}`;

function progressBar(p) {
  const pct = p.total ? (100 * p.done) / p.total : 0;
  return h('div', { class: 'progress', title: `${pct.toFixed(0)} %` }, h('div', { class: 'progress-done', style: `width: ${pct}%` }));
}

function prefetchRow(j, phases) {
  const p = j.prefetch ?? {};
  return h('tr', { class: `job state-${j.state}`, data: { jobId: j.id, state: j.state, kind: j.kind, cache: 'none', done: p.done, total: p.total, failed: p.failed } },
    h('td', { class: 'job-id' }, h('a', { href: `#/jobs/${j.id}` }, j.id), h('small', {}, fmt.clock(j.created_at))),
    h('td', { class: 'job-what' }, 'prefetch', h('small', {}, j.label)),
    h('td', { class: 'job-target' }, j.backend, ' ', (j.archs ?? []).join(', ')),
    h('td', { class: 'job-state' }, badge(j.state), h('span', { class: 'phases' }, phases),
      j.error && h('div', { class: 'job-error' }, j.error.detail ?? j.error.title)),
    h('td', { class: 'job-cache job-progress' }, progressBar(p), h('small', {}, prefetchCounts(p))),
    h('td', { class: 'job-client' }, j.client));
}

// #/jobs/{id}: any job. A prefetch shows its entries; a build, autotune or failure its phases,
// target, outcome and (when done) a link to its kernel, until it ends.
async function renderJob(view, id) {
  const box = h('section', { class: 'job-detail', data: { jobId: id, state: 'loading' } }, empty('loading…'));
  view.append(box);
  let j;
  try {
    j = await api(`/jobs/${encodeURIComponent(id)}`);
  } catch (e) {
    box.dataset.state = e.status === 404 || e.status === 400 ? 'missing' : 'error';
    box.replaceChildren(h('div', { class: 'banner error' }, h('h2', {}, box.dataset.state === 'missing' ? 'no such job' : 'could not load the job'), h('p', {}, e.message)));
    return;
  }
  if (j.kind === 'prefetch') {
    box.remove();
    renderPrefetch(view, id);
    return;
  }
  let last = '';
  poll(1000, async () => {
    const job = await api(`/jobs/${encodeURIComponent(id)}`);
    const text = JSON.stringify(job);
    if (text === last) return;
    last = text;
    box.dataset.state = job.state;
    box.dataset.kind = job.kind;
    box.replaceChildren(jobDetail(job));
  });
}

function jobDetail(j) {
  const phases = PHASES.filter((p) => j.phases?.[p] != null)
    .map((p) => h('span', { class: `phase phase-${p}` }, `${p} +${(j.phases[p] - j.created_at).toFixed(2)} s`));
  const what = j.kind === 'autotune' ? `autotune ${j.template ?? ''}` : `${j.kind} ${j.template ?? 'source'}`;
  const r = j.result ?? {};
  const meta = [
    ['kind', what],
    ['state', h('span', {}, badge(j.state), h('span', { class: 'phases' }, phases))],
    ['target', `${j.backend ?? ''} ${(j.archs ?? []).join(', ')}`],
    ['created', fmt.clock(j.created_at)],
    ['client', j.client],
    ['cache', j.cache],
    ['kernel', j.key && h('a', { href: `#/kernels/${j.key}`, class: 'kernel-link' }, j.kernel_name ?? j.key)],
    ['winner', r.winner?.key && h('a', { href: `#/kernels/${r.winner.key}` }, r.winner.kernel_name)],
    ['prefetch', j.prefetch_job && h('a', { href: `#/jobs/${j.prefetch_job}` }, j.prefetch_job)],
    ['HTTP status', j.http_status],
  ].filter(([, v]) => v != null && v !== '');
  return h('div', {},
    h('h2', {}, `Job ${j.id}`),
    h('dl', { class: 'meta' }, meta.map(([dt, dd]) => [h('dt', {}, dt), h('dd', {}, dd)])),
    j.error && h('div', { class: 'banner error job-error-box' }, h('h3', {}, j.error.title ?? 'failed'), h('p', { class: 'job-error' }, j.error.detail),
      r.log && h('pre', { class: 'log' }, r.log)));
}

function renderPrefetch(view, id) {
  const head = h('div', { class: 'prefetch-head' });
  const rows = h('tbody');
  view.append(h('section', { class: 'prefetch', data: { jobId: id } }, h('h2', {}, `Prefetch ${id}`), head,
    h('table', { class: 'prefetch-entries' },
      h('thead', {}, h('tr', {}, ['#', 'label', 'outcome', 'cache', 'kernel', 'error'].map((c) => h('th', {}, c)))),
      rows)));
  const entries = new Map(); // index -> entry, from each event's `recent`, then the result
  let last = '';
  poll(1000, async () => {
    const j = await api(`/jobs/${encodeURIComponent(id)}`);
    const p = j.prefetch ?? {};
    for (const e of p.recent ?? []) entries.set(e.index, e);
    const result = j.result?.entries ?? j.result?.prefetch?.entries;
    for (const e of result ?? []) if (e.outcome) entries.set(e.index, e);
    const text = JSON.stringify([j.state, p, entries.size]);
    if (text === last) return;
    last = text;
    head.replaceChildren(h('span', {}, badge(j.state), ' ', j.label ?? '', progressBar(p), h('span', { class: 'prefetch-counts' }, prefetchCounts(p)),
      j.error && h('div', { class: 'job-error' }, j.error.detail ?? j.error.title)));
    rows.replaceChildren(...[...entries.values()].sort((a, b) => a.index - b.index).map((e) =>
      h('tr', { class: `entry outcome-${e.outcome}`, data: { index: e.index, outcome: e.outcome } },
        h('td', {}, e.index), h('td', {}, e.label ?? ''), h('td', {}, badge(e.outcome)), h('td', {}, e.cache ?? '—'),
        h('td', { class: 'col-kernel' }, e.key && e.outcome !== 'failed' ? h('a', { href: `#/kernels/${e.key}` }, e.kernel_name ?? e.key) : e.kernel_name ?? ''),
        h('td', {}, e.error && h('div', { class: 'job-error' }, e.error.detail, e.error.log && h('pre', {}, e.error.log))))));
  });
}

function renderJobs(view) {
  const rows = h('tbody');
  const none = empty('no jobs yet');
  view.append(h('section', { class: 'jobs' }, h('h2', {}, 'Jobs'),
    h('table', { class: 'jobs-table' },
      h('thead', {}, h('tr', {}, ['id', 'what', 'target', 'state', 'cache', 'client'].map((c) => h('th', {}, c)))),
      rows),
    none));
  let last = '';
  poll(1000, async () => {
    const { jobs = [] } = await api('/jobs');
    const text = JSON.stringify(jobs);
    if (text === last) return;
    last = text;
    rows.replaceChildren(...jobs.map(jobRow));
    none.hidden = jobs.length > 0;
  });
}

// ---- Kernels (#/kernels?prefix=&name=&template=&backend=&status=&cursor=): a page of the cache

const KERNEL_FILTERS = ['prefix', 'name', 'template', 'backend', 'status'];

function kernelFilters(params, templates) {
  const select = (name, options) => h('select', { name },
    options.map(([value, label]) => h('option', { value, selected: params.get(name) === value || (!params.has(name) && value === '*') }, label)));
  const form = h('form', { class: 'kernel-filters' },
    h('label', {}, 'key prefix', h('input', { name: 'prefix', value: params.get('prefix') ?? '', placeholder: '8e2e55', autocomplete: 'off', spellcheck: 'false' })),
    h('label', {}, 'name contains', h('input', { name: 'name', value: params.get('name') ?? '', placeholder: 'gemm', autocomplete: 'off' })),
    h('label', {}, 'template', select('template', [['*', 'any'], ['', '(source mode)'], ...templates.map((t) => [t, t])])),
    h('label', {}, 'backend', select('backend', [['*', 'any'], ...BACKENDS.map((b) => [b, b])])),
    h('label', {}, 'status', select('status', [['*', 'any'], ['ok', 'ok'], ['failed', 'failed (cached error)']])),
    h('button', { type: 'submit' }, 'Search'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const name of KERNEL_FILTERS) {
      const v = form.elements[name].value;
      if (form.elements[name].tagName === 'SELECT' ? v !== '*' : v.trim()) q.set(name, v.trim());
    }
    const qs = q.toString();
    location.hash = `#/kernels${qs ? `?${qs}` : ''}`;
  });
  return form;
}

function kernelRow(k) {
  return h('tr', { class: `kernel-row status-${k.status}`, data: { key: k.key, status: k.status, backend: k.backend, template: k.template ?? '' } },
    h('td', { class: 'col-kernel' }, h('a', { href: `#/kernels/${k.key}` }, k.kernel_name || k.key)),
    h('td', { class: 'col-key' }, k.key.slice(0, 16) + '…'),
    // A cpu target lists every feature: its -march name is enough here (the whole in the title).
    h('td', { title: (k.archs ?? []).join(', ') }, `${k.backend} ${(k.archs ?? []).map((a) => a.split('+')[0] + (a.includes('+') ? '+…' : '')).join(', ')}`),
    h('td', {}, k.template ?? 'source'),
    h('td', {}, badge(k.status)),
    h('td', {}, new Date(k.created_at * 1000).toLocaleString()),
    h('td', {}, fmt.bytes(k.bytes)));
}

async function renderKernelList(view, query = '') {
  const params = new URLSearchParams(query);
  const gen = generation;
  const templates = await api('/templates').then((t) => (t.templates ?? []).map((x) => x.name)).catch(() => []);
  if (gen !== generation) return; // the route changed meanwhile
  const rows = h('tbody');
  const summary = h('span', { class: 'kernels-total' });
  const pager = h('div', { class: 'pager' }, summary);
  const none = empty('no kernel matches');
  view.append(h('section', { class: 'kernels' }, h('h2', {}, 'Kernels'),
    h('p', {}, 'Every kernel in this instance\'s cache, cache hits included (hits are not jobs), newest first.'),
    kernelFilters(params, templates),
    h('table', { class: 'kernels-table' },
      h('thead', {}, h('tr', {}, ['kernel', 'key', 'target', 'template', 'status', 'built', 'size'].map((c) => h('th', {}, c)))),
      rows),
    none, pager));
  const q = new URLSearchParams();
  for (const name of [...KERNEL_FILTERS, 'cursor']) if (params.has(name)) q.set(name, params.get(name));
  q.set('limit', '50');
  let last = '';
  poll(5000, async () => {
    const page = await api(`/kernels?${q}`);
    const text = JSON.stringify(page);
    if (text === last) return;
    last = text;
    rows.replaceChildren(...page.kernels.map(kernelRow));
    none.hidden = page.kernels.length > 0;
    summary.textContent = `${page.kernels.length} of ${page.total}${params.has('cursor') ? ' (a later page)' : ''}`;
    const links = [];
    if (params.has('cursor')) {
      const first = new URLSearchParams(params);
      first.delete('cursor');
      links.push(h('a', { href: `#/kernels?${first}`, class: 'first-page' }, '« newest'));
    }
    if (page.next) {
      const next = new URLSearchParams(params);
      next.set('cursor', page.next);
      links.push(h('a', { href: `#/kernels?${next}`, class: 'next-page' }, 'older ›'));
    }
    pager.replaceChildren(summary, ...links);
  });
}

// ---- Kernel detail (#/kernels/{key})

function benchmarksTable(benchmarks) {
  const rows = Object.entries(benchmarks ?? {}).map(([digest, b]) => ({
    device: b.device?.name ?? digest.slice(0, 12),
    status: b.status,
    median: fmt.ms(b.median_ms),
    min: fmt.ms(b.min_ms),
    iters: b.iters,
    verify: b.verify && `${b.verify.passed ? 'passed' : 'FAILED'} (max abs err ${b.verify.max_abs_err})`,
    vendor: b.vendor?.median_ms != null ? `${b.vendor.name} ${fmt.ms(b.vendor.median_ms)}` : null,
    'vs vendor': b.vs_vendor != null ? `${b.vs_vendor.toFixed(2)}×` : null,
    reason: b.reason,
  }));
  return rows.length ? table(Object.keys(rows[0]), rows, 'benchmarks') : empty('not benchmarked');
}

function resourcesTable(usage) {
  const rows = Array.isArray(usage) ? usage : usage ? [usage] : [];
  const columns = [...new Set(rows.flatMap(Object.keys))];
  return rows.length ? table(columns, rows, 'resources') : empty('none reported');
}

function autotunePanel(at, key) {
  const rows = (at.choices ?? []).map((c) => ({
    rank: c.rank,
    status: c.status,
    median: fmt.ms(c.median_ms),
    params: summarize(c.params).join(' '),
    kernel: c.key ? h('a', { href: `#/kernels/${c.key}`, class: c.key === key ? 'this' : null }, c.kernel_name) : null,
    error: c.error && `${c.error.stage}: ${c.error.reason}`,
  }));
  const vendor = at.vendor?.median_ms != null ? `; ${at.vendor.name} ${fmt.ms(at.vendor.median_ms)}` : '';
  const vs = at.vs_vendor != null ? `, ${at.vs_vendor.toFixed(2)}× vendor` : '';
  return panel('autotune', 'Autotune',
    h('p', {}, `${at.template} on ${at.backend}: ${rows.length} choices; winner ${at.winner?.kernel_name ?? 'none'}${vs}${vendor}`),
    h('div', { class: 'chart-box' }, h('canvas', { id: 'autotune-chart' })),
    table(Object.keys(rows[0] ?? {}), rows, 'choices'));
}

function drawAutotune(canvas, at, key) {
  const choices = at.choices ?? [];
  const color = (c) => (c.key === key ? COLORS.current : c.status === 'ok' ? COLORS.ok : COLORS.failed);
  const label = (c) => {
    const parts = summarize(c.params);
    const lines = [];
    for (let i = 0; i < parts.length; i += 3) lines.push(parts.slice(i, i + 3).join(' '));
    return c.status === 'ok' ? lines : [`✗ ${c.status}`, ...lines];
  };
  const datasets = [{ type: 'bar', label: 'median ms', data: choices.map((c) => c.median_ms ?? 0), backgroundColor: choices.map(color) }];
  if (at.vendor?.median_ms != null) {
    datasets.push({ type: 'line', label: `${at.vendor.name} (vendor)`, data: choices.map(() => at.vendor.median_ms),
      borderColor: COLORS.vendor, borderDash: [6, 4], pointRadius: 0, fill: false });
  }
  drawChart(canvas, {
    type: 'bar',
    data: { labels: choices.map(label), datasets },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false,
      scales: { y: { beginAtZero: true, title: { display: true, text: 'median ms' } } },
      plugins: { tooltip: { callbacks: { afterLabel: (ctx) => choices[ctx.dataIndex]?.error?.reason ?? '' } } },
    },
  });
}

function kernelHeader(k) {
  const meta = [
    ['key', k.key],
    ['backend', `${k.backend} ${(k.archs ?? []).join(', ')}`],
    ['built by', k.built_by && `instance ${k.built_by}`],
    ['hits', k.hits && h('span', { data: { hits: String(k.hits.count) } },
      `${k.hits.count}${k.hits.last_at ? `, last ${fmt.clock(k.hits.last_at)}` : ''} (this instance, since it started)`)],
    ['template', k.template && `${k.template.name ?? k.template.template} ${summarize(k.template.params).join(' ')}`],
    ['tensors', k.template?.inputs && [...k.template.inputs, k.template.output].map(tensorText).join(', ')],
    ['artifact', k.artifact && h('span', {}, h('a', { href: k.artifact.url, download: `${k.kernel_name}.so` }, `${k.kernel_name}.so`),
      ` ${fmt.bytes(k.artifact.bytes)}, sha256 ${k.artifact.sha256}`)],
  ].filter(([, v]) => v);
  return h('div', { class: 'kernel-header' },
    h('h2', {}, k.kernel_name, ' ', badge(k.status)),
    h('dl', { class: 'meta' }, meta.map(([dt, dd]) => [h('dt', {}, dt), h('dd', {}, dd)])));
}

// Why the kernel was built: the nearest entry of the same kernel cached before it, and each
// key input that differs (GET /kernels/{key}/why).
function whyPanel(why) {
  if (!why) return null;
  const valueText = (v) => (Array.isArray(v) && v.every((x) => typeof x === 'string') ? v.join(' ') || '(none)'
    : typeof v === 'string' ? v : JSON.stringify(v));
  const reasons = why.miss_reason ?? [];
  const near = why.nearest;
  return panel('why', 'Why it was built',
    h('p', { class: 'why-nearest' }, near
      ? ['nearest earlier entry: ', h('a', { href: `#/kernels/${near.key}` }, near.kernel_name), ` (${fmt.clock(near.created_at)})`]
      : 'no earlier entry of this kernel to compare with'),
    h('table', { class: 'why' },
      h('thead', {}, h('tr', {}, ['input', 'was', 'now'].map((c) => h('th', {}, c)))),
      h('tbody', {}, reasons.map((r) => h('tr', { data: { input: r.input } },
        h('td', { class: 'col-input' }, r.input),
        r.diff != null ? h('td', { colspan: 2 }, h('pre', { class: 'diff' }, r.diff))
          : r.was === undefined ? h('td', { colspan: 2 }, r.detail ?? '')
            : [h('td', { class: 'col-was' }, valueText(r.was)), h('td', { class: 'col-now' }, valueText(r.now), r.detail ? h('small', {}, ` ${r.detail}`) : null)])))));
}

async function renderKernel(view, key) {
  const box = h('div', { class: 'kernel', data: { state: 'loading' } }, empty('loading…'));
  view.append(box);
  let k;
  try {
    k = await api(`/kernels/${encodeURIComponent(key)}`);
  } catch (e) {
    box.dataset.state = e.status === 404 || e.status === 400 ? 'missing' : 'error';
    const title = box.dataset.state === 'missing' ? 'no such kernel' : 'could not load the kernel';
    box.replaceChildren(h('div', { class: 'banner error' }, h('h2', {}, title), h('p', {}, e.message)));
    return;
  }
  const text = (url) => api(url, 'text').catch((e) => `(${e.message})`);
  const [source, log, why] = await Promise.all([text(k.source_url), text(k.log_url),
    api(`/kernels/${encodeURIComponent(key)}/why`).catch(() => null)]);
  const failed = k.status === 'failed';
  const c = k.compile ?? {};
  const abi = k.abi ?? {};
  const logPanel = panel('log', 'Compiler log', h('pre', { class: 'log' }, log));
  box.dataset.state = k.status;
  box.replaceChildren(...[
    kernelHeader(k),
    failed && h('div', { class: 'banner error', data: { state: 'compile-failed' } },
      h('h3', {}, 'compilation failed'), h('p', {}, 'A cached compile error (a negative entry); the compiler log follows.')),
    failed && logPanel,
    panel('source', 'Source', codeBlock(source, 'source')),
    whyPanel(why),
    panel('compile', 'Compile',
      h('pre', { class: 'argv' }, fmt.shell(c.argv)),
      h('p', {}, `${c.compiler ?? ''} — ${firstLine(c.version)} — ${c.seconds?.toFixed(3) ?? '?'} s`)),
    !failed && logPanel,
    panel('abi', 'ABI',
      h('pre', { class: 'signature' }, abi.signature),
      h('p', {}, `workspace: ${abi.workspace_bytes == null ? 'unknown (the kernel answers the workspace query)' : fmt.bytes(abi.workspace_bytes)}`),
      table(['name', 'kind', 'ctype', 'binds', 'dtype', 'value'], abi.args ?? [], 'args')),
    k.wrapper && panel('wrappers', 'Wrappers', copyable('python', k.wrapper.python), copyable('cpp', k.wrapper.cpp)),
    !failed && panel('resources', 'Resource usage', resourcesTable(c.resource_usage ?? c.resources)),
    !failed && panel('benchmarks', 'Benchmarks', benchmarksTable(k.benchmarks)),
    k.autotune && autotunePanel(k.autotune, k.key),
  ].filter(Boolean));
  if (k.autotune) drawAutotune(box.querySelector('#autotune-chart'), k.autotune, k.key);
}

window.addEventListener('hashchange', route);
route();
