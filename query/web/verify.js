// Evidence checked in the browser, with WebCrypto alone: for each ledger entry of an invocation,
//
//   entry bytes ─SHA-256(0x00‖bytes)─▶ leaf hash ══ the proof's and the projection's
//       ─RFC 9162 audit path─▶ root ══ the proof's root ══ the root in the signed checkpoint
//   checkpoint (C2SP signed note) ─Ed25519 (WebCrypto)─▶ signed by the pinned verifier key
//
// Each step is reported on its own; the first failing one is named (leaf hash mismatch, root
// mismatch, bad signature, unknown key), never hidden behind a spinner.
//
// With a witness policy pinned (Settings: witnesses' verifier keys, a quorum k; docs/witnesses.md),
// the checkpoint each entry rests on is also checked for C2SP cosignature/v1 lines:
//
//   — <witness> base64(key id ‖ time ‖ sig) ─Ed25519 over "cosignature/v1\ntime <t>\n" ‖ text─▶
//       a listed witness's line that fails: bad cosignature (NOT verified)
//       fewer than k listed witnesses: not witnessed (a finding, never shown as verified)
//       lines of witnesses not listed: ignored, as C2SP asks

import { h, clear, link, section, table, short, stateBadge } from './dom.js';
import { get } from './api.js';
import { pinnedKey, pinnedWitnessPolicy } from './settings.js';

const utf8 = new TextEncoder();

export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

function fromHex(text) {
  if (!/^[0-9a-f]{64}$/.test(text)) throw new Error(`not a hex hash: ${text}`);
  return Uint8Array.from(text.match(/../g), (x) => parseInt(x, 16));
}

/** Canonical standard base64 (re-encoding gives the same text), as the evidence format requires. */
function fromBase64(text) {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) throw new Error('not base64');
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  if (btoa(String.fromCharCode(...bytes)) !== text) throw new Error('not canonical base64');
  return bytes;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
}

export const leafHash = (entry) => sha256(concat([0x00], entry));
const nodeHash = (left, right) => sha256(concat([0x01], left, right));

function same(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** RFC 9162 §2.1.3.2: the root an audit path leads to from leaf `index` of a tree of `size`. */
export async function rootFromInclusion(leaf, index, size, path) {
  if (index >= size) throw new Error(`leaf index ${index} is outside a tree of ${size}`);
  let fn = BigInt(index);
  let sn = BigInt(size - 1);
  let r = leaf;
  for (const p of path) {
    if (sn === 0n) throw new Error('the audit path is longer than the tree is deep');
    if (fn % 2n === 1n || fn === sn) {
      r = await nodeHash(p, r);
      while (fn % 2n === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; }
    } else {
      r = await nodeHash(r, p);
    }
    fn >>= 1n; sn >>= 1n;
  }
  if (sn !== 0n) throw new Error('the audit path is shorter than the tree is deep');
  return r;
}

/**
 * Keys `<name>+<key id>+<base64(type ‖ Ed25519 public key)>`, one per line, of one signature type
 * (0x01 a log's note key, 0x04 a witness's cosignature/v1 key); the key id is
 * SHA-256(name ‖ 0x0A ‖ type ‖ key)[:4]. Blank lines and lines starting with # are skipped.
 */
async function parseKeys(text, type, what) {
  const keys = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    // name+keyid+key: the name has no '+', the id is 8 hex digits, the base64 key may hold '+'.
    const m = /^([^+]+)\+([^+]*)\+(.+)$/.exec(line);
    if (!m) throw new Error('expected name+keyid+key');
    const [, name, idHex, b64] = m;
    if (!name || /[\s+]/.test(name)) throw new Error('bad key name');
    if (!/^[0-9a-f]{8}$/.test(idHex)) throw new Error('the key id is not 8 lowercase hex digits');
    const material = fromBase64(b64);
    if (material.length !== 33 || material[0] !== type) throw new Error(`not ${what} (0x0${type} and 32 bytes)`);
    const expect = (await sha256(concat(utf8.encode(name), [0x0a], material))).slice(0, 4);
    if (hex(expect) !== idHex) throw new Error('the key id does not match the key');
    const publicKey = await crypto.subtle.importKey('raw', material.slice(1), { name: 'Ed25519' }, false, ['verify']);
    keys.push({ name, idHex, publicKey });
  }
  if (!keys.length) throw new Error('no key in the text');
  return keys;
}

