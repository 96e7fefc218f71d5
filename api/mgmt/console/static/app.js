// raftmq's web console. It talks to the management API of the node that
// served it, with the user's credentials as HTTP basic authentication (as
// RabbitMQ's UI does), kept in this tab's sessionStorage until logout.
'use strict';

const S = {
  auth: sessionStorage.getItem('raftmq.auth'),
  whoami: null,
  overview: null,
  vhost: sessionStorage.getItem('raftmq.vhost') || '',
  timer: null,
  page: null, // the page shown: {refresh()}
  lists: {}, // listing state (page, sort, filter) by listing key
};

// ---- helpers ----

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

function esc(v) {
  return String(v ?? '').replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}
const enc = encodeURIComponent;

function num(v) {
  if (v === undefined || v === null || v === '') return '';
  return typeof v === 'number' ? v.toLocaleString() : esc(v);
}

function rate(details) {
  if (!details || typeof details.rate !== 'number') return '';
  const r = details.rate;
  return (r === 0 ? '0' : r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString()) + '/s';
}

function bytes(n) {
  if (typeof n !== 'number') return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + ' ' + u[i];
}

// duration in ms as text: 1500 -> "1.5 s", 90000 -> "1 min 30 s".
function dur(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 1000) return ms + ' ms';
  const s = ms / 1000;
  if (s < 60) return (Number.isInteger(s) ? s : s.toFixed(1)) + ' s';
  const parts = [];
  let rest = Math.floor(s);
  for (const [unit, n] of [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]]) {
    if (rest >= n) { parts.push(Math.floor(rest / n) + ' ' + unit); rest %= n; }
  }
  return parts.slice(0, 2).join(' ');
}

// an instant (RFC 3339 text) relative to now; past instants are overdue.
function due(iso, overdueWord) {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return esc(iso);
  const d = t - Date.now();
  const title = `title="${esc(iso)}"`;
  if (d < 0) return `<span class="overdue" ${title}>${overdueWord} ${dur(-d)}</span>`;
  return `<span ${title}>in ${dur(d)}</span>`;
}

function yes(b) { return b ? '●' : ''; }

function shortJSON(v) {
  if (!v || typeof v !== 'object' || Object.keys(v).length === 0) return '';
  return Object.entries(v).map(([k, x]) => `<span class="tag" title="${esc(k)}: ${esc(JSON.stringify(x))}">${esc(k)}: ${esc(typeof x === 'string' ? x : JSON.stringify(x))}</span>`).join(' ');
}

function vhostLabel(v) { return v === '/' ? '/' : esc(v); }

// ---- the API ----

class ApiError extends Error {
  constructor(status, error, reason) {
    super(reason ? `${error}: ${reason}` : error);
    this.status = status;
    this.reason = reason || error;
  }
}

function authHeaders() {
  return { Authorization: 'Basic ' + S.auth, 'X-Requested-With': 'XMLHttpRequest' };
}

async function api(method, path, body, headers = {}) {
  const h = { ...authHeaders(), ...headers };
  if (body !== undefined) h['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch('api/' + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, 'The node does not answer', String(e.message || e));
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = null; }
  }
  if (!resp.ok) {
    const err = new ApiError(resp.status, (data && data.error) || `HTTP ${resp.status}`, data && data.reason);
    if (resp.status === 401 && S.whoami && await loginLost()) {
      logout('Logged out: the login is no longer accepted.');
    }
    throw err;
  }
  return data;
}

// loginLost tells the two kinds of 401 apart: a login the node no longer
// accepts (password changed, user deleted or untagged) ends the session, a
// right the user lacks (policies without policymaker) is only an error.
async function loginLost() {
  try {
    return (await fetch('api/whoami', { headers: authHeaders(), cache: 'no-store' })).status === 401;
  } catch (e) {
    return false;
  }
}

// ---- banner: every failure is shown, none leaves a blank page ----

function showBanner(text, info) {
  const b = $('#banner');
  $('#banner-text').textContent = text;
  b.classList.toggle('info', !!info);
  b.hidden = false;
  if (info) {
    clearTimeout(showBanner.t);
    showBanner.t = setTimeout(() => { if (b.classList.contains('info')) b.hidden = true; }, 4000);
  }
}
function showError(e) {
  // A 401 has already sent the user back to the login form, saying why.
  if (e instanceof ApiError && e.status === 401 && !S.whoami) return;
  showBanner(e instanceof ApiError ? e.message : `Error: ${e && e.message ? e.message : e}`);
}
function clearBanner() { $('#banner').hidden = true; }

window.addEventListener('error', ev => showBanner(`Console error: ${ev.message}`));
window.addEventListener('unhandledrejection', ev => showError(ev.reason));

// ---- login ----

function showLogin(message) {
  $('#top').hidden = true;
  const main = $('#main');
  main.replaceChildren($('#login-template').content.cloneNode(true));
  if (message) { const p = $('#login-error'); p.textContent = message; p.hidden = false; }
  $('#login').addEventListener('submit', async ev => {
    ev.preventDefault();
    const f = ev.target;
    const btn = $('#login-submit');
    btn.disabled = true;
    // btoa takes Latin-1 only: encode the UTF-8 bytes of the credentials.
    S.auth = btoa(String.fromCharCode(...new TextEncoder().encode(f.username.value + ':' + f.password.value)));
    try {
      await start();
    } catch (e) {
      S.auth = null;
      const p = $('#login-error');
      p.textContent = loginFailure(e);
      p.hidden = false;
      btn.disabled = false;
    }
  });
  $('#login-username').focus();
}

function loginFailure(e) {
  if (!(e instanceof ApiError) || e.status !== 401) return e.message;
  return e.reason === 'Login failed' ? e.reason : `Login failed: ${e.reason}`;
}

function logout(message) {
  clearInterval(S.timer);
  S.timer = null;
  S.auth = null;
  S.whoami = null;
  S.page = null;
  S.lists = {}; // the next user starts with unfiltered first pages
  sessionStorage.removeItem('raftmq.auth');
  clearBanner();
  showLogin(message);
}

const isAdmin = () => S.whoami && S.whoami.tags.includes('administrator');
const isMonitor = () => isAdmin() || (S.whoami && S.whoami.tags.includes('monitoring'));

async function start() {
  S.whoami = await api('GET', 'whoami');
  if (typeof S.whoami.tags === 'string') S.whoami.tags = S.whoami.tags.split(',');
  sessionStorage.setItem('raftmq.auth', S.auth);
  $('#whoami').textContent = S.whoami.name;
  $('#nav-users').hidden = !isAdmin();
  $('#nav-admin').hidden = !isAdmin();
  $('#nav-policies').hidden = !isMonitor() && !S.whoami.tags.includes('policymaker');
  $('#top').hidden = false;
  const vhosts = await api('GET', 'vhosts?columns=name');
  const sel = $('#vhost');
  sel.replaceChildren(new Option('All', ''), ...vhosts.map(v => new Option(v.name, v.name)));
  if (!vhosts.some(v => v.name === S.vhost)) S.vhost = '';
  sel.value = S.vhost;
  try {
    S.overview = await api('GET', 'overview');
    $('#cluster').textContent = `${S.overview.cluster_name} · ${S.overview.node} · ${S.overview.product_version}`;
  } catch (e) { showError(e); }
  schedule();
  await route();
}

function schedule() {
  clearInterval(S.timer);
  const ms = Number($('#refresh').value);
  S.timer = ms > 0 ? setInterval(refresh, ms) : null;
}

// refresh reloads the shown page's data, unless the user is typing in one
// of its forms or has armed a danger button: a list drawn again would
// meet the confirming click with a fresh button, unarmed.
async function refresh() {
  if (!S.page || document.hidden) return;
  const a = document.activeElement;
  if (a && a.matches('input, textarea, select') && a.closest('#main form')) return;
  if (document.querySelector('#main button.danger.armed')) return;
  try {
    await S.page.refresh();
  } catch (e) { showError(e); }
}

// ---- routing: #/page[/vhost/name] ----

