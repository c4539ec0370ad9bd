// The tool catalog (versions, lifecycle) and, for the selected tool, charts from /v1/stats (calls
// per bucket by outcome, p50/p95 latency) and its error classes from /v1/invocation-counts.

import { h, link, duration, section, table, empty, tenantForm } from './dom.js';
import { get } from './api.js';
import { stackedBars, lines, hbars } from './charts.js';

const OUTCOMES = [
  { name: 'succeeded', cls: 'st-succeeded' }, { name: 'failed', cls: 'st-failed' }, { name: 'timed_out', cls: 'st-timeout' },
  { name: 'denied', cls: 'st-denied' }, { name: 'canceled', cls: 'st-canceled' }, { name: 'in_flight', cls: 'st-running' },
];
const BUCKETS = [['1m', 60e3], ['5m', 300e3], ['15m', 900e3], ['1h', 3600e3], ['6h', 21600e3], ['1d', 86400e3], ['7d', 604800e3], ['31d', 2678400e3]];

// The narrowest bucket that draws the span from the first call to the last in at most 40 bars.
function bucketFor(first, last) {
  const span = Date.parse(last) - Date.parse(first);
  const width = Number.isNaN(span) ? 0 : span;
  return (BUCKETS.find(([, w]) => width / w <= 40) || BUCKETS[BUCKETS.length - 1])[0];
}

function label(iso, bucket) {
  const d = new Date(iso);
  const text = d.toISOString();
  return bucket.endsWith('d') ? text.slice(5, 10) : text.slice(11, 16);
}

