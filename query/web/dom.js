// DOM building without HTML strings: every value reaches the page as text, never as markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(element, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') element.setAttribute('class', value);
    else if (key.startsWith('on') && typeof value === 'function') element.addEventListener(key.slice(2), value);
    else if (key === 'style' && typeof value === 'object') Object.assign(element.style, value);
    else element.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** An HTML element: h('a', {href: '#/x'}, 'text', otherNode). */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function clear(element) {
  element.replaceChildren();
  return element;
}

/** Terminal and in-flight states to the four colours of the view. */
export function stateClass(state) {
  switch (state) {
    case 'succeeded': return 'st-succeeded';
    case 'failed': case 'validation_failed': case 'schema_parse_failed': case 'blocked': case 'timed_out':
      return 'st-failed';
    case 'denied': return 'st-denied';
    case 'canceled': return 'st-canceled';
    default: return 'st-running';
  }
}

export function stateBadge(state) {
  return h('span', { class: `badge ${stateClass(state)}`, 'data-state': state }, state || 'unknown');
}

export function behaviorBadge(behavior) {
  const known = ['allow', 'ask', 'deny'].includes(behavior) ? behavior : 'other';
  return h('span', { class: `badge dec-${known}`, 'data-behavior': behavior }, behavior || '?');
}

export function time(value) {
  if (!value) return '—';
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return value;
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z').replace('Z', ' UTC');
}

export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

export function json(value) {
  return h('pre', { class: 'json' }, value === undefined ? '—' : JSON.stringify(value, null, 2));
}

export function short(hash, n = 12) {
  return hash ? `${hash.slice(0, n)}…` : '—';
}

/** A link inside the view (hash routes carry ids, never the token). */
export function link(parts, text, attrs = {}) {
  return h('a', { href: '#/' + parts.map(encodeURIComponent).join('/'), ...attrs }, text);
}

export function section(title, ...children) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...children);
}

export function table(headers, rows, attrs = {}) {
  return h('table', attrs,
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows));
}

export function errorBox(error) {
  return h('div', { class: 'error', role: 'alert', 'data-test': 'error' },
    h('strong', {}, error.code ? `${error.status || ''} ${error.code}: ` : 'error: '),
    error.message || String(error));
}

/**
 * Asks for the tenant to read, with the server's reason: a partitioned ledger keeps each tenant in
 * its own partition, so an admin's listing names one (docs/scaling.md). `go(tenant)` follows it.
 */
export function tenantForm(error, label, go) {
  const input = h('input', { name: 'tenant', required: true, placeholder: 'tenant', 'data-filter': 'tenant' });
  const form = h('form', { class: 'filters', 'data-test': 'tenant-required' },
    h('p', {}, error.message),
    h('label', {}, 'Tenant', input),
    h('button', { type: 'submit', class: 'primary' }, label));
  input.addEventListener('input', () => input.setCustomValidity(''));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const tenant = input.value.trim();
    if (!tenant) {
      input.setCustomValidity('Name a tenant.');
      input.reportValidity();
      return;
    }
    go(tenant);
  });
  return form;
}

export function empty(text) {
  return h('p', { class: 'muted' }, text);
}
