// The viewer's model of a pod: its context tree and the envelopes received,
// with no DOM. The views read it and redraw what it marks dirty.

import { Deque, parseTime } from './util.js';

// At most this many envelopes stay in memory; the oldest go first.
export const MAX_RECORDS = 50000;

// Gateway messages that history never keeps (docs/protocol.md section 8): welcomes,
// presence, errors and the answers to requests. system/context events are
// kept.
const NOT_KEPT = new Set([
  'system/welcome', 'system/presence', 'system/error',
  'system/filter', 'system/contexts', 'system/history',
]);

// keptByHistory tells whether the gateway's history holds env, so that its
// id can be given as resume= after a dropped connection.
export function keptByHistory(env) {
  const kind = env.kind;
  if (typeof kind !== 'string' || NOT_KEPT.has(kind)) return false;
  if (kind.startsWith('system/') && kind !== 'system/context') return false; // an answer of a later version
  const lc = env.lifecycle;
  if (lc && typeof lc === 'object' && lc.mode === 'ephemeral') return false;
  return typeof env.id === 'string' && env.id !== '';
}

const PATH = /^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)*$/;

// contextRef reads an envelope's context (docs/protocol.md section 3), object or path,
// as {id, type, parent, path}; null for the main context.
export function contextRef(env) {
  const c = env.context;
  if (typeof c === 'string') {
    if (c === '') return null;
    const i = c.lastIndexOf('/');
    return { id: c, type: null, parent: i > 0 ? c.slice(0, i) : null, path: true };
  }
  if (c && typeof c === 'object' && typeof c.id === 'string' && c.id !== '') {
    return {
      id: c.id,
      type: typeof c.type === 'string' && c.type !== '' ? c.type : null,
      parent: typeof c.parent === 'string' && c.parent !== '' ? c.parent : null,
      path: false,
    };
  }
  return null;
}

// Ctx is one node of the tree: a context the pod named, or one known only
// as another's parent (known false: a path's prefix, or a parent id that
// no envelope here opened).
export class Ctx {
  constructor(id) {
    this.id = id;
    this.type = null;
    this.parent = null;
    this.children = [];
    this.known = false;
    this.path = false;
    this.depth = null; // as the gateway reported it
    this.state = null; // 'active' | 'concluded' once known
    this.reason = null;
    this.messages = 0;
    this.bytes = 0;
    // The gateway's token estimates (docs/protocol.md section 3): of the
    // context's envelopes, and once it concluded, of what its fold hides
    // and what a late joiner is spared; null until reported.
    this.tokens = null;
    this.tokensFolded = null;
    this.tokensSaved = null;
    this.created = null; // ms since the epoch
    this.last = null;
    this.concluded = null;
    this.creator = null;
    this.participants = null;
    this.sub = { contexts: 0, messages: 0, bytes: 0 }; // over the descendants
    this.envs = new Deque(); // the records in this context, oldest first
    this.held = 0; // of them, envelopes (not system/context events)
    this.userFold = null; // the person's choice: true folded, false unfolded
    this.concludedAtJoin = false; // concluded before the viewer watched it live
    this.ui = null; // the tree view's elements
  }

  // expanded tells whether the subtree shows: a concluded context folds
  // unless the person unfolded it.
  expanded() {
    return this.userFold !== null ? !this.userFold : this.state !== 'concluded';
  }

  level() {
    let n = 1;
    for (let p = this.parent; p; p = p.parent) n++;
    return n;
  }

  // isWithin tells whether anc is this context or one of its ancestors.
  isWithin(anc) {
    for (let c = this; c; c = c.parent) if (c === anc) return true;
    return false;
  }
}

export class Model {
  constructor() {
    this.contexts = new Map();
    this.roots = [];
    this.main = new Deque(); // records without a context
    this.records = new Deque(); // every record, oldest first
    this.byId = new Map();
    this.seq = 0;
    this.knownCount = 0; // contexts known (not only as a parent)
    this.lastKeptId = null; // for resume=
    this.live = false; // false while the replayed history comes in
    this.conclusionKinds = new Set(['conclusion', 'reasoning/conclusion', 'reasoning/end']);
    this.dirty = new Set();
    this.onChange = () => {};
    this.onRecord = () => {};
    this.onConsumed = () => {};
  }

  touch(c) {
    this.dirty.add(c);
    this.onChange();
  }

  // ensure returns the node of id, made (at the root, unknown) when new.
  ensure(id) {
    let c = this.contexts.get(id);
    if (!c) {
      c = new Ctx(id);
      this.contexts.set(id, c);
      this.roots.push(c);
      this.touch(c);
    }
    return c;
  }

