// Sign-in (the bearer token, per tab), the pinned verifier key (the trust anchor, per browser) and
// the pinned witness policy (which witnesses must have cosigned a checkpoint, per browser).

import { h, clear } from './dom.js';
import { signIn } from './api.js';
import { parseVerifierKey, parseWitnessPolicy } from './verify.js';

const KEY_KEY = 'toolledger.verifierKey';
const WITNESS_KEYS_KEY = 'toolledger.witnessKeys';
const WITNESS_QUORUM_KEY = 'toolledger.witnessQuorum';

export function pinnedKey() {
  return localStorage.getItem(KEY_KEY) || '';
}

/** The pinned witness policy as text, {keys, quorum} ('' quorum: a majority), or null when none is. */
export function pinnedWitnessPolicy() {
  const keys = localStorage.getItem(WITNESS_KEYS_KEY) || '';
  if (!keys.trim()) return null;
  return { keys, quorum: localStorage.getItem(WITNESS_QUORUM_KEY) || '' };
}

function keyLines(text) {
  return text.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
}

export function pinnedKeyLabel() {
  const text = pinnedKey();
  if (!text) return 'no verifier key pinned';
  const [name, id] = (keyLines(text)[0] || '').split('+');
  const policy = pinnedWitnessPolicy();
  const witnesses = keyLines(policy ? policy.keys : '').length;
  return `key ${name}+${id}${policy ? ` · witnesses ${policy.quorum || Math.floor(witnesses / 2) + 1} of ${witnesses}` : ''}`;
}

function keyField(value) {
  return h('textarea', { id: 'verifier-key', name: 'key', rows: 2, spellcheck: 'false', autocomplete: 'off',
    placeholder: 'toolledger/ATL_LEDGER+1a2b3c4d+AQ…   (printed by toolledger init; keys/checkpoint.pub)' }, value);
}

async function checkKey(text, out) {
  clear(out);
  if (!text.trim()) {
    out.append(h('span', { class: 'warn' }, 'No key: evidence cannot be verified until one is pinned.'));
    return true;
  }
  try {
    const keys = await parseVerifierKey(text);
    out.append(h('span', { class: 'ok' }, `Key ok: ${keys.map((k) => `${k.name}+${k.idHex}`).join(', ')}`));
    return true;
  } catch (error) {
    out.append(h('span', { class: 'bad' }, `Not a verifier key: ${error.message}`));
    return false;
  }
}

export function renderSignIn(view, done, message) {
  const tokenInput = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true,
    placeholder: 'bearer token' });
  const key = keyField(pinnedKey());
  const keyCheck = h('div', { class: 'hint' });
  const form = h('form', { class: 'card signin', 'data-test': 'sign-in' },
    h('h1', {}, 'Sign in'),
    message ? h('p', { class: 'error' }, message) : null,
    h('p', { class: 'muted' }, 'The token is kept in this tab only (sessionStorage) and sent as a bearer token to /v1. ' +
      'Every page shows only what the server returns for it.'),
    h('label', { for: 'token' }, 'API token'), tokenInput,
    h('label', { for: 'verifier-key' }, 'Verifier key (trust anchor for evidence, kept in this browser)'), key, keyCheck,
    h('button', { type: 'submit', class: 'primary' }, 'Sign in'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!(await checkKey(key.value, keyCheck))) return;
    if (key.value.trim()) localStorage.setItem(KEY_KEY, key.value.trim());
    signIn(tokenInput.value);
    done();
  });
  view.append(form);
}

function witnessFields(policy) {
  const keys = h('textarea', { id: 'witness-keys', name: 'witness-keys', rows: 3, spellcheck: 'false', autocomplete: 'off',
    placeholder: 'witness.example.com/w1+4a1c77d0+BO…   (one witness verifier key per line, as toolledger witness printed it)' },
  policy ? policy.keys : '');
  const quorum = h('input', { id: 'witness-quorum', name: 'witness-quorum', type: 'number', min: 1, step: 1, inputmode: 'numeric',
    placeholder: 'majority', value: policy ? policy.quorum : '' });
  return { keys, quorum };
}