async function route() {
  if (!S.whoami) return;
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const name = parts[0] || 'overview';
  for (const a of $$('#nav a')) a.classList.toggle('active', a.dataset.page === name);
  const pages = { overview: overviewPage, connections: connectionsPage, channels: channelsPage, exchanges: exchangesPage, queues: queuesPage, policies: policiesPage, users: usersPage, admin: adminPage };
  const make = pages[name];
  // A fresh element per page drops the listeners the last page bound.
  const main = document.createElement('main');
  main.id = 'main';
  $('#main').replaceWith(main);
  S.page = null;
  if (!make) {
    main.innerHTML = `<div class="panel">No page "${esc(name)}". <a href="#/">Overview</a></div>`;
    return;
  }
  main.innerHTML = '<div class="empty">Loading…</div>';
  const page = parts.length >= 3 && make.detail ? make.detail(parts[1], parts.slice(2).join('/')) : make();
  S.page = page;
  main.innerHTML = page.html;
  if (page.bind) page.bind(main);
  try {
    await page.refresh();
  } catch (e) { showError(e); }
}

// ---- shared widgets ----

// A danger button acts on its second click: the first arms it (and stops
// the click before the page's own handlers see it).
function armDangerButtons() {
  document.addEventListener('click', ev => {
    const b = ev.target.closest('button.danger');
    if (!b) return;
    if (b.classList.contains('armed')) {
      setTimeout(() => { b.classList.remove('armed'); b.textContent = b.dataset.label; });
      return;
    }
    ev.stopImmediatePropagation();
    ev.preventDefault();
    b.dataset.label = b.textContent;
    b.textContent = 'Confirm ' + b.textContent.toLowerCase() + '?';
    b.classList.add('armed');
    setTimeout(() => { if (b.isConnected) { b.classList.remove('armed'); b.textContent = b.dataset.label; } }, 4000);
  }, true);
}

// onSubmit makes fn(form) the action of the form's submit button.
function onSubmit(form, what, fn) {
  form.addEventListener('submit', ev => {
    ev.preventDefault();
    act(what, () => fn(form));
  });
}

// act runs an action of a button or form, shows its outcome and refreshes.
async function act(what, fn) {
  try {
    const msg = await fn();
    showBanner(msg || what + ': done', true);
    if (S.page) await S.page.refresh();
  } catch (e) { showError(e); }
}

function scope(base) { return S.vhost ? `${base}/${enc(S.vhost)}` : base; }

function parseJSONField(text, what) {
  if (!text.trim()) return {};
  let v;
  try { v = JSON.parse(text); } catch (e) { throw new Error(`${what} is not JSON: ${e.message}`); }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error(`${what} must be a JSON object`);
  return v;
}

function vhostOptions(selected) {
  return $$('#vhost option').filter(o => o.value).map(o => `<option${o.value === selected ? ' selected' : ''}>${esc(o.value)}</option>`).join('');
}

// A listing paged by the server: RabbitMQ's page, page_size, name,
// use_regex, sort and sort_reverse.
function pagedList(key, path, columns, opts = {}) {
  const st = S.lists[key] || (S.lists[key] = { page: 1, size: 100, name: '', regex: false, sort: opts.sort || 'name', reverse: false });
  const html = `
    <div class="toolbar" data-list="${key}">
      <input type="search" placeholder="Filter by name" class="filter" value="${esc(st.name)}" aria-label="Filter by name">
      <label class="nowrap"><input type="checkbox" class="regex"${st.regex ? ' checked' : ''}> regex</label>
      <span class="pager">
        <button type="button" class="secondary first" aria-label="First page">«</button>
        <button type="button" class="secondary prev" aria-label="Previous page">‹</button>
        <span class="pageinfo muted"></span>
        <button type="button" class="secondary next" aria-label="Next page">›</button>
        <button type="button" class="secondary last" aria-label="Last page">»</button>
        <select class="size" aria-label="Page size">${[20, 50, 100, 500].map(n => `<option${n === st.size ? ' selected' : ''}>${n}</option>`).join('')}</select>
      </span>
      <span class="count muted"></span>
    </div>
    <div class="table-wrap"><table id="${key}-table"><thead><tr>${columns.map(c => c.sort
      ? `<th class="sort${c.num ? ' num' : ''}" data-sort="${c.sort}">${c.title}</th>`
      : `<th${c.num ? ' class="num"' : ''}>${c.title}</th>`).join('')}</tr></thead><tbody></tbody></table></div>`;
  let root;
  let timer;
  async function load() {
    const q = new URLSearchParams({ page: st.page, page_size: st.size, sort: st.sort, sort_reverse: st.reverse });
    if (st.name) { q.set('name', st.name); q.set('use_regex', st.regex); }
    let data;
    try {
      data = await api('GET', `${path()}?${q}`);
    } catch (e) {
      if (e.status === 400 && st.page > 1) { st.page = 1; return load(); }
      throw e;
    }
    if (!root || !root.isConnected) return;
    const body = $('tbody', root);
    body.innerHTML = data.items.length
      ? data.items.map(it => `<tr>${columns.map(c => `<td${c.num ? ' class="num"' : ''}>${c.cell(it)}</td>`).join('')}</tr>`).join('')
      : `<tr><td colspan="${columns.length}" class="empty">${st.name ? 'Nothing matches the filter.' : 'None.'}</td></tr>`;
    $('.pageinfo', root).textContent = `page ${data.page} of ${Math.max(data.page_count, 1)}`;
    st.pages = data.page_count;
    $('.first', root).disabled = $('.prev', root).disabled = data.page <= 1;
    $('.last', root).disabled = $('.next', root).disabled = data.page >= data.page_count;
    $('.count', root).textContent = data.filtered_count === data.total_count
      ? `${data.total_count.toLocaleString()} in all`
      : `${data.filtered_count.toLocaleString()} of ${data.total_count.toLocaleString()} match`;
    for (const th of $$('th.sort', root)) {
      th.classList.toggle('sorted-asc', th.dataset.sort === st.sort && !st.reverse);
      th.classList.toggle('sorted-desc', th.dataset.sort === st.sort && st.reverse);
    }
  }
  function bind(main) {
    root = $(`[data-list="${key}"]`, main).parentElement;
    const reload = () => load().catch(showError);
    $('.filter', root).addEventListener('input', ev => {
      clearTimeout(timer);
      timer = setTimeout(() => { st.name = ev.target.value; st.page = 1; reload(); }, 250);
    });
    $('.regex', root).addEventListener('change', ev => { st.regex = ev.target.checked; st.page = 1; reload(); });
    $('.first', root).addEventListener('click', () => { st.page = 1; reload(); });
    $('.last', root).addEventListener('click', () => { st.page = Math.max(1, st.pages || 1); reload(); });
    $('.prev', root).addEventListener('click', () => { st.page = Math.max(1, st.page - 1); reload(); });
    $('.next', root).addEventListener('click', () => { st.page++; reload(); });
    $('.size', root).addEventListener('change', ev => { st.size = Number(ev.target.value); st.page = 1; reload(); });
    $('thead', root).addEventListener('click', ev => {
      const th = ev.target.closest('th.sort');
      if (!th) return;
      if (st.sort === th.dataset.sort) st.reverse = !st.reverse;
      else { st.sort = th.dataset.sort; st.reverse = !!opts.numericDesc && th.classList.contains('num'); }
      st.page = 1;
      reload();
    });
  }
  return { html, bind, load };
}

function link(kind, it, label) {
  return `<a class="name" href="#/${kind}/${enc(it.vhost)}/${enc(it.name)}">${esc(label ?? it.name)}</a>`;
}

// ---- overview ----