  // addUp adds d to the totals of from and its ancestors.
  addUp(from, d) {
    for (let a = from; a; a = a.parent) {
      a.sub.contexts += d.contexts;
      a.sub.messages += d.messages;
      a.sub.bytes += d.bytes;
      this.touch(a);
    }
  }

  weight(c, sign) {
    return {
      contexts: sign * ((c.known ? 1 : 0) + c.sub.contexts),
      messages: sign * (c.messages + c.sub.messages),
      bytes: sign * (c.bytes + c.sub.bytes),
    };
  }

  // attach moves c (and its subtree) under the context parentId (null: the
  // root). A move that would make a cycle is ignored.
  attach(c, parentId) {
    if ((c.parent ? c.parent.id : null) === parentId) return;
    let p = null;
    if (parentId !== null) {
      p = this.ensure(parentId);
      if (p.isWithin(c)) return;
    }
    const from = c.parent ? c.parent.children : this.roots;
    const i = from.indexOf(c);
    if (i >= 0) from.splice(i, 1);
    if (c.parent) this.addUp(c.parent, this.weight(c, -1));
    c.parent = p;
    if (p) {
      p.children.push(c);
      this.addUp(p, this.weight(c, 1));
    } else {
      this.roots.push(c);
    }
    this.touchSubtree(c); // their levels changed
  }

  touchSubtree(c) {
    this.touch(c);
    for (const k of c.children) this.touchSubtree(k);
  }

  markKnown(c) {
    if (c.known) return;
    c.known = true;
    this.knownCount++;
    if (c.parent) this.addUp(c.parent, { contexts: 1, messages: 0, bytes: 0 });
    this.touch(c);
  }

  setCounts(c, messages, bytes) {
    const dm = messages - c.messages;
    const db = bytes - c.bytes;
    if (dm === 0 && db === 0) return;
    c.messages = messages;
    c.bytes = bytes;
    if (c.parent) this.addUp(c.parent, { contexts: 0, messages: dm, bytes: db });
    this.touch(c);
  }

  // learn places the context an envelope names in the tree.
  learn(ref) {
    const c = this.ensure(ref.id);
    if (ref.parent !== null && (c.parent ? c.parent.id : null) !== ref.parent) this.attach(c, ref.parent);
    if (ref.path) c.path = true;
    if (ref.type !== null && c.type !== ref.type) {
      c.type = ref.type;
      this.touch(c);
    }
    if (c.path && c.parent) this.pathAncestors(c.parent);
    return c;
  }

  // pathAncestors hangs the prefixes of a path ("a/b" of "a/b/c") under
  // theirs, as far as they are not registered contexts of their own.
  pathAncestors(p) {
    while (p && !p.known && PATH.test(p.id)) {
      if (!p.path) {
        p.path = true;
        this.touch(p);
      }
      const i = p.id.lastIndexOf('/');
      if (i <= 0 || p.parent !== null) return;
      this.attach(p, p.id.slice(0, i));
      p = p.parent;
    }
  }

  // add records an envelope received over the connection (replayed or
  // live). It returns null for one already held (a replay after a
  // reconnection that could not resume).
  add(env, bytes) {
    const id = typeof env.id === 'string' ? env.id : null;
    if (id !== null && this.byId.has(id)) return null;
    const rec = { seq: ++this.seq, env, bytes, ctx: null, consumedBy: null, history: false };
    const ref = contextRef(env);
    if (env.kind === 'system/context') {
      if (ref) {
        const c = this.learn(ref);
        rec.ctx = c;
        if (!c.known) {
          this.markKnown(c);
          c.state = 'active';
        }
        const p = env.payload;
        if (p && typeof p === 'object' && p.event === 'concluded') this.conclude(c, p.reason, p.stats);
      }
    } else if (ref) {
      const c = this.learn(ref);
      rec.ctx = c;
      const at = parseTime(env.ts) ?? Date.now();
      // An envelope that names a concluded context opens a new one with
      // the same id (docs/protocol.md section 3).
      if (c.state === 'concluded') this.reopen(c);
      if (!c.known || c.state === null) {
        this.markKnown(c);
        c.state = 'active';
      }
      if (c.created === null) c.created = at;
      c.last = at;
      this.setCounts(c, c.messages + 1, c.bytes + bytes);
      c.held++;
      this.touch(c);
    }
    (rec.ctx ? rec.ctx.envs : this.main).push(rec);
    this.records.push(rec);
    if (id !== null) this.byId.set(id, rec);
    if (keptByHistory(env)) this.lastKeptId = id;
    const lc = env.lifecycle;
    if (lc && typeof lc === 'object' && Array.isArray(lc.consumes)) {
      for (const cid of lc.consumes) {
        const r = typeof cid === 'string' ? this.byId.get(cid) : undefined;
        if (r && !r.consumedBy && r.env.lifecycle && r.env.lifecycle.mode === 'transient') {
          r.consumedBy = id;
          this.onConsumed(r);
        }
      }
    }
    while (this.records.length > MAX_RECORDS) this.evict();
    this.onRecord(rec);
    return rec;
  }

