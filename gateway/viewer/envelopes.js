// The envelopes of the selected context (or of the main context): those
// received, and older ones paged in through gateway/history (docs/protocol.md section 6).
// Rows are appended once a frame; nothing from an envelope is parsed as
// HTML.

import { el, setText, str, fmtClock, fmtBytes, requestID } from './util.js';
import { contextRef, keptByHistory } from './model.js';

const WINDOW = 200; // rows drawn when a context is selected
const MAX_ROWS = 1000; // rows kept while following the newest
const MAX_HELD = 50000; // older records a view keeps ready to draw
const PAGE = 50; // envelopes asked of gateway/history at a time
const SHOW_MORE = 100; // held records drawn per "load older"
const EMPTY_PAGES = 5; // history pages read in a row when none fits the view

export class EnvelopeView {
  // els: list, title, info, foldedNote, foldedText, unfold, older,
  // olderNote, nested, nestedLabel, empty
  constructor(model, els, send) {
    this.model = model;
    this.els = els;
    this.send = send;
    this.ctx = null;
    this.nested = els.nested.checked;
    this.shown = []; // records drawn, oldest first
    this.above = []; // records held but not drawn, older than shown
    this.pending = []; // records to append at the next frame
    this.rows = new Map(); // record -> li
    this.ids = new Set(); // ids drawn
    this.gen = 0; // changes with each selection
    this.req = null; // the gateway/history request under way
    this.cursor = null; // the oldest id history answered, for before=
    this.more = null; // whether history has older ones (null: not asked)
    this.unfolded = false;
    this.historyOn = false; // the welcome described a history
    this.historyOff = false; // the gateway does not answer gateway/history
    this.follow = true;
    els.list.onscroll = () => {
      const l = els.list;
      this.follow = l.scrollTop + l.clientHeight >= l.scrollHeight - 24;
    };
    els.older.onclick = () => this.loadOlder();
    els.unfold.onclick = () => this.showUnfolded();
    els.nested.onchange = () => {
      this.nested = els.nested.checked;
      this.select(this.ctx);
    };
    els.list.replaceChildren();
  }

  matches(rec) {
    if (this.ctx === null) return rec.ctx === null;
    if (!rec.ctx) return false;
    return rec.ctx === this.ctx || (this.nested && rec.ctx.isWithin(this.ctx));
  }

  select(ctx) {
    this.ctx = ctx;
    this.gen++;
    this.unfolded = false;
    this.req = null;
    this.cursor = null;
    this.more = null;
    this.pending = [];
    this.rows.clear();
    this.ids.clear();
    let recs;
    if (ctx === null) {
      recs = this.model.main.toArray();
    } else if (!this.nested || ctx.children.length === 0) {
      recs = ctx.envs.toArray();
    } else {
      recs = [];
      const walk = (c) => {
        for (let i = 0; i < c.envs.length; i++) recs.push(c.envs.at(i));
        for (const k of c.children) walk(k);
      };
      walk(ctx);
      recs.sort((a, b) => a.seq - b.seq);
    }
    const cut = Math.max(0, recs.length - WINDOW);
    this.above = recs.slice(0, cut);
    this.shown = recs.slice(cut);
    const frag = document.createDocumentFragment();
    for (const r of this.shown) frag.append(this.row(r));
    this.els.list.replaceChildren(frag);
    setText(this.els.olderNote, '');
    this.follow = true;
    this.scrollToEnd();
    this.updateHeader();
    this.updateOlder();
  }

  onRecord(rec) {
    if (this.matches(rec)) this.pending.push(rec);
  }

  flush() {
    if (this.pending.length === 0) return;
    const frag = document.createDocumentFragment();
    for (const r of this.pending) {
      const id = r.env.id;
      if (typeof id === 'string' && this.ids.has(id)) continue;
      frag.append(this.row(r));
      this.shown.push(r);
    }
    this.pending = [];
    this.els.list.append(frag);
    if (this.ctx === null) this.updateHeader(); // the main context's count
    if (this.follow) {
      this.trim(MAX_ROWS);
      this.scrollToEnd();
    } else {
      this.trim(3 * MAX_ROWS); // the person reads older ones: trim later
    }
    this.updateOlder();
  }

  // trim keeps the list to limit rows, taking out the oldest; they stay
  // ready for "load older". What is in view stays where it is.
  trim(limit) {
    const excess = this.shown.length - limit;
    if (excess <= 0) return;
    const l = this.els.list;
    const before = l.scrollHeight;
    const gone = this.shown.splice(0, excess);
    for (const r of gone) {
      const li = this.rows.get(r);
      if (li) li.remove();
      this.rows.delete(r);
      if (typeof r.env.id === 'string') this.ids.delete(r.env.id);
      this.above.push(r);
    }
    if (this.above.length > MAX_HELD) this.above.splice(0, this.above.length - MAX_HELD);
    if (!this.follow) l.scrollTop -= before - l.scrollHeight;
  }

