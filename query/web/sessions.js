// Sessions with filters (tenant, tool, status, time range) and counts. /v1/sessions filters by
// tenant and time; tool and status come from /v1/invocations with the same filters, grouped by
// session, so a session is listed when one of its invocations matches.

import { h, link, stateClass, time, duration, table, empty } from './dom.js';
import { get, all } from './api.js';

const STATES = ['succeeded', 'failed', 'denied', 'timed_out', 'canceled', 'validation_failed', 'schema_parse_failed',
  'blocked', 'running', 'awaiting_approval', 'queued', 'planned', 'unknown'];

function rfc3339(local) {
  if (!local) return null;
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

function filterForm(query, tenants, tools) {
  const select = (name, label, options) => h('label', {}, label,
    h('select', { name, 'data-filter': name },
      h('option', { value: '' }, 'any'),
      options.map((o) => h('option', { value: o, selected: query.get(name) === o }, o))));
  const form = h('form', { class: 'filters', 'data-test': 'filters' },
    select('tenant', 'Tenant', tenants),
    select('tool', 'Tool', tools),
    select('status', 'Status', STATES),
    h('label', {}, 'From', h('input', { type: 'datetime-local', name: 'from', step: 1, value: query.get('from') || '' })),
    h('label', {}, 'To', h('input', { type: 'datetime-local', name: 'to', step: 1, value: query.get('to') || '' })),
    h('button', { type: 'submit', class: 'primary' }, 'Apply'),
    h('a', { href: '#/sessions', class: 'button' }, 'Clear'));
  const apply = (event) => {
    if (event) event.preventDefault();
    const next = new URLSearchParams();
    for (const el of form.querySelectorAll('select, input')) if (el.value) next.set(el.name, el.value);
    location.hash = `#/sessions?${next}`;
  };
  form.addEventListener('submit', apply);
  for (const el of form.querySelectorAll('select')) el.addEventListener('change', () => apply());
  return form;
}

function chips(counts) {
  return h('span', { class: 'chips' }, Object.entries(counts).sort((a, b) => b[1] - a[1])
    .map(([state, n]) => h('span', { class: `chip ${stateClass(state)}`, title: state, 'data-state': state }, `${n} ${state}`)));
}

export async function renderSessions(view, query, stale) {
  const tenant = query.get('tenant') || null;
  const tool = query.get('tool') || null;
  const status = query.get('status') || null;
  const range = { from: rfc3339(query.get('from')), to: rfc3339(query.get('to')) };
  const [sessions, invocations, catalog] = await Promise.all([
    all('/v1/sessions', { tenant, ...range }),
    all('/v1/invocations', { tenant, tool_id: tool, status, ...range }, 20000),
    get('/v1/tools', { tenant }).catch(() => ({ tools: [] })),
  ]);
  if (stale()) return;
  // The tenants this token can read, as the server showed them; an admin may narrow to one.
  const tenants = [...new Set([...sessions.items.map((s) => s.tenant), ...(tenant ? [tenant] : [])])].sort();
  const tools = [...new Set(catalog.tools.map((t) => t.tool_id).concat(tool ? [tool] : []))].sort();
  const bySession = new Map();
  for (const inv of invocations.items) {
    if (!inv.session_id) continue;
    const key = `${inv.tenant}\u0000${inv.session_id}`;
    const counts = bySession.get(key) || {};
    counts[inv.state] = (counts[inv.state] || 0) + 1;
    bySession.set(key, counts);
  }
  const narrowed = Boolean(tool || status);
  const shown = sessions.items.filter((s) => (!tenant || s.tenant === tenant) &&
    (!narrowed || bySession.has(`${s.tenant}\u0000${s.session_id}`)));
  const totals = {};
  for (const inv of invocations.items) {
    if (shown.some((s) => s.tenant === inv.tenant && s.session_id === inv.session_id)) totals[inv.state] = (totals[inv.state] || 0) + 1;
  }
  const matching = Object.values(totals).reduce((a, b) => a + b, 0);
  view.append(
    h('h1', {}, 'Sessions'),
    filterForm(query, tenants, tools),
    h('p', { class: 'counts', 'data-test': 'counts' },
      h('strong', { 'data-test': 'session-count' }, String(shown.length)), ' sessions · ',
      h('strong', { 'data-test': 'invocation-count' }, String(matching)), narrowed ? ' matching invocations' : ' invocations', ' · ',
      chips(totals),
      sessions.truncated || invocations.truncated ? h('span', { class: 'warn' }, ' (first pages only: narrow the time range)') : null));
  if (!shown.length) {
    view.append(empty('No session matches these filters.'));
    return;
  }
  const rows = shown.map((s) => {
    const counts = bySession.get(`${s.tenant}\u0000${s.session_id}`) || {};
    const span = s.first_time && s.last_time ? new Date(s.last_time) - new Date(s.first_time) : null;
    return h('tr', { 'data-session': s.session_id, 'data-tenant': s.tenant },
      h('td', {}, link(['session', s.tenant, s.session_id], s.session_id, { class: 'mono', 'data-test': 'session-link' })),
      h('td', {}, s.tenant),
      h('td', { class: 'nowrap' }, time(s.first_time)),
      h('td', { class: 'num nowrap' }, duration(span)),
      h('td', { class: 'num', 'data-test': 'session-invocations' }, String(s.invocation_count)),
      h('td', { class: 'num' }, String(s.event_count)),
      h('td', {}, chips(counts)));
  });
  view.append(h('div', { class: 'card flush' },
    table(['session', 'tenant', 'started', 'span', 'invocations', 'events', 'final states'], rows, { 'data-test': 'sessions' })));
}
