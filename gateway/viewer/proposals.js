// The pod's pending proposals (docs/protocol.md section 11), and the
// console where a person decides them: approve once, approve always, or
// reject with a reason. The list is the gateway's (gateway/proposals when
// the page goes live, again after each reconnection), kept current from
// the mcp/proposal envelopes and system/proposal events the pod delivers.
// Each proposal shows who proposed it, to whom, and the exact call, as
// text. A decision's outcome is the gateway's answer: system/approve, the
// system/proposal event that ends it, or the system/error that refuses it.

import { el, setText, str, requestID } from './util.js';
import { contextRef } from './model.js';
import { rawAt, prettyJSON, visible } from './jsontext.js';
import { mayKind } from './caps.js';

const GATEWAY = 'system:gateway';
// Ended proposals shown (the newest first), and ended ids remembered so
// that a list answered before their end reached the page does not bring
// them back.
const MAX_ENDED = 10;
const MAX_GONE = 4096;

// Proposal is one proposal as the page knows it.
class Proposal {
  constructor(id) {
    this.id = id;
    this.proposer = '';
    this.to = '';
    this.context = null;
    this.call = null; // the proposed mcp/request payload, parsed
    this.callRaw = null; // its JSON text as the gateway sent it
    this.digest = null; // the gateway's digest of that call, which an approval names
    this.created = null;
    this.expires = null;
    this.state = 'pending';
    this.by = '';
    this.reason = '';
    this.request = ''; // the call an approval or a fulfilment made
    this.scope = '';
    this.grant = '';
    this.answer = null; // the text of the answer to that call
    this.approvers = new Set(); // the last event's to: who the gateway told
    this.seen = 0; // the page's count of envelopes when last seen pending
    this.busy = false; // a decision of this page awaits the gateway
    this.outcome = null; // {text, cls}: what became of this page's decision
    this.ui = null;
  }
}

export class ProposalsView {
  // els: list, count, empty, hint, ended, endedBox; send(obj) sends an
  // envelope and tells whether the connection took it.
  constructor(els, send) {
    this.els = els;
    this.send = send;
    this.you = null;
    this.caps = [];
    this.pending = new Map(); // id -> Proposal, in the order they came
    this.ended = []; // the ended ones shown, newest first
    this.gone = new Set(); // ids known ended
    this.byRequest = new Map(); // released call id -> Proposal
    this.reqs = new Map(); // this page's requests: id -> {what, p, scope, seq}
    this.seq = 0;
    els.list.replaceChildren();
    els.ended.replaceChildren();
    this.drawCounts();
  }

  // setWho takes the welcome's you: the id and capabilities that decide
  // which controls show.
  setWho(you, caps) {
    this.you = you;
    this.caps = Array.isArray(caps) ? caps : [];
    setText(this.els.hint, this.mayCall() ? ''
      : 'This token may not call tools (mcp/request), so it decides no proposal: they show here as they come and go.');
    for (const p of this.pending.values()) this.draw(p);
  }

  mayCall() {
    return mayKind(this.caps, 'mcp/request');
  }

  // mayDecide: whoever may make the call approves or rejects it; the
  // gateway tells the participants it counts as such (the event's to).
  mayDecide(p) {
    return p.state === 'pending' && p.proposer !== this.you && (this.mayCall() || p.approvers.has(this.you));
  }

  // list asks the gateway for the pending proposals.
  list() {
    const id = requestID();
    if (this.send({ kind: 'gateway/proposals', id, payload: {} })) this.reqs.set(id, { what: 'list', seq: this.seq });
  }

  // connectionLost: the old connection answers nothing more.
  connectionLost() {
    for (const r of this.reqs.values()) {
      if (!r.p) continue;
      r.p.busy = false;
      r.p.outcome = { text: 'the connection dropped before the gateway answered: see the proposal\'s state once the viewer is live again', cls: 'bad' };
      this.draw(r.p);
    }
    this.reqs.clear();
  }

