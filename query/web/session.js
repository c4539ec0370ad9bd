// A session's timeline: invocations as bars on a time axis coloured by final state, permission
// decisions (allow / ask / deny) and hooks marked on their invocation's lane, and replay controls
// that step through the session's events in ledger order at a chosen speed.
//
// Data: /v1/sessions/{id} (summary, invocations, events with their classes and transitions) and
// /v1/sessions/{id}/replay?speed=0 (the events themselves, for decisions and hooks). Without a
// ledger (503) the timeline still draws, with decisions and hooks unmarked.

import { h, s, link, stateBadge, stateClass, behaviorBadge, time, duration, section, table, errorBox } from './dom.js';
import { get, ndjson } from './api.js';

const LANE = 28;
const LABEL = 260;
const WIDTH = 1180;
const AXIS = 34;
const SPEEDS = [1, 2, 5, 10, 50, 100];

function ms(value) {
  const t = value ? Date.parse(value) : NaN;
  return Number.isNaN(t) ? null : t;
}

/** One event as the page uses it, from the projection's row and (when available) the ledger's event. */
function normalize(row, replayed) {
  const event = replayed ? replayed.event : null;
  const data = (event && event.data) || {};
  const cls = row.class || (event && event.type) || '';
  let mark = null;
  if (cls.endsWith('permission.decided')) mark = { kind: 'decision', behavior: data.behavior || null, reason: data.reason };
  else if (cls.includes('.hook.')) mark = { kind: 'hook', phase: cls.includes('.pre.') ? 'pre' : 'post', hook: data.hook_event, done: cls.endsWith('completed') };
  const invocation = (event && (event.invocationid || data.invocation_id)) || null;
  return { seq: row.seq, time: ms(row.time || (event && event.time)), cls, eventId: row.event_id, transition: row.transition, invocation, mark };
}

function detail(e) {
  if (!e.mark) return e.transition ? stateBadge(e.transition.to) : '';
  if (e.mark.kind === 'decision') return e.mark.behavior ? behaviorBadge(e.mark.behavior) : 'decision';
  return `${e.mark.phase} hook${e.mark.hook ? ` ${e.mark.hook}` : ''}${e.mark.done ? ' done' : ' started'}`;
}

function marker(e, x, y) {
  const title = s('title', {}, e.mark.kind === 'decision' ? `permission ${e.mark.behavior || '?'} · seq ${e.seq}` : `${e.mark.phase} hook · seq ${e.seq}`);
  if (e.mark.kind === 'hook') {
    const up = e.mark.phase === 'pre';
    const d = up ? `M${x - 5},${y - 13} L${x + 5},${y - 13} L${x},${y - 6} Z` : `M${x - 5},${y + 13} L${x + 5},${y + 13} L${x},${y + 6} Z`;
    return s('path', { d, class: 'mk-hook', 'data-mark': 'hook' }, title);
  }
  const b = e.mark.behavior;
  if (b === 'allow') return s('circle', { cx: x, cy: y, r: 6, class: 'mk-allow', 'data-mark': 'allow' }, title);
  if (b === 'ask') return s('path', { d: `M${x},${y - 7} L${x + 7},${y} L${x},${y + 7} L${x - 7},${y} Z`, class: 'mk-ask', 'data-mark': 'ask' }, title);
  if (b === 'deny') return s('g', { 'data-mark': 'deny' }, s('rect', { x: x - 6, y: y - 6, width: 12, height: 12, class: 'mk-deny' }),
    s('path', { d: `M${x - 3},${y - 3} L${x + 3},${y + 3} M${x + 3},${y - 3} L${x - 3},${y + 3}`, class: 'mk-deny-x' }), title);
  return s('circle', { cx: x, cy: y, r: 5, class: 'mk-other', 'data-mark': 'decision' }, title);
}

function ticks(t0, t1) {
  const span = Math.max(t1 - t0, 1);
  const steps = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 1800000, 3600000];
  const step = steps.find((x) => span / x <= 10) || 7200000;
  const out = [];
  for (let t = 0; t <= span; t += step) out.push(t);
  return out;
}