  scrollToEnd() {
    const l = this.els.list;
    l.scrollTop = l.scrollHeight;
  }

  // prepend draws records older than every one drawn (oldest first).
  prepend(recs) {
    const l = this.els.list;
    const before = l.scrollHeight;
    const frag = document.createDocumentFragment();
    const added = [];
    for (const r of recs) {
      const id = r.env.id;
      if (typeof id === 'string' && this.ids.has(id)) continue;
      frag.append(this.row(r));
      added.push(r);
    }
    if (added.length === 0) return 0;
    l.prepend(frag);
    this.shown.unshift(...added);
    l.scrollTop += l.scrollHeight - before; // what was in view stays there
    return added.length;
  }

  loadOlder() {
    if (this.above.length > 0) {
      const take = this.above.splice(Math.max(0, this.above.length - SHOW_MORE));
      this.prepend(take);
      setText(this.els.olderNote, '');
      this.updateOlder();
      return;
    }
    this.requestHistory(false, 0);
  }

  // showUnfolded reads a folded context's envelopes again with fold:false.
  showUnfolded() {
    this.unfolded = true;
    this.cursor = null;
    this.more = null;
    this.requestHistory(true, 0);
  }

  requestHistory(replace, pages) {
    if (this.historyOff || this.req) return;
    if (!replace && this.more === false) return;
    const payload = { limit: PAGE };
    if (this.ctx !== null) payload.context = this.ctx.id;
    if (this.unfolded) payload.fold = false;
    const before = replace ? null : this.cursor ?? this.oldestKeptId();
    if (before) payload.before = before;
    const id = requestID();
    if (!this.send({ kind: 'gateway/history', id, payload })) {
      setText(this.els.olderNote, 'not connected: try again once the viewer is live');
      return;
    }
    this.req = { id, gen: this.gen, replace, pages };
    setText(this.els.olderNote, 'loading…');
    this.updateOlder();
  }

  // connectionLost forgets a history request the old connection will not
  // answer.
  connectionLost() {
    if (this.req === null) return;
    this.req = null;
    setText(this.els.olderNote, 'the connection dropped before history answered: try again');
    this.updateOlder();
  }

  // oldestKeptId is where history is asked to go back from: the oldest
  // envelope of the pod that the viewer received and history keeps. Every
  // envelope received since is in memory, so whatever this view lacks is
  // older than that one.
  oldestKeptId() {
    const all = this.model.records;
    for (let i = 0; i < all.length; i++) {
      const r = all.at(i);
      if (keptByHistory(r.env)) return r.env.id;
    }
    return null;
  }

  // answer takes a system/history answer or a system/error with the
  // request's correlation_id; it tells whether the envelope was one.
  answer(env) {
    const req = this.req;
    if (!req || env.correlation_id !== req.id) return false;
    this.req = null;
    if (req.gen !== this.gen) return true; // the selection changed meanwhile
    if (env.kind === 'system/error') {
      this.historyError(env.payload);
      this.updateOlder();
      return true;
    }
    if (env.kind !== 'system/history') return true;
    const p = env.payload && typeof env.payload === 'object' ? env.payload : {};
    const envs = Array.isArray(p.envelopes) ? p.envelopes.filter((e) => e && typeof e === 'object') : [];
    this.more = p.more === true;
    if (envs.length > 0 && typeof envs[0].id === 'string') this.cursor = envs[0].id;
    const recs = [];
    for (const e of envs) {
      if (!this.admitsHistory(e)) continue;
      const ref = contextRef(e);
      recs.push({
        seq: 0, env: e, bytes: 0, consumedBy: null, history: true,
        ctx: ref ? this.model.contexts.get(ref.id) ?? null : null,
      });
    }
    if (req.replace) {
      this.shown = [];
      this.above = [];
      this.rows.clear();
      this.ids.clear();
      this.els.list.replaceChildren();
    }
    const added = this.prepend(recs);
    if (req.replace) {
      this.follow = true;
      this.scrollToEnd();
    }
    if (added === 0 && this.more && req.pages + 1 < EMPTY_PAGES) {
      this.requestHistory(false, req.pages + 1);
      return true;
    }
    setText(this.els.olderNote, added > 0
      ? `${added} older envelope${added === 1 ? '' : 's'} from the pod's history${this.more ? '' : ' (its start)'}`
      : this.more ? 'nothing older for this view in the last pages of history' : 'nothing older in the pod\'s history');
    this.updateHeader();
    this.updateOlder();
    return true;
  }