/** Verifier keys `<name>+<key id>+<base64(0x01 ‖ Ed25519 public key)>`, one per line. */
export function parseVerifierKey(text) {
  return parseKeys(text, 0x01, 'an Ed25519 key');
}

/**
 * A witness policy: the witnesses' verifier keys (`<name>+<key id>+<base64(0x04 ‖ key)>`, one per
 * line, a repeated key counted once) and the quorum, a number as text ('' or absent: a majority).
 * Returns {witnesses, quorum}.
 */
export async function parseWitnessPolicy(keysText, quorumText = '') {
  const witnesses = [];
  for (const key of await parseKeys(keysText, 0x04, 'a cosignature/v1 witness key')) {
    if (!witnesses.some((w) => w.name === key.name && w.idHex === key.idHex)) witnesses.push(key);
  }
  const given = String(quorumText ?? '').trim();
  if (given && !/^[1-9][0-9]*$/.test(given)) throw new Error(`the quorum is not a positive whole number: ${given}`);
  const quorum = given ? Number(given) : Math.floor(witnesses.length / 2) + 1;
  if (quorum > witnesses.length) throw new Error(`a quorum of ${quorum} needs at least ${quorum} witnesses; ${witnesses.length} listed`);
  return { witnesses, quorum };
}

/** A checkpoint body's origin, size (NaN when not a number) and root (null when not base64). */
function checkpointFields(text) {
  const lines = text.split('\n');
  const size = /^(0|[1-9][0-9]*)$/.test(lines[1] || '') ? Number(lines[1]) : NaN;
  let root = null;
  try { root = fromBase64(lines[2] || ''); } catch { root = null; }
  return { origin: lines[0], size, root };
}

/** A C2SP signed note holding a tlog checkpoint, checked against `keys`. */
export async function openCheckpoint(note, keys) {
  const split = note.lastIndexOf('\n\n');
  if (split < 0) return { ok: false, step: 'signature', failure: 'bad signature', detail: 'the note has no signature block' };
  const text = note.slice(0, split + 1);
  const { origin, size, root } = checkpointFields(text.slice(0, -1));
  const signers = [];
  let verifiedBy = null;
  for (const line of note.slice(split + 2).split('\n').filter(Boolean)) {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m) return { ok: false, origin, size, root, step: 'signature', failure: 'bad signature', detail: `malformed signature line: ${line}` };
    let blob;
    try { blob = fromBase64(m[2]); } catch { return { ok: false, origin, size, root, step: 'signature', failure: 'bad signature', detail: 'signature is not base64' }; }
    const idHex = hex(blob.slice(0, 4));
    signers.push(`${m[1]}+${idHex}`);
    const key = keys.find((k) => k.name === m[1] && k.idHex === idHex);
    if (!key) continue;
    const signature = blob.slice(4);
    const good = signature.length === 64 &&
      await crypto.subtle.verify({ name: 'Ed25519' }, key.publicKey, signature, utf8.encode(text));
    if (!good) return { ok: false, origin, size, root, signers, step: 'signature', failure: 'bad signature', detail: `the signature by ${key.name}+${key.idHex} does not verify over the checkpoint text` };
    verifiedBy = `${key.name}+${key.idHex}`;
  }
  if (!verifiedBy) {
    return { ok: false, origin, size, root, signers, step: 'signature', failure: 'unknown key',
      detail: `signed by ${signers.join(', ') || 'nobody'}; pinned: ${keys.map((k) => `${k.name}+${k.idHex}`).join(', ')}` };
  }
  if (!root || root.length !== 32 || Number.isNaN(size)) {
    return { ok: false, origin, size, root, signers, verifiedBy, step: 'checkpoint', failure: 'root mismatch', detail: 'the signed text is not a checkpoint (origin, size, base64 root)' };
  }
  return { ok: true, origin, size, root, signers, verifiedBy };
}

/**
 * The cosignatures by the policy's witnesses on a checkpoint note (C2SP tlog-cosignature): each line
 * whose name and key id are a listed witness's must verify — else {ok: false, detail} — and lines
 * of anyone else are ignored. Returns {ok: true, cosignedBy: [{name, idHex, time}], quorum, of, met}.
 * The log's own signature is openCheckpoint's business.
 */
