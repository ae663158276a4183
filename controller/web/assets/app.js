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

// An event stream with its events' handlers. A stream the server refuses
// (a token that may not see it) closes at once: `fallback`, the same thing
// as plain JSON, then says why, and the view shows it.
function stream(url, fallback, handlers) {
  const es = new EventSource(url);
  for (const [name, fn] of Object.entries(handlers)) es.addEventListener(name, (e) => fn(JSON.parse(e.data)));
  const refuse = (message) => {
    es.close();
    show(el('p', {class: 'error', 'data-refused': '', text: message}));
  };
  es.addEventListener('refused', (e) => refuse(JSON.parse(e.data).message));
  es.addEventListener('error', () => {
    if (es.readyState === EventSource.CLOSED) api(fallback).then(() => {}, (e) => refuse(e.message));
  });
  return es;
}

function table(headings, rows, attrs) {
  return el('table', attrs || {}, el('thead', {}, el('tr', {}, ...headings.map((t) => el('th', {text: t})))),
            el('tbody', {}, ...rows));
}

function link(href, text) {
  return el('a', {href: href, text: text});
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
  const es = stream('/api/sessions/events', '/api/sessions', {sessions: (got) => {
    const list = got.sessions || [];
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
  }});
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
  card('events', 'Timeline: who did what');
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

  // The shared timeline (every participant's entries and the controller's
  // events), fetched on from the last entry seen; the status's own events
  // where the controller keeps no timeline.
  const timeline = [];
  let lastSeq = 0, timelineAt = 0, timelineBusy = false, noTimeline = false;
  const drawTimeline = (rows) => eventsBody.replaceChildren(...rows.slice().reverse().map((t) => el('tr', {},
      el('td', {text: new Date(num(t.unix_ms)).toLocaleTimeString()}),
      el('td', {text: t.who + (t.role ? ' (' + t.role + ')' : '')}),
      el('td', {text: t.kind}),
      el('td', {text: t.text}))));
  const refreshTimeline = (st) => {
    if (noTimeline) {
      drawTimeline((st.events || []).map((e) => ({unix_ms: e.unix_ms, who: 'controller', role: '', kind: e.kind,
                                                  text: (num(e.rank) >= 0 ? 'rank ' + e.rank + ': ' : '') + e.message})));
      return;
    }
    const final = TERMINAL.has((st.session || {}).state);
    if (timelineBusy || (!final && Date.now() - timelineAt < 2000)) return;
    timelineBusy = true;
    timelineAt = Date.now();
    api('/api/sessions/' + encodeURIComponent(id) + '/timeline?after=' + lastSeq).then((got) => {
      for (const t of got.items || []) {
        timeline.push(t);
        lastSeq = Math.max(lastSeq, num(t.seq));
      }
      if (timeline.length > KEEP) timeline.splice(0, timeline.length - KEEP);
      drawTimeline(timeline);
    }, () => { noTimeline = true; refreshTimeline(st); }).finally(() => { timelineBusy = false; });
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
    refreshTimeline(st);
    if (TERMINAL.has(s.state)) es.close();  // the last look; no reconnecting
  };
  const base = '/api/sessions/' + encodeURIComponent(id);
  const es = stream(base + '/events', base + '/status', {status: update});
  return {close: () => es.close()};
}

function timeLeft(s, receivedAt) {
  if (s.state !== 'open') return '';
  return duration(Math.max(0, num(s.remaining_ms) - (Date.now() - receivedAt)) / 1000);
}

function itemCell(i) {
  const text = i.index + ': ' + i.state + (num(i.attempts) > 1 ? ' (' + num(i.attempts_used) + '/' + num(i.attempts) + ')' : '');
  return i.session_id ? link('#/s/' + encodeURIComponent(i.session_id), text) : text;
}

// What a signed result asks an instructor to look at, item by item.
function reviewLines(items) {
  return items.flatMap((i) => (i.flags || []).map((f) => el('div', {'data-review': String(i.index),
                                                                     text: 'item ' + i.index + ': ' + f})));
}