  evict() {
    const r = this.records.shift();
    (r.ctx ? r.ctx.envs : this.main).shift();
    if (r.ctx && r.env.kind !== 'system/context') r.ctx.held--;
    const id = r.env.id;
    if (typeof id === 'string' && this.byId.get(id) === r) this.byId.delete(id);
  }

  conclude(c, reason, stats) {
    c.state = 'concluded';
    c.reason = typeof reason === 'string' ? reason : null;
    c.concluded = Date.now();
    if (stats && typeof stats === 'object') {
      if (Number.isFinite(stats.messages) && Number.isFinite(stats.bytes)) this.setCounts(c, stats.messages, stats.bytes);
      if (Number.isInteger(stats.depth)) c.depth = stats.depth;
      c.created = parseTime(stats.created) ?? c.created;
      c.last = parseTime(stats.last_activity) ?? c.last;
      c.concluded = parseTime(stats.concluded) ?? c.concluded;
      if (Array.isArray(stats.participants)) c.participants = stats.participants.map(String);
      takeTokens(c, stats);
    }
    if (!this.live) c.concludedAtJoin = true;
    this.touch(c);
  }

  reopen(c) {
    c.state = 'active';
    c.reason = null;
    c.concluded = null;
    c.created = null;
    c.depth = null;
    c.participants = null;
    c.tokens = c.tokensFolded = c.tokensSaved = null;
    c.concludedAtJoin = false;
    this.setCounts(c, 0, 0);
    this.touch(c);
  }

  // applySnapshot takes the gateway/contexts answer (docs/protocol.md section 6): it
  // adds the contexts whose envelopes are not in the replayed history and
  // sets every context's counts to the registry's.
  applySnapshot(list) {
    if (!Array.isArray(list)) return;
    for (const info of list) {
      if (!info || typeof info !== 'object' || typeof info.id !== 'string' || info.id === '') continue;
      const c = this.ensure(info.id);
      const parent = typeof info.parent === 'string' && info.parent !== '' ? info.parent : null;
      if (parent !== null && (c.parent ? c.parent.id : null) !== parent) this.attach(c, parent);
      if (typeof info.type === 'string' && info.type !== '') c.type = info.type;
      this.markKnown(c);
      if (parent !== null && PATH.test(c.id) && c.id.startsWith(parent + '/') && c.id.indexOf('/', parent.length + 1) < 0) {
        c.path = true;
        this.pathAncestors(c.parent);
      }
      if (Number.isInteger(info.depth)) c.depth = info.depth;
      if (Number.isFinite(info.messages) && Number.isFinite(info.bytes)) this.setCounts(c, info.messages, info.bytes);
      c.created = parseTime(info.created) ?? c.created;
      c.last = parseTime(info.last_activity) ?? c.last;
      if (typeof info.creator === 'string') c.creator = info.creator;
      if (Array.isArray(info.participants)) c.participants = info.participants.map(String);
      takeTokens(c, info);
      if (info.state === 'concluded') {
        if (c.state !== 'concluded') c.concludedAtJoin = true;
        c.state = 'concluded';
        c.reason = typeof info.reason === 'string' ? info.reason : null;
        c.concluded = parseTime(info.concluded) ?? c.concluded;
      } else {
        c.state = 'active';
        c.reason = null;
        c.concluded = null;
      }
      this.touch(c);
    }
  }
}

// takeTokens keeps the token figures of a context's stats or info, those
// it has (tokens_folded and tokens_saved are null while it is active).
function takeTokens(c, o) {
  if (Number.isFinite(o.tokens)) c.tokens = o.tokens;
  if (Number.isFinite(o.tokens_folded)) c.tokensFolded = o.tokens_folded;
  if (Number.isFinite(o.tokens_saved)) c.tokensSaved = o.tokens_saved;
}
