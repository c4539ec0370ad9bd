// Clicks through the web view in headless Chromium against a running server holding generated
// sessions, checks what each page shows against the /v1 API, saves a screenshot of each page, and
// shows that a tampered entry is reported as not verified. Run by tests/e2e/web.rs.
//
// Environment: TOOLLEDGER_UI_BASE (http://127.0.0.1:PORT), TOOLLEDGER_UI_ADMIN_TOKEN,
// TOOLLEDGER_UI_TENANT_TOKEN (reads TOOLLEDGER_UI_TENANT only), TOOLLEDGER_UI_KEY (the verifier key),
// TOOLLEDGER_SCREENSHOTS (a directory). Exits 1 when any check fails.

import crypto from 'node:crypto';
import { checks, env, openBrowser, walkThrough } from './harness.mjs';

const base = env('TOOLLEDGER_UI_BASE');
const adminToken = env('TOOLLEDGER_UI_ADMIN_TOKEN');
const tenantToken = env('TOOLLEDGER_UI_TENANT_TOKEN');
const tenant = env('TOOLLEDGER_UI_TENANT');
const verifierKey = env('TOOLLEDGER_UI_KEY').trim();
const shots = env('TOOLLEDGER_SCREENSHOTS');
const bookkeeping = checks();
const { check } = bookkeeping;