export async function checkCosignatures(note, policy) {
  const split = note.lastIndexOf('\n\n');
  const text = split < 0 ? '' : note.slice(0, split + 1);
  const cosignedBy = [];
  for (const line of split < 0 ? [] : note.slice(split + 2).split('\n').filter(Boolean)) {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    let blob = null;
    try { blob = m ? fromBase64(m[2]) : null; } catch { blob = null; }
    if (!blob || blob.length < 4) continue; // not a signature line any listed witness could own
    const idHex = hex(blob.slice(0, 4));
    const witness = policy.witnesses.find((w) => w.name === m[1] && w.idHex === idHex);
    if (!witness) continue;
    const bad = { ok: false, detail: `the cosignature by ${witness.name}+${witness.idHex} does not verify over the checkpoint text` };
    // time (8 bytes, big-endian, at most 2^63 − 1) and the Ed25519 signature (64 bytes)
    if (blob.length !== 4 + 8 + 64) return bad;
    const time = new DataView(blob.buffer, blob.byteOffset + 4, 8).getBigUint64(0);
    if (time > 0x7fffffffffffffffn) return bad;
    const message = concat(utf8.encode(`cosignature/v1\ntime ${time}\n`), utf8.encode(text));
    if (!(await crypto.subtle.verify({ name: 'Ed25519' }, witness.publicKey, blob.slice(12), message))) return bad;
    if (!cosignedBy.some((c) => c.name === witness.name && c.idHex === witness.idHex)) {
      cosignedBy.push({ name: witness.name, idHex: witness.idHex, time: Number(time) });
    }
  }
  const of = policy.witnesses.length;
  return { ok: true, cosignedBy, quorum: policy.quorum, of, met: cosignedBy.length >= policy.quorum };
}

/** "w1, w2 (2 of 3, quorum 2)": who cosigned, of how many listed, and how many the policy asks for. */
export function witnessSummary(w) {
  const names = w.cosignedBy.map((c) => c.name).join(', ') || 'none';
  return `${names} (${w.cosignedBy.length} of ${w.of}, quorum ${w.quorum})`;
}

function step(name, ok, detail) {
  return { name, ok, detail };
}

/** Verifies one entry's inclusion proof; `shown` is the projection's timeline row for it. */
async function verifyEntry(shown, proof, keys, notes, policy, witnessed) {
  const steps = [];
  const fail = (failure, name, detail) => {
    steps.push(step(name, false, detail));
    return { seq: shown.seq, ok: false, failure, steps, proof };
  };
  const bytes = utf8.encode(proof.entry);
  const leaf = await leafHash(bytes);
  if (hex(leaf) !== proof.leaf_hash || hex(leaf) !== shown.leaf_hash) {
    return fail('leaf hash mismatch', 'leaf hash',
      `the entry hashes to ${hex(leaf)}; the proof says ${proof.leaf_hash}, the projection ${shown.leaf_hash}`);
  }
  steps.push(step('leaf hash', true, hex(leaf)));
  let event = null;
  try { event = JSON.parse(proof.entry).event; } catch { event = null; }
  if (!event || (shown.event_id && event.id !== shown.event_id) || proof.ledger_seq !== shown.seq) {
    return fail('entry mismatch', 'entry is the event shown',
      `ledger seq ${proof.ledger_seq} holds event ${event ? event.id : '(unparsable)'}, the page shows ${shown.event_id} at seq ${shown.seq}`);
  }
  steps.push(step('entry is the event shown', true, `event ${event.id}`));
  let root;
  try {
    root = await rootFromInclusion(leaf, shown.seq - 1, proof.tree_size, proof.proof.map(fromHex));
  } catch (error) {
    return fail('root mismatch', 'inclusion path', error.message);
  }
  if (hex(root) !== proof.root) {
    return fail('root mismatch', 'inclusion path', `the path leads to ${hex(root)}, the proof claims ${proof.root}`);
  }
  steps.push(step('inclusion path', true, `root ${hex(root)} at size ${proof.tree_size}`));
  if (!notes.has(proof.checkpoint)) notes.set(proof.checkpoint, await openCheckpoint(proof.checkpoint, keys));
  const note = notes.get(proof.checkpoint);
  if (!note.ok && note.step === 'signature') return fail(note.failure, 'checkpoint signature', note.detail);
  if (!note.ok || note.size !== proof.tree_size || !same(note.root, root)) {
    return fail('root mismatch', 'checkpoint root',
      note.ok ? `the signed checkpoint is size ${note.size} root ${hex(note.root)}; the path gives size ${proof.tree_size} root ${hex(root)}` : note.detail);
  }
  steps.push(step('checkpoint root', true, `${note.origin} size ${note.size}`));
  steps.push(step('checkpoint signature', true, `Ed25519 by ${note.verifiedBy}`));
  if (!policy) return { seq: shown.seq, ok: true, steps, proof, checkpoint: note };
  if (!witnessed.has(proof.checkpoint)) witnessed.set(proof.checkpoint, await checkCosignatures(proof.checkpoint, policy));
  const w = witnessed.get(proof.checkpoint);
  if (!w.ok) return fail('bad cosignature', 'witnesses', w.detail);
  // Under the quorum the entry's proof still holds; the checkpoint it rests on is the finding.
  steps.push(step('witnesses', w.met, `${w.met ? 'witnessed by' : 'not witnessed: cosigned by'} ${witnessSummary(w)}`));
  return { seq: shown.seq, ok: true, steps, proof, checkpoint: note, witnessed: w };
}

