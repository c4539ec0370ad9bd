// The web view under a pinned witness policy, against a server whose bundles carry the cosignatures
// of three witnesses (run by tests/e2e/web_witness.rs). Pins policies in Settings, opens an
// invocation's verification, and checks the badge against the cosignature lines the server actually
// sent (read off the wire, not from the page): verified naming the witnesses under 2 of 3; the
// finding "not witnessed", never "verified", with one line left or a stranger's key in the policy; a
// failure when a listed witness's line is altered; and today's view once the policy is forgotten.
//
// Environment: TOOLLEDGER_UI_BASE, TOOLLEDGER_UI_ADMIN_TOKEN, TOOLLEDGER_UI_TENANT, TOOLLEDGER_UI_KEY
// (the log's verifier key), TOOLLEDGER_UI_WITNESS_KEYS (the three witnesses' verifier keys, one per
// line), TOOLLEDGER_UI_STRANGER_KEY (a witness key that cosigned nothing), TOOLLEDGER_SCREENSHOTS.

import { checks, env, openBrowser, walkThrough } from './harness.mjs';

const base = env('TOOLLEDGER_UI_BASE');
const token = env('TOOLLEDGER_UI_ADMIN_TOKEN');
const tenant = env('TOOLLEDGER_UI_TENANT');
const logKey = env('TOOLLEDGER_UI_KEY').trim();
const witnessKeys = env('TOOLLEDGER_UI_WITNESS_KEYS').trim().split('\n').map((k) => k.trim());
const strangerKey = env('TOOLLEDGER_UI_STRANGER_KEY').trim();
const shots = env('TOOLLEDGER_SCREENSHOTS');
const bookkeeping = checks();
const { check } = bookkeeping;
const nameOf = (vkey) => vkey.split('+')[0];
const witnessNames = witnessKeys.map(nameOf);

async function api(pathname, params = {}) {
  const url = new URL(pathname, base);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  const response = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) throw new Error(`${pathname}: ${response.status} ${await response.text()}`);
  return response.json();
}

/** The names on a note's signature lines that are witnesses', in line order. */
function cosignersIn(note) {
  return note.split('\n').filter((l) => l.startsWith('\u2014 ')).map((l) => l.split(' ')[1]).filter((n) => witnessNames.includes(n));
}
/** The note without the signature lines of the witnesses not in `keep`. */
function keepOnly(note, keep) {
  return note.split('\n').filter((l) => {
    const name = l.startsWith('\u2014 ') ? l.split(' ')[1] : null;
    return !name || !witnessNames.includes(name) || keep.includes(name);
  }).join('\n');
}

const browser = await openBrowser({ base, shots });
const { page, ready, go, shot } = browser;
const textOf = (selector) => page.evaluate((s) => document.querySelector(s)?.textContent ?? '', selector);

/** Pins a policy through the Settings form and waits until it is stored. */
async function pinPolicy(keys, quorum) {
  await go('#/settings');
  await page.fill('#witness-keys', keys.join('\n'));
  await page.fill('#witness-quorum', quorum);
  await page.click('form[data-test=witness-policy] button[type=submit]');
  await page.waitForFunction(([k, q]) => localStorage.getItem('toolledger.witnessKeys') === k &&
    (localStorage.getItem('toolledger.witnessQuorum') || '') === q, [keys.join('\n'), quorum], { timeout: 10000 });
  await ready();
}

