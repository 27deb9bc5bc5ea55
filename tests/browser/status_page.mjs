#!/usr/bin/env node
// End-to-end test of the status page (web/): starts a real kforge server on a fresh cache,
// submits real work (a compile, a compile error, a cpu autotune, a prefetch), then drives the page in
// headless Chromium and checks what it shows.
//
//   npm ci && node status_page.mjs --kforge ../../build/bin/kforge --out /tmp/shots [--web-dir ../../web]
//
// --web-dir serves the page's own files from disk (kforge serve --web-dir) instead of the
// copies embedded in the binary. CHROMIUM overrides /usr/bin/chromium.
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const { values: opts } = parseArgs({ options: { kforge: { type: 'string' }, out: { type: 'string' }, 'web-dir': { type: 'string' } } });
if (!opts.kforge || !opts.out) {
  console.error('usage: node status_page.mjs --kforge PATH/TO/kforge --out DIR [--web-dir DIR]');
  process.exit(2);
}

const WAIT_MS = 10_000;

// A cpu source-mode kernel computing y = <expr>; `terminator: ''` makes it a compile error.
const sourceRequest = (expr, terminator = ';') => ({
  backend: 'cpu', arch: 'native',
  source: '#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility("default")))\n' +
    'extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) ' +
    `{ if (workspace_size) { *workspace_size = 0; return 0; } for (int64_t i = 0; i < n; ++i) y[i] = ${expr}; return 0${terminator} }`,
});
const tensor = (name) => ({ name, dtype: 'float32', sizes: [64, 64], strides: [64, 1] });
const AUTOTUNE_REQUEST = {
  backend: 'cpu', arch: 'native', template: 'gemm', inputs: [tensor('a'), tensor('b')], output: tensor('c'),
  choices: 'default', benchmark: { verify: true, budget_ms: 20 },
};

class AssertionFailed extends Error {}
let passed = 0;
function check(ok, what, detail = '') {
  if (!ok) throw new AssertionFailed(detail ? `${what}: ${detail}` : what);
  console.log(`  ok ${++passed} - ${what}`);
}

// ---- the server

async function startServer(cacheDir, extraArgs = []) {
  const args = ['serve', '--port', '0', '--cache-dir', cacheDir, ...extraArgs, ...(opts['web-dir'] ? ['--web-dir', opts['web-dir']] : [])];
  const proc = spawn(opts.kforge, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log = (log + d).slice(-4000); });
  const lines = readline.createInterface({ input: proc.stdout });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`kforge printed nothing within ${WAIT_MS / 1000} s`)), WAIT_MS);
    lines.once('line', (line) => {
      clearTimeout(timer);
      const m = line.match(/^listening on (http:\/\/\S+)/);
      m ? resolve(m[1]) : reject(new Error(`unexpected first line from kforge: ${line}`));
    });
    proc.once('error', reject);
    proc.once('exit', (code) => reject(new Error(`kforge exited (${code}) before listening:\n${log}`)));
  });
  lines.on('line', () => {}); // keep draining stdout
  return { proc, url, log: () => log };
}