/**
 * The inclusion proofs of every entry of an invocation in one request: its evidence bundle (one
 * signed checkpoint, an audit path per entry; docs/evidence-bundles.md), each entry reshaped as
 * /v1/proofs/inclusion answers, by seq. Nothing in it is taken on trust: verifyEntry recomputes
 * the leaf, the path's root and the checkpoint's signature as for a single proof.
 */
async function bundleProofs(reconstruction) {
  const bundle = await get(`/v1/invocations/${encodeURIComponent(reconstruction.invocation_id)}/bundle`,
    { tenant: reconstruction.tenant });
  const { size, root } = checkpointFields(bundle.checkpoint);
  const decoder = new TextDecoder('utf-8', { fatal: true });
  const bySeq = new Map();
  for (const e of bundle.entries) {
    let entry = '';
    try { entry = decoder.decode(fromBase64(e.entry)); } catch { entry = ''; }
    bySeq.set(e.seq, {
      ledger_seq: e.seq, leaf_index: e.seq - 1, tree_size: size, entry,
      leaf_hash: hex(await leafHash(utf8.encode(entry))), proof: e.inclusion_proof, root: root ? hex(root) : '',
      checkpoint: bundle.checkpoint,
    });
  }
  return bySeq;
}

/**
 * Verifies every timeline entry of a reconstruction. Returns {ok, failure, detail, firstBad, entries,
 * keys, checkpoint, policy, witnessed}. The proofs come in one request (the invocation's evidence
 * bundle); when it cannot be had (an entry not signed yet, no checkpoint meeting the server's
 * witness policy), each entry's proof is asked for on its own. `progress(done, total)` is told as
 * entries are checked. With a witness policy pinned, every entry's checkpoint must meet it: one that
 * does not makes the result the finding 'not witnessed' (`witnessed` is then that checkpoint's).
 */
