// Sessions with filters (tenant, tool, status, time range) and counts, all worked out by the server:
// /v1/sessions lists the sessions holding an invocation that matches the tool and status, a page at a
// time, each with the states of its matching invocations; /v1/invocation-counts totals them by state.

import { h, link, stateClass, time, duration, table, empty, errorBox, tenantForm } from './dom.js';
import { get } from './api.js';

// Sessions a page; more are fetched on request, following the server's cursor.
const PAGE = 100;

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

function sessionRow(s) {
  const span = s.first_time && s.last_time ? new Date(s.last_time) - new Date(s.first_time) : null;
  return h('tr', { 'data-session': s.session_id, 'data-tenant': s.tenant },
    h('td', {}, link(['session', s.tenant, s.session_id], s.session_id, { class: 'mono', 'data-test': 'session-link' })),
    h('td', {}, s.tenant),
    h('td', { class: 'nowrap' }, time(s.first_time)),
    h('td', { class: 'num nowrap' }, duration(span)),
    h('td', { class: 'num', 'data-test': 'session-invocations' }, String(s.invocation_count)),
    h('td', { class: 'num' }, String(s.event_count)),
    h('td', {}, chips(s.states)));
}

export async function renderSessions(view, query, stale) {
  const tenant = query.get('tenant') || null;
  const tool = query.get('tool') || null;
  const status = query.get('status') || null;
  const range = { from: rfc3339(query.get('from')), to: rfc3339(query.get('to')) };
  const filters = { tenant, tool_id: tool, status, ...range };
  let first, totals, catalog;
  try {
    [first, totals, catalog] = await Promise.all([
      get('/v1/sessions', { ...filters, limit: PAGE }),
      get('/v1/invocation-counts', { ...filters, group_by: 'state' }),
      get('/v1/tools', { tenant }).catch(() => ({ tools: [] })),
    ]);
  } catch (error) {
    // A partitioned ledger keeps each tenant in its own partition: an admin names the tenant to list.
    if (stale() || tenant || error.field !== 'tenant') throw error;
    view.append(h('h1', {}, 'Sessions'), tenantForm(error, 'List its sessions', (chosen) => {
      location.hash = `#/sessions?${new URLSearchParams({ tenant: chosen })}`;
    }));
    return;
  }
  if (stale()) return;
  // The tenants this token can read, as the server showed them; an admin may narrow to one.
  const tenants = [...new Set([...catalog.tools.map((t) => t.tenant), ...first.items.map((s) => s.tenant),
    ...(tenant ? [tenant] : [])])].sort();
  const tools = [...new Set(catalog.tools.map((t) => t.tool_id).concat(tool ? [tool] : []))].sort();
  const states = Object.fromEntries(totals.groups.map((g) => [g.key, g.count]));
  const narrowed = Boolean(tool || status);
  let shown = first.items.length;
  const sessionCount = h('strong', { 'data-test': 'session-count' }, String(shown));
  const moreNote = h('span', { 'data-test': 'more-sessions-note' }, first.next_cursor ? ' shown, more to load' : '');
  view.append(
    h('h1', {}, 'Sessions'),
    filterForm(query, tenants, tools),
    h('p', { class: 'counts', 'data-test': 'counts' },
      sessionCount, ' sessions', moreNote, ' · ',
      h('strong', { 'data-test': 'invocation-count' }, String(totals.total)), narrowed ? ' matching invocations' : ' invocations', ' · ',
      chips(states)));
  if (!first.items.length) {
    view.append(empty('No session matches these filters.'));
    return;
  }
  const list = table(['session', 'tenant', 'started', 'span', 'invocations', 'events', 'final states'],
    first.items.map(sessionRow), { 'data-test': 'sessions' });
  view.append(h('div', { class: 'card flush' }, list));
  let cursor = first.next_cursor;
  if (!cursor) return;
  const more = h('button', { type: 'button', 'data-test': 'more-sessions' }, `Next ${PAGE} sessions`);
  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const next = await get('/v1/sessions', { ...filters, limit: PAGE, cursor });
      if (stale()) return;
      list.tBodies[0].append(...next.items.map(sessionRow));
      shown += next.items.length;
      sessionCount.textContent = String(shown);
      cursor = next.next_cursor;
      if (!cursor) {
        moreNote.textContent = '';
        more.remove();
      }
    } catch (error) {
      if (!stale()) more.after(errorBox(error));
    } finally {
      more.disabled = false;
    }
  });
  view.append(h('p', {}, more));
}