  // answer takes the gateway's answer to one of this page's requests (or
  // its refusal); it tells whether env was one.
  answer(env, line) {
    const r = this.reqs.get(env.correlation_id);
    if (!r) return false;
    this.reqs.delete(env.correlation_id);
    const p = env.payload && typeof env.payload === 'object' ? env.payload : {};
    if (env.kind === 'system/error') {
      const why = `${str(p.error)}: ${str(p.message)}`;
      if (r.what === 'list') {
        setText(this.els.hint, `The gateway did not list the proposals (${why}).`);
        return true;
      }
      r.p.busy = false;
      r.p.outcome = { text: `refused by the gateway: ${why}`, cls: 'bad' };
      this.draw(r.p);
      if (p.error === 'proposal_not_pending') this.list(); // it ended meanwhile
      return true;
    }
    if (r.what === 'list' && env.kind === 'system/proposals') {
      this.takeList(Array.isArray(p.proposals) ? p.proposals : [], line, r.seq);
    } else if (r.what === 'approve' && env.kind === 'system/approve') {
      r.p.busy = false;
      const grant = typeof p.grant_id === 'string' && p.grant_id !== ''
        ? `; grant ${p.grant_id} lets ${r.p.proposer} make this call from now on` : '';
      r.p.outcome = { text: `approved ${str(p.scope || r.scope)} by you: the call was released (request ${str(p.request)})${grant}`, cls: 'ok' };
      this.event(p, null, line, ['payload']);
    }
    return true;
  }

  // takeList makes the pending list the gateway's: what it lists is
  // pending; what it does not, and the page saw pending before it asked,
  // ended meanwhile.
  takeList(list, line, seq) {
    const listed = new Set();
    list.forEach((info, i) => {
      if (!info || typeof info !== 'object' || typeof info.id !== 'string' || this.gone.has(info.id)) return;
      listed.add(info.id);
      const p = this.pendingOf(info.id);
      this.fill(p, info.proposer, info.to, info.context, info.call, rawAt(line, ['payload', 'proposals', i, 'call']), info.digest);
      if (typeof info.created === 'string') p.created = info.created;
      if (typeof info.expires === 'string') p.expires = info.expires;
      p.seen = Math.max(p.seen, seq);
      this.draw(p);
    });
    for (const p of [...this.pending.values()]) {
      if (!listed.has(p.id) && p.seen <= seq) this.end(p, { state: 'ended', reason: 'no longer pending when the page asked the gateway' });
    }
    this.drawCounts();
  }

  // observe follows the pod's envelopes: proposals, their events, and the
  // answers to the calls approvals released.
  observe(env, line) {
    this.seq++;
    const kind = env.kind;
    if (kind === 'mcp/proposal' && env.from !== GATEWAY && typeof env.id === 'string' && env.id !== '') {
      if (this.gone.has(env.id)) return;
      const p = this.pendingOf(env.id);
      const ref = contextRef(env);
      this.fill(p, env.from, Array.isArray(env.to) ? env.to[0] : '', ref ? ref.id : null, env.payload, rawAt(line, ['payload']), null);
      if (p.created === null && typeof env.ts === 'string') p.created = env.ts;
      p.seen = this.seq;
      this.draw(p);
      this.drawCounts();
    } else if (kind === 'system/proposal' && env.from === GATEWAY && env.payload && typeof env.payload === 'object') {
      this.event(env.payload, Array.isArray(env.to) ? env.to : null, line, ['payload']);
    } else if (kind === 'mcp/response') {
      const c = Array.isArray(env.correlation_id) ? env.correlation_id[0] : env.correlation_id;
      const p = typeof c === 'string' ? this.byRequest.get(c) : undefined;
      if (p) {
        p.answer = `answer from ${str(env.from)}: ${answerText(env.payload)}`;
        this.draw(p);
      }
    }
  }