function overviewPage() {
  const html = `<h1>Overview</h1>
    <div class="panel"><h2>Totals</h2><div class="cards" id="totals"></div></div>
    ${chartPanels('overview')}
    <div class="panel"><h2>Nodes</h2><div class="table-wrap" id="nodes"></div></div>
    <div class="panel"><h2>Listeners</h2><div class="table-wrap" id="listeners"></div></div>`;
  async function refresh() {
    const o = await api('GET', 'overview?' + historyQuery());
    S.overview = o;
    drawCharts('overview', o.message_stats, o.queue_totals);
    const qt = o.queue_totals || {}, ot = o.object_totals || {}, ms = o.message_stats || {};
    const card = (n, l, r) => `<div class="card"><div class="n">${num(n)}</div><div class="l">${l}${r ? ' · ' + r : ''}</div></div>`;
    $('#totals').innerHTML = [
      card(qt.messages, 'messages', rate(qt.messages_details)),
      card(qt.messages_ready, 'ready', rate(qt.messages_ready_details)),
      card(qt.messages_unacknowledged, 'unacked', rate(qt.messages_unacknowledged_details)),
      card(ms.publish ?? 0, 'published', rate(ms.publish_details)),
      card(ms.deliver_get ?? 0, 'delivered', rate(ms.deliver_get_details)),
      card(ms.ack ?? 0, 'acked', rate(ms.ack_details)),
      card(ms.redeliver ?? 0, 'redelivered', rate(ms.redeliver_details)),
      card(ot.queues, 'queues'), card(ot.exchanges, 'exchanges'), card(ot.connections, 'connections'),
      card(ot.channels, 'channels'), card(ot.consumers, 'consumers'),
    ].join('');
    $('#listeners').innerHTML = `<table><thead><tr><th>Node</th><th>Protocol</th><th>Address</th><th class="num">Port</th></tr></thead><tbody>${
      (o.listeners || []).map(l => `<tr><td>${esc(l.node)}</td><td>${esc(l.protocol)}</td><td>${esc(l.ip_address)}</td><td class="num">${esc(l.port)}</td></tr>`).join('')}</tbody></table>`;
    if (!isMonitor()) {
      $('#nodes').innerHTML = '<p class="muted">The nodes are shown to users tagged monitoring or administrator.</p>';
      return;
    }
    const nodes = await api('GET', 'nodes');
    $('#nodes').innerHTML = `<table id="nodes-table"><thead><tr><th>Name</th><th>State</th><th>Raft role</th><th>Suffrage</th>
      <th class="num">Term</th><th class="num">Commit index</th><th class="num">Applied index</th>
      <th>AMQP</th><th>Memory</th><th>Disk free</th><th>File descriptors</th><th class="num">Uptime</th><th class="num">Goroutines</th></tr></thead><tbody>${
      nodes.map(n => `<tr data-node="${esc(n.name)}">
        <td class="nowrap">${esc(n.name)}${n.name === o.node ? ' <span class="tag">this node</span>' : ''}</td>
        <td>${n.running ? `<span class="ok">${esc(n.health || 'running')}</span>` : `<span class="tag bad">${esc(n.health || 'stopped')}</span>`}</td>
        <td>${n.raft_leader ? '<span class="tag leader">leader</span>' : n.raft_state ? esc(n.raft_state.toLowerCase()) : 'follower'}</td>
        <td>${esc(n.raft_suffrage)}</td>
        <td class="num">${num(n.raft_term)}</td><td class="num">${num(n.raft_commit_index)}</td><td class="num">${num(n.raft_applied_index)}</td>
        <td title="raft ${esc(n.raft_addr)}">${esc(n.amqp_addr)}</td>
        ${nodeResourceCells(n)}
        <td class="num">${num(n.proc_used)}</td>
      </tr>`).join('')}</tbody></table>
      <p class="muted">Each node's own figures, asked from it by the node that served this page; a node that does not answer shows none.
      Memory is the process's resident memory, of the memory alarm's limit.</p>`;
  }
  return { html, refresh };
}

// ---- queues ----

function features(it) {
  const out = [];
  if (it.durable) out.push('<span class="tag" title="durable">D</span>');
  if (it.auto_delete) out.push('<span class="tag" title="auto-delete">AD</span>');
  if (it.exclusive) out.push('<span class="tag" title="exclusive">Excl</span>');
  for (const [k, v] of Object.entries(it.arguments || {})) {
    out.push(`<span class="tag" title="${esc(k)}: ${esc(JSON.stringify(v))}">${esc(k.replace(/^x-/, ''))}</span>`);
  }
  if (it.policy) out.push(`<span class="tag" title="policy">${esc(it.policy)}</span>`);
  return out.join('');
}

function queuesPage() {
  const list = pagedList('queues', () => scope('queues'), [
    { title: 'Virtual host', sort: 'vhost', cell: it => vhostLabel(it.vhost) },
    { title: 'Name', sort: 'name', cell: it => link('queues', it) },
    { title: 'Type', sort: 'type', cell: it => esc(it.type) },
    { title: 'Features', cell: features },
    { title: 'Raft group', cell: it => esc(it.raft_group) },
    { title: 'Leader', cell: it => it.leader ? esc(it.leader) : '<span class="muted">none</span>' },
    { title: 'Ready', sort: 'messages_ready', num: true, cell: it => num(it.messages_ready) },
    { title: 'Unacked', sort: 'messages_unacknowledged', num: true, cell: it => num(it.messages_unacknowledged) },
    { title: 'Total', sort: 'messages', num: true, cell: it => num(it.messages) },
    { title: 'In', num: true, cell: it => rate(it.message_stats && it.message_stats.publish_details) },
    { title: 'Out', num: true, cell: it => rate(it.message_stats && it.message_stats.deliver_get_details) },
    { title: 'Consumers', sort: 'consumers', num: true, cell: it => num(it.consumers) },
    { title: 'Message TTL', sort: 'effective_message_ttl', num: true, cell: it => dur(it.effective_message_ttl) },
    { title: 'Next death', sort: 'next_death', cell: it => due(it.next_death, 'overdue') },
    { title: 'Lease due', sort: 'lease_due', cell: it => due(it.lease_due, 'overdue') },
  ], { numericDesc: true });
  const html = `<h1>Queues</h1><div class="panel">${list.html}</div>
    <div class="panel"><details><summary>Add a queue</summary>
    <form class="stack" id="add-queue">
      <label>Virtual host <select name="vhost">${vhostOptions(S.vhost || '/')}</select></label>
      <label>Name <input name="name" required></label>
      <label>Type <select name="type"><option>classic</option><option>quorum</option></select></label>
      <label class="inline"><input type="checkbox" name="durable" checked> durable</label>
      <label class="inline"><input type="checkbox" name="auto_delete"> auto-delete</label>
      <label>Arguments (JSON) <textarea name="arguments" placeholder='{"x-message-ttl": 60000, "x-dead-letter-exchange": "dlx"}'></textarea></label>
      <div><button type="submit">Add queue</button></div>
    </form></details></div>`;
  function bind(main) {
    list.bind(main);
    onSubmit($('#add-queue', main), 'Add queue', async f => {
      const args = parseJSONField(f.arguments.value, 'Arguments');
      if (f.type.value !== 'classic') args['x-queue-type'] = f.type.value;
      await api('PUT', `queues/${enc(f.vhost.value)}/${enc(f.name.value)}`, { durable: f.durable.checked, auto_delete: f.auto_delete.checked, arguments: args });
      const n = f.name.value;
      f.name.value = '';
      return `Queue ${n} declared`;
    });
  }
  return { html, bind, refresh: list.load };
}

// publishForm is the form that publishes through exchange (or to the queue
// through the default exchange).
function publishForm(id, routingKey) {
  return `<form class="stack" id="${id}">
    ${routingKey === undefined ? '<label>Routing key <input name="routing_key"></label>' : ''}
    <label>Delivery mode <select name="delivery_mode"><option value="2">2 - persistent</option><option value="1">1 - non-persistent</option></select></label>
    <label>Headers (JSON) <textarea name="headers" placeholder='{"x-trace": "abc"}'></textarea></label>
    <label>Properties (JSON) <textarea name="properties" placeholder='{"content_type": "text/plain", "expiration": "60000", "priority": 1}'></textarea></label>
    <label>Payload <textarea name="payload" id="${id}-payload"></textarea></label>
    <label>Payload encoding <select name="payload_encoding"><option value="string">string</option><option value="base64">base64</option></select></label>
    <div><button type="submit" id="${id}-submit">Publish message</button></div>
  </form>`;
}

function bindPublish(form, vhost, exchange, routingKey) {
  onSubmit(form, 'Publish', async f => {
    const props = parseJSONField(f.properties.value, 'Properties');
    const headers = parseJSONField(f.headers.value, 'Headers');
    if (Object.keys(headers).length) props.headers = headers;
    props.delivery_mode = Number(f.delivery_mode.value);
    const rk = routingKey === undefined ? f.routing_key.value : routingKey;
    const r = await api('POST', `exchanges/${enc(vhost)}/${enc(exchange || 'amq.default')}/publish`,
      { properties: props, routing_key: rk, payload: f.payload.value, payload_encoding: f.payload_encoding.value });
    if (!r.routed) throw new Error('Message published, but not routed to any queue');
    return 'Message published';
  });
}

