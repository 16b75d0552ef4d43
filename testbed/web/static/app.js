// The hpnlab web view: the fabric drawn with Cytoscape.js, charts with Chart.js, fed by the testbed's
// server-sent events (live) or one snapshot of a results folder (a past run). window.hpnlab exposes the
// page's model so browser tests read what is drawn, not the server's JSON.
'use strict';

const token = new URLSearchParams(location.search).get('token') || '';
const api = (path) => `${path}${path.includes('?') ? '&' : '?'}token=${encodeURIComponent(token)}`;
const hp = window.hpnlab = { cy: null, run: null, mode: null, network: null, state: null, states: 0,
                             events: [], ops: [], selectedFlow: null, charts: {} };
const PLANE = ['#1f77b4', '#ff7f0e'];
const SHAPE = { host: 'ellipse', tor: 'round-rectangle', agg: 'diamond', core: 'hexagon' };
const HISTORY = 120;  // points on the throughput chart: a minute at two samples a second

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;',
                                                          "'": '&#39;' }[c]));
const mbps = (bps) => (bps / 1e6).toFixed(bps < 1e7 ? 2 : 1);
const bytes = (n) => n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} kB` : `${n} B`;

// utilization 0..1 -> grey when idle, else green -> yellow -> red
function utilColour(u) {
  if (u === null || u === undefined || u < 0.005) return '#d0d0d0';
  const hue = 120 * (1 - Math.min(u, 1));
  return `hsl(${hue.toFixed(0)}, 80%, 42%)`;
}

function style() {
  return [
    { selector: 'node', style: { label: 'data(label)', 'font-size': 9, 'text-valign': 'top', 'text-margin-y': -2,
                                 width: 16, height: 16, 'border-width': 1, 'border-color': '#333' } },
    { selector: 'node[role="host"]', style: { 'background-color': '#2ca02c', shape: 'ellipse',
                                              'text-valign': 'bottom', 'text-margin-y': 2 } },
    ...['tor', 'agg', 'core'].map((r) => ({ selector: `node[role="${r}"]`, style: { shape: SHAPE[r],
      'background-color': (n) => n.data('plane') === null ? '#555' : PLANE[n.data('plane') % 2] } })),
    { selector: 'node.down', style: { 'background-color': '#000', opacity: 0.5 } },
    { selector: 'node:selected', style: { 'border-width': 3, 'border-color': '#000' } },
    { selector: 'edge', style: { width: (e) => 1.5 + 5 * Math.min(e.data('util') || 0, 1),
                                 'line-color': (e) => utilColour(e.data('util')), 'curve-style': 'straight' } },
    { selector: 'edge.flow', style: { 'underlay-color': '#ffe45c', 'underlay-opacity': 0.9,
                                      'underlay-padding': 4 } },
    { selector: 'edge.flow-selected', style: { 'underlay-color': '#ff9900', 'underlay-padding': 6 } },
    { selector: 'edge.paused', style: { 'line-style': 'dotted', 'line-color': '#9467bd', width: 4 } },
    // a link the detector named gray (lossy or degraded): it still runs, so it keeps its load colour's width
    { selector: 'edge.gray', style: { 'line-style': 'dashed', 'line-color': '#e377c2', 'line-dash-pattern': [2, 2] } },
    { selector: 'edge.failed', style: { 'line-style': 'dashed', 'line-color': '#000', width: 2.5,
                                        label: '✕', 'font-size': 12, color: '#c0392b' } },
    { selector: 'edge:selected', style: { 'overlay-color': '#000', 'overlay-opacity': 0.15, 'overlay-padding': 4 } },
  ];
}

function drawNetwork(network) {
  if (!network) return;
  hp.network = network;
  const c = network.counts || {};
  $('#title').textContent = `${network.kind}: ${c.hosts} hosts, ${c.tors} ToRs, ${c.aggs} aggregation, ` +
    `${c.cores} core, ${c.links} links · run ${network.run}${network.label ? ` (${network.label})` : ''}` +
    (network.routing ? ` · ${network.routing}${network.mode ? `/${network.mode}` : ''}` : '') +
    (network.scale ? ` · scale 1/${Number(network.scale).toLocaleString()}` : ' · links not shaped') +
    (dilated() ? ` · time dilated ${network.dilation}x (1 s of the fabric = ${network.dilation} s of wall time)` : '');
  $('#busbw-caption').textContent = `Bus bandwidth of each op as it completes (Mbit/s, emulated` +
    `${dilated() ? ", per second of the fabric's time" : ''})`;
  if (hp.cy && hp.run === network.run) return;
  if (hp.cy) hp.cy.destroy();
  hp.run = network.run;
  hp.cy = cytoscape({ container: $('#graph'), elements: network.elements, style: style(),
                      layout: { name: 'preset', fit: true, padding: 24 } });
  hp.cy.on('tap', 'edge', (e) => showLink(e.target));
  hp.cy.on('tap', 'node', (e) => showNode(e.target));
  $('#graph').dataset.nodes = hp.cy.nodes().length;
  $('#graph').dataset.edges = hp.cy.edges().length;
}

// Under time dilation the page shows two clocks: what the hub sees happen (wall seconds since the view
// started) and what the run records (the fabric's seconds): each time on the page says which it is.
const FABRIC_S = "s of the fabric's time";
const dilated = () => !!(hp.network && hp.network.dilation && hp.network.dilation !== 1);
const clock = (ev) => ev.clock === 'fabric' ? FABRIC_S : dilated() ? 's wall' : 's';

function showLink(edge) {
  const d = edge.data();
  const st = hp.state && hp.state.links[d.id];
  const a = hp.cy.$id(d.source).data('label'), b = hp.cy.$id(d.target).data('label');
  let html = `<b>${esc(d.id)}</b><br>${esc(d.kind)}, ${d.rate_gbps} Gbit/s real`;
  if (st) {
    html += `<br>${st.up ? 'up' : '<b style="color:#c0392b">failed</b>'}` +
      `<br>${esc(a)} → ${esc(b)}: ${mbps(st.ab_bps)} Mbit/s<br>${esc(b)} → ${esc(a)}: ${mbps(st.ba_bps)} Mbit/s` +
      (st.util !== null ? `<br>utilization ${(100 * st.util).toFixed(1)}%` : '') +
      (st.backlog ? `<br>queue ${bytes(st.backlog)}` : '') + (st.paused ? '<br>PFC paused' : '') +
      (st.paused && st.paused_by ? ` by ${esc(st.paused_by.join(', '))}` : '');
  }
  $('#detail').innerHTML = html;
}

function showNode(node) {
  const d = node.data();
  const fields = ['role', 'pod', 'segment', 'plane', 'rail', 'side'].filter((k) => d[k] !== null && d[k] !== undefined);
  $('#detail').innerHTML = `<b>${esc(d.id)}</b> (${esc(d.label)})<br>` +
    fields.map((k) => `${k} ${esc(d[k])}`).join(', ') + `<br>${node.connectedEdges().length} links`;
}

function applyState(state) {
  if (!hp.cy || !state) return;
  hp.state = state;
  hp.states += 1;
  const links = state.links;
  const shaped = Object.values(links).some((l) => l.util !== null);
  const peak = Math.max(1, ...Object.values(links).map((l) => Math.max(l.ab_bps, l.ba_bps)));
  const flowLinks = new Set(state.flows.flatMap((f) => f.links));
  const failed = [];
  hp.cy.batch(() => {
    hp.cy.edges().forEach((e) => {
      const st = links[e.id()];
      if (!st) return;
      // unshaped links have no rate to divide by: colour them against the busiest link instead
      e.data('util', shaped ? st.util : Math.max(st.ab_bps, st.ba_bps) / peak);
      e.toggleClass('failed', !st.up);
      e.toggleClass('paused', !!st.paused);
      e.toggleClass('flow', flowLinks.has(e.id()));
      if (!st.up) failed.push(e.id());
    });
  });
  $('#failed').innerHTML = failed.map((n) => `<li>${esc(n)}</li>`).join('');
  $('#failed-count').textContent = failed.length;
  $('#failed-count').classList.toggle('bad', failed.length > 0);
  const ports = Object.entries(state.ports).sort((x, y) => y[1].backlog - x[1].backlog || y[1].pause_events
    - x[1].pause_events).slice(0, 15);
  $('#ports tbody').innerHTML = ports.length ? ports.map(([k, p]) => `<tr><td>${esc(k)}</td><td>${bytes(p.backlog)}` +
    `</td><td title="${esc((p.paused_by || []).join(', '))}">${p.paused ? '⏸' : ''}</td><td>${p.pause_events}</td>` +
    `<td>${p.drops}</td><td>${p.ecn_marks || 0}</td>` +
    '</tr>').join('') : '<tr><td colspan="6" class="muted">no queue, pause, drop or ECN mark</td></tr>';
  $('#ports-age').textContent = state.ports_age_s > 1 ? `(read ${state.ports_age_s.toFixed(0)} s ago)` : '';
  drawFlows(state.flows);
  // what the hosts send: the host-to-ToR direction of every host link
  let sent = 0;
  hp.cy.edges('[kind="host-tor"]').forEach((e) => { const st = links[e.id()]; if (st) sent += st.ab_bps; });
  pushPoint(hp.charts.throughput, new Date(state.t * 1000).toLocaleTimeString(), sent / 1e6);
}

function drawFlows(flows) {
  $('#flow-count').textContent = flows.length;
  $('#flows').innerHTML = flows.slice(0, 200).map((f) => `<li data-flow="${esc(f.flow)}"` +
    `${f.flow === hp.selectedFlow ? ' class="on"' : ''}>${esc(f.flow)} (${f.links.length} links)</li>`).join('');
  const sel = flows.find((f) => f.flow === hp.selectedFlow);
  hp.cy.edges().removeClass('flow-selected');
  if (sel) sel.links.forEach((l) => hp.cy.$id(l).addClass('flow-selected'));
}

function addEvent(ev) {
  hp.events.push(ev);
  if (ev.kind === 'gray' && ev.link && hp.cy) hp.cy.$id(ev.link).addClass('gray');
  const li = document.createElement('li');
  li.textContent = `${ev.t.toFixed(ev.clock === 'fabric' ? 3 : 1)} ${clock(ev)}  ${ev.text}`;
  $('#events').prepend(li);
  while ($('#events').children.length > 200) $('#events').lastChild.remove();
}

function addOp(op) {
  hp.ops.push(op);
  const ch = hp.charts.busbw;
  ch.data.labels.push(`${hp.ops.length}. ${op.variant || ''} ${op.job || ''} ${op.label || ''}`.trim());
  ch.data.datasets[0].data.push(op.busbw_bps / 1e6);
  ch.update('none');
}

function setProgress(p) {
  if (!p) return;
  $('#progress').hidden = false;
  $('#progress-bar').style.width = `${p.total ? (100 * p.done / p.total) : 0}%`;
  $('#progress-text').textContent = `${p.text}: ${p.done}/${p.total} ops`;
}

function pushPoint(chart, label, y) {
  chart.data.labels.push(label);
  chart.data.datasets[0].data.push(y);
  if (chart.data.labels.length > HISTORY) { chart.data.labels.shift(); chart.data.datasets[0].data.shift(); }
  chart.update('none');
}

function makeCharts() {
  const common = { animation: false, responsive: true, maintainAspectRatio: false,
                   plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true } } };
  hp.charts.throughput = new Chart($('#throughput'), { type: 'line', options: common,
    data: { labels: [], datasets: [{ data: [], borderColor: '#1f77b4', pointRadius: 0, fill: false }] } });
  hp.charts.busbw = new Chart($('#busbw'), { type: 'bar', options: { ...common, plugins: { legend: { display: false },
      tooltip: { callbacks: { afterLabel: (ctx) => {
        const op = hp.ops[ctx.dataIndex];
        return op ? `${(100 * (op.fraction_of_ideal || 0)).toFixed(0)}% of ideal, ${op.seconds} ${FABRIC_S}`
          : ''; } } } } },
    data: { labels: [], datasets: [{ data: [], backgroundColor: '#2ca02c' }] } });
}

function applySnapshot(snap) {
  drawNetwork(snap.network);
  hp.events = []; $('#events').innerHTML = '';
  (snap.events || []).forEach(addEvent);
  if (hp.ops.length === 0) (snap.ops || []).forEach(addOp);
  setProgress(snap.progress);
  applyState(snap.state);
}

function live() {
  const es = new EventSource(api('/api/events'));
  const on = (kind, fn) => es.addEventListener(kind, (e) => fn(JSON.parse(e.data)));
  es.onopen = () => { $('#link-status').textContent = '● live'; $('#link-status').classList.add('live'); };
  es.onerror = () => { $('#link-status').textContent = '○ reconnecting'; $('#link-status').classList.remove('live'); };
  on('snapshot', applySnapshot);
  on('network', drawNetwork);
  on('state', applyState);
  on('event', addEvent);
  on('op', addOp);
  on('progress', setProgress);
  on('closed', () => { es.close(); $('#link-status').textContent = '○ the network has stopped';
                       $('#link-status').classList.remove('live'); });
}

function results(snap) {
  if (snap.error) {  // a results.json this page cannot read: say so instead of drawing half a page
    $('#link-status').textContent = `results of ${snap.run} cannot be shown: ${snap.error}`;
    return;
  }
  drawNetwork(snap.network);
  $('#link-status').textContent = `results of ${snap.run}`;
  $('#results').hidden = false;
  document.querySelectorAll('.live-only').forEach((el) => { el.hidden = true; });
  $('#summary').textContent = snap.summary;
  $('#plots').innerHTML = snap.plots.map((p) => `<a href="${api(`/api/plot/${encodeURIComponent(p)}`)}">` +
    `<img alt="${esc(p)}" src="${api(`/api/plot/${encodeURIComponent(p)}`)}"></a>`).join('');
  // the timeline: one line per variant and repetition, failures marked in the events list
  const th = hp.charts.throughput;
  th.config.type = 'line';
  th.options.scales.x = { type: 'linear', title: { display: true, text: FABRIC_S } };
  th.data.labels = [];
  th.data.datasets = snap.timeline.map((s, i) => ({ label: s.series, data: s.points.map(([t, b]) => ({ x: t, y: b / 1e6 })),
    borderColor: PLANE[i % 2], pointRadius: 0, borderDash: i > 1 ? [4, 3] : [] }));
  th.options.plugins.legend.display = true;
  th.update();
  snap.failures.forEach((f) => addEvent({ t: f.t, clock: 'fabric', text: `${f.series}: ${f.links.join(', ')} ` +
    `${f.up ? 'restored' : 'failed'} (${f.cause})` }));
  snap.ops.forEach(addOp);
  $('#failed-count').textContent = new Set(snap.failures.filter((f) => !f.up).flatMap((f) => f.links)).size;
  snap.failures.filter((f) => !f.up).forEach((f) => f.links.forEach((l) => hp.cy.$id(l).addClass('failed')));
}

async function main() {
  makeCharts();
  $('#flows').addEventListener('click', (e) => {
    const li = e.target.closest('li');
    if (!li) return;
    hp.selectedFlow = hp.selectedFlow === li.dataset.flow ? null : li.dataset.flow;
    if (hp.state) drawFlows(hp.state.flows);
  });
  const snap = await (await fetch(api('/api/snapshot'))).json();
  hp.mode = snap.mode;
  if (snap.mode === 'results') results(snap); else live();
}

main();
