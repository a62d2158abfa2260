// iterion studio: makes the server-rendered pages live and filterable.
//
// Every value shown here came from a run, and a run may be hostile: this
// script only ever sets textContent and attribute values, never innerHTML,
// outerHTML, insertAdjacentHTML or document.write, and never builds a CSS
// selector from run data. The markup it builds is the one the server
// renders (crates/iterion-studio/src/pages.rs).
'use strict';

(function () {
  const body = document.body;

  function el(tag, cls, content) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (content !== undefined && content !== null) e.textContent = String(content);
    return e;
  }

  // A word safe in a class name (statuses and levels are the server's own
  // words; this keeps a surprise from breaking the class list).
  function word(s) {
    return String(s).replace(/[^a-z0-9_-]/gi, '_');
  }

  function setLive(state) {
    const s = document.getElementById('live-state');
    if (s) {
      s.textContent = state;
      s.dataset.state = state;
    }
  }

  function badge(status) {
    return el('span', 'badge status-' + word(status), status);
  }

  // ---- runs page ------------------------------------------------------
  function runRow(row) {
    const r = row.run;
    const tr = el('tr');
    tr.dataset.status = r.status;
    const cell = function (child, cls) {
      const td = el('td', cls);
      if (typeof child === 'string') td.textContent = child;
      else td.appendChild(child);
      tr.appendChild(td);
    };
    const a = el('a', 'run-link', r.id);
    a.href = '/runs/' + encodeURIComponent(r.id);
    cell(a);
    cell(r.workflow);
    cell(badge(r.status));
    cell(r.failure_code || '-', 'code');
    cell(el('time', null, row.started));
    cell(row.duration);
    cell(row.mode || '-');
    return tr;
  }

  function runsPage() {
    const tbody = document.getElementById('runs-body');
    const empty = document.getElementById('runs-empty');
    const es = new EventSource('/api/live/runs' + window.location.search);
    es.addEventListener('open', function () { setLive('live'); });
    es.addEventListener('error', function () { setLive('reconnecting'); });
    es.addEventListener('runs', function (m) {
      const rows = JSON.parse(m.data);
      tbody.replaceChildren.apply(tbody, rows.map(runRow));
      empty.hidden = rows.length > 0;
      setLive('live');
    });
  }

  // ---- run page -------------------------------------------------------
  function entryItem(e) {
    const quiet = e.kind === 'run_checkpoint' ? ' quiet' : '';
    const li = el('li', 'entry level-' + word(e.level) + ' group-' + word(e.group) + quiet);
    li.dataset.group = e.group;
    li.dataset.kind = e.kind;
    li.dataset.node = e.node || '';
    li.dataset.seq = String(e.seq);
    li.append(
      el('span', 'seq', e.seq),
      el('time', null, e.time),
      el('span', 'kind', e.kind),
      el('span', 'node', e.node || ''),
      el('span', 'summary', e.summary)
    );
    if (e.fields.length) {
      const d = el('details');
      d.appendChild(el('summary', null, 'data'));
      const dl = el('dl', 'fields');
      for (const f of e.fields) dl.append(el('dt', null, f.name), el('dd', null, f.value));
      d.appendChild(dl);
      li.appendChild(d);
    }
    return li;
  }

  function graphNode(name) {
    for (const g of document.querySelectorAll('g.node[data-node]')) {
      if (g.getAttribute('data-node') === name) return g;
    }
    return null;
  }

  function moveNode(name, state) {
    const g = graphNode(name);
    if (g) setState(g, state);
  }

  function setState(g, state) {
    for (const c of Array.from(g.classList)) if (c.indexOf('state-') === 0) g.classList.remove(c);
    g.classList.add('state-' + word(state));
    const t = g.querySelector('.node-state');
    if (t) t.textContent = state;
  }

  function facts(cls, rows) {
    const dl = el('dl', cls);
    for (const row of rows) dl.append(el('dt', null, row[0]), el('dd', null, row[1]));
    return dl;
  }

  // The decision card, from the server's CardView.
  function renderDecision(view) {
    const box = document.getElementById('decision-body');
    const verdict = el('p', 'verdict verdict-' + word(view.verdict), view.title);
    verdict.id = 'verdict';
    const parts = [verdict, facts('facts', view.facts)];
    if (view.limits.length) parts.push(el('h3', null, 'Limits'), facts('facts limits', view.limits));
    if (view.notes.length) {
      const ul = el('ul', 'notes');
      for (const n of view.notes) ul.appendChild(el('li', null, n));
      parts.push(ul);
    }
    box.replaceChildren.apply(box, parts);
  }

  function fileRow(run, f) {
    const tr = el('tr');
    tr.append(el('td', 'path', f.path), el('td', null, f.size), el('td', 'sha', f.sha256), el('td', null, f.status));
    const td = el('td');
    const a = el('a', 'download', 'download');
    a.href = '/api/runs/' + encodeURIComponent(run) + '/files/' +
      f.path.split('/').map(encodeURIComponent).join('/');
    a.setAttribute('download', '');
    td.appendChild(a);
    tr.appendChild(td);
    return tr;
  }

  function runPage() {
    const run = body.dataset.run;
    const timeline = document.getElementById('timeline');
    const logs = document.getElementById('logs');
    const groups = new Set();
    let quiet = false;
    let node = null;

    function visible(li) {
      if (!groups.has(li.dataset.group)) return false;
      if (li.classList.contains('quiet') && !quiet) return false;
      if (node !== null && li.dataset.node !== node) return false;
      return true;
    }

    function apply() {
      for (const li of timeline.children) li.hidden = !visible(li);
      if (logs) for (const l of logs.children) l.hidden = node !== null && l.dataset.node !== node;
      for (const g of document.querySelectorAll('g.node[data-node]')) {
        g.classList.toggle('selected', g.getAttribute('data-node') === node);
      }
      const nf = document.getElementById('node-filter');
      nf.hidden = node === null;
      document.getElementById('node-filter-name').textContent = node === null ? '' : node;
    }

    for (const box of document.querySelectorAll('#timeline-filters input[type=checkbox]')) {
      if (box.dataset.group && box.checked) groups.add(box.dataset.group);
      if (box.dataset.quiet) quiet = box.checked;
      box.addEventListener('change', function () {
        if (box.dataset.group) {
          if (box.checked) groups.add(box.dataset.group);
          else groups.delete(box.dataset.group);
        }
        if (box.dataset.quiet) quiet = box.checked;
        apply();
      });
    }

    function pick(g) {
      const name = g.getAttribute('data-node');
      node = node === name ? null : name;
      apply();
    }
    for (const g of document.querySelectorAll('g.node[data-node]')) {
      g.addEventListener('click', function () { pick(g); });
      g.addEventListener('keydown', function (ev) {
        if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); pick(g); }
      });
    }
    document.getElementById('node-filter-clear').addEventListener('click', function () {
      node = null;
      apply();
    });
    apply();

    if (body.dataset.live !== '1') return;
    const es = new EventSource('/api/runs/' + encodeURIComponent(run) + '/live?after=' +
      encodeURIComponent(body.dataset.after || '0'));
    es.addEventListener('open', function () { setLive('live'); });
    es.addEventListener('entry', function (m) {
      const msg = JSON.parse(m.data);
      const li = entryItem(msg.entry);
      li.hidden = !visible(li);
      timeline.appendChild(li);
      if (msg.state) moveNode(msg.state.node, msg.state.state);
      if (msg.decision) renderDecision(msg.decision);
      body.dataset.after = String(msg.entry.seq);
      setLive('live');
    });
    es.addEventListener('end', function (m) {
      es.close();
      const msg = JSON.parse(m.data);
      const status = document.getElementById('run-status');
      status.replaceChildren(badge(msg.run.status));
      document.getElementById('run-duration').textContent = msg.duration;
      const failure = document.getElementById('run-failure');
      if (msg.run.failure_code) {
        document.getElementById('failure-code').textContent = msg.run.failure_code;
        document.getElementById('failure-disposition').textContent = msg.run.disposition || '';
        document.getElementById('failure-message').textContent = msg.failure_message || '';
        failure.hidden = false;
      }
      const hint = document.getElementById('run-hint');
      hint.textContent = msg.hint || '';
      hint.hidden = !msg.hint;
      if (msg.files) {
        document.getElementById('drain').textContent = msg.drain || '';
        const tbody = document.getElementById('files-body');
        tbody.replaceChildren.apply(tbody, msg.files.files.map(function (f) { return fileRow(run, f); }));
        const empty = document.getElementById('files-empty');
        if (empty) empty.hidden = msg.files.files.length > 0;
      }
      for (const g of document.querySelectorAll('g.node[data-terminal]')) {
        const t = g.getAttribute('data-terminal');
        if (t === 'done' && msg.terminals.done) setState(g, 'finished');
        if (t === 'fail' && msg.terminals.fail) setState(g, 'failed');
      }
      body.dataset.live = '0';
      setLive('ended');
    });
    es.addEventListener('failure', function () {
      es.close();
      setLive('store error: reload to retry');
    });
    es.addEventListener('error', function () {
      if (es.readyState !== EventSource.CLOSED) setLive('reconnecting');
    });
  }

  if (body.dataset.page === 'runs') runsPage();
  if (body.dataset.page === 'run') runPage();
})();