function bindingsTable(items, vhost, self) {
  if (!items.length) return '<p class="muted">No bindings.</p>';
  return `<table><thead><tr><th>From</th><th>To</th><th>Routing key</th><th>Arguments</th><th></th></tr></thead><tbody>${items.map(b => {
    const from = b.source === '' ? '(default exchange)' : b.source === self ? esc(b.source) : `<a href="#/exchanges/${enc(vhost)}/${enc(b.source)}">${esc(b.source)}</a>`;
    const to = b.destination === self ? esc(b.destination) : `<a href="#/${b.destination_type === 'queue' ? 'queues' : 'exchanges'}/${enc(vhost)}/${enc(b.destination)}">${esc(b.destination)}</a>`;
    const del = b.source === '' ? '' : `<button type="button" class="danger unbind" data-path="bindings/${enc(vhost)}/e/${enc(b.source)}/${b.destination_type === 'queue' ? 'q' : 'e'}/${enc(b.destination)}/${enc(b.properties_key)}">Unbind</button>`;
    return `<tr><td>${from}</td><td>${to} <span class="muted">${esc(b.destination_type)}</span></td><td>${esc(b.routing_key)}</td><td>${shortJSON(b.arguments)}</td><td>${del}</td></tr>`;
  }).join('')}</tbody></table>`;
}

function bindUnbind(root) {
  root.addEventListener('click', ev => {
    const b = ev.target.closest('button.unbind.armed');
    if (!b) return;
    act('Unbind', async () => { await api('DELETE', b.dataset.path); return 'Binding removed'; });
  });
}

queuesPage.detail = (vhost, name) => {
  const base = `queues/${enc(vhost)}/${enc(name)}`;
  const html = `<h1>Queue <span class="name">${esc(name)}</span> <span class="muted">in ${vhostLabel(vhost)}</span></h1>
    <div class="grid">
      <div class="panel"><h2>Details</h2><div id="queue-details" class="empty">Loading…</div></div>
      <div class="panel"><h2>Messages</h2><div id="queue-counts"></div></div>
    </div>
    ${chartPanels('queue')}
    <div class="panel" id="bindings-panel"><h2>Bindings</h2><div id="queue-bindings"></div>
      <details><summary>Add a binding</summary>
      <form class="row" id="bind-queue">
        <label>From exchange <input name="source" required></label>
        <label>Routing key <input name="routing_key"></label>
        <label>Arguments (JSON) <input name="arguments" placeholder="{}"></label>
        <button type="submit">Bind</button>
      </form></details></div>
    <div class="grid">
      <div class="panel"><h2>Publish message</h2><p class="muted">Through the default exchange, routed to this queue.</p>${publishForm('publish', name)}</div>
      <div class="panel"><h2>Get messages</h2>
        <form class="stack" id="get">
          <label>Ack mode <select name="ackmode">
            <option value="ack_requeue_true">Nack message, requeue true</option>
            <option value="ack_requeue_false">Automatic ack</option>
            <option value="reject_requeue_true">Reject, requeue true</option>
            <option value="reject_requeue_false">Reject, requeue false</option></select></label>
          <label>Encoding <select name="encoding"><option value="auto">Auto string / base64</option><option value="base64">base64</option></select></label>
          <label>Messages <input name="count" type="number" min="1" value="1"></label>
          <label>Truncate at (bytes) <input name="truncate" type="number" min="1" value="50000"></label>
          <div><button type="submit" id="get-submit">Get message(s)</button></div>
        </form>
        <div id="got"></div>
      </div>
    </div>
    <div class="panel"><h2>Purge and delete</h2>
      <div class="toolbar">
        <button type="button" class="danger" id="purge">Purge messages</button>
        <label class="nowrap"><input type="checkbox" id="if-empty"> only if empty</label>
        <label class="nowrap"><input type="checkbox" id="if-unused"> only if unused</label>
        <button type="button" class="danger" id="delete">Delete queue</button>
      </div></div>`;
  async function refresh() {
    const [q, bindings] = await Promise.all([api('GET', base + '?' + historyQuery()), api('GET', base + '/bindings')]);
    drawCharts('queue', q.message_stats, q);
    const eff = q.effective_policy_definition || {};
    $('#queue-details').classList.remove('empty');
    $('#queue-details').innerHTML = `<dl class="props">
      <dt>Type</dt><dd>${esc(q.type)}</dd>
      <dt>Features</dt><dd>${features(q) || '—'}</dd>
      <dt>State</dt><dd>${esc(q.state)}</dd>
      <dt>Consumers</dt><dd>${num(q.consumers)}</dd>
      <dt>Policy</dt><dd>${esc(q.policy || '—')}${q.operator_policy ? ` <span class="muted">operator:</span> ${esc(q.operator_policy)}` : ''}</dd>
      <dt>Effective policy</dt><dd>${shortJSON(eff) || '—'}</dd>
      <dt>Message TTL</dt><dd>${q.effective_message_ttl == null ? '—' : dur(q.effective_message_ttl)}</dd>
      <dt>Queue TTL (expires)</dt><dd>${q.effective_expires == null ? '—' : dur(q.effective_expires)}</dd>
      <dt>Dead-letter exchange</dt><dd>${esc(q.effective_dead_letter_exchange || '—')}</dd>
      <dt>Next death</dt><dd>${due(q.next_death, 'overdue') || '—'}</dd>
      <dt>Lease due</dt><dd>${due(q.lease_due, 'overdue') || '—'}</dd>
      <dt>Raft group</dt><dd>${esc(q.raft_group)}</dd>
      <dt>Leader</dt><dd>${q.leader ? esc(q.leader) : '<span class="muted">none elected</span>'}</dd>
      <dt>Members</dt><dd>${(q.members || []).map(m => (q.online || []).includes(m) ? esc(m) : `${esc(m)} <span class="muted">(offline)</span>`).join(', ')}</dd>
      <dt>Arguments</dt><dd>${shortJSON(q.arguments) || '—'}</dd></dl>`;
    const ms = q.message_stats || {};
    $('#queue-counts').innerHTML = `<div class="cards">
      <div class="card"><div class="n" id="queue-ready">${num(q.messages_ready)}</div><div class="l">ready ${rate(q.messages_ready_details)}</div></div>
      <div class="card"><div class="n">${num(q.messages_unacknowledged)}</div><div class="l">unacked ${rate(q.messages_unacknowledged_details)}</div></div>
      <div class="card"><div class="n">${num(q.messages)}</div><div class="l">total ${rate(q.messages_details)}</div></div>
      <div class="card"><div class="n">${bytes(q.message_bytes_ready)}</div><div class="l">ready bytes</div></div>
      ${ms.publish !== undefined ? `<div class="card"><div class="n">${num(ms.publish)}</div><div class="l">published ${rate(ms.publish_details)}</div></div>` : ''}
      ${ms.deliver_get !== undefined ? `<div class="card"><div class="n">${num(ms.deliver_get)}</div><div class="l">delivered ${rate(ms.deliver_get_details)}</div></div>` : ''}
    </div>`;
    $('#queue-bindings').innerHTML = bindingsTable(bindings, vhost, name);
  }
  function bind(main) {
    bindPublish($('#publish', main), vhost, '', name);
    bindUnbind($('#bindings-panel', main));
    onSubmit($('#bind-queue', main), 'Bind', async f => {
      await api('POST', `bindings/${enc(vhost)}/e/${enc(f.source.value)}/q/${enc(name)}`, { routing_key: f.routing_key.value, arguments: parseJSONField(f.arguments.value, 'Arguments') });
      return 'Binding added';
    });
    $('#get', main).addEventListener('submit', async ev => {
      ev.preventDefault();
      const f = ev.target;
      const out = $('#got');
      try {
        const msgs = await api('POST', base + '/get', { count: Number(f.count.value), ackmode: f.ackmode.value, encoding: f.encoding.value, truncate: Number(f.truncate.value) });
        out.innerHTML = msgs.length ? msgs.map((m, i) => `<div class="message">
          <strong>Message ${i + 1}</strong> <span class="muted">${num(m.message_count)} left in the queue</span>
          <dl class="props">
            <dt>Exchange</dt><dd>${esc(m.exchange || '(default)')}</dd>
            <dt>Routing key</dt><dd>${esc(m.routing_key)}</dd>
            <dt>Redelivered</dt><dd>${m.redelivered ? 'yes' : 'no'}</dd>
            <dt>Properties</dt><dd>${shortJSON(m.properties) || '—'}</dd>
            <dt>Payload</dt><dd>${num(m.payload_bytes)} bytes, encoding ${esc(m.payload_encoding)}</dd>
          </dl><pre class="payload">${esc(m.payload)}</pre></div>`).join('')
          : '<p class="muted">The queue is empty.</p>';
        if (S.page) await S.page.refresh();
      } catch (e) { showError(e); }
    });
    $('#purge', main).addEventListener('click', ev => {
      if (!ev.target.classList.contains('armed')) return;
      act('Purge', async () => { await api('DELETE', base + '/contents'); return `Queue ${name} purged`; });
    });
    $('#delete', main).addEventListener('click', ev => {
      if (!ev.target.classList.contains('armed')) return;
      const q = new URLSearchParams();
      if ($('#if-empty').checked) q.set('if-empty', 'true');
      if ($('#if-unused').checked) q.set('if-unused', 'true');
      act('Delete', async () => {
        await api('DELETE', base + (q.toString() ? '?' + q : ''));
        location.hash = '#/queues';
        return `Queue ${name} deleted`;
      });
    });
  }
  return { html, bind, refresh };
};

