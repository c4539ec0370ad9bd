// One invocation reconstructed: ordered events, the four inputs with the diffs between them,
// mutations, permission decisions with reasons, hooks, results (payload contents on demand),
// error and retry guidance, native ids, anomalies — and a verified badge computed in the browser.

import { h, clear, link, stateBadge, behaviorBadge, time, json, short, section, table, empty } from './dom.js';
import { get } from './api.js';
import { badge, verifyInvocation } from './verify.js';

const INPUTS = ['model_input', 'observable_input', 'permission_input', 'call_input'];

function value(v) {
  if (v === undefined) return h('span', { class: 'muted' }, '—');
  if (v === null || typeof v !== 'object') return h('code', {}, JSON.stringify(v));
  return h('code', {}, JSON.stringify(v));
}

function changes(list) {
  if (!list || !list.length) return empty('no change');
  return table(['path', 'change', 'before', 'after'], list.map((c) => h('tr', { class: `op-${c.op}` },
    h('td', { class: 'mono' }, c.path || '/'), h('td', {}, h('span', { class: `op op-${c.op}` }, c.op)),
    h('td', {}, value(c.before)), h('td', {}, value(c.after)))), { class: 'compact diff' });
}

function text(v) {
  if (v === null || v === undefined) return '—';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(([, v]) => v !== undefined).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v instanceof Node ? v : text(v))]));
}

function payloadTable(payloads, withContent) {
  if (!payloads.length) return empty('No offloaded payloads.');
  return table(['seq', 'path', 'status', 'size', 'commitment', withContent ? 'content' : ''], payloads.map((p) => h('tr', {},
    h('td', { class: 'mono num' }, String(p.seq)), h('td', { class: 'mono' }, p.path),
    h('td', {}, h('span', { class: `badge pl-${p.status}` }, p.status), p.detail ? ` ${p.detail}` : ''),
    h('td', { class: 'num' }, String(p.size)), h('td', { class: 'mono' }, short(p.commitment, 20)),
    h('td', {}, withContent ? (p.content !== undefined ? json(p.content) : h('span', { class: 'muted' }, p.status === 'ok' ? '—' : 'not available')) : ''))),
  { class: 'compact', 'data-test': 'payloads' });
}