  // event applies a proposal's state (a system/proposal event's payload,
  // or a system/approve answer's).
  event(ev, to, line, at) {
    const id = ev.proposal;
    if (typeof id !== 'string' || id === '') return;
    if (ev.state === 'pending') {
      if (this.gone.has(id)) return;
      const p = this.pendingOf(id);
      this.fill(p, ev.proposer, ev.to, ev.context, ev.call, rawAt(line, [...at, 'call']), ev.digest);
      if (typeof ev.expires === 'string') p.expires = ev.expires;
      if (to) p.approvers = new Set(to.slice(1));
      p.seen = this.seq;
      this.draw(p);
      this.drawCounts();
      return;
    }
    let p = this.pending.get(id) ?? this.ended.find((q) => q.id === id);
    if (!p) {
      p = new Proposal(id);
      this.fill(p, ev.proposer, ev.to, ev.context, null, null, null);
    }
    this.end(p, ev);
  }

  pendingOf(id) {
    let p = this.pending.get(id);
    if (!p) {
      p = new Proposal(id);
      this.pending.set(id, p);
    }
    return p;
  }

  // fill takes what a proposal's envelope, event or listing says of it.
  // The digest an approval names is the gateway's for the call shown:
  // taken with that call, or later for the same call (the proposal's
  // envelope carries none, its pending event does).
  fill(p, proposer, to, context, call, raw, digest) {
    if (typeof proposer === 'string' && proposer !== '') p.proposer = proposer;
    if (typeof to === 'string' && to !== '') p.to = to;
    if (typeof context === 'string' && context !== '') p.context = context;
    if (call !== null && call !== undefined && p.call === null) {
      p.call = call;
      p.callRaw = raw ?? JSON.stringify(call);
    }
    if (typeof digest === 'string' && p.digest === null && p.call !== null && JSON.stringify(p.call) === JSON.stringify(call)) {
      p.digest = digest;
    }
  }

  // end moves p to the ended ones with ev's state, who and why.
  end(p, ev) {
    const first = p.state === 'pending';
    p.state = typeof ev.state === 'string' ? ev.state : 'ended';
    if (typeof ev.by === 'string') p.by = ev.by;
    if (typeof ev.reason === 'string') p.reason = ev.reason;
    if (typeof ev.scope === 'string') p.scope = ev.scope;
    if (typeof ev.grant_id === 'string') p.grant = ev.grant_id;
    if (typeof ev.request === 'string' && ev.request !== '') {
      p.request = ev.request;
      this.byRequest.set(p.request, p);
    }
    if (p.busy && p.by !== this.you) {
      // Someone else decided first: this page's decision comes to nothing
      // (its answer, a refusal, still shows when it comes).
      p.outcome = { text: `it ended before your decision: ${p.state} by ${p.by}`, cls: 'bad' };
    } else if (p.by === this.you && p.state === 'rejected' && !(p.outcome && p.outcome.cls === 'ok')) {
      p.outcome = { text: `rejected by you${p.reason ? `: ${p.reason}` : ''}`, cls: 'ok' };
    }
    p.busy = false;
    if (p.by === this.you) {
      // This page's rejection was taken: no answer will come for it.
      for (const [k, r] of this.reqs) if (r.p === p && r.what === 'reject') this.reqs.delete(k);
    }
    if (first) {
      this.pending.delete(p.id);
      this.gone.add(p.id);
      if (this.gone.size > MAX_GONE) this.gone.delete(this.gone.values().next().value);
      this.ended.unshift(p);
      while (this.ended.length > MAX_ENDED) {
        const old = this.ended.pop();
        if (old.ui) old.ui.li.remove();
        if (old.request) this.byRequest.delete(old.request);
      }
    }
    this.draw(p);
    this.drawCounts();
  }

  drawCounts() {
    const n = this.pending.size;
    setText(this.els.count, String(n));
    this.els.empty.hidden = n > 0;
    this.els.endedBox.hidden = this.ended.length === 0;
  }