// ---- exchanges ----

function exchangesPage() {
  const list = pagedList('exchanges', () => scope('exchanges'), [
    { title: 'Virtual host', sort: 'vhost', cell: it => vhostLabel(it.vhost) },
    { title: 'Name', sort: 'name', cell: it => link('exchanges', it, it.name || '(AMQP default)') },
    { title: 'Type', sort: 'type', cell: it => esc(it.type) },
    { title: 'Features', cell: it => features({ durable: it.durable, auto_delete: it.auto_delete, arguments: it.arguments, policy: it.policy }) + (it.internal ? '<span class="tag">internal</span>' : '') },
    { title: 'Delayed', num: true, cell: delayedCell },
    { title: 'In', num: true, cell: it => rate(it.message_stats && it.message_stats.publish_in_details) },
    { title: 'Out', num: true, cell: it => rate(it.message_stats && it.message_stats.publish_out_details) },
  ]);
  const html = `<h1>Exchanges</h1><div class="panel">${list.html}</div>
    <div class="panel"><details><summary>Add an exchange</summary>
    <form class="stack" id="add-exchange">
      <label>Virtual host <select name="vhost">${vhostOptions(S.vhost || '/')}</select></label>
      <label>Name <input name="name" required></label>
      <label>Type <select name="type"><option>direct</option><option>fanout</option><option>topic</option><option>headers</option><option>x-delayed-message</option><option>x-consistent-hash</option><option>x-modulus-hash</option><option>x-local-random</option></select></label>
      <label class="inline"><input type="checkbox" name="durable" checked> durable</label>
      <label class="inline"><input type="checkbox" name="auto_delete"> auto-delete</label>
      <label class="inline"><input type="checkbox" name="internal"> internal</label>
      <label>Arguments (JSON) <textarea name="arguments" placeholder='{"alternate-exchange": "unrouted"} — x-delayed-message needs {"x-delayed-type": "direct"}; x-consistent-hash takes {"hash-header": "h"} or {"hash-property": "message_id"}'></textarea></label>
      <div><button type="submit">Add exchange</button></div>
    </form></details></div>`;
  function bind(main) {
    list.bind(main);
    onSubmit($('#add-exchange', main), 'Add exchange', async f => {
      await api('PUT', `exchanges/${enc(f.vhost.value)}/${enc(f.name.value)}`, { type: f.type.value, durable: f.durable.checked,
        auto_delete: f.auto_delete.checked, internal: f.internal.checked, arguments: parseJSONField(f.arguments.value, 'Arguments') });
      return `Exchange ${f.name.value} declared`;
    });
  }
  return { html, bind, refresh: list.load };
}

exchangesPage.detail = (vhost, name) => {
  const wire = name === 'amq.default' ? '' : name;
  const base = `exchanges/${enc(vhost)}/${enc(name || 'amq.default')}`;
  const delayed = delayedView(base);
  const html = `<h1>Exchange <span class="name">${esc(wire || '(AMQP default)')}</span> <span class="muted">in ${vhostLabel(vhost)}</span></h1>
    <div class="panel"><h2>Details</h2><div id="exchange-details" class="empty">Loading…</div></div>
    <div class="panel" id="bindings-panel"><h2>Bindings from this exchange</h2><div id="bindings-source"></div>
      <h2>Bindings to this exchange</h2><div id="bindings-destination"></div>
      ${wire ? `<details><summary>Add a binding from this exchange</summary>
      <form class="row" id="bind-exchange">
        <label>To <select name="kind"><option value="q">queue</option><option value="e">exchange</option></select></label>
        <label>Name <input name="destination" required></label>
        <label>Routing key <input name="routing_key"></label>
        <label>Arguments (JSON) <input name="arguments" placeholder="{}"></label>
        <button type="submit">Bind</button>
      </form></details>` : ''}</div>
    ${delayed.html}
    <div class="panel"><h2>Publish message</h2>${publishForm('publish')}</div>
    ${wire && !wire.startsWith('amq.') ? '<div class="panel"><h2>Delete</h2><button type="button" class="danger" id="delete">Delete exchange</button></div>' : ''}`;
  async function refresh() {
    const [x, src, dst] = await Promise.all([api('GET', base), api('GET', base + '/bindings/source'), api('GET', base + '/bindings/destination')]);
    $('#exchange-details').classList.remove('empty');
    $('#exchange-details').innerHTML = `<dl class="props">
      <dt>Type</dt><dd>${esc(x.type)}</dd><dt>Durable</dt><dd>${x.durable ? 'yes' : 'no'}</dd>
      <dt>Auto-delete</dt><dd>${x.auto_delete ? 'yes' : 'no'}</dd><dt>Internal</dt><dd>${x.internal ? 'yes' : 'no'}</dd>
      <dt>Policy</dt><dd>${esc(x.policy || '—')}</dd><dt>Arguments</dt><dd>${shortJSON(x.arguments) || '—'}</dd></dl>`;
    $('#bindings-source').innerHTML = wire ? bindingsTable(src, vhost, wire) : '<p class="muted">The default exchange is bound to every queue by its name.</p>';
    $('#bindings-destination').innerHTML = bindingsTable(dst, vhost, wire);
    await delayed.refresh(x);
  }
  function bind(main) {
    bindPublish($('#publish', main), vhost, name);
    bindUnbind($('#bindings-panel', main));
    delayed.bind(main);
    const bf = $('#bind-exchange', main);
    if (bf) {
      onSubmit(bf, 'Bind', async f => {
        await api('POST', `bindings/${enc(vhost)}/e/${enc(wire)}/${f.kind.value}/${enc(f.destination.value)}`, { routing_key: f.routing_key.value, arguments: parseJSONField(f.arguments.value, 'Arguments') });
        return 'Binding added';
      });
    }
    const del = $('#delete', main);
    if (del) {
      del.addEventListener('click', ev => {
        if (!ev.target.classList.contains('armed')) return;
        act('Delete', async () => { await api('DELETE', base); location.hash = '#/exchanges'; return `Exchange ${wire} deleted`; });
      });
    }
  }
  return { html, bind, refresh };
};

// ---- delayed messages (x-delayed-message exchanges) ----

// delayedCell is an exchange's waiting messages in the exchanges list
// (empty for exchanges of other types).
function delayedCell(x) {
  if (typeof x.messages_delayed !== 'number') return '';
  return num(x.messages_delayed) + (x.next_delayed_due ? ` <span class="muted">next ${due(x.next_delayed_due, 'due')}</span>` : '');
}