  admitsHistory(e) {
    const ref = contextRef(e);
    if (this.ctx === null) return ref === null;
    if (!ref) return false;
    // The gateway keeps the context and its descendants.
    return this.nested || ref.id === this.ctx.id;
  }

  historyError(p) {
    const code = p && typeof p.error === 'string' ? p.error : 'error';
    const message = p && typeof p.message === 'string' ? p.message : '';
    if (code === 'unknown_request') {
      this.historyOff = true;
      setText(this.els.olderNote, 'This gateway does not answer gateway/history: nothing older can be shown.');
    } else if (code === 'invalid_envelope') {
      this.more = false;
      setText(this.els.olderNote, `Nothing older: the gateway's history no longer holds these envelopes (${message}).`);
    } else {
      setText(this.els.olderNote, `The gateway answered ${code}: ${message}`);
    }
  }

  updateOlder() {
    const b = this.els.older;
    const held = this.above.length;
    setText(b, held > 0 ? `Show older (${held} held)` : 'Load older');
    b.disabled = held === 0 && (this.historyOff || this.more === false || this.req !== null);
    this.els.empty.hidden = this.shown.length > 0;
  }

  // consumed marks a drawn transient envelope that a later one consumed.
  consumed(rec) {
    const li = this.rows.get(rec);
    if (!li) return;
    const badges = li.querySelector('.badges');
    if (badges) badges.append(badge(`consumed by ${rec.consumedBy}`, 'collapsed'));
  }

  updateHeader() {
    const c = this.ctx;
    const e = this.els;
    setText(e.title, c === null ? 'main' : c.id);
    e.nestedLabel.hidden = c === null;
    const info = [];
    if (c === null) {
      info.push(['context', 'none (main)'], ['held', `${this.model.main.length} envelopes`]);
    } else {
      if (c.type) info.push(['type', c.type]);
      info.push(['state', !c.known ? (c.path ? 'path prefix' : 'not seen here')
        : c.state === 'concluded' ? `concluded: ${c.reason ?? '?'}` : 'active']);
      if (c.parent) info.push(['parent', c.parent.id]);
      info.push(['depth', String(c.depth ?? c.level())]);
      info.push(['messages', String(c.messages)], ['bytes', fmtBytes(c.bytes)]);
      if (c.tokens !== null) info.push(['tokens', `≈ ${c.tokens}`]);
      if (c.tokensFolded !== null) info.push(['tokens folded', `≈ ${c.tokensFolded}`]);
      if (c.tokensSaved !== null) info.push(['tokens saved', `≈ ${c.tokensSaved}`]);
      if (c.created !== null) info.push(['created', new Date(c.created).toLocaleString()]);
      if (c.concluded !== null && c.state === 'concluded') info.push(['concluded', new Date(c.concluded).toLocaleString()]);
      if (c.creator) info.push(['creator', c.creator]);
      if (c.participants && c.participants.length) info.push(['senders', c.participants.join(', ')]);
      if (c.children.length) info.push(['nested', `${c.sub.contexts} contexts · ${c.sub.messages} msg · ${fmtBytes(c.sub.bytes)}`]);
    }
    const frag = document.createDocumentFragment();
    for (const [k, v] of info) {
      const d = el('div');
      d.append(el('dt', null, k), el('dd', null, v));
      frag.append(d);
    }
    e.info.replaceChildren(frag);

    // A folded context: history replayed only its conclusion (docs/protocol.md section 8).
    let note = '';
    let canUnfold = false;
    if (c !== null && c.known && !this.unfolded && c.held < c.messages) {
      if (!this.historyOn) {
        note = `This gateway sent no history: the ${c.messages - c.held} envelopes sent in this context before you joined are not shown.`;
      } else if (c.state === 'concluded' && c.concludedAtJoin) {
        note = `Folded: this context had concluded when you joined, so history replays only its conclusion (${c.held} of ${c.messages} envelopes).`;
        canUnfold = !this.historyOff;
      }
    }
    e.foldedNote.hidden = note === '';
    setText(e.foldedText, note);
    e.unfold.hidden = !canUnfold;
  }