async function checkPolicy(keysText, quorumText, out) {
  clear(out);
  if (!keysText.trim()) {
    out.append(h('span', { class: 'muted' }, 'No witness policy: cosignatures are not required, and not shown.'));
    return true;
  }
  try {
    const policy = await parseWitnessPolicy(keysText, quorumText);
    out.append(h('span', { class: 'ok' }, `Policy ok: at least ${policy.quorum} of ${policy.witnesses.length} witnesses` +
      `${quorumText.trim() ? '' : ' (a majority)'}: ${policy.witnesses.map((w) => `${w.name}+${w.idHex}`).join(', ')}`));
    return true;
  } catch (error) {
    out.append(h('span', { class: 'bad' }, `Not a witness policy: ${error.message}`));
    return false;
  }
}

export function renderSettings(view, done) {
  const key = keyField(pinnedKey());
  const keyCheck = h('div', { class: 'hint' });
  checkKey(key.value, keyCheck);
  const form = h('form', { class: 'card' },
    h('h1', {}, 'Settings'),
    h('label', { for: 'verifier-key' }, 'Pinned verifier key'),
    h('p', { class: 'muted' }, 'The browser verifies evidence against this key only: a checkpoint signed by any other key is shown as not verified. ' +
      'One key per line after a rotation; lines starting with # are skipped.'),
    key, keyCheck,
    h('div', { class: 'row' },
      h('button', { type: 'submit', class: 'primary' }, 'Pin key'),
      h('button', { type: 'button', onclick: () => { localStorage.removeItem(KEY_KEY); key.value = ''; checkKey('', keyCheck); } }, 'Forget key')));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!(await checkKey(key.value, keyCheck))) return;
    localStorage.setItem(KEY_KEY, key.value.trim());
    done();
  });
  view.append(form);

  const witness = witnessFields(pinnedWitnessPolicy());
  const policyCheck = h('div', { class: 'hint', 'data-test': 'witness-policy-check' });
  checkPolicy(witness.keys.value, witness.quorum.value, policyCheck);
  const forget = () => {
    localStorage.removeItem(WITNESS_KEYS_KEY);
    localStorage.removeItem(WITNESS_QUORUM_KEY);
    done();
  };
  const policyForm = h('form', { class: 'card', 'data-test': 'witness-policy' },
    h('h2', {}, 'Witness policy'),
    h('p', { class: 'muted' }, 'Witnesses are independent parties that cosign a checkpoint only when it extends the history they saw before ' +
      '(docs/witnesses.md). With a policy pinned, evidence counts as verified only when at least the quorum of these witnesses ' +
      'cosigned the checkpoint it rests on; fewer is shown as not witnessed, naming who did cosign. A listed witness\'s cosignature ' +
      'that does not verify fails the evidence; cosignatures of witnesses not listed are ignored.'),
    h('label', { for: 'witness-keys' }, 'Witness verifier keys, one per line'), witness.keys,
    h('label', { for: 'witness-quorum' }, 'Quorum: how many of them must have cosigned (empty: a majority)'), witness.quorum,
    policyCheck,
    h('div', { class: 'row' },
      h('button', { type: 'submit', class: 'primary' }, 'Pin policy'),
      h('button', { type: 'button', 'data-test': 'forget-policy', onclick: forget }, 'Forget policy')));
  policyForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    const keysText = witness.keys.value.trim();
    const quorumText = String(witness.quorum.value).trim();
    if (!(await checkPolicy(keysText, quorumText, policyCheck))) return;
    if (!keysText) { forget(); return; }
    localStorage.setItem(WITNESS_KEYS_KEY, keysText);
    localStorage.setItem(WITNESS_QUORUM_KEY, quorumText);
    done();
  });
  view.append(policyForm);
}
