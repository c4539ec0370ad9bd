// What the browser tests share: their environment, pass/fail bookkeeping, a headless Chromium on a
// throw-away profile that records script errors and requests, and the page moves (sign in, follow a
// link, go to a hash, take a screenshot), and the walk-through's ending. Used by ui.mjs, witness.mjs
// and partitions.mjs.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The environment variable `name`; exits 2 when it is not set. */
export function env(name) {
  const value = process.env[name];
  if (!value) { console.error(`${path.basename(process.argv[1])}: ${name} is not set`); process.exit(2); }
  return value;
}

/** Pass/fail bookkeeping: `check(ok, what, detail)` prints one line; `report()` the totals. */
export function checks() {
  const counts = { passed: 0, failed: 0 };
  return {
    counts,
    check(ok, what, detail = '') {
      if (ok) { counts.passed += 1; console.log(`ok - ${what}`); } else { counts.failed += 1; console.log(`FAILED - ${what} ${detail}`); }
      return ok;
    },
    /** Prints `ui: N passed, M failed` (what the Rust side looks for) and exits 1 on any failure. */
    finish() {
      console.log(`ui: ${counts.passed} passed, ${counts.failed} failed`);
      process.exit(counts.failed ? 1 : 0);
    },
  };
}

/**
 * Headless Chromium on a fresh profile, its page, and helpers bound to it. `problems` collects
 * script errors and console errors (unless `expectErrors` is set), `requests` every request with
 * its Authorization header.
 */
export async function openBrowser({ base, shots }) {
  fs.mkdirSync(shots, { recursive: true });
  const userData = fs.mkdtempSync(path.join(os.tmpdir(), 'toolledger-chromium-'));
  const context = await chromium.launchPersistentContext(userData, {
    executablePath: process.env.TOOLLEDGER_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const page = context.pages()[0] || await context.newPage();
  const b = { context, page, problems: [], requests: [], expectErrors: false };
  page.on('pageerror', (e) => b.problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && !b.expectErrors) b.problems.push(`console: ${m.text()}`); });
  page.on('request', (r) => b.requests.push({ url: r.url(), auth: r.headers().authorization || null }));

  b.ready = () => page.waitForSelector('body[data-ready]', { timeout: 30000 });
  // Clicks a link to another page and waits for that page: `data-ready` holds the hash it was drawn
  // for, and until the hashchange handler runs the old page's value is still there.
  b.navigate = async (selector) => {
    const before = await page.getAttribute('body', 'data-ready');
    await page.click(selector);
    await page.waitForFunction((x) => document.body.dataset.ready && document.body.dataset.ready !== x, before, { timeout: 30000 });
  };
  b.go = async (hash) => {
    await page.evaluate((x) => { location.hash = x; }, hash);
    await b.ready();
  };
  b.shot = async (name) => {
    const file = path.join(shots, `${name}.png`);
    await page.mouse.move(4, 890);
    await page.screenshot({ path: file, fullPage: true });
    console.log(`screenshot ${file}`);
  };
  b.text = () => page.evaluate(() => document.body.innerText);
  b.signIn = async (token, key) => {
    await page.goto(`${base}/`);
    await page.waitForSelector('form[data-test=sign-in]');
    await page.fill('#token', token);
    await page.fill('#verifier-key', key);
    await page.click('form[data-test=sign-in] button[type=submit]');
    await b.ready();
  };
  b.close = async () => {
    await context.close();
    fs.rmSync(userData, { recursive: true, force: true });
  };
  return b;
}

/**
 * Runs `walk` (a script's steps and checks) in `browser`, then checks that no script error or
 * policy violation was recorded (`allowed(problem)` excepts expected ones); a walk that throws is a
 * failure with a screenshot. Closes the browser and exits with the verdict (`bookkeeping.finish`).
 */
export async function walkThrough(browser, bookkeeping, walk, allowed = () => false) {
  const { check, finish } = bookkeeping;
  try {
    await walk();
    const unexpected = browser.problems.filter((p) => !allowed(p));
    check(unexpected.length === 0, 'no script errors or policy violations', unexpected.join(' | '));
  } catch (error) {
    check(false, 'the walk-through ran to its end', error.stack);
    await browser.shot('failure').catch(() => {});
  } finally {
    await browser.close();
  }
  finish();
}
