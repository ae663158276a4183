// The firedrill dashboard: the sessions a token may see and, per session,
// its job live (Server-Sent Events from /api/sessions/ID/events). Plain DOM
// and SVG, no library; every value is inserted as text, never as markup.
'use strict';

const SVGNS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#2563eb', '#c2410c', '#15803d', '#7c3aed', '#b91c1c', '#0e7490', '#a16207', '#be185d'];
const PHASES = [['data_ms', 'data', '#94a3b8'], ['forward_ms', 'forward', '#2563eb'],
                ['backward_ms', 'backward', '#7c3aed'], ['comm_ms', 'comm (exposed)', '#c2410c'],
                ['optim_ms', 'optimizer', '#15803d']];
const TERMINAL = new Set(['scored', 'ended', 'aborted']);
const KEEP = 600;  // points kept per series

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v;
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function num(v) { return v === undefined || v === null ? 0 : Number(v); }

function fmt(v, digits) {
  if (!isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  return v.toFixed(digits === undefined ? (a >= 100 ? 0 : a >= 10 ? 1 : 2) : digits);
}

function duration(s) {
  s = Math.max(0, Math.round(s));
  const m = Math.floor(s / 60);
  return m > 0 ? m + ' min ' + String(s % 60).padStart(2, '0') + ' s' : s + ' s';
}

async function api(path) {
  const r = await fetch(path, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
  if (r.status === 401) {
    const e = new Error('not logged in');
    e.login = true;
    throw e;
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error ? body.error.message : r.status + ' ' + r.statusText);
  return body;
}

const main = () => document.getElementById('main');
let me = null;       // /api/whoami
let current = null;  // the view on screen: {close()}

function show(...kids) {
  main().replaceChildren(...kids);
}

// ---- charts -------------------------------------------------------------

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(t);
  return ticks;
}

// A line chart in `card`: series is a Map name -> [[x, y], ...].
class LineChart {
  constructor(card, name, opts) {
    this.opts = opts || {};
    this.svg = svg('svg', {viewBox: '0 0 640 230', 'data-chart': name, role: 'img'});
    this.legend = el('div', {class: 'legend'});
    card.append(this.svg, this.legend);
  }
  draw(series) {
    const W = 640, H = 230, L = 56, R = 12, T = 10, B = 28;
    const pts = [...series.values()].flat();
    const s = this.svg;
    s.replaceChildren();
    this.legend.replaceChildren();
    if (pts.length === 0) {
      s.append(svg('text', {x: L, y: H / 2, text: this.opts.empty || 'no data yet'}));
      return;
    }
    let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
    let y0 = Math.min(...pts.map((p) => p[1])), y1 = Math.max(...pts.map((p) => p[1]));
    if (this.opts.ref !== undefined) { y0 = Math.min(y0, this.opts.ref); y1 = Math.max(y1, this.opts.ref); }
    if (this.opts.zero) y0 = Math.min(0, y0);
    if (y1 === y0) { y1 = y0 + (Math.abs(y0) || 1) * 0.1; }
    if (x1 === x0) x1 = x0 + 1;
    const pad = (y1 - y0) * 0.05;
    y1 += pad;
    if (!this.opts.zero) y0 -= pad;
    const X = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
    const Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    for (const t of niceTicks(y0, y1, 4)) {
      s.append(svg('line', {class: 'gridline', x1: L, x2: W - R, y1: Y(t), y2: Y(t)}));
      s.append(svg('text', {x: L - 6, y: Y(t) + 4, 'text-anchor': 'end', text: fmt(t)}));
    }
    const xt = this.opts.xTime ? (x) => duration(x - x0) : (x) => fmt(x, 0);
    for (const t of niceTicks(x0, x1, 5)) {
      s.append(svg('text', {x: X(t), y: H - 8, 'text-anchor': 'middle', text: xt(t)}));
    }
    s.append(svg('line', {class: 'axis', x1: L, x2: L, y1: T, y2: H - B}));
    s.append(svg('line', {class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B}));
    if (this.opts.ref !== undefined) {
      s.append(svg('line', {class: 'ref', x1: L, x2: W - R, y1: Y(this.opts.ref), y2: Y(this.opts.ref)}));
    }
    let i = 0;
    for (const [label, p] of series) {
      const color = PALETTE[i++ % PALETTE.length];
      const line = svg('polyline', {fill: 'none', stroke: color, 'stroke-width': 1.6, 'data-series': label,
                                    points: p.map((q) => X(q[0]).toFixed(1) + ',' + Y(q[1]).toFixed(1)).join(' ')});
      line.append(svg('title', {text: label}));
      s.append(line);
      const last = p[p.length - 1];
      const swatch = el('i');
      swatch.style.background = color;  // CSSOM: the page's CSP allows no style attributes
      this.legend.append(el('span', {}, swatch, label + (last ? ' ' + fmt(last[1]) : '')));
    }
  }
}

// Each rank's window-mean phases as a stacked bar.
function drawPhases(s, legend, ranks) {
  const W = 640, L = 64, R = 60, row = 22;
  const H = 14 + row * Math.max(1, ranks.length);
  s.setAttribute('viewBox', `0 0 ${W} ${H}`);
  s.replaceChildren();
  legend.replaceChildren();
  const totals = ranks.map((r) => PHASES.reduce((a, [k]) => a + num(r[k]), 0));
  const max = Math.max(1e-9, ...totals);
  ranks.forEach((r, i) => {
    const y = 6 + i * row;
    s.append(svg('text', {x: L - 8, y: y + 13, 'text-anchor': 'end', text: 'rank ' + r.rank}));
    let x = L;
    for (const [k, label, color] of PHASES) {
      const w = num(r[k]) / max * (W - L - R);
      const rect = svg('rect', {x: x, y: y, width: Math.max(0, w), height: row - 6, fill: color,
                                'data-rank': r.rank, 'data-phase': label});
      rect.append(svg('title', {text: `rank ${r.rank} ${label}: ${fmt(num(r[k]))} ms`}));
      s.append(rect);
      x += w;
    }
    s.append(svg('text', {x: x + 6, y: y + 13, text: fmt(totals[i]) + ' ms'}));
  });
  for (const [, label, color] of PHASES) {
    const i = el('i');
    i.style.background = color;
    legend.append(el('span', {}, i, label));
  }
}

// ---- views --------------------------------------------------------------

function loginView(why) {
  const next = location.pathname + location.hash;
  show(el('form', {class: 'login', method: 'post', action: '/login'},
          el('h1', {text: 'Log in'}),
          el('p', {class: 'muted', text: 'Paste your firedrill token (fdt_...). The owner token is ' +
                                         '<state-dir>/owner.token; others come from `firedrill token issue`.'}),
          el('input', {type: 'password', name: 'token', autocomplete: 'off', required: 'required',
                       placeholder: 'fdt_...'}),
          el('input', {type: 'hidden', name: 'next', value: next}),
          el('button', {type: 'submit', text: 'Log in'}),
          why ? el('p', {class: 'error', text: why}) : ''));
}

function candidate() { return me && me.roles.split('+').includes('candidate'); }

function listView() {
  const body = el('tbody');
  show(el('h1', {text: 'Sessions'}),
       el('table', {'data-view': 'sessions'},
          el('thead', {}, el('tr', {}, ...['session', 'scenario', 'state', 'started', 'age', 'score']
                                            .map((t) => el('th', {text: t})))),
          body));
  const es = new EventSource('/api/sessions/events');
  es.addEventListener('sessions', (e) => {
    const list = JSON.parse(e.data).sessions || [];
    list.sort((a, b) => num(b.created_unix_ms) - num(a.created_unix_ms));
    body.replaceChildren(...list.map((s) => {
      const created = num(s.created_unix_ms);
      const scored = s.state === 'scored' && !candidate();
      return el('tr', {class: 'link', 'data-session': s.session_id,
                       on: {click: () => { location.hash = '#/s/' + encodeURIComponent(s.session_id); }}},
                el('td', {text: s.session_id}),
                el('td', {text: s.title || s.scenario_id}),
                el('td', {class: 'state ' + s.state, text: s.state}),
                el('td', {text: new Date(created).toLocaleString()}),
                el('td', {text: TERMINAL.has(s.state) ? '' : duration((Date.now() - created) / 1000)}),
                el('td', {text: scored ? s.total_score + ' / ' + s.max_score : ''}));
    }));
    if (list.length === 0) body.append(el('tr', {}, el('td', {class: 'muted', colspan: 6, text: 'no sessions yet'})));
  });
  es.addEventListener('refused', (e) => show(el('p', {class: 'error', text: JSON.parse(e.data).message})));
  return {close: () => es.close()};
}

function sessionView(id) {
  const facts = el('div', {class: 'facts'});
  const cards = {};
  const card = (name, title) => (cards[name] = el('div', {class: 'card'}, el('h2', {text: title})));
  card('step', 'Step time per rank (ms, window mean)');
  card('phases', 'Phase split per rank (ms per step, window mean)');
  card('tput', 'Throughput against the healthy baseline (1 = baseline)');
  card('loss', 'Loss by step');
  card('events', 'Events');
  const stepChart = new LineChart(cards.step, 'step-time', {xTime: true, zero: true});
  const tputChart = new LineChart(cards.tput, 'throughput', {xTime: true, ref: 1, zero: true,
                                                             empty: 'no baseline measured yet'});
  const lossChart = new LineChart(cards.loss, 'loss', {});
  const phaseSvg = svg('svg', {'data-chart': 'phases'});
  const phaseLegend = el('div', {class: 'legend'});
  cards.phases.append(phaseSvg, phaseLegend);
  const eventsBody = el('tbody');
  cards.events.append(el('div', {class: 'events'}, el('table', {}, eventsBody)));
  const title = el('h1', {text: id});
  show(title, facts, el('div', {class: 'grid', 'data-view': 'session', 'data-session': id},
                        cards.step, cards.phases, cards.tput, cards.loss, cards.events));

  const stepSeries = new Map(), tputSeries = new Map([['throughput / baseline', []]]), lossSeries = new Map();
  const push = (map, key, p) => {
    if (!map.has(key)) map.set(key, []);
    const a = map.get(key);
    if (a.length && a[a.length - 1][0] === p[0]) return;
    a.push(p);
    if (a.length > KEEP) a.splice(0, a.length - KEEP);
  };

  // The loss history so far, where the drill offers its metrics (an unset
  // evidence tool is on); without them the curve starts when the page does.
  let historyAsked = false;
  const loadHistory = () => {
    historyAsked = true;
    api('/api/sessions/' + encodeURIComponent(id) + '/metrics').then((m) => {
      for (const r of m.ranks || []) {
        const rows = (r.rows || []).map((q) => [num(q.step), num(q.loss)]);
        const key = 'rank ' + r.rank;
        const merged = new Map(rows.concat(lossSeries.get(key) || []));
        lossSeries.set(key, [...merged].sort((a, b) => a[0] - b[0]).slice(-KEEP));
      }
      lossChart.draw(lossSeries);
    }).catch(() => {});
  };

  const fact = (label, value) => el('div', {}, el('span', {text: label}), value);
  const update = (st) => {
    const s = st.session || {};
    if (!historyAsked && (st.tools || {}).metrics !== false) loadHistory();
    title.textContent = (s.title || s.scenario_id || '') + ' (' + id + ')';
    const run = st.run || {}, base = st.baseline || {};
    const score = s.state === 'scored' && !candidate() ? s.total_score + ' / ' + s.max_score : '';
    facts.replaceChildren(
        fact('state', el('span', {class: 'state ' + s.state, text: s.state})),
        fact('run', (run.kind || '-') + ' ' + (run.state || '') + ', step ' + num(run.steps_done) +
                        (num(run.steps_total) ? ' of ' + num(run.steps_total) : '')),
        fact('elapsed', duration(num(st.elapsed_s)) +
                            (num(st.time_budget_s) ? ' of ' + duration(num(st.time_budget_s)) : '')),
        fact('world', String((st.ranks || []).length) + ' ranks'),
        score ? fact('score', score) : '');
    const now = Date.now() / 1000;
    const ranks = st.ranks || [];
    for (const r of ranks) {
      if (num(r.window_steps) > 0) push(stepSeries, 'rank ' + r.rank, [now, num(r.step_ms)]);
      if (num(r.step) > 0 && isFinite(num(r.loss))) push(lossSeries, 'rank ' + r.rank, [num(r.step), num(r.loss)]);
    }
    const b = num(base.throughput_samples_per_s), t = num(run.throughput_samples_per_s);
    if (b > 0 && t > 0) push(tputSeries, 'throughput / baseline', [now, t / b]);
    stepChart.draw(stepSeries);
    tputChart.draw(tputSeries);
    lossChart.draw(lossSeries);
    drawPhases(phaseSvg, phaseLegend, ranks.filter((r) => num(r.window_steps) > 0));
    eventsBody.replaceChildren(...(st.events || []).slice().reverse().map((e) => el('tr', {},
        el('td', {text: new Date(num(e.unix_ms)).toLocaleTimeString()}),
        el('td', {text: e.kind}),
        el('td', {text: num(e.rank) >= 0 ? 'rank ' + e.rank : ''}),
        el('td', {text: e.message}))));
    if (TERMINAL.has(s.state)) es.close();  // the last look; no reconnecting
  };
  const es = new EventSource('/api/sessions/' + encodeURIComponent(id) + '/events');
  es.addEventListener('status', (e) => update(JSON.parse(e.data)));
  es.addEventListener('refused', (e) => {
    es.close();
    show(el('p', {class: 'error', text: JSON.parse(e.data).message}));
  });
  return {close: () => es.close()};
}

function route() {
  if (current) current.close();
  const m = location.hash.match(/^#\/s\/([^/]+)$/);
  current = m ? sessionView(decodeURIComponent(m[1])) : listView();
}

async function start() {
  try {
    me = await api('/api/whoami');
  } catch (e) {
    if (e.login) return loginView(new URLSearchParams(location.search).get('why'));
    return show(el('p', {class: 'error', text: e.message}));
  }
  const who = document.getElementById('who');
  who.replaceChildren(me.name + ' (' + me.roles + ')',
                      el('button', {text: 'log out', on: {click: async () => {
                        await fetch('/logout', {method: 'POST', credentials: 'same-origin'});
                        location.reload();
                      }}}));
  window.addEventListener('hashchange', route);
  route();
}

start();