// The proctor's view: every candidate's sitting of the exams this token
// proctors, with the time each has left.
function examsView() {
  const wrap = el('div', {'data-view': 'exams'});
  show(el('h1', {text: 'Exams'}), wrap);
  let got = null, at = 0;
  const render = () => {
    if (!got) return;
    const exams = got.exams || [];
    if (exams.length === 0) return wrap.replaceChildren(el('p', {class: 'muted', text: 'no exams yet'}));
    wrap.replaceChildren(...exams.map((x) => el('div', {class: 'card', 'data-exam': x.exam_id},
        el('h2', {text: x.title + ' (' + x.exam_id + '): ' + num(x.items) + ' items, ' + num(x.time_limit_min) +
                        ' min, pass mark ' + num(x.pass_mark) + '%'}),
        table(['candidate', 'sitting', 'state', 'time left', 'items', 'result', 'for review', 'warnings'],
              (x.sittings || []).map((s) => el('tr', {'data-candidate': s.candidate},
                  el('td', {text: s.candidate}), el('td', {text: String(s.sitting)}),
                  el('td', {class: 'state', text: s.state}), el('td', {text: timeLeft(s, at)}),
                  el('td', {}, ...(s.items || []).flatMap((i, k) => (k ? [', ', itemCell(i)] : [itemCell(i)]))),
                  el('td', {text: num(s.max_total) > 0 ? num(s.total) + ' / ' + num(s.max_total) +
                                                             (s.passed ? ' pass' : ' fail') : ''}),
                  el('td', {class: 'flag'}, ...reviewLines(s.items || [])),
                  el('td', {text: (s.warnings || []).slice(-1).join('')})))))));
  };
  const es = stream('/api/exams/events', '/api/exams', {exams: (x) => { got = x; at = Date.now(); render(); }});
  const tick = setInterval(render, 1000);  // the countdowns
  return {close: () => { es.close(); clearInterval(tick); }};
}

// A candidate's own sitting: time left, warnings, the items.
function sittingView() {
  const wrap = el('div', {'data-view': 'sitting'});
  show(el('h1', {text: 'My sitting'}), wrap);
  let got = null, at = 0;
  const render = () => {
    if (!got) return;
    wrap.replaceChildren(
        el('div', {class: 'facts'},
           el('div', {}, el('span', {text: 'exam'}), got.exam_title || got.exam_id),
           el('div', {}, el('span', {text: 'state'}), got.state),
           el('div', {}, el('span', {text: 'time left'}), timeLeft(got, at))),
        table(['item', 'points', 'title', 'state', 'attempts'], (got.items || []).map((i) => el('tr', {},
            el('td', {}, itemCell(i)), el('td', {text: String(num(i.points))}), el('td', {text: i.title || ''}),
            el('td', {text: i.state}), el('td', {text: num(i.attempts_used) + ' of ' + num(i.attempts)})))),
        ...(got.warnings || []).map((w) => el('p', {class: 'error', text: w})));
  };
  const es = stream('/api/sitting/events', '/api/sitting', {sitting: (x) => { got = x; at = Date.now(); render(); }});
  const tick = setInterval(render, 1000);
  return {close: () => { es.close(); clearInterval(tick); }};
}

function route() {
  if (current) current.close();
  const m = location.hash.match(/^#\/s\/([^/]+)$/);
  if (m) current = sessionView(decodeURIComponent(m[1]));
  else if (location.hash === '#/exams') current = examsView();
  else if (location.hash === '#/sitting') current = sittingView();
  else current = listView();
}

async function start() {
  try {
    me = await api('/api/whoami');
  } catch (e) {
    if (e.login) return loginView(new URLSearchParams(location.search).get('why'));
    return show(el('p', {class: 'error', text: e.message}));
  }
  const roles = me.roles.split('+');
  const nav = [link('#/', 'sessions')];
  if (roles.includes('owner') || roles.includes('proctor')) nav.push(link('#/exams', 'exams'));
  if (roles.includes('candidate')) nav.push(link('#/sitting', 'my sitting'));
  document.getElementById('nav').replaceChildren(...nav);
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