function drawTimeline(invocations, events, tenant) {
  const times = events.map((e) => e.time).filter((t) => t !== null);
  const t0 = Math.min(...times);
  const t1 = Math.max(...times, t0 + 1);
  const plot = WIDTH - LABEL - 20;
  const x = (t) => LABEL + ((t - t0) / (t1 - t0)) * plot;
  const height = AXIS + invocations.length * LANE + 10;
  const svg = s('svg', { viewBox: `0 0 ${WIDTH} ${height}`, class: 'timeline', role: 'img', 'aria-label': 'session timeline', 'data-test': 'timeline' });
  const axis = s('g', { class: 'axis' });
  for (const t of ticks(t0, t1)) {
    axis.append(s('line', { x1: x(t0 + t), x2: x(t0 + t), y1: AXIS - 6, y2: height - 6, class: 'grid' }),
      s('text', { x: x(t0 + t), y: AXIS - 12, 'text-anchor': 'middle' }, `+${duration(t)}`));
  }
  svg.append(axis);
  const lanes = new Map();
  invocations.forEach((inv, i) => {
    const y = AXIS + i * LANE + LANE / 2;
    const own = events.filter((e) => e.invocation === inv.invocation_id && e.time !== null);
    const start = own.length ? own[0].time : ms(inv.created_at || inv.first_time) ?? t0;
    const end = own.length ? own[own.length - 1].time : ms(inv.ended_at) ?? start;
    const lane = s('g', { class: 'lane', 'data-invocation': inv.invocation_id, 'data-state': inv.state });
    lane.append(s('rect', { x: 0, y: y - LANE / 2, width: WIDTH, height: LANE, class: i % 2 ? 'lane-bg odd' : 'lane-bg' }));
    const label = s('a', { href: `#/invocation/${encodeURIComponent(tenant)}/${encodeURIComponent(inv.invocation_id)}` },
      s('text', { x: 8, y: y + 4, class: 'lane-label' }, `${inv.tool_id || '?'} · ${inv.invocation_id}`.slice(0, 36)));
    const bar = s('a', { href: `#/invocation/${encodeURIComponent(tenant)}/${encodeURIComponent(inv.invocation_id)}` },
      s('rect', { x: x(start), y: y - 7, width: Math.max(x(end) - x(start), 4), height: 14, rx: 3,
        class: `bar ${stateClass(inv.state)}`, 'data-test': 'bar' },
      s('title', {}, `${inv.invocation_id} · ${inv.tool_id || '?'} · ${inv.state} · ${duration(end - start)}`)));
    lane.append(label, bar);
    for (const e of own.filter((ev) => ev.mark)) lane.append(marker(e, x(e.time), y));
    lanes.set(inv.invocation_id, { lane, start });
    svg.append(lane);
  });
  const cursor = s('line', { x1: LABEL, x2: LABEL, y1: AXIS - 6, y2: height - 6, class: 'cursor', visibility: 'hidden', 'data-test': 'cursor' });
  svg.append(cursor);
  return { svg, x, lanes, cursor };
}

function legend() {
  const item = (cls, text) => h('span', { class: 'legend-item' }, h('span', { class: `swatch ${cls}` }), text);
  return h('div', { class: 'legend' },
    item('st-succeeded', 'succeeded'), item('st-failed', 'failed / timed out'), item('st-denied', 'denied'),
    item('st-canceled', 'canceled'), item('st-running', 'running / not terminal'),
    item('mk-allow', 'allow'), item('mk-ask', 'ask'), item('mk-deny', 'deny'), item('mk-hook', 'hook (▼ pre, ▲ post)'));
}

/** Replay: a position in the event list, stepped by hand or by a timer at the chosen speed. */
function replayControls(events, chart, rows) {
  let at = -1;
  let timer = null;
  const position = h('span', { class: 'position', 'data-test': 'replay-position' }, `0 / ${events.length}`);
  const speed = h('select', { 'data-test': 'replay-speed', 'aria-label': 'speed' },
    SPEEDS.map((v) => h('option', { value: v, selected: v === 10 }, `${v}×`)));
  const play = h('button', { type: 'button', class: 'primary', 'data-test': 'replay-play' }, '▶ Play');
  const show = () => {
    for (const row of rows) row.classList.remove('current');
    const t0 = events[0].time;
    if (at < 0) {
      chart.cursor.setAttribute('visibility', 'hidden');
      position.textContent = `0 / ${events.length}`;
      for (const { lane } of chart.lanes.values()) lane.classList.remove('future', 'active');
      return;
    }
    const e = events[at];
    rows[at].classList.add('current');
    rows[at].scrollIntoView({ block: 'nearest' });
    const cx = chart.x(e.time ?? t0);
    chart.cursor.setAttribute('x1', cx);
    chart.cursor.setAttribute('x2', cx);
    chart.cursor.setAttribute('visibility', 'visible');
    for (const [id, { lane, start }] of chart.lanes) {
      lane.classList.toggle('future', start > (e.time ?? t0));
      lane.classList.toggle('active', id === e.invocation);
    }
    position.textContent = `${at + 1} / ${events.length} · seq ${e.seq} · +${duration((e.time ?? t0) - t0)}`;
  };
  const stop = () => { clearTimeout(timer); timer = null; play.textContent = '▶ Play'; };
  const tick = () => {
    if (at >= events.length - 1) { stop(); return; }
    at += 1;
    show();
    const next = events[at + 1];
    if (!next) { stop(); return; }
    const gap = (next.time ?? 0) - (events[at].time ?? 0);
    timer = setTimeout(tick, Math.min(Math.max(gap / Number(speed.value), 40), 2500));
  };
  play.addEventListener('click', () => {
    if (timer) { stop(); return; }
    if (at >= events.length - 1) at = -1;
    play.textContent = '⏸ Pause';
    tick();
  });
  const button = (text, test, action) => h('button', { type: 'button', 'data-test': test, onclick: () => { stop(); action(); show(); } }, text);
  const bar = h('div', { class: 'replay', 'data-test': 'replay' },
    button('↺ Reset', 'replay-reset', () => { at = -1; }),
    button('◀ Step', 'replay-back', () => { at = Math.max(at - 1, -1); }),
    play,
    button('Step ▶', 'replay-step', () => { at = Math.min(at + 1, events.length - 1); }),
    h('label', {}, 'speed ', speed), position);
  return bar;
}