// delayedView is the delayed-messages panel of an exchange's page: the
// messages waiting, a page at a time, earliest due first, each with a
// cancel button, and a purge button. It stays hidden for other types.
function delayedView(base) {
  const size = 20;
  let page = 1;
  let root;
  const html = `<div class="panel" id="delayed-panel" hidden><h2>Delayed messages</h2>
    <p id="delayed-summary"></p>
    <div class="toolbar"><span class="pager">
      <button type="button" class="secondary" id="delayed-prev" aria-label="Earlier delayed messages">‹</button>
      <span class="muted" id="delayed-pageinfo"></span>
      <button type="button" class="secondary" id="delayed-next" aria-label="Later delayed messages">›</button></span>
      <button type="button" class="danger" id="delayed-purge">Purge delayed messages</button></div>
    <div class="table-wrap"><table id="delayed-table"><thead><tr><th class="num">Seq</th><th>Due</th><th>Routing key</th><th>Headers</th><th class="num">Size</th><th></th></tr></thead><tbody></tbody></table></div></div>`;
  async function refresh(x) {
    if (!root || !root.isConnected) return;
    if (x.type !== 'x-delayed-message') { root.hidden = true; return; }
    root.hidden = false;
    let data;
    try {
      data = await api('GET', `${base}/delayed?page=${page}&page_size=${size}`);
    } catch (e) {
      // The messages moved on (released, cancelled): back to the first page.
      if (e.status === 400 && page > 1) { page = 1; return refresh(x); }
      throw e;
    }
    $('#delayed-summary', root).innerHTML = x.messages_delayed
      ? `${num(x.messages_delayed)} waiting; the next is due ${due(x.next_delayed_due, 'overdue by')}.`
      : 'No message waits.';
    $('tbody', root).innerHTML = data.items.length ? data.items.map(m => `<tr data-seq="${esc(m.seq)}">
      <td class="num">${esc(m.seq)}</td><td>${due(m.due, 'overdue by')}</td><td>${esc(m.routing_key)}</td>
      <td>${shortJSON(m.headers)}</td><td class="num">${bytes(m.payload_bytes)}</td>
      <td><button type="button" class="danger delayed-cancel" data-seq="${esc(m.seq)}">Cancel</button></td></tr>`).join('')
      : '<tr><td colspan="6" class="empty">None.</td></tr>';
    $('#delayed-pageinfo', root).textContent = `page ${data.page} of ${Math.max(data.page_count, 1)}`;
    $('#delayed-prev', root).disabled = data.page <= 1;
    $('#delayed-next', root).disabled = data.page >= data.page_count;
    $('#delayed-purge', root).disabled = !x.messages_delayed;
  }
  function bind(main) {
    root = $('#delayed-panel', main);
    const reload = () => S.page && S.page.refresh().catch(showError);
    $('#delayed-prev', root).addEventListener('click', () => { page = Math.max(1, page - 1); reload(); });
    $('#delayed-next', root).addEventListener('click', () => { page++; reload(); });
    root.addEventListener('click', ev => {
      const b = ev.target.closest('button.armed');
      if (!b) return;
      if (b.id === 'delayed-purge') {
        act('Purge', async () => {
          const r = await api('DELETE', `${base}/delayed`);
          return `Purged ${r.message_count} delayed messages`;
        });
      } else if (b.classList.contains('delayed-cancel')) {
        act('Cancel', async () => {
          await api('DELETE', `${base}/delayed/${enc(b.dataset.seq)}`);
          return `Delayed message ${b.dataset.seq} cancelled`;
        });
      }
    });
  }
  return { html, bind, refresh };
}

// ---- connections ----

function connectionsPage() {
  const list = pagedList('connections', () => 'connections', [
    { title: 'Name', sort: 'name', cell: it => `<span class="name">${esc(it.name)}</span>` },
    { title: 'Node', sort: 'node', cell: it => esc(it.node) },
    { title: 'User', sort: 'user', cell: it => esc(it.user) },
    { title: 'Virtual host', sort: 'vhost', cell: it => vhostLabel(it.vhost) },
    { title: 'Client', cell: it => esc([it.client_properties && it.client_properties.product, it.client_properties && it.client_properties.version].filter(Boolean).join(' ')) },
    { title: 'TLS', cell: it => yes(it.ssl) },
    { title: 'Channels', sort: 'channels', num: true, cell: it => num(it.channels) },
    { title: 'Connected', sort: 'connected_at', cell: it => it.connected_at ? `<span title="${esc(new Date(it.connected_at).toISOString())}">${dur(Math.max(0, Date.now() - it.connected_at))} ago</span>` : '' },
    { title: '', cell: it => `<button type="button" class="danger close-conn" data-name="${esc(it.name)}">Close</button>` },
  ]);
  const html = `<h1>Connections</h1><div class="panel">${list.html}
    <p class="muted">Every node's client connections; closing one sends connection.close from the node that holds it.</p></div>`;
  function bind(main) {
    list.bind(main);
    $('tbody', main).addEventListener('click', ev => {
      const b = ev.target.closest('button.close-conn.armed');
      if (!b) return;
      act('Close', async () => {
        await api('DELETE', `connections/${enc(b.dataset.name)}`, undefined, { 'X-Reason': `Closed from the raftmq console by ${S.whoami.name}` });
        return 'Connection closed';
      });
    });
  }
  return { html, bind, refresh: list.load };
}

// ---- policies ----

function policiesPage() {
  const html = `<h1>Policies</h1><div class="panel"><div class="table-wrap" id="policies"></div></div>
    ${isAdmin() || (S.whoami.tags || []).includes('policymaker') ? `<div class="panel"><details><summary>Add or update a policy</summary>
    <form class="stack" id="add-policy">
      <label>Virtual host <select name="vhost">${vhostOptions(S.vhost || '/')}</select></label>
      <label>Name <input name="name" required></label>
      <label>Pattern <input name="pattern" required placeholder="^orders\\."></label>
      <label>Apply to <select name="apply_to"><option value="all">exchanges and queues</option><option value="queues">queues</option><option value="exchanges">exchanges</option></select></label>
      <label>Priority <input name="priority" type="number" value="0"></label>
      <label>Definition (JSON) <textarea name="definition" required placeholder='{"message-ttl": 60000, "dead-letter-exchange": "dlx"}'></textarea></label>
      <div><button type="submit">Save policy</button></div>
    </form></details></div>` : ''}`;
  async function refresh() {
    const items = await api('GET', scope('policies'));
    $('#policies').innerHTML = items.length ? `<table><thead><tr><th>Virtual host</th><th>Name</th><th>Pattern</th><th>Apply to</th><th>Definition</th><th class="num">Priority</th><th></th></tr></thead><tbody>${
      items.map(p => `<tr><td>${vhostLabel(p.vhost)}</td><td>${esc(p.name)}</td><td><code>${esc(p.pattern)}</code></td><td>${esc(p['apply-to'])}</td>
        <td>${shortJSON(p.definition)}</td><td class="num">${num(p.priority)}</td>
        <td><button type="button" class="danger del-policy" data-path="policies/${enc(p.vhost)}/${enc(p.name)}">Delete</button></td></tr>`).join('')}</tbody></table>`
      : '<p class="empty">No policies.</p>';
  }
  function bind(main) {
    $('#policies', main).addEventListener('click', ev => {
      const b = ev.target.closest('button.del-policy.armed');
      if (b) act('Delete policy', async () => { await api('DELETE', b.dataset.path); return 'Policy deleted'; });
    });
    const f = $('#add-policy', main);
    if (f) {
      onSubmit(f, 'Save policy', async () => {
        await api('PUT', `policies/${enc(f.vhost.value)}/${enc(f.name.value)}`, { pattern: f.pattern.value, 'apply-to': f.apply_to.value,
          priority: Number(f.priority.value), definition: parseJSONField(f.definition.value, 'Definition') });
        return `Policy ${f.name.value} saved`;
      });
    }
  }
  return { html, bind, refresh };
}

// ---- users and permissions ----