export async function verifyInvocation(reconstruction, progress = () => {}) {
  const text = pinnedKey();
  if (!text) {
    return { ok: false, failure: 'unknown key', detail: 'no verifier key is pinned (Settings)', entries: [] };
  }
  let keys;
  try { keys = await parseVerifierKey(text); } catch (error) {
    return { ok: false, failure: 'unknown key', detail: `the pinned key is not usable: ${error.message}`, entries: [] };
  }
  const pinnedPolicy = pinnedWitnessPolicy();
  let policy = null;
  if (pinnedPolicy) {
    try { policy = await parseWitnessPolicy(pinnedPolicy.keys, pinnedPolicy.quorum); } catch (error) {
      return { ok: false, failure: 'witness policy unusable', detail: `the pinned witness policy is not usable: ${error.message}`, entries: [] };
    }
  }
  const notes = new Map();
  const witnessed = new Map();
  const entries = [];
  const timeline = reconstruction.timeline;
  let bundled = new Map();
  try { bundled = await bundleProofs(reconstruction); } catch { bundled = new Map(); }
  for (const shown of timeline) {
    let proof = bundled.get(shown.seq);
    try {
      // In the invocation's tenant's partition: each partition is its own log (docs/scaling.md).
      if (!proof) proof = await get('/v1/proofs/inclusion', { seq: shown.seq, tenant: reconstruction.tenant });
    } catch (error) {
      const failure = error.code === 'no_checkpoint' ? 'not yet signed' : 'proof unavailable';
      entries.push({ seq: shown.seq, ok: false, failure, steps: [step('proof from the server', false, `${error.status} ${error.code}: ${error.message}`)] });
      progress(entries.length, timeline.length);
      continue;
    }
    entries.push(await verifyEntry(shown, proof, keys, notes, policy, witnessed));
    progress(entries.length, timeline.length);
  }
  const firstBad = entries.find((e) => !e.ok) || null;
  const good = entries.find((e) => e.ok);
  const unwitnessed = policy ? entries.find((e) => e.ok && !e.witnessed.met) || null : null;
  let failure = firstBad ? firstBad.failure : (entries.length ? null : 'nothing to verify');
  let detail = firstBad ? firstBad.steps[firstBad.steps.length - 1].detail : null;
  if (!failure && unwitnessed) {
    failure = 'not witnessed';
    detail = `the checkpoint of size ${unwitnessed.checkpoint.size} (ledger seq ${unwitnessed.seq} rests on it) is cosigned by ` +
      `${witnessSummary(unwitnessed.witnessed)}; the pinned policy lists ${policy.witnesses.map((w) => `${w.name}+${w.idHex}`).join(', ')}`;
  }
  return {
    ok: entries.length > 0 && !firstBad && !unwitnessed,
    failure,
    detail,
    firstBad,
    entries,
    keys: keys.map((k) => `${k.name}+${k.idHex}`),
    checkpoint: unwitnessed ? unwitnessed.checkpoint : good ? good.checkpoint : null,
    policy: policy ? { witnesses: policy.witnesses.map((w) => `${w.name}+${w.idHex}`), quorum: policy.quorum } : null,
    witnessed: unwitnessed ? unwitnessed.witnessed : good && good.witnessed ? good.witnessed : null,
  };
}

/**
 * The badge the invocation page shows: green verified (naming the witnesses under a pinned policy),
 * amber not witnessed (every proof holds but the checkpoint is under the policy's quorum: a finding,
 * not a pass), or red naming the failed step.
 */
export function badge(result) {
  if (!result) return h('span', { class: 'badge vf-pending', 'data-test': 'verified-badge', 'data-verified': 'pending' }, 'verifying…');
  if (result.ok) {
    const witnesses = result.witnessed ? ` · witnessed by ${witnessSummary(result.witnessed)}` : '';
    return h('span', { class: 'badge vf-ok', 'data-test': 'verified-badge', 'data-verified': 'true',
      title: `every entry proven in checkpoint size ${result.checkpoint.size}, signed by ${result.checkpoint.verifiedBy}${witnesses}` },
    `✓ verified · ${result.entries.length} entries · key ${result.checkpoint.verifiedBy}${witnesses}`);
  }
  if (result.failure === 'not witnessed' && result.witnessed) {
    return h('span', { class: 'badge vf-warn', 'data-test': 'verified-badge', 'data-verified': 'unwitnessed', 'data-failure': result.failure,
      title: result.detail },
    `✗ not witnessed: cosigned by ${witnessSummary(result.witnessed)} · ${result.entries.length} entries proven under key ${result.checkpoint.verifiedBy}`);
  }
  const where = result.firstBad ? ` at ledger seq ${result.firstBad.seq}` : '';
  return h('span', { class: 'badge vf-bad', 'data-test': 'verified-badge', 'data-verified': 'false', 'data-failure': result.failure },
    `✕ NOT verified: ${result.failure}${where}`);
}

