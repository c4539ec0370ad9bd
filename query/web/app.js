// The web view's entry: a hash router over a few pages, and the sign-in gate in front of them.
// Pages render only what /v1 returned for the signed-in token; ids travel in the hash, the token
// never does.

import { h, clear, errorBox } from './dom.js';
import { token, signOut } from './api.js';
import { renderSessions } from './sessions.js';
import { renderSession } from './session.js';
import { renderInvocation } from './invocation.js';
import { renderVerification } from './verify.js';
import { renderTools } from './tools.js';
import { renderSettings, renderSignIn, pinnedKeyLabel } from './settings.js';

const main = document.getElementById('main');
let generation = 0;

function parse() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, query: new URLSearchParams(query || '') };
}

function header() {
  const who = document.getElementById('who');
  clear(who);
  if (token()) {
    who.append(h('span', { class: 'muted' }, pinnedKeyLabel()), ' ',
      h('button', { class: 'link', type: 'button', 'data-test': 'sign-out', onclick: () => { signOut(); route(); } }, 'Sign out'));
  }
  const { parts } = parse();
  const current = parts[0] === 'tools' ? 'tools' : parts[0] === 'settings' ? 'settings' : 'sessions';
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.dataset.nav === current);
  }
}

/** Renders the page for the hash; a page started for an older hash discards its results. */
async function route() {
  const mine = ++generation;
  const stale = () => mine !== generation;
  header();
  const { parts, query } = parse();
  const view = h('div', { class: 'page' });
  clear(main).append(view);
  if (!token() && parts[0] !== 'settings') {
    renderSignIn(view, route);
    return;
  }
  try {
    switch (parts[0]) {
      case 'session': await renderSession(view, parts[1], parts[2], stale); break;
      case 'invocation': await renderInvocation(view, parts[1], parts[2], stale); break;
      case 'verify': await renderVerification(view, parts[1], parts[2], stale); break;
      case 'tools': await renderTools(view, parts[1], parts[2], query, stale); break;
      case 'settings': renderSettings(view, route); break;
      default: await renderSessions(view, query, stale);
    }
  } catch (error) {
    if (stale()) return;
    if (error.status === 401) {
      signOut();
      clear(view);
      renderSignIn(view, route, 'The server did not accept the token; sign in again.');
      header();
      return;
    }
    view.append(errorBox(error));
  }
  if (!stale()) document.body.dataset.ready = location.hash || '#/sessions';
}

window.addEventListener('hashchange', () => { delete document.body.dataset.ready; route(); });
route();
