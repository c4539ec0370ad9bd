// The web view over a partitioned ledger (docs/scaling.md), in headless Chromium against `toolledger
// up --demo` with four partitions: an admin is asked for the tenant the sessions and tools pages
// list (each partition has its own projection), the tenant's sessions and tools then show, and an
// invocation verifies — also entry by entry when its bundle is withheld, each proof asked for in
// the tenant's partition. Run by tests/e2e/partitions.rs.
//
// Environment: TOOLLEDGER_UI_BASE, TOOLLEDGER_UI_ADMIN_TOKEN, TOOLLEDGER_UI_TENANT (the demo's),
// TOOLLEDGER_UI_KEY (the verifier key), TOOLLEDGER_SCREENSHOTS. Exits 1 when any check fails.

import { checks, env, openBrowser, walkThrough } from './harness.mjs';

const base = env('TOOLLEDGER_UI_BASE');
const adminToken = env('TOOLLEDGER_UI_ADMIN_TOKEN');
const tenant = env('TOOLLEDGER_UI_TENANT');
const verifierKey = env('TOOLLEDGER_UI_KEY').trim();
const shots = env('TOOLLEDGER_SCREENSHOTS');
const bookkeeping = checks();
const { check } = bookkeeping;

const browser = await openBrowser({ base, shots });
const { page, requests, navigate, go, shot, text } = browser;

/** Names `tenant` in the page's tenant form and waits for the page it leads to. */
async function nameTheTenant() {
  const before = await page.getAttribute('body', 'data-ready');
  await page.fill('form[data-test=tenant-required] input[name=tenant]', tenant);
  await page.click('form[data-test=tenant-required] button[type=submit]');
  await page.waitForFunction((x) => document.body.dataset.ready && document.body.dataset.ready !== x, before, { timeout: 30000 });
}

// The listings' 400s are the design here; Chromium may report them after the page moved on.
const expectedRefusals = (problem) => problem.includes('status of 400 (Bad Request)');

await walkThrough(browser, bookkeeping, async () => {
  // The listings without a tenant answer 400 (the browser logs those responses as errors).
  browser.expectErrors = true;
  await browser.signIn(adminToken, verifierKey);
  check(Boolean(await page.$('form[data-test=tenant-required]')), 'an admin is asked which tenant to list');
  check((await text()).includes('4 partitions'), "with the server's reason");
  await shot('partitions-tenant-required');
  browser.expectErrors = false;

  await nameTheTenant();
  const rows = await page.$$eval('table[data-test=sessions] tbody tr', (trs) => trs.map((tr) => tr.dataset.tenant));
  check(rows.length > 0 && rows.every((t) => t === tenant), `the tenant's sessions are listed (${rows.length})`);
  await shot('partitions-sessions');

  await navigate('a[data-test=session-link]');
  await navigate('table[data-test=invocations] a[data-test=invocation-link]');
  await page.waitForSelector('[data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
  check(await page.getAttribute('[data-test=verified-badge]', 'data-verified') === 'true',
    "an invocation of the tenant's partition verifies", await page.textContent('[data-test=verified-badge]'));

  // With its bundle withheld the page proves entry by entry: each in the tenant's partition.
  browser.expectErrors = true;
  await page.route('**/bundle*', (route) => route.fulfill({
    status: 503,
    contentType: 'application/json',
    body: JSON.stringify({ error: { code: 'no_ledger', message: 'withheld by the test', field: null } }),
  }));
  const before = requests.length;
  await navigate('[data-test=verify-link]');
  await page.waitForSelector('[data-test=verify-status] [data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
  await page.unroute('**/bundle*');
  browser.expectErrors = false;
  check(await page.getAttribute('[data-test=verify-status] [data-test=verified-badge]', 'data-verified') === 'true',
    'verified entry by entry', await page.textContent('[data-test=verify-status]'));
  const proofs = requests.slice(before).map((r) => new URL(r.url)).filter((u) => u.pathname === '/v1/proofs/inclusion');
  check(proofs.length > 0 && proofs.every((u) => u.searchParams.get('tenant') === tenant),
    `each of its ${proofs.length} proofs asked for in the tenant's partition`);
  await shot('partitions-verification');

  // The tools page asks too, then lists the tenant's catalog.
  browser.expectErrors = true;
  await go('#/tools');
  check(Boolean(await page.$('form[data-test=tenant-required]')), 'the tools page asks for the tenant');
  browser.expectErrors = false;
  await nameTheTenant();
  const tools = await page.$$eval('table[data-test=tools] tbody tr', (trs) => trs.map((tr) => tr.dataset.tenant));
  check(tools.length > 0 && tools.every((t) => t === tenant), `the tenant's tools are listed (${tools.length})`);
}, expectedRefusals);