async function stopServer(server) {
  if (server.proc.exitCode !== null) return;
  const exited = new Promise((resolve) => server.proc.once('exit', resolve));
  server.proc.kill('SIGTERM');
  const timer = setTimeout(() => server.proc.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

async function call(base, method, route, body) {
  const res = await fetch(base + route, {
    method, headers: { 'Content-Type': 'application/json' }, body: body && JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

// ---- the page

async function expectShown(page, selector, what, hasText) {
  const loc = page.locator(selector, hasText ? { hasText } : {}).first();
  try {
    await loc.waitFor({ timeout: WAIT_MS });
  } catch {
    throw new AssertionFailed(`${what}: nothing matches ${selector}${hasText ? ` containing "${hasText}"` : ''} within ${WAIT_MS / 1000} s`);
  }
  check(true, what);
  return loc;
}

// The canvas has a Chart.js chart and some painted pixels.
const chartDrawn = (page, selector) => page.evaluate((sel) => {
  const canvas = document.querySelector(sel);
  const chart = canvas && window.Chart?.getChart(canvas);
  if (!chart) return null;
  const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < px.length; i += 4) painted += px[i] > 0;
  return { painted, labels: chart.data.labels?.length ?? 0 };
}, selector);

const go = (page, hash) => page.evaluate((h) => { location.hash = h; }, hash);

async function checkEmptyCache(page, base) {
  await page.goto(`${base}/`);
  await expectShown(page, '[data-state="empty-cache"]', 'an empty cache shows the "no kernels yet" hint', 'no kernels yet');
}

async function checkOverview(page, base, status) {
  await page.goto(`${base}/`);
  const stat = (name) => page.locator(`[data-stat="${name}"] dd`).textContent();
  await expectShown(page, '[data-stat="version"] dd', 'overview rendered');
  check(await page.locator('[data-state="empty-cache"]').isHidden(), 'overview hides the empty-cache hint');
  check((await stat('version')) === status.version, 'overview shows the version', await stat('version'));
  const entries = Number(await stat('cache-entries'));
  check(entries >= 2, 'overview shows at least 2 cache entries', `shows ${entries}`);
  check(/^\d+(\.\d+)? %$/.test(await stat('hit-rate')), 'overview shows a hit rate', await stat('hit-rate'));
  check(Number(await stat('hits-served')) >= 1, 'overview counts the hits served', await stat('hits-served'));
  await expectShown(page, '.hits-by-route tr[data-route="POST /kernels"]', 'overview lists hits by route', 'POST /kernels');

  await expectShown(page, '[data-backend="cpu"][data-available="true"][data-device="available"]', 'cpu backend shown available with its device');
  await expectShown(page, '[data-backend="cpu"] h3 .badge', 'cpu badge says it compiles and runs here', 'compile and run');
  for (const gpu of ['cuda', 'rocm']) {
    const b = status.backends[gpu] ?? {};
    const dev = b.device ?? {};
    const card = `[data-backend="${gpu}"] .device`;
    if (dev.available) await expectShown(page, card, `${gpu} device shown available`, dev.name);
    else await expectShown(page, card, `${gpu} shows "no GPU on this host" with the reason`, `no GPU on this host: ${dev.reason}`);
    // The badge says what the backend can do here: never "available" beside "no GPU".
    const can = !b.available ? 'unavailable' : dev.available ? 'compile and run' : 'compile only';
    await expectShown(page, `[data-backend="${gpu}"][data-can="${can}"] h3 .badge`, `${gpu} badge says "${can}"`, can);
  }
  const compileChart = await chartDrawn(page, '#chart-compile');
  check(compileChart?.painted > 0, 'compile-time chart drawn', JSON.stringify(compileChart));
  await page.screenshot({ path: path.join(opts.out, 'overview.png'), fullPage: true });
}

async function checkJobs(page, base, work) {
  await go(page, '#/jobs');
  const row = (attrs) => `.jobs-table tr${Object.entries(attrs).map(([k, v]) => `[data-${k}="${v}"]`).join('')}`;
  const done = row({ key: work.ok.key, state: 'done', cache: 'miss' });
  await expectShown(page, done, 'jobs: the compile is done with a cache miss');
  await expectShown(page, `${done} .job-what`, 'jobs: the compile is listed as source mode', 'source');
  await expectShown(page, `${done} .phase-compiling`, 'jobs: the compile shows its compiling phase');
  await expectShown(page, `${done} .job-what a[href="#/kernels/${work.ok.key}"]`, 'jobs: the compile links to its kernel');
  check(await page.locator(row({ key: work.ok.key, cache: 'hit' })).count() === 0, 'jobs: the repeated compile (a hit) is not a job');
  await expectShown(page, `${row({ state: 'failed' })} .job-error`, 'jobs: the compile error is failed with its detail', 'compilation failed');
  await expectShown(page, row({ kind: 'autotune', state: 'done', key: work.winner.key }), 'jobs: the autotune is done and links to its winner');
  await page.screenshot({ path: path.join(opts.out, 'jobs.png'), fullPage: true });

  // #/jobs/{id} shows any job, not only prefetches (it said "Prefetch … undefined/undefined").
  await page.click(`${done} .job-id a`);
  await expectShown(page, '.job-detail[data-state="done"][data-kind="kernel"] .kernel-link', 'job page: a build shows its kernel', work.ok.kernel_name);
  await expectShown(page, '.job-detail dd', 'job page: a build shows its cache outcome', 'miss');
  check(!/undefined|Prefetch/.test(await page.locator('#view').innerText()), 'job page: no prefetch view, nothing undefined');
  await go(page, '#/jobs');
  await page.click(`${row({ state: 'failed' })} .job-id a`);
  await expectShown(page, '.job-detail[data-state="failed"] .job-error', 'job page: a failed build shows the compiler error', 'error:');
  await go(page, '#/jobs');

  // Live update: a new job shows up without a reload.
  await page.evaluate(() => { window.kforgeNoReload = true; });
  const fresh = await call(base, 'POST', '/kernels', sourceRequest('3 * x[i]'));
  check(fresh.status === 200, 'a new compile while the page is open answers 200', fresh.text.slice(0, 300));
  await expectShown(page, row({ key: fresh.json.key, state: 'done' }), 'jobs: the new compile appears live');
  check(await page.evaluate(() => window.kforgeNoReload === true), 'jobs: the page was not reloaded');

  // A prefetch: one hit (the kernel just compiled), one to build, one compile error.
  const prefetch = await call(base, 'POST', '/prefetch', {
    label: 'browser-model', wait_ms: 60000,
    requests: [sourceRequest('3 * x[i]'), sourceRequest('4 * x[i]'), { ...sourceRequest('5 * x[i]', ''), label: 'broken' }],
  });
  check(prefetch.status === 200 && prefetch.json.result?.failed === 1, 'a prefetch answers 200 with its result (wait_ms)', prefetch.text.slice(0, 300));
  const pf = row({ kind: 'prefetch', state: 'done', done: 3, total: 3, failed: 1 });
  await expectShown(page, pf, 'jobs: the prefetch is listed done with its progress');
  await expectShown(page, `${pf} .job-progress`, 'jobs: the prefetch row shows its counts', 'hit 1 · built 1 · failed 1');
  await expectShown(page, `${pf} .job-what`, 'jobs: the prefetch row shows its label', 'browser-model');
  await page.click(`${pf} .job-id a`);
  await expectShown(page, `.prefetch[data-job-id="${prefetch.json.id}"] .prefetch-counts`, 'prefetch page: counts', '3/3');
  await expectShown(page, '.prefetch-entries tr[data-outcome="hit"][data-index="0"]', 'prefetch page: the cached entry is a hit');
  await expectShown(page, '.prefetch-entries tr[data-outcome="built"][data-index="1"] a[href^="#/kernels/"]', 'prefetch page: the built entry links to its kernel');
  await expectShown(page, '.prefetch-entries tr[data-outcome="failed"][data-index="2"] .job-error', 'prefetch page: the failed entry shows its error', 'compilation failed');
  await page.screenshot({ path: path.join(opts.out, 'prefetch.png'), fullPage: true });
}

// #/kernels: every cache entry, hits included, searchable; each row opens the kernel page.
async function checkKernelList(page, work) {
  await go(page, '#/kernels');
  const row = (key) => `.kernels-table tr[data-key="${key}"]`;
  await expectShown(page, row(work.ok.key), 'kernels: the kernel that was a cache hit is listed');
  await expectShown(page, `${row(work.bad.key)}[data-status="failed"]`, 'kernels: the cached compile error is listed, failed');
  await expectShown(page, `${row(work.winner.key)}[data-template="gemm"]`, 'kernels: the autotune winner is listed with its template');
  await expectShown(page, '.kernels-total', 'kernels: the count is shown', ' of ');
  await page.selectOption('.kernel-filters select[name="status"]', 'failed');
  await page.click('.kernel-filters button');
  // The two cached compile errors: the one submitted above and the prefetch's broken entry.
  await expectShown(page, '.kernels-total', 'kernels: filtered by status', '2 of 2');
  check(await page.locator('.kernels-table tr.kernel-row:not([data-status="failed"])').count() === 0, 'kernels: only failed entries are left');
  await expectShown(page, row(work.bad.key), 'kernels: the submitted compile error is among them');
  check(page.url().includes('status=failed'), 'kernels: the filter is in the address', page.url());
  await go(page, `#/kernels?prefix=${work.ok.key.slice(0, 10)}`);
  await expectShown(page, '.kernels-total', 'kernels: a key prefix finds one kernel', '1 of 1');
  await go(page, '#/kernels?template=gemm&backend=cpu');
  await expectShown(page, row(work.winner.key), 'kernels: template and backend filters keep the gemm kernels');
  check(await page.locator(row(work.ok.key)).count() === 0, 'kernels: a source-mode kernel is not a gemm');
  await go(page, `#/kernels?name=${encodeURIComponent(work.ok.kernel_name.slice(4))}`);
  await page.click(`${row(work.ok.key)} a`);
  await expectShown(page, `.kernel[data-state="ok"] h2`, 'kernels: a row opens its kernel page', work.ok.kernel_name);
  await page.screenshot({ path: path.join(opts.out, 'kernels.png'), fullPage: true });
}

async function checkKernels(page, work) {
  const { winner, autotune } = work;
  await go(page, `#/kernels/${winner.key}`);
  await expectShown(page, '.kernel[data-state="ok"]', 'kernel detail of the autotune winner rendered');
  await expectShown(page, 'code.hljs', 'kernel source highlighted with the kernel name', winner.kernel_name);
  check(await page.locator('code.hljs span').count() > 0, 'kernel source has highlight markup');
  await expectShown(page, '[data-section="log"] pre.log', 'kernel compile log shown', '$ ');
  await expectShown(page, '[data-wrapper="python"] pre', 'python wrapper shown', winner.kernel_name);
  await expectShown(page, '[data-wrapper="cpp"] pre', 'cpp wrapper shown', winner.kernel_name);
  await expectShown(page, '#autotune-chart', 'autotune chart canvas present');
  const chart = await chartDrawn(page, '#autotune-chart');
  check(chart?.painted > 0 && chart.labels === autotune.choices.length,
    `autotune chart drawn with all ${autotune.choices.length} choices`, JSON.stringify(chart));
  await page.screenshot({ path: path.join(opts.out, 'kernel.png'), fullPage: true });

  await go(page, `#/kernels/${work.ok.key}`);
  await expectShown(page, '.kernel[data-state="ok"] [data-hits="1"]', 'kernel page shows its hit count', '1, last ');
  await go(page, `#/kernels/${work.bad.key}`);
  await expectShown(page, '.kernel[data-state="failed"] [data-state="compile-failed"]', 'failed kernel shown as a compile error');
  await expectShown(page, '[data-section="log"] pre.log', 'failed kernel shows the compiler log', 'error');
  // It was built after `ok`, the same kernel but for one line: its page says so with a diff.
  await expectShown(page, `[data-section="why"] .why-nearest a[href="#/kernels/${work.ok.key}"]`,
    'failed kernel: "why it was built" names the kernel before it as the nearest');
  await expectShown(page, '[data-section="why"] tr[data-input="source"] pre.diff',
    'failed kernel: "why it was built" shows the source diff', '+++ b/source.cpp');
  await page.screenshot({ path: path.join(opts.out, 'kernel-failed.png'), fullPage: true });

  await go(page, `#/kernels/${'0'.repeat(64)}`);
  await expectShown(page, '.kernel[data-state="missing"]', 'unknown kernel shows "no such kernel"', 'no such kernel');
}

// With a token file, the page asks for the token once and then sends it on every call.
async function checkAuth(browser, root) {
  const token = 'kforge-browser-test-token';
  await writeFile(path.join(root, 'tokens'), `read:${token}\n`);
  const server = await startServer(path.join(root, 'cache-auth'), ['--token-file', path.join(root, 'tokens')]);
  const page = await browser.newPage();
  try {
    await page.goto(`${server.url}/`);
    await expectShown(page, '#token-dialog[open]', 'auth: a 401 opens the token prompt');
    check(await page.locator('dialog[open]').count() === 1, 'auth: one prompt for the concurrent 401s');
    await page.fill('#token-dialog input', token);
    await page.click('#token-dialog button');
    await expectShown(page, '[data-stat="version"] dd', 'auth: the overview loads with the token');
    await expectShown(page, '.jobs .empty', 'auth: the jobs table loads with the token', 'no jobs yet');
    check(await page.evaluate(() => sessionStorage.getItem('kforge-token')) === token, 'auth: the token is kept in sessionStorage');
  } finally {
    await page.close();
    await stopServer(server);
  }
}

// ---- main

async function submitWork(base) {
  const ok = await call(base, 'POST', '/kernels', sourceRequest('2 * x[i]'));
  check(ok.status === 200 && ok.json.cache === 'miss', 'compile answers 200, cache miss', ok.text.slice(0, 300));
  const again = await call(base, 'POST', '/kernels', sourceRequest('2 * x[i]'));
  check(again.status === 200 && again.json.cache === 'hit', 'repeated compile answers 200, cache hit', again.text.slice(0, 300));
  const bad = await call(base, 'POST', '/kernels', sourceRequest('2 * x[i]', ''));
  check(bad.status === 422 && /^[0-9a-f]{64}$/.test(bad.json?.key), 'compile error answers 422 with a key', bad.text.slice(0, 300));
  const tune = await call(base, 'POST', '/autotune', AUTOTUNE_REQUEST);
  check(tune.status === 200 && tune.json.winner?.key, 'cpu autotune answers 200 with a winner',
    tune.json?.winner_reason ?? tune.text.slice(0, 300));
  const status = await call(base, 'GET', '/status');
  check(status.status === 200, 'GET /status answers 200', `${status.status} ${status.text.slice(0, 200)}`);
  return { ok: ok.json, bad: bad.json, autotune: tune.json, winner: tune.json.winner, status: status.json };
}

async function main() {
  await mkdir(opts.out, { recursive: true });
  await rm(path.join(opts.out, 'failure.png'), { force: true });
  const root = await mkdtemp(path.join(tmpdir(), 'kforge-browser-'));
  let server;
  let browser;
  let page;
  try {
    server = await startServer(path.join(root, 'cache'));
    console.log(`kforge at ${server.url}`);
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const scriptErrors = [];
    page.on('pageerror', (e) => scriptErrors.push(e.message));
    await checkEmptyCache(page, server.url);
    const work = await submitWork(server.url);
    await checkOverview(page, server.url, work.status);
    await checkJobs(page, server.url, work);
    await checkKernels(page, work);
    await checkKernelList(page, work);
    await checkAuth(browser, root);
    check(scriptErrors.length === 0, 'no script errors on the page', scriptErrors.join('; '));
    console.log(`PASS: ${passed} assertions; screenshots in ${opts.out}`);
  } catch (e) {
    console.error(`FAIL: ${e instanceof AssertionFailed ? e.message : e.stack}`);
    if (page) await page.screenshot({ path: path.join(opts.out, 'failure.png'), fullPage: true }).catch(() => {});
    if (server) console.error(`--- kforge stderr (tail) ---\n${server.log()}`);
    process.exitCode = 1;
  } finally {
    await browser?.close();
    if (server) await stopServer(server);
    await rm(root, { recursive: true, force: true });
  }
}

await main();
