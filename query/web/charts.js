// Small hand-written SVG charts: stacked bars, lines, horizontal bars. Labels are SVG text nodes.

import { s } from './dom.js';

const W = 440;
const H = 250;
const PAD = { left: 50, right: 10, top: 14, bottom: 34 };

/** A round axis maximum in four even steps; for counts (`whole`) the steps are whole numbers. */
function nice(max, whole) {
  if (max <= 0) return 4;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10]) {
    const v = whole ? Math.ceil((m * p) / 4) * 4 : m * p;
    if (v >= max) return v;
  }
  return 10 * p;
}

function frame(title, max, format) {
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': title });
  const plotH = H - PAD.top - PAD.bottom;
  for (let i = 0; i <= 4; i += 1) {
    const y = PAD.top + plotH - (plotH * i) / 4;
    svg.append(s('line', { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: 'grid' }),
      s('text', { x: PAD.left - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' }, format((max * i) / 4)));
  }
  return { svg, plotH, plotW: W - PAD.left - PAD.right };
}

function xLabels(svg, labels, step, offset) {
  const every = Math.max(1, Math.ceil(labels.length / 6));
  labels.forEach((label, i) => {
    if (i % every) return;
    svg.append(s('text', { x: PAD.left + i * step + offset, y: H - PAD.bottom + 16, 'text-anchor': 'middle', class: 'tick' }, label));
  });
}

/** Stacked bars: buckets [{label, parts: {name: n}}], series [{name, cls}]. */
export function stackedBars(title, buckets, series) {
  const max = nice(Math.max(1, ...buckets.map((b) => series.reduce((n, x) => n + (b.parts[x.name] || 0), 0))), true);
  const { svg, plotH, plotW } = frame(title, max, (v) => String(Math.round(v)));
  const step = plotW / Math.max(buckets.length, 1);
  const width = Math.max(Math.min(step * 0.7, 40), 2);
  buckets.forEach((b, i) => {
    let y = PAD.top + plotH;
    for (const x of series) {
      const n = b.parts[x.name] || 0;
      if (!n) continue;
      const hgt = (n / max) * plotH;
      y -= hgt;
      svg.append(s('rect', { x: PAD.left + i * step + (step - width) / 2, y, width, height: hgt, class: `fill ${x.cls}` },
        s('title', {}, `${b.label}: ${n} ${x.name}`)));
    }
  });
  xLabels(svg, buckets.map((b) => b.label), step, step / 2);
  return svg;
}

/** Lines over buckets: points [{label, values: {name: v|null}}], series [{name, cls}]. */
export function lines(title, points, series, format) {
  const max = nice(Math.max(1, ...points.flatMap((p) => series.map((x) => p.values[x.name] || 0))), false);
  const { svg, plotH, plotW } = frame(title, max, format);
  const step = plotW / Math.max(points.length, 1);
  for (const x of series) {
    const coords = points.map((p, i) => (p.values[x.name] === null || p.values[x.name] === undefined ? null
      : [PAD.left + i * step + step / 2, PAD.top + plotH - (p.values[x.name] / max) * plotH]));
    const d = coords.filter(Boolean).map(([cx, cy], i) => `${i ? 'L' : 'M'}${cx.toFixed(1)},${cy.toFixed(1)}`).join(' ');
    if (d) svg.append(s('path', { d, class: `line ${x.cls}` }));
    coords.forEach((c, i) => c && svg.append(s('circle', { cx: c[0], cy: c[1], r: 3, class: `dot ${x.cls}` },
      s('title', {}, `${points[i].label}: ${x.name} ${format(points[i].values[x.name])}`))));
  }
  xLabels(svg, points.map((p) => p.label), step, step / 2);
  return svg;
}

/** Horizontal bars: items [{label, value}]. */
export function hbars(title, items, cls) {
  const rowH = 30;
  const height = Math.max(items.length, 1) * rowH + 16;
  const max = Math.max(1, ...items.map((x) => x.value));
  const svg = s('svg', { viewBox: `0 0 ${W} ${height}`, class: 'chart', role: 'img', 'aria-label': title });
  const left = 170;
  items.forEach((x, i) => {
    const y = 8 + i * rowH;
    const w = ((W - left - 50) * x.value) / max;
    svg.append(s('text', { x: left - 8, y: y + 19, 'text-anchor': 'end', class: 'tick' }, x.label),
      s('rect', { x: left, y: y + 3, width: Math.max(w, 2), height: rowH - 8, rx: 2, class: `fill ${cls}` }),
      s('text', { x: left + w + 6, y: y + 19, class: 'tick' }, String(x.value)));
  });
  return svg;
}