async function toolPanel(tool) {
  const scope = { tenant: tool.tenant, tool_id: tool.tool_id };
  // The widest bucket first: few rows, and the span of the calls to choose the chart's bucket from.
  const [overview, errors] = await Promise.all([
    get('/v1/stats', { ...scope, bucket: '31d' }),
    get('/v1/invocation-counts', { ...scope, group_by: 'error_class' }),
  ]);
  const bucket = bucketFor(overview.first_time, overview.last_time);
  const stats = bucket === overview.bucket ? overview : await get('/v1/stats', { ...scope, bucket });
  const rows = stats.rows.filter((r) => r.tool_id === tool.tool_id).sort((a, b) => a.bucket_start.localeCompare(b.bucket_start));
  const classes = Object.fromEntries(errors.groups.filter((g) => g.key !== null).map((g) => [g.key, g.count]));
  const totals = rows.reduce((t, r) => { t.calls += r.calls; t.ok += r.succeeded; return t; }, { calls: 0, ok: 0 });
  const p95 = rows.map((r) => r.latency_p95_ms).filter((v) => v !== null);
  const panel = h('div', { 'data-test': 'tool-panel', 'data-tool': tool.tool_id });
  panel.append(h('h2', {}, h('span', { class: 'mono' }, tool.tool_id), ` · ${tool.tenant}`),
    h('p', { class: 'counts' }, h('strong', { 'data-test': 'tool-calls' }, String(totals.calls)), ' calls · ',
      `${totals.calls ? Math.round((100 * totals.ok) / totals.calls) : 0}% succeeded · worst bucket p95 `,
      duration(p95.length ? Math.max(...p95) : null), ` · bucket ${bucket}`));
  if (!rows.length) {
    panel.append(empty('No invocations of this tool yet.'));
  } else {
    panel.append(h('div', { class: 'charts' },
      h('figure', { class: 'card' }, h('figcaption', {}, `Calls per ${bucket} by outcome`),
        stackedBars('calls by outcome', rows.map((r) => ({ label: label(r.bucket_start, bucket), parts: r })), OUTCOMES),
        h('div', { class: 'legend' }, OUTCOMES.map((o) => h('span', { class: 'legend-item' }, h('span', { class: `swatch ${o.cls}` }), o.name)))),
      h('figure', { class: 'card' }, h('figcaption', {}, 'Latency p50 / p95 (ms)'),
        lines('latency', rows.map((r) => ({ label: label(r.bucket_start, bucket), values: { p50: r.latency_p50_ms, p95: r.latency_p95_ms } })),
          [{ name: 'p50', cls: 'ln-p50' }, { name: 'p95', cls: 'ln-p95' }], (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)}s` : `${Math.round(v)}`)),
        h('div', { class: 'legend' }, h('span', { class: 'legend-item' }, h('span', { class: 'swatch ln-p50' }), 'p50'),
          h('span', { class: 'legend-item' }, h('span', { class: 'swatch ln-p95' }), 'p95'))),
      h('figure', { class: 'card' }, h('figcaption', {}, 'Error classes'),
        Object.keys(classes).length ? hbars('error classes', Object.entries(classes).sort((a, b) => b[1] - a[1]).map(([k, v]) => ({ label: k, value: v })), 'st-failed')
          : empty('No errors.'))));
  }
  panel.append(h('div', { class: 'two' },
    section('Versions', tool.versions.length ? table(['#', 'version', 'lifecycle', 'kind', 'first seq'], tool.versions.map((v) => h('tr', {},
      h('td', { class: 'num' }, String(v.version_no)), h('td', { class: 'mono' }, v.version ?? '—'), h('td', {}, v.lifecycle ?? '—'), h('td', {}, v.tool_kind ?? '—'),
      h('td', { class: 'mono num' }, String(v.first_seq)))), { class: 'compact' }) : empty('No versions recorded.')),
    section('Lifecycle and surfaces', tool.lifecycle_history.length ? table(['seq', 'lifecycle'], tool.lifecycle_history.map((l) => h('tr', {},
      h('td', { class: 'mono num' }, String(l.seq)), h('td', {}, l.lifecycle))), { class: 'compact' }) : empty('No lifecycle changes.'),
    tool.surfaces.length ? table(['surface', 'revision', 'disposition', 'reason'], tool.surfaces.map((x) => h('tr', {},
      h('td', { class: 'mono' }, x.surface_id), h('td', { class: 'num' }, String(x.revision)), h('td', {}, x.disposition), h('td', {}, x.reason || ''))),
    { class: 'compact' }) : empty('On no surface.'))));
  return panel;
}

export async function renderTools(view, tenant, toolId, query, stale) {
  const catalogOf = (scope) => Promise.all([get('/v1/tools', scope), get('/v1/invocation-counts', { ...scope, group_by: 'tool_id' })]);
  let read;
  try {
    read = await catalogOf({});
  } catch (error) {
    // A partitioned ledger keeps each tenant in its own partition: an admin names the tenant to list.
    if (stale() || error.field !== 'tenant') throw error;
    if (!tenant) {
      view.append(h('h1', {}, 'Tools'), tenantForm(error, 'List its tools', (chosen) => {
        location.hash = `#/tools/${encodeURIComponent(chosen)}`;
      }));
      return;
    }
    read = await catalogOf({ tenant });
  }
  if (stale()) return;
  const [{ tools }, usage] = read;
  // Without a choice, the most called tool (calls summed over the readable tenants).
  const calls = Object.fromEntries(usage.groups.filter((g) => g.key !== null).map((g) => [g.key, g.count]));
  const busiest = [...tools].sort((a, b) => (calls[b.tool_id] || 0) - (calls[a.tool_id] || 0))[0];
  const selected = tools.find((t) => t.tenant === tenant && t.tool_id === toolId) || busiest;
  view.append(h('h1', {}, 'Tools'),
    h('p', { class: 'counts' }, h('strong', { 'data-test': 'tool-count' }, String(tools.length)), ' tools in the catalog'));
  if (!tools.length) {
    view.append(empty('No tool has been declared or called yet.'));
    return;
  }
  view.append(h('div', { class: 'card flush' }, table(['tool', 'tenant', 'title', 'version', 'lifecycle', 'kind', 'versions', 'surfaces'],
    tools.map((t) => h('tr', { class: t === selected ? 'selected' : '', 'data-tool': t.tool_id, 'data-tenant': t.tenant },
      h('td', {}, link(['tools', t.tenant, t.tool_id], t.tool_id, { class: 'mono', 'data-test': 'tool-link' })),
      h('td', {}, t.tenant), h('td', {}, t.title || t.name || '—'), h('td', { class: 'mono' }, t.version || '—'),
      h('td', {}, t.lifecycle ? h('span', { class: `badge lc-${t.lifecycle}` }, t.lifecycle) : '—'), h('td', {}, t.tool_kind || '—'),
      h('td', { class: 'num' }, String(t.versions.length)), h('td', { class: 'num' }, String(t.surfaces.length)))),
    { 'data-test': 'tools', class: 'compact' })));
  const panel = await toolPanel(selected);
  if (stale()) return;
  view.append(panel);
}