// The API as a plain client sees it: what the page must agree with.
async function api(pathname, params = {}, token = adminToken) {
  const url = new URL(pathname, base);
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) url.searchParams.set(k, v);
  const response = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) throw new Error(`${pathname}: ${response.status} ${await response.text()}`);
  return pathname.endsWith('/replay') ? (await response.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l)) : response.json();
}
async function apiAll(pathname, params = {}, token = adminToken) {
  const items = [];
  let cursor;
  do {
    const page = await api(pathname, { ...params, limit: 1000, cursor }, token);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return items;
}

const browser = await openBrowser({ base, shots });
const { page, requests, ready, navigate, go, shot, text } = browser;
const signIn = (token, key = verifierKey) => browser.signIn(token, key);

await walkThrough(browser, bookkeeping, async () => {
  // Assets: no token needed, strict policy; data: token needed.
  const index = await fetch(`${base}/`);
  const csp = index.headers.get('content-security-policy') || '';
  check(index.ok && index.headers.get('content-type').startsWith('text/html'), 'GET / serves the page without a token');
  check(csp.includes("default-src 'self'") && csp.includes("script-src 'self'") && !csp.includes('unsafe'), 'strict Content-Security-Policy', csp);
  const script = await fetch(`${base}/ui/app.js`);
  check(script.ok && script.headers.get('content-type').startsWith('text/javascript'), '/ui/app.js is JavaScript');
  check((await fetch(`${base}/v1/sessions`)).status === 401, '/v1 still needs a token');

  // Sessions, as the admin sees them. The page groups nothing itself: it reads the session list and
  // the counts the server works out, never the invocation list.
  const beforeSessions = requests.length;
  await signIn(adminToken);
  const sessions = await apiAll('/v1/sessions');
  const invocations = await apiAll('/v1/invocations');
  const rows = await page.$$eval('table[data-test=sessions] tbody tr', (trs) => trs.map((tr) => ({
    session: tr.dataset.session, tenant: tr.dataset.tenant,
    invocations: Number(tr.querySelector('[data-test=session-invocations]').textContent),
    states: Object.fromEntries([...tr.querySelectorAll('.chip[data-state]')].map((c) => [c.dataset.state, parseInt(c.textContent, 10)])) })));
  check(rows.length === sessions.length, `sessions list shows all ${sessions.length} sessions`, `(${rows.length})`);
  check(await page.textContent('[data-test=session-count]') === String(sessions.length), 'session count matches the API');
  check(await page.textContent('[data-test=invocation-count]') === String(invocations.length), 'invocation count matches the API');
  check(rows.every((r) => sessions.find((s) => s.session_id === r.session && s.tenant === r.tenant)?.invocation_count === r.invocations),
    'each session row shows its invocation count');
  const statesOf = (tenantName, sessionId, keep = () => true) => {
    const counts = {};
    for (const i of invocations) {
      if (i.tenant === tenantName && i.session_id === sessionId && keep(i)) counts[i.state] = (counts[i.state] || 0) + 1;
    }
    return JSON.stringify(Object.entries(counts).sort());
  };
  check(rows.every((r) => JSON.stringify(Object.entries(r.states).sort()) === statesOf(r.tenant, r.session)),
    'each session row shows its invocations by final state');
  check(new Set(rows.map((r) => r.tenant)).size >= 2, 'the admin sees both tenants');
  const sessionsPageReads = requests.slice(beforeSessions).map((r) => new URL(r.url).pathname);
  check(!sessionsPageReads.includes('/v1/invocations') && sessionsPageReads.includes('/v1/invocation-counts'),
    'the sessions page counts on the server, not from the invocation list', sessionsPageReads.join(' '));
  await shot('sessions');

  // Filters: tenant, then status.
  await page.selectOption('select[data-filter=tenant]', tenant);
  await ready();
  const tenantRows = await page.$$eval('table[data-test=sessions] tbody tr', (trs) => trs.map((tr) => tr.dataset.tenant));
  check(tenantRows.length === sessions.filter((s) => s.tenant === tenant).length && tenantRows.every((t) => t === tenant),
    `tenant filter shows only ${tenant}'s sessions`);
  await page.selectOption('select[data-filter=status]', 'failed');
  await ready();
  const failedSessions = new Set(invocations.filter((i) => i.tenant === tenant && i.state === 'failed').map((i) => i.session_id));
  const statusRows = await page.$$eval('table[data-test=sessions] tbody tr', (trs) => trs.map((tr) => ({
    session: tr.dataset.session,
    states: Object.fromEntries([...tr.querySelectorAll('.chip[data-state]')].map((c) => [c.dataset.state, parseInt(c.textContent, 10)])) })));
  check(statusRows.length === failedSessions.size && statusRows.every((r) => failedSessions.has(r.session)),
    'status filter lists the sessions with a failed invocation');
  check(statusRows.every((r) => JSON.stringify(Object.entries(r.states).sort()) === statesOf(tenant, r.session, (i) => i.state === 'failed')),
    'and each row counts only its failed invocations');
  const failedCount = invocations.filter((i) => i.tenant === tenant && i.state === 'failed').length;
  check(await page.textContent('[data-test=invocation-count]') === String(failedCount), `the failed invocations of ${tenant} are counted (${failedCount})`);

  // The session of the tenant with the most invocations that holds a permission decision.
  const mine = sessions.filter((s) => s.tenant === tenant).sort((a, b) => b.invocation_count - a.invocation_count)[0];
  await go('#/sessions');
  await navigate(`tr[data-session="${mine.session_id}"] a[data-test=session-link]`);
  const timeline = await api(`/v1/sessions/${mine.session_id}`, { tenant, limit: 1000 });
  const replayed = await api(`/v1/sessions/${mine.session_id}/replay`, { tenant, speed: 0 });
  check(await page.textContent('[data-test=session-id]') === mine.session_id, 'session page opened from the list');
  check((await page.$$('[data-test=timeline] [data-test=bar]')).length === timeline.invocations.length,
    `timeline draws one bar per invocation (${timeline.invocations.length})`);
  const barStates = await page.$$eval('[data-test=timeline] g.lane', (gs) => gs.map((g) => [g.dataset.invocation, g.dataset.state]));
  check(barStates.every(([id, st]) => timeline.invocations.find((i) => i.invocation_id === id)?.state === st), 'bars carry their final state');
  check((await page.$$('table[data-test=events] tbody tr')).length === mine.event_count, `event list holds all ${mine.event_count} events`);
  const decided = replayed.filter((r) => String(r.event.type).endsWith('permission.decided')).map((r) => r.event.data.behavior);
  const marks = await page.$$eval('[data-test=timeline] [data-mark]', (m) => m.map((x) => x.dataset.mark));
  check(decided.length > 0 && ['allow', 'ask', 'deny'].every((b) => marks.filter((m) => m === b).length === decided.filter((d) => d === b).length),
    `decisions marked by behavior (${decided.length}: ${[...new Set(decided)].join(', ')})`);
  check(marks.includes('hook'), 'hooks marked');
  for (let i = 0; i < 3; i += 1) await page.click('[data-test=replay-step]');
  check((await page.textContent('[data-test=replay-position]')).startsWith(`3 / ${mine.event_count}`), 'step moves the replay to event 3');
  check(await page.$eval('table[data-test=events] tr.current', (tr) => tr.dataset.index) === '2', 'the current event is highlighted');
  await page.selectOption('[data-test=replay-speed]', '100');
  await page.click('[data-test=replay-play]');
  // Half-way through (the screenshot shows the replay in progress), then pause.
  const halfway = Math.max(4, Math.floor(mine.event_count / 2));
  await page.waitForFunction((n) => parseInt(document.querySelector('[data-test=replay-position]').textContent, 10) >= n, halfway, { timeout: 60000 });
  await page.click('[data-test=replay-play]');
  const paused = await page.textContent('[data-test=replay-position]');
  check(parseInt(paused, 10) >= halfway, `play advances through the session (paused at ${paused.split(' ·')[0]})`);
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot('session-timeline');

  // An invocation with a permission decision and a mutation, opened from the session page.
  let chosen = null;
  for (const inv of timeline.invocations) {
    const r = await api(`/v1/invocations/${inv.invocation_id}`, { tenant });
    if (r.permission_decisions.length && r.mutations.length && r.timeline.length >= 5) { chosen = r; break; }
    if (!chosen && r.permission_decisions.length) chosen = r;
  }
  await navigate(`table[data-test=invocations] a[data-test=invocation-link]:text-is("${chosen.invocation_id}")`);
  check(await page.textContent('[data-test=invocation-id]') === chosen.invocation_id, 'invocation page opened from the session');
  const seqs = await page.$$eval('table[data-test=invocation-events] tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.seq)));
  check(JSON.stringify(seqs) === JSON.stringify(chosen.timeline.map((e) => e.seq)), `its ${seqs.length} events in ledger order`);
  const behaviors = await page.$$eval('table[data-test=decisions] tbody tr', (trs) => trs.map((tr) => tr.dataset.behavior));
  check(JSON.stringify(behaviors) === JSON.stringify(chosen.permission_decisions.map((d) => d.behavior)), 'decisions with their behaviors');
  await page.waitForSelector('[data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
  check(await page.getAttribute('[data-test=verified-badge]', 'data-verified') === 'true', 'verified badge: verified',
    await page.textContent('[data-test=verified-badge]'));
  await shot('invocation');

  // Its verification, step by step: every proof in one request (the invocation's evidence bundle).
  const beforeVerify = requests.length;
  await navigate('[data-test=verify-link]');
  await page.waitForSelector('[data-test=verify-status] [data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
  check(await page.getAttribute('[data-test=verify-status] [data-test=verified-badge]', 'data-verified') === 'true', 'verification page: verified');
  check((await page.$$('table[data-test=verify-steps] td.step-ok')).length === chosen.timeline.length * 5, 'five steps passed for every entry');
  const keyId = verifierKey.split('+').slice(0, 2).join('+');
  check(await page.textContent('[data-test=pinned-key]') === keyId, `the verifying key is shown (${keyId})`);
  const verifyReads = requests.slice(beforeVerify).map((r) => new URL(r.url).pathname);
  check(!verifyReads.includes('/v1/proofs/inclusion') && verifyReads.filter((p) => p.endsWith('/bundle')).length === 1,
    'the verification page asks for its proofs in one request', JSON.stringify(verifyReads));
  await shot('verification');

  // Tools and their charts.
  const beforeTools = requests.length;
  await navigate('#nav a[data-nav=tools]');
  const tools = (await api('/v1/tools')).tools;
  check((await page.$$('table[data-test=tools] tbody tr')).length === tools.length, `catalog lists all ${tools.length} tools`);
  check(await page.textContent('[data-test=tool-count]') === String(tools.length), 'tool count matches the API');
  check((await page.$$('[data-test=tool-panel] svg.chart')).length === 3, 'rate, latency and error-class charts drawn');
  const panelTool = await page.getAttribute('[data-test=tool-panel]', 'data-tool');
  const panelTenant = (await page.textContent('[data-test=tool-panel] h2')).split(' · ')[1];
  const toolCalls = (await apiAll('/v1/invocations', { tenant: panelTenant, tool_id: panelTool })).length;
  check(await page.textContent('[data-test=tool-calls]') === String(toolCalls), `calls of ${panelTool} match the API (${toolCalls})`);
  const errorClasses = {};
  for (const i of await apiAll('/v1/invocations', { tenant: panelTenant, tool_id: panelTool })) {
    if (i.error_class) errorClasses[i.error_class] = (errorClasses[i.error_class] || 0) + 1;
  }
  // Each bar: its class (right-aligned label) then its count.
  const bars = await page.$$eval('[data-test=tool-panel] figure:last-child svg.chart text', (texts) => texts.map((t) => t.textContent));
  const drawn = {};
  for (let i = 0; i + 1 < bars.length; i += 2) drawn[bars[i]] = Number(bars[i + 1]);
  check(JSON.stringify(Object.entries(drawn).sort()) === JSON.stringify(Object.entries(errorClasses).sort()),
    `error classes of ${panelTool} drawn with their counts`, JSON.stringify({ drawn, errorClasses }));
  check(!requests.slice(beforeTools).some((r) => new URL(r.url).pathname === '/v1/invocations'),
    'the tools page reads no invocation list');
  await shot('tools');

  // Tampering, at the boundary: the browser receives an altered inclusion proof and must say so.
  const target = chosen.timeline[Math.min(2, chosen.timeline.length - 1)].seq;
  const verifyHash = `#/verify/${encodeURIComponent(tenant)}/${encodeURIComponent(chosen.invocation_id)}`;
  // `alter(proof, bundle)`: `proof` is the target entry's, reshaped as /v1/proofs/inclusion's
  // (entry text, audit path, checkpoint) and written back into the bundle the browser receives.
  async function tampered(alter) {
    await page.route('**/v1/invocations/*/bundle?*', async (route) => {
      const response = await route.fetch();
      const bundle = await response.json();
      const entry = bundle.entries.find((e) => e.seq === target);
      const proof = { entry: Buffer.from(entry.entry, 'base64').toString('utf8'), proof: entry.inclusion_proof, checkpoint: bundle.checkpoint };
      alter(proof);
      entry.entry = Buffer.from(proof.entry, 'utf8').toString('base64');
      entry.inclusion_proof = proof.proof;
      bundle.checkpoint = proof.checkpoint;
      await route.fulfill({ response, body: JSON.stringify(bundle) });
    });
    await go('#/sessions');
    await go(verifyHash);
    await page.waitForSelector('[data-test=verify-status] [data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
    await page.unrouteAll();
    return {
      verified: await page.getAttribute('[data-test=verify-status] [data-test=verified-badge]', 'data-verified'),
      failure: await page.getAttribute('[data-test=verify-status] [data-test=verified-badge]', 'data-failure'),
      detail: await page.textContent('[data-test=verify-failure]').catch(() => ''),
      bad: await page.$$eval('table[data-test=verify-steps] tr.row-bad', (trs) => trs.map((tr) => Number(tr.dataset.seq))),
    };
  }
  // One letter inside a string value of the entry: still canonical JSON, different bytes.
  let result = await tampered((proof) => {
    const at = proof.entry.search(/"[a-z]{6,}"/) + 1;
    const c = proof.entry[at];
    proof.entry = proof.entry.slice(0, at) + (c === 'x' ? 'y' : 'x') + proof.entry.slice(at + 1);
  });
  check(result.verified === 'false' && result.failure === 'leaf hash mismatch' && result.detail.includes('leaf hash mismatch'),
    `an altered entry is NOT verified: leaf hash mismatch (seq ${target})`, JSON.stringify(result));
  check(JSON.stringify(result.bad) === JSON.stringify([target]), 'only the altered entry is marked');
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot('verification-tampered');
  // One character of the checkpoint's signature.
  result = await tampered((proof) => {
    const lines = proof.checkpoint.split('\n');
    const i = lines.findIndex((l) => l.startsWith('\u2014 '));
    const sig = lines[i];
    const at = sig.length - 10;
    lines[i] = sig.slice(0, at) + (sig[at] === 'A' ? 'B' : 'A') + sig.slice(at + 1);
    proof.checkpoint = lines.join('\n');
  });
  check(result.verified === 'false' && result.failure === 'bad signature', 'an altered checkpoint signature: bad signature', JSON.stringify(result));
  // A root the signed checkpoint does not hold (the proof's own root and path changed to match).
  result = await tampered((proof) => { proof.proof[0] = proof.proof[0].replace(/^./, (c) => (c === '0' ? '1' : '0')); });
  check(result.verified === 'false' && result.failure === 'root mismatch', 'an altered audit path: root mismatch', JSON.stringify(result));
  // Another key pinned: the checkpoint's signer is unknown.
  const { publicKey } = crypto.generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x, 'base64url');
  const name = verifierKey.split('+')[0];
  const material = Buffer.concat([Buffer.from([1]), raw]);
  const id = crypto.createHash('sha256').update(Buffer.concat([Buffer.from(`${name}\n`), material])).digest('hex').slice(0, 8);
  await page.evaluate((k) => localStorage.setItem('toolledger.verifierKey', k), `${name}+${id}+${material.toString('base64')}`);
  await go('#/sessions');
  await go(verifyHash);
  await page.waitForSelector('[data-test=verify-status] [data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
  check(await page.getAttribute('[data-test=verify-status] [data-test=verified-badge]', 'data-failure') === 'unknown key',
    'a checkpoint signed by a key other than the pinned one: unknown key');
  await page.evaluate((k) => localStorage.setItem('toolledger.verifierKey', k), verifierKey);

  // A tenant token: nothing of another tenant is requested or rendered.
  const others = new Set();
  for (const s of sessions.filter((x) => x.tenant !== tenant)) others.add(s.session_id);
  for (const i of invocations.filter((x) => x.tenant !== tenant)) others.add(i.invocation_id);
  await page.click('[data-test=sign-out]');
  await page.waitForSelector('form[data-test=sign-in]');
  requests.length = 0;
  await signIn(tenantToken);
  const scoped = await apiAll('/v1/sessions', {}, tenantToken);
  const tenantView = await page.$$eval('table[data-test=sessions] tbody tr', (trs) => trs.map((tr) => tr.dataset.tenant));
  check(tenantView.length === scoped.length && tenantView.every((t) => t === tenant), `a ${tenant} token lists only ${tenant}'s ${scoped.length} sessions`);
  const seen = [];
  const scan = async (where) => {
    const shown = await text();
    const leaked = [...others].filter((x) => shown.includes(x));
    seen.push(where);
    return check(leaked.length === 0, `no id of another tenant on ${where}`, leaked.slice(0, 3).join(', '));
  };
  await scan('the sessions list');
  await go(`#/session/${encodeURIComponent(tenant)}/${encodeURIComponent(mine.session_id)}`);
  await scan('the session timeline');
  await go(`#/invocation/${encodeURIComponent(tenant)}/${encodeURIComponent(chosen.invocation_id)}`);
  await page.waitForSelector('[data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
  await scan('the invocation');
  await go('#/tools');
  check((await page.$$eval('table[data-test=tools] tbody tr', (trs) => trs.map((tr) => tr.dataset.tenant))).every((t) => t === tenant),
    'the catalog shows only the token\'s tenant');
  await scan('the tool catalog');
  const foreign = requests.filter((r) => { const u = new URL(r.url); return u.origin !== new URL(base).origin; });
  check(foreign.length === 0, 'every request goes to the server itself', foreign.map((r) => r.url).join(' '));
  check(requests.every((r) => !r.url.includes(tenantToken) && !r.url.includes(adminToken)), 'no token in any URL');
  check(requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/')).every((r) => r.auth === `Bearer ${tenantToken}`),
    'every data request carries the signed-in token');
  check(requests.every((r) => { const u = new URL(r.url); const t = u.searchParams.get('tenant'); return !t || t === tenant; }),
    'the page never asks for another tenant');
  // A link to another tenant's session, typed by hand: refused by the server, nothing rendered.
  const other = sessions.find((s) => s.tenant !== tenant);
  browser.expectErrors = true;
  await go(`#/session/${encodeURIComponent(other.tenant)}/${encodeURIComponent(other.session_id)}`);
  browser.expectErrors = false;
  const refused = await page.textContent('[data-test=error]').catch(() => '');
  check(/40[34]/.test(refused), `another tenant's session by URL is refused (${refused.trim().slice(0, 40)})`);
  check(!(await page.$('[data-test=timeline]')), 'and nothing of it is drawn');
});