await walkThrough(browser, bookkeeping, async () => {
  await browser.signIn(token, logKey);
  const invocation = (await api('/v1/invocations', { tenant, limit: 1 })).items[0];
  const reconstruction = await api(`/v1/invocations/${encodeURIComponent(invocation.invocation_id)}`, { tenant });
  const entries = reconstruction.timeline.length;
  const verifyHash = `#/verify/${encodeURIComponent(tenant)}/${encodeURIComponent(invocation.invocation_id)}`;

  // Opens the verification page; `alter(note)` rewrites the bundle's checkpoint note in flight.
  async function verification(alter = (note) => note) {
    let served = null;
    await page.route('**/v1/invocations/*/bundle?*', async (route) => {
      const response = await route.fetch();
      const bundle = await response.json();
      served = bundle.checkpoint;
      bundle.checkpoint = alter(bundle.checkpoint);
      await route.fulfill({ response, body: JSON.stringify(bundle) });
    });
    await go('#/sessions');
    await go(verifyHash);
    const badge = '[data-test=verify-status] [data-test=verified-badge]';
    await page.waitForSelector(`${badge}:not([data-verified=pending])`, { timeout: 60000 });
    await page.unrouteAll();
    return {
      served: served || '',
      verified: await page.getAttribute(badge, 'data-verified'),
      failure: await page.getAttribute(badge, 'data-failure'),
      badge: await textOf(badge),
      witnessed: await textOf('[data-test=witnessed]'),
      detail: await textOf('[data-test=verify-failure]'),
      ok: (await page.$$('table[data-test=verify-steps] td.step-ok')).length,
      warned: (await page.$$('table[data-test=verify-steps] td.step-warn')).length,
    };
  }

  // A policy that cannot be one is refused and nothing is pinned.
  await go('#/settings');
  await page.fill('#witness-keys', witnessKeys.join('\n'));
  await page.fill('#witness-quorum', '4');
  await page.click('form[data-test=witness-policy] button[type=submit]');
  await page.waitForSelector('[data-test=witness-policy-check] .bad', { timeout: 10000 });
  check((await textOf('[data-test=witness-policy-check]')).includes('a quorum of 4 needs at least 4 witnesses') &&
    await page.evaluate(() => localStorage.getItem('toolledger.witnessKeys')) === null, 'a quorum above the witnesses is refused, nothing pinned');

  // The three witnesses, quorum left empty: a majority, 2.
  await pinPolicy(witnessKeys, '');
  check((await textOf('[data-test=witness-policy-check]')).includes('at least 2 of 3 witnesses (a majority)'), 'the pinned policy reads 2 of 3 (a majority)',
    await textOf('[data-test=witness-policy-check]'));
  let r = await verification();
  const served = cosignersIn(r.served);
  const summary = (names, of) => `${names.join(', ') || 'none'} (${names.length} of ${of}, quorum 2)`;
  check(served.length >= 2, `the server's bundle carries ${served.length} of the 3 cosignatures (its policy is 2 of 3)`, r.served);
  check(r.verified === 'true' && r.badge.includes(`witnessed by ${summary(served, 3)}`),
    `verified and witnessed by ${summary(served, 3)}`, JSON.stringify(r));
  check(r.witnessed === `witnessed by ${summary(served, 3)}`, 'the trust section names the cosigning witnesses', r.witnessed);
  check(r.ok === entries * 6 && r.warned === 0, `six steps passed for each of the ${entries} entries, witnesses included`, `${r.ok} ok, ${r.warned} warned`);
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot('verification-witnessed');
  await go(`#/invocation/${encodeURIComponent(tenant)}/${encodeURIComponent(invocation.invocation_id)}`);
  await page.waitForSelector('[data-test=verified-badge]:not([data-verified=pending])', { timeout: 60000 });
  check(await page.getAttribute('[data-test=verified-badge]', 'data-verified') === 'true' &&
    (await textOf('[data-test=verified-badge]')).includes('witnessed by'), 'the invocation page\'s badge says witnessed too');

  // Each request may be proved in a newer checkpoint (reading the ledger appends to it), so what is
  // kept or changed is chosen from the note that request got.
  const firstOf = (note, n) => cosignersIn(note).slice(0, n);
  // Two cosignatures left: still the quorum.
  r = await verification((note) => keepOnly(note, firstOf(note, 2)));
  const two = firstOf(r.served, 2);
  check(two.length === 2 && r.verified === 'true' && r.badge.includes(`witnessed by ${summary(two, 3)}`),
    `two left: verified, witnessed by ${summary(two, 3)}`, JSON.stringify(r));

  // One left: under the quorum, a finding that names who cosigned; never "verified".
  r = await verification((note) => keepOnly(note, firstOf(note, 1)));
  const one = firstOf(r.served, 1);
  check(r.verified === 'unwitnessed' && r.failure === 'not witnessed', 'one left: the finding "not witnessed"', JSON.stringify(r));
  check(r.badge.includes(`not witnessed: cosigned by ${summary(one, 3)}`) && !/verified/i.test(r.badge),
    `the badge names ${one[0]} (1 of 3) and does not say verified`, r.badge);
  check(r.detail.includes('Finding: not witnessed') && r.detail.includes(summary(one, 3)), 'the finding is explained', r.detail);
  check(r.warned === entries && r.ok === entries * 5, 'each entry\'s proof holds; its witnesses step is flagged', `${r.ok} ok, ${r.warned} warned`);

  // A listed witness's line with one character changed: a failure, not a finding.
  r = await verification((note) => {
    const lines = note.split('\n');
    const i = lines.findIndex((l) => l.startsWith(`\u2014 ${firstOf(note, 1)[0]} `));
    const at = lines[i].length - 10;
    lines[i] = lines[i].slice(0, at) + (lines[i][at] === 'A' ? 'B' : 'A') + lines[i].slice(at + 1);
    return lines.join('\n');
  });
  const changed = firstOf(r.served, 1)[0];
  check(r.verified === 'false' && r.failure === 'bad cosignature' && r.detail.includes(changed),
    `an altered cosignature by ${changed}: NOT verified, bad cosignature`, JSON.stringify(r));

  // A policy listing a stranger who cosigned nothing, 2 of 2: the other witnesses' lines are
  // ignored and the quorum is not met.
  await pinPolicy([witnessKeys[0], strangerKey], '2');
  r = await verification();
  const first = cosignersIn(r.served).filter((n) => n === witnessNames[0]);
  check(r.verified === 'unwitnessed' && r.failure === 'not witnessed' && !/verified/i.test(r.badge),
    'a stranger in a 2-of-2 policy: not witnessed', JSON.stringify(r));
  check(r.badge.includes(`cosigned by ${summary(first, 2)}`) && r.witnessed === `not witnessed: cosigned by ${summary(first, 2)}`,
    `and it names who did cosign: ${summary(first, 2)}`, JSON.stringify(r));
  check(r.detail.includes(nameOf(strangerKey)), 'the detail lists the policy, stranger included', r.detail);
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot('verification-not-witnessed');

  // Forgotten: the view is what it is without a policy.
  await go('#/settings');
  await page.click('[data-test=forget-policy]');
  await page.waitForFunction(() => localStorage.getItem('toolledger.witnessKeys') === null, null, { timeout: 10000 });
  await ready();
  r = await verification();
  check(r.verified === 'true' && !r.badge.includes('witness') && r.witnessed === '' && r.ok === entries * 5,
    'no policy: verified as before, no witness column or text', JSON.stringify(r));
});