  row(rec) {
    const env = rec.env;
    const li = el('li', 'env');
    const kind = str(env.kind);
    if (kind.startsWith('system/')) li.classList.add('system');
    const head = el('div', 'env-head');
    const ts = el('time', 'ts', fmtClock(env.ts));
    ts.title = str(env.ts);
    head.append(ts, el('span', 'from', str(env.from)));
    if (Array.isArray(env.to) && env.to.length > 0) head.append(el('span', 'to', `→ ${env.to.map(str).join(', ')}`));
    head.append(el('span', 'kind', kind));
    const ref = contextRef(env);
    if (ref && (this.ctx === null || ref.id !== this.ctx.id)) head.append(el('span', 'in', `in ${ref.id}`));
    const badges = el('span', 'badges');
    head.append(badges);
    const eid = el('span', 'eid', str(env.id));
    eid.title = 'envelope id';
    head.append(eid);
    li.append(head);

    const p = env.payload;
    const collapsed = p && typeof p === 'object' && p.collapsed === true && typeof p.summary === 'string';
    let text;
    if (kind === 'system/context' && p && typeof p === 'object') {
      text = contextEventText(p);
      if (p.event === 'concluded') badges.append(badge('concluded', 'concluded'));
    } else if (kind === 'system/proposal' && p && typeof p === 'object') {
      text = proposalEventText(p);
    } else if (collapsed) {
      li.classList.add('collapsed');
      badges.append(badge('collapsed', 'collapsed'));
      text = p.summary;
      if (p.consumed_by !== undefined) badges.append(badge(`consumed by ${str(p.consumed_by)}`, 'collapsed'));
    } else {
      text = preview(p);
    }
    if (this.model.conclusionKinds.has(kind)) badges.append(badge('conclusion', 'conclusion'));
    const lc = env.lifecycle;
    let summary = null;
    if (lc && typeof lc === 'object') {
      if (lc.mode === 'transient') {
        badges.append(badge('transient', 'transient'));
        if (typeof lc.summary === 'string') summary = lc.summary;
      } else if (lc.mode === 'ephemeral') {
        const b = badge('ephemeral', 'ephemeral');
        b.title = 'delivered live only: history does not keep it';
        badges.append(b);
      }
      if (Array.isArray(lc.consumes)) badges.append(badge(`consumes ${lc.consumes.length}`, ''));
    }
    if (rec.consumedBy) badges.append(badge(`consumed by ${rec.consumedBy}`, 'collapsed'));
    // A call the gateway released for an approved proposal names its
    // approver (docs/protocol.md section 11).
    const ap = env.approval;
    if (ap && typeof ap === 'object') badges.append(badge(`approved by ${str(ap.by)}: proposal ${str(ap.proposal)}`, 'conclusion'));
    if (rec.history) badges.append(badge('from history', 'history'));
    if (text !== '') li.append(el('div', 'env-body', text));
    if (summary !== null) li.append(el('div', 'kept-note', `summary: ${summary}`));

    const d = el('details');
    d.append(el('summary', null, 'JSON'));
    d.ontoggle = () => {
      if (!d.open || d.dataset.filled) return;
      d.dataset.filled = '1';
      d.append(el('pre', null, JSON.stringify(env, null, 2)));
      if (collapsed) d.append(el('p', 'kept-note', 'History keeps only this summary of the envelope: a later one consumed it.'));
    };
    li.append(d);
    this.rows.set(rec, li);
    if (typeof env.id === 'string') this.ids.add(env.id);
    return li;
  }
}

function badge(text, cls) {
  return el('span', cls ? `badge ${cls}` : 'badge', text);
}

function preview(p) {
  if (p === undefined) return '';
  if (typeof p === 'string') return p;
  if (p && typeof p === 'object' && !Array.isArray(p) && typeof p.text === 'string') {
    const rest = Object.keys(p).length - 1;
    return rest > 0 ? `${p.text}  (+${rest} field${rest === 1 ? '' : 's'})` : p.text;
  }
  const s = str(p);
  return s.length > 400 ? `${s.slice(0, 400)}…` : s;
}

// proposalEventText shows a system/proposal event: the proposal's new
// state, whose it is, who changed it and why.
function proposalEventText(p) {
  let s = `proposal ${str(p.proposal)} ${str(p.state)}: ${str(p.proposer)} → ${str(p.to)}`;
  if (p.by !== undefined) s += `, by ${str(p.by)}`;
  if (p.scope !== undefined) s += ` (${str(p.scope)})`;
  if (p.reason !== undefined && p.reason !== '') s += `: ${str(p.reason)}`;
  if (p.request !== undefined) s += ` · call ${str(p.request)}`;
  return s;
}

function contextEventText(p) {
  let s = str(p.event ?? 'event');
  if (p.reason !== undefined) s += `: ${str(p.reason)}`;
  const st = p.stats;
  if (st && typeof st === 'object') {
    if (st.messages !== undefined) s += ` · ${str(st.messages)} msg`;
    if (Number.isFinite(st.bytes)) s += ` · ${fmtBytes(st.bytes)}`;
    if (Number.isFinite(st.tokens)) s += ` · ≈${st.tokens} tokens`;
    if (Number.isFinite(st.tokens_saved)) s += ` (${st.tokens_saved} saved by folding)`;
    if (Array.isArray(st.participants) && st.participants.length) s += ` · by ${st.participants.map(str).join(', ')}`;
  }
  return s;
}