export async function renderVerification(view, tenant, id, stale) {
  const r = await get(`/v1/invocations/${encodeURIComponent(id)}`, { tenant, payloads: 'none' });
  if (stale()) return;
  const status = h('div', { class: 'verify-status', 'data-test': 'verify-status' }, badge(null));
  const progress = h('p', { class: 'muted' }, `fetching the inclusion proofs of ${r.timeline.length} entries…`);
  const body = h('div');
  view.append(
    h('p', { class: 'crumbs' }, link(['sessions'], 'Sessions'), ' / ',
      r.session_id ? link(['session', r.tenant, r.session_id], r.session_id) : 'no session', ' / ',
      link(['invocation', r.tenant, r.invocation_id], r.invocation_id), ' / verification'),
    h('h1', {}, 'Verification ', h('span', { class: 'mono' }, r.invocation_id), ' ', stateBadge(r.state)),
    h('p', { class: 'muted' }, 'Computed in this browser from the inclusion proofs and the signed checkpoint served by /v1 (the invocation\'s evidence bundle); the server is not trusted for the verdict.'),
    status, progress, body);
  const result = await verifyInvocation(r, (done, total) => { progress.textContent = `checked ${done} of ${total} entries`; });
  if (stale()) return;
  clear(status).append(badge(result));
  progress.textContent = result.ok ? 'Every step of every entry passed.' : '';
  if (result.failure === 'not witnessed') {
    body.append(h('div', { class: 'warn-box', 'data-test': 'verify-failure' },
      h('strong', {}, 'Finding: not witnessed'), ' (every proof holds, but the checkpoint is under the pinned witness policy\'s quorum)',
      h('br'), result.detail || ''));
  } else if (!result.ok) {
    body.append(h('div', { class: 'error', 'data-test': 'verify-failure' },
      h('strong', {}, `Failed step: ${result.failure}`),
      result.firstBad ? ` (ledger seq ${result.firstBad.seq})` : '',
      h('br'), result.detail || ''));
  }
  const cp = result.checkpoint;
  const w = result.witnessed;
  const witnessFacts = result.policy ? [
    h('dt', {}, 'witness policy'), h('dd', { class: 'mono', 'data-test': 'witness-policy' },
      `${result.policy.witnesses.join(', ')} · quorum ${result.policy.quorum}`),
    h('dt', {}, 'witnesses'), h('dd', { class: w && w.met ? 'ok' : 'warn', 'data-test': 'witnessed' },
      w ? `${w.met ? 'witnessed by' : 'not witnessed: cosigned by'} ${witnessSummary(w)}` : '—'),
    h('dt', {}, 'cosigned at'), h('dd', { class: 'mono' },
      w && w.cosignedBy.length ? w.cosignedBy.map((c) => `${c.name}+${c.idHex} ${new Date(c.time * 1000).toISOString()}`).join(', ') : '—'),
  ] : [];
  body.append(section('Trust',
    h('dl', { class: 'facts' },
      h('dt', {}, 'pinned key'), h('dd', { class: 'mono', 'data-test': 'pinned-key' }, (result.keys || []).join(', ') || 'none'),
      h('dt', {}, 'verified by'), h('dd', { class: 'mono' }, cp ? cp.verifiedBy : '—'),
      h('dt', {}, 'checkpoint'), h('dd', { class: 'mono' }, cp ? `${cp.origin} · size ${cp.size} · root ${hex(cp.root)}` : '—'),
      h('dt', {}, 'signers in the note'), h('dd', { class: 'mono' }, cp ? cp.signers.join(', ') : '—'),
      ...witnessFacts)));
  const names = ['leaf hash', 'entry is the event shown', 'inclusion path', 'checkpoint root', 'checkpoint signature'];
  const headers = ['leaf hash', 'event shown', 'inclusion path', 'checkpoint root', 'signature'];
  if (result.policy) { names.push('witnesses'); headers.push('witnesses'); }
  const rows = result.entries.map((e) => {
    const cells = names.map((name) => {
      const s = e.steps.find((x) => x.name === name);
      if (!s) return h('td', { class: 'step-skip' }, '·');
      // A checkpoint under the quorum is a finding on a proof that holds, not a failed step.
      const kind = s.ok ? 'step-ok' : e.ok ? 'step-warn' : 'step-bad';
      return h('td', { class: kind, title: s.detail }, s.ok ? '✓' : '✕');
    });
    const last = e.steps[e.steps.length - 1];
    return h('tr', { 'data-seq': e.seq, class: e.ok ? '' : 'row-bad' },
      h('td', { class: 'mono' }, String(e.seq)), ...cells,
      h('td', { class: e.ok ? 'muted mono' : 'bad' }, e.ok ? short(e.proof.leaf_hash, 16) : `${e.failure}: ${last ? last.detail : ''}`));
  });
  body.append(section('Entries',
    table(['seq', ...headers, 'detail'], rows, { class: 'steps', 'data-test': 'verify-steps' })));
  return result;
}