function usersPage() {
  if (!isAdmin()) {
    return { html: '<div class="panel">Users and permissions are for users tagged administrator.</div>', refresh: async () => {} };
  }
  const html = `<h1>Users</h1>
    <div class="panel"><div class="table-wrap" id="users"></div>
      <details><summary>Add or update a user</summary>
      <form class="stack" id="add-user">
        <label>Username <input name="name" required autocomplete="off"></label>
        <label>Password <input name="password" type="password" autocomplete="new-password"></label>
        <label>Tags (comma-separated) <input name="tags" placeholder="administrator, monitoring, policymaker, management"></label>
        <div><button type="submit">Save user</button></div>
      </form></details></div>
    <h1>Permissions</h1>
    <div class="panel"><div class="table-wrap" id="permissions"></div>
      <details><summary>Set permissions</summary>
      <form class="row" id="set-permission">
        <label>User <select name="user" id="perm-user"></select></label>
        <label>Virtual host <select name="vhost">${vhostOptions(S.vhost || '/')}</select></label>
        <label>Configure <input name="configure" value=".*"></label>
        <label>Write <input name="write" value=".*"></label>
        <label>Read <input name="read" value=".*"></label>
        <button type="submit">Set permissions</button>
      </form></details></div>`;
  async function refresh() {
    const [users, perms] = await Promise.all([api('GET', 'users'), api('GET', 'permissions')]);
    $('#users').innerHTML = `<table><thead><tr><th>Name</th><th>Tags</th><th>Virtual hosts</th><th></th></tr></thead><tbody>${users.map(u => `<tr>
      <td>${esc(u.name)}${u.name === S.whoami.name ? ' <span class="tag">you</span>' : ''}</td>
      <td>${(Array.isArray(u.tags) ? u.tags : String(u.tags || '').split(',')).filter(Boolean).map(t => `<span class="tag">${esc(t)}</span>`).join('')}</td>
      <td>${perms.filter(p => p.user === u.name).map(p => vhostLabel(p.vhost)).join(', ') || '<span class="tag warn">no access</span>'}</td>
      <td>${u.name === S.whoami.name ? '' : `<button type="button" class="danger del-user" data-name="${esc(u.name)}">Delete</button>`}</td></tr>`).join('')}</tbody></table>`;
    $('#permissions').innerHTML = perms.length ? `<table><thead><tr><th>User</th><th>Virtual host</th><th>Configure</th><th>Write</th><th>Read</th><th></th></tr></thead><tbody>${perms.map(p => `<tr>
      <td>${esc(p.user)}</td><td>${vhostLabel(p.vhost)}</td><td><code>${esc(p.configure)}</code></td><td><code>${esc(p.write)}</code></td><td><code>${esc(p.read)}</code></td>
      <td><button type="button" class="danger del-perm" data-path="permissions/${enc(p.vhost)}/${enc(p.user)}">Clear</button></td></tr>`).join('')}</tbody></table>`
      : '<p class="empty">No permissions.</p>';
    const sel = $('#perm-user');
    const keep = sel.value;
    sel.innerHTML = users.map(u => `<option>${esc(u.name)}</option>`).join('');
    if (keep) sel.value = keep;
  }
  function bind(main) {
    main.addEventListener('click', ev => {
      const u = ev.target.closest('button.del-user.armed');
      if (u) act('Delete user', async () => { await api('DELETE', `users/${enc(u.dataset.name)}`); return `User ${u.dataset.name} deleted`; });
      const p = ev.target.closest('button.del-perm.armed');
      if (p) act('Clear permissions', async () => { await api('DELETE', p.dataset.path); return 'Permissions cleared'; });
    });
    onSubmit($('#add-user', main), 'Save user', async f => {
      const body = { tags: f.tags.value };
      if (f.password.value) body.password = f.password.value;
      await api('PUT', `users/${enc(f.name.value)}`, body);
      f.password.value = '';
      return `User ${f.name.value} saved`;
    });
    onSubmit($('#set-permission', main), 'Set permissions', async f => {
      await api('PUT', `permissions/${enc(f.vhost.value)}/${enc(f.user.value)}`, { configure: f.configure.value, write: f.write.value, read: f.read.value });
      return `Permissions of ${f.user.value} in ${f.vhost.value} set`;
    });
  }
  return { html, bind, refresh };
}

// ---- charts: message rates and queue depths over the last minutes ----
//
// The management API keeps 10 minutes of samples (one every 5 s) on the
// node that serves the console; a page asks for them with RabbitMQ's
// msg_rates_age/_incr and lengths_age/_incr and draws them here as inline
// SVG.

const CHART_INCR = 5; // seconds, the API's sampling interval
const RATE_SERIES = [
  ['publish', 'publish', '#2b5d8c'], ['deliver_get', 'deliver', '#067647'], ['ack', 'ack', '#7a5af8'],
  ['redeliver', 'redeliver', '#b54708'], ['dead_lettered', 'dead-letter', '#b42318'],
];
const DEPTH_SERIES = [['messages_ready', 'ready', '#2b5d8c'], ['messages_unacknowledged', 'unacked', '#b54708']];

function chartAge() {
  const v = Number(sessionStorage.getItem('raftmq.chartAge'));
  return [60, 300, 600].includes(v) ? v : 600;
}

function historyQuery() {
  const age = chartAge();
  return `msg_rates_age=${age}&msg_rates_incr=${CHART_INCR}&lengths_age=${age}&lengths_incr=${CHART_INCR}`;
}

function bindChartWindow() {
  document.addEventListener('change', ev => {
    if (!ev.target.matches('select.chart-age')) return;
    sessionStorage.setItem('raftmq.chartAge', ev.target.value);
    refresh();
  });
}

// chartPanels is the markup of a page's two charts, ids prefixed.
function chartPanels(prefix) {
  const age = chartAge();
  const opts = [[60, 'last minute'], [300, 'last 5 minutes'], [600, 'last 10 minutes']]
    .map(([v, l]) => `<option value="${v}"${v === age ? ' selected' : ''}>${l}</option>`).join('');
  return `<div class="grid charts">
    <div class="panel"><h2>Message rates <select class="chart-age" aria-label="Chart window">${opts}</select></h2><div class="chart" id="${prefix}-rates"></div></div>
    <div class="panel"><h2>Queued messages</h2><div class="chart" id="${prefix}-depths"></div></div></div>`;
}

// ratePoints turns a counter's samples (newest first) into per-second
// rates between neighbours, oldest first; a counter that went back (a
// node that restarted) gives no negative rate.
function ratePoints(details) {
  const s = (details && details.samples) || [];
  const out = [];
  for (let i = s.length - 2; i >= 0; i--) {
    const dt = (s[i].timestamp - s[i + 1].timestamp) / 1000;
    if (dt > 0) out.push({ t: s[i].timestamp, v: Math.max(0, (s[i].sample - s[i + 1].sample) / dt) });
  }
  return out;
}