  // draw makes or updates p's card, in the list its state puts it in.
  draw(p) {
    const u = p.ui ?? this.card(p);
    const call = p.call && typeof p.call === 'object' ? p.call : {};
    const params = call.params && typeof call.params === 'object' ? call.params : null;
    setText(u.proposer, p.proposer || '?');
    setText(u.to, p.to || '?');
    setText(u.in, p.context ? `in ${visible(p.context)}` : '');
    setText(u.state, p.state);
    u.li.className = `proposal st-${p.state.replace(/[^a-z]/g, '')}`;
    setText(u.when, p.state === 'pending' && p.expires ? `expires ${clock(p.expires)}` : p.created ? `proposed ${clock(p.created)}` : '');
    setText(u.method, typeof call.method === 'string' ? visible(call.method) : '?');
    setText(u.tool, params && typeof params.name === 'string' ? visible(params.name) : '');
    u.toolLabel.hidden = !(params && typeof params.name === 'string');
    if (u.raw !== p.callRaw) {
      u.raw = p.callRaw;
      let label = 'no params';
      let text = '';
      if (p.callRaw !== null && params) {
        const args = params.name !== undefined && params.arguments !== undefined;
        label = args ? 'arguments' : 'params';
        text = prettyJSON(rawAt(p.callRaw, args ? ['params', 'arguments'] : ['params']) ?? JSON.stringify(args ? params.arguments : params));
      } else if (p.callRaw === null) {
        label = 'the call is not known here (it was proposed before the page watched)';
      }
      setText(u.argsLabel, label);
      setText(u.args, text);
      u.args.hidden = text === '';
      setText(u.whole, p.callRaw !== null ? prettyJSON(p.callRaw) : '');
      u.wholeBox.hidden = p.callRaw === null;
    }
    this.drawActions(p, u);
    setText(u.outcome, p.outcome ? p.outcome.text : '');
    u.outcome.className = `p-outcome ${p.outcome ? p.outcome.cls : ''}`;
    u.outcome.hidden = !p.outcome;
    let endText = '';
    if (p.state !== 'pending') {
      endText = `${p.state}${p.by ? ` by ${p.by}` : ''}${p.scope ? ` (${p.scope})` : ''}${p.reason ? `: ${p.reason}` : ''}`;
      if (p.request) endText += ` · call ${p.request}`;
    }
    setText(u.endText, visible(endText));
    u.endText.hidden = endText === '';
    setText(u.answer, p.answer ? visible(p.answer) : '');
    u.answer.hidden = !p.answer;
    const list = p.state === 'pending' ? this.els.list : this.els.ended;
    if (u.li.parentElement !== list) {
      if (list === this.els.ended) list.prepend(u.li);
      else list.append(u.li);
    }
  }

  card(p) {
    const li = el('li', 'proposal');
    li.dataset.id = p.id;
    const head = el('div', 'p-head');
    const u = p.ui = {
      li, raw: undefined,
      proposer: el('span', 'p-proposer'), to: el('span', 'p-to'), in: el('span', 'p-in'),
      state: el('span', 'badge p-state'), when: el('span', 'p-when'),
      method: el('span', 'p-method'), tool: el('span', 'p-tool'), toolLabel: el('span', 'p-label', 'tool'),
      argsLabel: el('div', 'p-label'), args: el('pre', 'p-args'),
      wholeBox: el('details', 'p-whole'), whole: el('pre', 'p-call-json'),
      actions: null, outcome: el('p', 'p-outcome'), endText: el('p', 'p-end'), answer: el('p', 'p-answer'),
    };
    u.outcome.setAttribute('role', 'status');
    const eid = el('span', 'eid', p.id);
    eid.title = 'proposal id (its mcp/proposal envelope\'s id)';
    head.append(u.proposer, el('span', 'p-label', 'proposes to'), u.to, u.in, u.state, u.when, eid);
    const callLine = el('div', 'p-callline');
    callLine.append(el('span', 'p-label', 'call'), u.method, u.toolLabel, u.tool);
    u.wholeBox.append(el('summary', null, 'the whole call (JSON-RPC)'), u.whole);
    li.append(head, callLine, u.argsLabel, u.args, u.wholeBox, u.endText, u.answer, u.outcome);
    return u;
  }