export async function renderSession(view, tenant, id, stale) {
  const path = `/v1/sessions/${encodeURIComponent(id)}`;
  const first = await get(path, { tenant, limit: 1000 });
  const rows = [...first.events.items];
  let cursor = first.events.next_cursor;
  while (cursor && rows.length < 20000) {
    const page = await get(path, { tenant, limit: 1000, cursor });
    rows.push(...page.events.items);
    cursor = page.events.next_cursor;
  }
  let replayed = null;
  let replayError = null;
  try {
    replayed = await ndjson(`${path}/replay`, { tenant, speed: 0 });
  } catch (error) {
    replayError = error;
  }
  if (stale()) return;
  const session = first.session;
  const bySeq = new Map((replayed || []).map((r) => [r.seq, r]));
  const events = rows.map((row) => normalize(row, bySeq.get(row.seq)));
  const invocations = [...first.invocations].sort((a, b) => a.first_seq - b.first_seq);
  const states = {};
  for (const inv of invocations) states[inv.state] = (states[inv.state] || 0) + 1;
  view.append(
    h('p', { class: 'crumbs' }, link(['sessions'], 'Sessions'), ' / ', session.session_id),
    h('h1', {}, 'Session ', h('span', { class: 'mono', 'data-test': 'session-id' }, session.session_id)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'tenant'), h('dd', {}, session.tenant),
      h('dt', {}, 'started'), h('dd', {}, time(session.first_time)),
      h('dt', {}, 'last event'), h('dd', {}, time(session.last_time)),
      h('dt', {}, 'invocations'), h('dd', { 'data-test': 'invocation-total' }, String(session.invocation_count)),
      h('dt', {}, 'events'), h('dd', { 'data-test': 'event-total' }, String(session.event_count)),
      h('dt', {}, 'final states'), h('dd', {}, Object.entries(states).map(([st, n]) => [stateBadge(st), ` ${n} `]))));
  if (replayError) {
    view.append(h('div', { class: 'warn-box' }, `Decisions and hooks are not marked: the replay stream is unavailable (${replayError.code}: ${replayError.message}).`));
  }
  if (!events.length) {
    view.append(errorBox({ message: 'this session has no events' }));
    return;
  }
  const chart = drawTimeline(invocations, events, session.tenant);
  const eventRows = events.map((e, i) => h('tr', { 'data-seq': e.seq, 'data-index': i },
    h('td', { class: 'num' }, String(i + 1)),
    h('td', { class: 'mono num' }, String(e.seq)),
    h('td', { class: 'nowrap' }, e.time !== null ? `+${duration(e.time - events[0].time)}` : '—'),
    h('td', { class: 'mono' }, e.cls.replace(/^tool\./, '')),
    h('td', {}, e.invocation ? link(['invocation', session.tenant, e.invocation], e.invocation, { class: 'mono' }) : '—'),
    h('td', {}, detail(e))));
  view.append(
    section('Timeline', replayControls(events, chart, eventRows), h('div', { class: 'chart-wrap' }, chart.svg), legend()),
    h('div', { class: 'stack' },
      section('Events', h('div', { class: 'scroll' }, table(['#', 'seq', 'offset', 'class', 'invocation', 'detail'], eventRows, { 'data-test': 'events', class: 'compact' }))),
      section('Invocations', table(['invocation', 'tool', 'state', 'error class', 'created', 'ended', 'events'], invocations.map((inv) => h('tr', { 'data-invocation': inv.invocation_id },
        h('td', {}, link(['invocation', session.tenant, inv.invocation_id], inv.invocation_id, { class: 'mono', 'data-test': 'invocation-link' })),
        h('td', { class: 'mono' }, inv.tool_id || '—'),
        h('td', {}, stateBadge(inv.state)),
        h('td', { class: 'mono' }, inv.error_class || ''),
        h('td', { class: 'nowrap' }, time(inv.created_at || inv.first_time)),
        h('td', { class: 'nowrap' }, time(inv.ended_at)),
        h('td', { class: 'num' }, String(inv.event_count)))), { 'data-test': 'invocations', class: 'compact' }))));
}
