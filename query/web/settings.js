// Sign-in (the bearer token, per tab) and the pinned verifier key (the trust anchor, per browser).

import { h, clear } from './dom.js';
import { signIn } from './api.js';
import { parseVerifierKey } from './verify.js';

const KEY_KEY = 'toolledger.verifierKey';

export function pinnedKey() {
  return localStorage.getItem(KEY_KEY) || '';
}

export function pinnedKeyLabel() {
  const text = pinnedKey();
  if (!text) return 'no verifier key pinned';
  const first = text.split('\n').map((l) => l.trim()).find((l) => l && !l.startsWith('#')) || '';
  const [name, id] = first.split('+');
  return `key ${name}+${id}`;
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
}