  // drawActions shows the decision controls where this token could decide
  // (and takes them out where it cannot: no button the gateway would
  // refuse for a reason the page knows).
  drawActions(p, u) {
    if (!this.mayDecide(p)) {
      if (u.actions) u.actions.remove();
      u.actions = null;
      return;
    }
    if (!u.actions) {
      const a = u.actions = el('div', 'p-actions');
      const once = el('button', 'approve-once', 'Approve once');
      once.type = 'button';
      once.title = 'the gateway releases this call, byte for byte, as the proposer\'s; its answer goes to the proposer';
      once.onclick = () => this.approve(p, 'once');
      a.append(once);
      if (mayKind(this.caps, 'capability/grant')) {
        const always = el('button', 'approve-always', 'Approve always');
        always.type = 'button';
        always.title = 'approve, and grant the proposer this method and tool in the whole pod from now on (capability/grant)';
        always.onclick = () => this.approve(p, 'always');
        a.append(always);
      }
      const reason = u.reason = el('input', 'reject-reason');
      reason.type = 'text';
      reason.maxLength = 1000;
      reason.placeholder = 'reason, told to the proposer';
      reason.setAttribute('aria-label', `reason to reject ${p.id}`);
      const reject = el('button', 'reject', 'Reject');
      reject.type = 'button';
      reject.onclick = () => this.reject(p, reason.value.trim());
      reason.onkeydown = (e) => {
        if (e.key === 'Enter') reject.click();
      };
      a.append(reason, reject);
      u.li.insertBefore(a, u.outcome);
    }
    for (const b of u.actions.querySelectorAll('button')) b.disabled = p.busy;
  }

  approve(p, scope) {
    const id = requestID();
    // The digest binds the approval to the call shown: if the id names
    // another call by now, the gateway refuses it (proposal_changed).
    if (!this.send({ kind: 'gateway/approve', id, payload: { proposal: p.id, digest: p.digest ?? '', scope } })) {
      p.outcome = { text: 'not connected: decide again once the viewer is live', cls: 'bad' };
    } else {
      this.reqs.set(id, { what: 'approve', p, scope });
      p.busy = true;
      p.outcome = { text: `approving (${scope})…`, cls: 'busy' };
    }
    this.draw(p);
  }

  // reject sends mcp/reject: the gateway answers a refusal alone; the
  // system/proposal event that ends the proposal says it was taken.
  reject(p, reason) {
    const id = requestID();
    if (!this.send({ kind: 'mcp/reject', id, correlation_id: p.id, payload: { reason } })) {
      p.outcome = { text: 'not connected: decide again once the viewer is live', cls: 'bad' };
    } else {
      this.reqs.set(id, { what: 'reject', p });
      p.busy = true;
      p.outcome = { text: 'rejecting…', cls: 'busy' };
    }
    this.draw(p);
  }
}

// answerText is the text of a JSON-RPC answer: a tool result's text
// content, or its error.
function answerText(payload) {
  if (!payload || typeof payload !== 'object') return str(payload);
  const e = payload.error;
  if (e && typeof e === 'object') return `error ${str(e.code)}: ${str(e.message)}`;
  const r = payload.result;
  if (r && typeof r === 'object' && Array.isArray(r.content)) {
    const texts = r.content.filter((c) => c && typeof c.text === 'string').map((c) => c.text);
    if (texts.length > 0) return `${r.isError === true ? 'tool error: ' : ''}${texts.join(' ')}`;
  }
  const s = str(r);
  return s.length > 400 ? `${s.slice(0, 400)}…` : s;
}

function clock(ts) {
  const t = Date.parse(ts);
  return Number.isFinite(t) ? new Date(t).toLocaleTimeString() : str(ts);
}