function levelPoints(details) {
  return ((details && details.samples) || []).map(x => ({ t: x.timestamp, v: x.sample })).reverse();
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function axisNum(v) {
  if (v >= 1e6) return (v / 1e6).toLocaleString() + 'M';
  if (v >= 1e3) return (v / 1e3).toLocaleString() + 'k';
  return String(parseFloat(v.toFixed(2)));
}

// svgChart draws series ([{key, label, color, points}]) over the last
// age seconds up to end (ms), as lines with a labelled grid.
function svgChart(series, age, end, unit) {
  const W = 560, H = 170, L = 44, R = 8, T = 8, B = 20;
  const start = end - age * 1000;
  const top = niceMax(Math.max(0, ...series.flatMap(x => x.points.map(p => p.v))));
  const x = t => L + (W - L - R) * (t - start) / (end - start);
  const y = v => T + (H - T - B) * (1 - v / top);
  const grid = [0, 0.25, 0.5, 0.75, 1].map(f => `<line class="gridline" x1="${L}" x2="${W - R}" y1="${y(top * f)}" y2="${y(top * f)}"/>
    <text class="axis" x="${L - 4}" y="${y(top * f) + 4}" text-anchor="end">${axisNum(top * f)}</text>`).join('');
  const ticks = [0, 0.5, 1].map(f => `<text class="axis" x="${L + (W - L - R) * f}" y="${H - 4}" text-anchor="${f === 0 ? 'start' : f === 1 ? 'end' : 'middle'}">${
    f === 1 ? 'now' : '−' + dur(age * 1000 * (1 - f))}</text>`).join('');
  const lines = series.map(sr => {
    const pts = sr.points.filter(p => p.t >= start);
    const max = Math.max(0, ...pts.map(p => p.v));
    return `<polyline data-series="${esc(sr.key)}" data-n="${pts.length}" data-max="${max}" fill="none" stroke="${sr.color}" stroke-width="1.6"
      points="${pts.map(p => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ')}"><title>${esc(sr.label)}</title></polyline>`;
  }).join('');
  const legend = series.map(sr => {
    const last = sr.points.length ? sr.points[sr.points.length - 1].v : null;
    return `<span class="legend-item"><svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect width="10" height="10" rx="2" fill="${sr.color}"/></svg>${esc(sr.label)} <span class="muted">${last === null ? '—' : axisNum(last) + unit}</span></span>`;
  }).join('');
  return `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(series.map(s => s.label).join(', '))}">${grid}${ticks}${lines}</svg>
    <div class="legend">${legend}</div>`;
}

// drawCharts fills the charts of a page from message_stats and the
// object that has the depths' *_details (a queue, queue_totals).
function drawCharts(prefix, ms, depths) {
  const rates = $(`#${prefix}-rates`), levels = $(`#${prefix}-depths`);
  if (!rates || !levels) return;
  ms = ms || {};
  depths = depths || {};
  const age = chartAge();
  const stamps = [...RATE_SERIES.map(([k]) => ms[k + '_details']), ...DEPTH_SERIES.map(([k]) => depths[k + '_details'])]
    .flatMap(d => (d && d.samples && d.samples.length ? [d.samples[0].timestamp] : []));
  const end = stamps.length ? Math.max(...stamps) : Date.now();
  const rs = RATE_SERIES.filter(([k]) => ms[k + '_details']).map(([k, label, color]) => ({ key: k, label, color, points: ratePoints(ms[k + '_details']) }));
  const ds = DEPTH_SERIES.filter(([k]) => depths[k + '_details']).map(([k, label, color]) => ({ key: k, label, color, points: levelPoints(depths[k + '_details']) }));
  rates.innerHTML = rs.length ? svgChart(rs, age, end, '/s') : '<p class="empty">No message rates.</p>';
  levels.innerHTML = ds.length ? svgChart(ds, age, end, '') : '<p class="empty">No queue depths.</p>';
}

// ---- node resources ----

// nodeResourceCells are a node's memory, disk, file descriptor and uptime
// cells, from the node's own answer (empty when it did not answer).
function nodeResourceCells(n) {
  // A meter, not a styled bar: the console's CSP allows no inline style.
  const bar = (used, limit) => limit > 0
    ? `<meter min="0" max="${limit}" value="${Math.min(used, limit)}" title="${Math.round(100 * used / limit)}%"></meter>` : '';
  const mem = typeof n.mem_used === 'number'
    ? `${bytes(n.mem_used)}${n.mem_limit ? ` <span class="muted">of ${bytes(n.mem_limit)}</span>` : ''} ${bar(n.mem_used, n.mem_limit)}${n.mem_alarm ? ' <span class="tag bad">alarm</span>' : ''}` : '';
  const disk = typeof n.disk_free === 'number' && n.disk_free > 0
    ? `${bytes(n.disk_free)}${n.disk_free_limit ? ` <span class="muted">limit ${bytes(n.disk_free_limit)}</span>` : ''}${n.disk_free_alarm ? ' <span class="tag bad">alarm</span>' : ''}` : '';
  const fds = typeof n.fd_used === 'number' ? `${num(n.fd_used)} <span class="muted">of ${num(n.fd_total)}</span> ${bar(n.fd_used, n.fd_total)}` : '';
  return `<td class="mem nowrap">${mem}</td><td class="disk nowrap">${disk}</td><td class="fds nowrap">${fds}</td>
    <td class="num uptime">${typeof n.uptime === 'number' ? dur(n.uptime) : ''}</td>`;
}

// ---- channels ----

function channelsPage() {
  const list = pagedList('channels', () => 'channels', [
    { title: 'Channel', sort: 'name', cell: it => `<span class="name">${esc(it.name)}</span>` },
    { title: 'Node', sort: 'node', cell: it => esc(it.node) },
    { title: 'User', sort: 'user', cell: it => esc(it.user) },
    { title: 'Virtual host', sort: 'vhost', cell: it => vhostLabel(it.vhost) },
    { title: 'State', cell: it => esc(it.state) },
    { title: 'Consumers', sort: 'consumer_count', num: true, cell: it => num(it.consumer_count) },
    { title: 'Prefetch', sort: 'prefetch_count', num: true, cell: it => num(it.prefetch_count) },
    { title: 'Unacked', sort: 'messages_unacknowledged', num: true, cell: it => num(it.messages_unacknowledged) },
  ], { numericDesc: true });
  const html = `<h1>Channels</h1><div class="panel">${list.html}
    <p class="muted">The channels that have consumers, on every node (the replicated log knows a channel by its consumers; a connection's channel count includes the others).</p></div>`;
  return { html, bind: list.bind, refresh: list.load };
}

// ---- admin: virtual hosts and limits ----

function adminPage() {
  if (!isAdmin()) {
    return { html: '<div class="panel">Virtual hosts and limits are for users tagged administrator.</div>', refresh: async () => {} };
  }
  const html = `<h1>Virtual hosts</h1>
    <div class="panel"><div class="table-wrap" id="vhosts"></div>
      <details><summary>Add a virtual host</summary>
      <form class="row" id="add-vhost">
        <label>Name <input name="name" required autocomplete="off"></label>
        <label>Description <input name="description"></label>
        <button type="submit">Add virtual host</button>
      </form></details></div>
    <h1>Virtual host limits</h1>
    <div class="panel"><div class="table-wrap" id="vhost-limits"></div>
      <form class="row" id="set-vhost-limit">
        <label>Virtual host <select name="vhost">${vhostOptions(S.vhost || '/')}</select></label>
        <label>Limit <select name="limit"><option>max-connections</option><option>max-queues</option></select></label>
        <label>Value <input name="value" type="number" step="1" required></label>
        <button type="submit">Set limit</button>
      </form>
      <p class="muted">A negative value is no limit, 0 refuses every new connection or queue. The limits hold across the cluster:
      max-queues is checked in the replicated log, max-connections by the node a client connects to, counting the connections every node reports.
      --max-queues-per-vhost and the connection and channel limits are each node's own (docs/operations.md).</p></div>`;
  async function refresh() {
    const [vhosts, limits] = await Promise.all([api('GET', 'vhosts'), api('GET', 'vhost-limits')]);
    $('#vhosts').innerHTML = `<table id="vhosts-table"><thead><tr><th>Name</th><th>Description</th><th class="num">Messages</th><th class="num">Ready</th><th class="num">Unacked</th><th>Cluster state</th><th></th></tr></thead><tbody>${
      vhosts.map(v => {
        const states = Object.values(v.cluster_state || {});
        const running = states.filter(x => x === 'running').length;
        return `<tr data-vhost="${esc(v.name)}"><td class="name">${vhostLabel(v.name)}</td><td>${esc(v.description)}</td>
        <td class="num">${num(v.messages)}</td><td class="num">${num(v.messages_ready)}</td><td class="num">${num(v.messages_unacknowledged)}</td>
        <td>${running === states.length ? `<span class="ok">running on ${states.length}</span>` : `<span class="tag warn">running on ${running} of ${states.length}</span>`}</td>
        <td>${v.name === '/' ? '' : `<button type="button" class="danger del-vhost" data-name="${esc(v.name)}">Delete</button>`}</td></tr>`;
      }).join('')}</tbody></table>`;
    const rows = limits.flatMap(l => Object.entries(l.value).map(([name, value]) => ({ vhost: l.vhost, name, value })));
    $('#vhost-limits').innerHTML = rows.length ? `<table id="vhost-limits-table"><thead><tr><th>Virtual host</th><th>Limit</th><th class="num">Value</th><th></th></tr></thead><tbody>${
      rows.map(r => `<tr data-limit="${esc(r.vhost + ' ' + r.name)}"><td>${vhostLabel(r.vhost)}</td><td>${esc(r.name)}</td><td class="num">${num(r.value)}</td>
        <td><button type="button" class="danger clear-limit" data-vhost="${esc(r.vhost)}" data-name="${esc(r.name)}">Clear</button></td></tr>`).join('')}</tbody></table>`
      : '<p class="empty" id="no-vhost-limits">No virtual host has limits.</p>';
  }
  function bind(main) {
    main.addEventListener('click', ev => {
      const b = ev.target.closest('button.del-vhost.armed');
      if (b) act('Delete virtual host', async () => { await api('DELETE', `vhosts/${enc(b.dataset.name)}`); return `Virtual host ${b.dataset.name} deleted`; });
      const c = ev.target.closest('button.clear-limit.armed');
      if (c) act('Clear limit', async () => {
        await api('DELETE', `vhost-limits/${enc(c.dataset.vhost)}/${enc(c.dataset.name)}`);
        return `Limit ${c.dataset.name} of ${c.dataset.vhost} cleared`;
      });
    });
    onSubmit($('#set-vhost-limit', main), 'Set limit', async f => {
      const value = Number(f.value.value);
      if (!Number.isInteger(value)) throw new Error('The value must be a whole number');
      await api('PUT', `vhost-limits/${enc(f.vhost.value)}/${enc(f.limit.value)}`, { value });
      f.value.value = '';
      return `Limit ${f.limit.value} of ${f.vhost.value} set to ${value}`;
    });
    onSubmit($('#add-vhost', main), 'Add virtual host', async f => {
      await api('PUT', `vhosts/${enc(f.name.value)}`, { description: f.description.value });
      const name = f.name.value;
      f.reset();
      return `Virtual host ${name} added`;
    });
  }
  return { html, bind, refresh };
}

// ---- start ----

document.addEventListener('DOMContentLoaded', () => {
  armDangerButtons();
  $('#logout').addEventListener('click', () => logout('Logged out.'));
  $('#banner-close').addEventListener('click', clearBanner);
  $('#refresh').addEventListener('change', schedule);
  bindChartWindow();
  $('#vhost').addEventListener('change', ev => {
    S.vhost = ev.target.value;
    sessionStorage.setItem('raftmq.vhost', S.vhost);
    for (const st of Object.values(S.lists)) st.page = 1;
    route().catch(showError);
  });
  window.addEventListener('hashchange', () => { clearBanner(); route().catch(showError); });
  if (S.auth) {
    start().catch(e => logout(loginFailure(e)));
  } else {
    showLogin();
  }
});