export async function renderInvocation(view, tenant, id, stale) {
  const path = `/v1/invocations/${encodeURIComponent(id)}`;
  const r = await get(path, { tenant, payloads: 'check' });
  if (stale()) return;
  const badgeSlot = h('span', { 'data-test': 'badge-slot' }, badge(null));
  view.append(
    h('p', { class: 'crumbs' }, link(['sessions'], 'Sessions'), ' / ',
      r.session_id ? link(['session', r.tenant, r.session_id], r.session_id) : 'no session', ' / ', r.invocation_id),
    h('h1', {}, h('span', { class: 'mono', 'data-test': 'invocation-id' }, r.invocation_id), ' ', stateBadge(r.state)),
    h('p', { class: 'badges' }, badgeSlot, ' ', link(['verify', r.tenant, r.invocation_id], 'verification details →', { 'data-test': 'verify-link' })),
    facts([['tenant', r.tenant], ['tool', h('span', { class: 'mono' }, r.tool_id || '—')], ['surface', r.surface_id],
      ['actor', r.actor_ref], ['attempt', r.attempt], ['retry of', r.retry_of ? link(['invocation', r.tenant, r.retry_of], r.retry_of) : null],
      ['retried by', r.retried_by.length ? h('span', {}, r.retried_by.map((x) => [link(['invocation', r.tenant, x], x), ' '])) : null],
      ['created', time(r.created_at)], ['started', time(r.started_at)], ['ended', time(r.ended_at)],
      ['terminal', r.terminal ? 'yes' : 'no']]));

  if (r.anomalies.length) {
    view.append(section('Anomalies', h('ul', { class: 'anomalies', 'data-test': 'anomalies' },
      r.anomalies.map((a) => h('li', {}, h('strong', {}, a.kind), ` at seq ${a.seq}: `, text(a.details))))));
  }
  if (r.error) {
    const e = r.error;
    view.append(section('Error', h('div', { class: 'error-report', 'data-test': 'error-report' },
      facts([['class', e.class], ['code', e.code], ['message', e.message], ['source', e.source],
        ['retry', `${e.retry.retryable ? 'retryable' : 'not retryable'} · ${e.retry.guidance} (from the ${e.retry.from})`]]))));
  }
  view.append(section('Events', table(['seq', 'time', 'class', 'transition', 'event id', 'leaf hash'], r.timeline.map((e) => h('tr', { 'data-seq': e.seq },
    h('td', { class: 'mono num' }, String(e.seq)), h('td', { class: 'nowrap' }, time(e.time)), h('td', { class: 'mono' }, e.class || '—'),
    h('td', {}, e.transition ? [h('span', { class: 'muted' }, e.transition.from), ' → ', stateBadge(e.transition.to)] : ''),
    h('td', { class: 'mono' }, e.event_id || '—'), h('td', { class: 'mono muted', title: e.leaf_hash }, short(e.leaf_hash)))),
  { class: 'compact', 'data-test': 'invocation-events' })));

  const inputs = h('div', { class: 'inputs' }, INPUTS.map((name) => h('div', { class: 'input' },
    h('h3', {}, name.replace('_', ' '), r.inputs.refs[name] ? h('span', { class: 'muted mono' }, ` ${r.inputs.refs[name]}`) : ''),
    json(r.inputs[name]))));
  const diffs = r.inputs.diffs.map((d) => h('div', { class: 'diff-block' }, h('h3', {}, `${d.from} → ${d.to}`), changes(d.changes)));
  view.append(section('Inputs', inputs, diffs.length ? diffs : empty('The inputs are identical.')));

  if (r.mutations.length) {
    view.append(section('Mutations', r.mutations.map((m) => h('div', { class: 'diff-block' },
      h('h4', {}, `${m.source} `, h('span', { class: 'mono' }, m.source_id), ` · ${m.from_input || '?'} → ${m.to_input || '?'} · seq ${m.seq}`),
      m.reason ? h('p', {}, 'reason: ', text(m.reason)) : null,
      m.diff ? changes(m.diff) : h('p', { class: 'muted' }, `changed fields: ${text(m.changed_fields)}`)))));
  }
  if (r.permission_requests.length || r.permission_decisions.length) {
    view.append(section('Permission',
      r.permission_requests.length ? h('p', { class: 'muted' }, `${r.permission_requests.length} request(s): `,
        r.permission_requests.map((q) => `${q.decision_id} (seq ${q.seq})`).join(', ')) : null,
      table(['seq', 'decision', 'behavior', 'mode', 'source', 'reason', 'decided'], r.permission_decisions.map((d) => h('tr', { 'data-behavior': d.behavior },
        h('td', { class: 'mono num' }, String(d.seq)), h('td', { class: 'mono' }, d.decision_id), h('td', {}, behaviorBadge(d.behavior)),
        h('td', {}, text(d.mode)), h('td', {}, text(d.source)), h('td', {}, text(d.reason)), h('td', { class: 'nowrap' }, time(d.decided_at)))),
      { class: 'compact', 'data-test': 'decisions' })));
  }
  if (r.hooks.length) {
    view.append(section('Hooks', table(['seq', 'hook', 'phase', 'event', 'outcome'], r.hooks.map((k) => h('tr', {},
      h('td', { class: 'mono num' }, String(k.first_seq)), h('td', { class: 'mono' }, k.hook_id), h('td', {}, k.phase), h('td', {}, k.hook_event),
      h('td', {}, text(k.outcome ?? k.status ?? (k.stop ? 'stop' : null))))), { class: 'compact' })));
  }
  const payloadSlot = h('div', {}, payloadTable(r.payloads, false));
  const more = h('button', { type: 'button', 'data-test': 'load-payloads' }, 'Load payload contents');
  more.addEventListener('click', async () => {
    more.disabled = true;
    more.textContent = 'loading…';
    try {
      const full = await get(path, { tenant, payloads: 'content' });
      clear(payloadSlot).append(payloadTable(full.payloads, true));
      more.remove();
    } catch (error) {
      more.textContent = `failed: ${error.message}`;
    }
  });
  view.append(section('Results',
    r.results.length ? table(['seq', 'result', 'kind', 'status'], r.results.map((x) => h('tr', {},
      h('td', { class: 'mono num' }, String(x.first_seq)), h('td', { class: 'mono' }, x.result_id), h('td', {}, x.kind), h('td', {}, x.status))), { class: 'compact' })
      : empty('No result.'),
    h('h3', {}, 'Payloads'), payloadSlot, r.payloads.length ? more : null));
  if (r.native_ids.length) {
    view.append(section('Native ids', table(['source', 'key', 'value', 'seq'], r.native_ids.map((n) => h('tr', {},
      h('td', {}, n.source), h('td', { class: 'mono' }, n.key), h('td', { class: 'mono' }, text(n.value)), h('td', { class: 'mono num' }, String(n.seq)))),
    { class: 'compact', 'data-test': 'native-ids' })));
  }
  verifyInvocation(r).then((result) => {
    if (!stale()) clear(badgeSlot).append(badge(result));
  }, (error) => {
    if (!stale()) clear(badgeSlot).append(badge({ ok: false, failure: `verification failed to run: ${error.message}` }));
  });
}
