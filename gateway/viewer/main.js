// The pod viewer (docs/protocol.md section 10): a form (or a link, /?pod=NAME) joins a
// pod as an ordinary participant; the page then shows the participants,
// the context tree and the envelopes of the selected context, live.

import { Model } from './model.js';
import { Connection } from './conn.js';
import { TreeView } from './tree.js';
import { EnvelopeView } from './envelopes.js';
import { el, setText, requestID } from './util.js';

const $ = (id) => document.getElementById(id);

const TOKEN_KEY = 'mcpp.viewer.token';
const POD = /^[A-Za-z0-9._-]{1,64}$/;
const PARTICIPANT = /^[A-Za-z0-9._:@-]{1,128}$/;
// How long the replayed history the welcome announced may pause before
// the page treats what comes as live.
const REPLAY_WAIT_MS = 3000;

let session = null;

function storedToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) ?? ''; } catch { return ''; }
}

function storeToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage refused: the token lasts as long as the page */ }
}

function showJoin(message) {
  $('app').hidden = true;
  $('join').hidden = false;
  $('leave').hidden = true;
  const e = $('join-error');
  e.hidden = !message;
  setText(e, message || '');
}

function join(pod, participant, token) {
  if (!POD.test(pod)) {
    showJoin('A pod name is 1 to 64 characters of A-Z, a-z, 0-9, ".", "_" and "-".');
    return;
  }
  if (participant && (!PARTICIPANT.test(participant) || participant.startsWith('system:'))) {
    showJoin('A participant id is 1 to 128 characters of A-Z, a-z, 0-9, ".", "_", ":", "@" and "-", not starting with "system:".');
    return;
  }
  storeToken(token);
  // The page's address names the pod (and the participant), never the
  // token, so that it can be shared or reloaded.
  const u = new URL(location.href);
  u.search = '';
  u.searchParams.set('pod', pod);
  if (participant) u.searchParams.set('participant', participant);
  history.replaceState(null, '', u);
  if (session) session.stop();
  session = new Session(pod, participant, token);
}

function leave() {
  if (session) session.stop();
  session = null;
  history.replaceState(null, '', location.pathname);
  document.title = 'MCPP pod viewer';
  setText($('pod-name'), '');
  setStatus('', '');
  setNote('', false);
  showJoin('');
}

function setStatus(state, text) {
  const s = $('status');
  s.className = `status ${state}`;
  setText(s, text);
}

function setNote(text, gap) {
  const n = $('conn-note');
  n.classList.toggle('gap', !!gap);
  n.replaceChildren();
  if (text) n.append(text);
}

class Session {
  constructor(pod, participant, token) {
    this.pod = pod;
    this.stopped = false;
    this.frame = 0;
    this.replayLeft = 0;
    this.replayTimer = 0;
    this.replayAt = 0;
    this.contextsReq = null;
    this.you = null;
    this.participants = new Map();
    this.participantsDirty = false;

    const model = this.model = new Model();
    this.view = new EnvelopeView(model, {
      list: $('envelopes'), title: $('view-title'), info: $('view-info'),
      foldedNote: $('folded-note'), foldedText: $('folded-text'), unfold: $('unfold'),
      older: $('load-older'), olderNote: $('older-note'), nested: $('nested'),
      nestedLabel: $('nested-label'), empty: $('empty-note'),
    }, (obj) => this.conn.send(obj));
    this.tree = new TreeView($('tree'), model, (c) => this.view.select(c));
    model.onChange = () => this.schedule();
    model.onRecord = (r) => {
      this.view.onRecord(r);
      this.schedule();
    };
    model.onConsumed = (r) => this.view.consumed(r);

    $('participants').replaceChildren();
    setText($('participants-count'), '');
    setText($('contexts-count'), '');
    setText($('history-note'), '');
    setText($('pod-name'), pod);
    document.title = `${pod} · MCPP pod viewer`;
    $('join').hidden = true;
    $('app').hidden = false;
    $('leave').hidden = false;
    setNote('', false);
    this.view.select(null);
    this.ticker = setInterval(() => this.tree.tick(), 1000);

    this.conn = new Connection({
      pod, participant, token,
      onWelcome: (env, how) => this.welcome(env, how),
      onEnvelope: (env, bytes) => this.envelope(env, bytes),
      onStatus: (state, text) => { if (!this.stopped) setStatus(state, text); },
      onRefused: (status, code, message) => this.refused(status, code, message),
      onReplaced: () => this.replaced(),
      resumeFrom: () => this.model.lastKeptId,
    });
    this.conn.start();
  }

  stop() {
    this.stopped = true;
    this.conn.stop();
    clearInterval(this.ticker);
    clearTimeout(this.replayTimer);
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
  }

  // schedule draws what changed at the next frame: however many envelopes
  // arrive in between, each changed node is drawn once.
  schedule() {
    if (!this.frame && !this.stopped) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    if (this.stopped) return;
    const selectedChanged = this.tree.flush();
    this.view.flush();
    if (selectedChanged) this.view.updateHeader();
    setText($('contexts-count'), String(this.model.knownCount));
    if (this.participantsDirty) this.drawParticipants();
  }

  welcome(env, { again, resume }) {
    const p = env.payload && typeof env.payload === 'object' ? env.payload : {};
    const you = p.you && typeof p.you === 'object' ? p.you : {};
    this.you = typeof you.id === 'string' ? you.id : null;
    this.participants.clear();
    if (this.you !== null) this.participants.set(this.you, you.capabilities);
    if (Array.isArray(p.participants)) {
      for (const o of p.participants) if (o && typeof o.id === 'string') this.participants.set(o.id, o.capabilities);
    }
    this.participantsDirty = true;
    const kinds = p.limits && p.limits.conclusion_kinds;
    if (Array.isArray(kinds)) this.model.conclusionKinds = new Set(kinds.filter((k) => typeof k === 'string'));

    const h = p.history && typeof p.history === 'object' ? p.history : null;
    this.view.historyOn = h !== null;
    if (!again) {
      setText($('history-note'), h
        ? `History: ${num(h.replayed)} envelopes replayed${h.folded ? `, ${num(h.folded)} left out by folding` : ''}${h.collapsed ? `, ${num(h.collapsed)} collapsed` : ''}.`
        : 'This gateway sent no history: envelopes show from now on (and the contexts it knows).');
    } else if (resume) {
      const at = new Date().toLocaleTimeString();
      if (h && h.resumed === true) setNote(`resumed at ${at} (${num(h.replayed)} missed envelopes replayed)`, false);
      else if (h && h.resumed === false) setNote(`resumed: false at ${at}, there may be a gap`, true);
      else setNote(`reconnected at ${at}; this gateway did not resume, there may be a gap`, true);
    } else {
      setNote(`reconnected at ${new Date().toLocaleTimeString()}`, false);
    }

    // Replayed history comes first; the contexts are asked for once it is
    // in, so that the registry's counts are not added to twice.
    if (again) this.view.connectionLost();
    this.model.live = false;
    this.replayLeft = h && Number.isInteger(h.replayed) && h.replayed > 0 ? h.replayed : 0;
    this.replayAt = Date.now();
    clearTimeout(this.replayTimer);
    if (this.replayLeft === 0) this.goLive();
    else this.replayTimer = setTimeout(() => this.replayStalled(), REPLAY_WAIT_MS);
    this.schedule();
  }

  // replayStalled goes live when the announced replay stops coming.
  replayStalled() {
    const idle = Date.now() - this.replayAt;
    if (this.replayLeft > 0 && idle < REPLAY_WAIT_MS) {
      this.replayTimer = setTimeout(() => this.replayStalled(), REPLAY_WAIT_MS - idle);
      return;
    }
    if (this.replayLeft > 0) this.goLive();
  }

  goLive() {
    clearTimeout(this.replayTimer);
    this.replayLeft = 0;
    this.model.live = true;
    // docs/protocol.md section 6: also the contexts whose envelopes are not in the history.
    const id = requestID();
    this.contextsReq = id;
    this.conn.send({ kind: 'gateway/contexts', id, payload: { state: 'all', limit: 20000 } });
  }

  envelope(env, bytes) {
    const kind = env.kind;
    if (kind === 'system/presence') {
      this.presence(env.payload);
      return;
    }
    if (env.correlation_id !== undefined && env.from === 'system:gateway') {
      if (this.view.answer(env)) return;
      if (env.correlation_id === this.contextsReq) {
        this.contextsReq = null;
        if (kind === 'system/contexts' && env.payload) this.model.applySnapshot(env.payload.contexts);
        return;
      }
    }
    if (kind === 'system/error') {
      const p = env.payload || {};
      setNote(`the gateway said ${str2(p.error)}: ${str2(p.message)}`, true);
      return;
    }
    if (kind === 'system/welcome' || kind === 'system/filter' || kind === 'system/contexts' || kind === 'system/history') return;
    if (this.replayLeft > 0) {
      this.replayAt = Date.now();
      if (--this.replayLeft === 0) {
        this.model.add(env, bytes);
        this.goLive();
        return;
      }
    }
    this.model.add(env, bytes);
  }

  presence(p) {
    if (!p || typeof p !== 'object' || !p.participant || typeof p.participant.id !== 'string') return;
    const id = p.participant.id;
    if (p.event === 'join') this.participants.set(id, p.participant.capabilities);
    else if (p.event === 'leave' && id !== this.you) this.participants.delete(id);
    this.participantsDirty = true;
    this.schedule();
  }

  drawParticipants() {
    this.participantsDirty = false;
    const ids = [...this.participants.keys()].sort((a, b) => (a === this.you ? -1 : b === this.you ? 1 : a < b ? -1 : a > b ? 1 : 0));
    const frag = document.createDocumentFragment();
    for (const id of ids) {
      const li = el('li');
      li.append(el('span', 'pid', id));
      if (id === this.you) li.append(el('span', 'you', 'you'));
      const caps = this.participants.get(id);
      if (Array.isArray(caps)) li.append(el('span', 'caps', caps.map(str2).join(', ')));
      frag.append(li);
    }
    $('participants').replaceChildren(frag);
    setText($('participants-count'), String(ids.length));
  }

  refused(status, code, message) {
    this.stop();
    session = null;
    let hint = '';
    if (status === 401) hint = ' A token is needed only when the gateway runs with a token file: check it and join again.';
    else if (status === 403) hint = ' This token or this page may not join this pod.';
    showJoin(`The gateway refused to let the viewer join (${status} ${code}): ${message}.${hint}`);
  }

  replaced() {
    const b = el('button', null, 'Reconnect');
    b.type = 'button';
    b.onclick = () => this.conn.reconnect();
    setNote('', true);
    $('conn-note').append('Another connection joined as the same participant, so this one was closed (replaced). ', b);
  }
}

function num(v) {
  return Number.isFinite(v) ? String(v) : '0';
}

function str2(v) {
  return typeof v === 'string' ? v : JSON.stringify(v) ?? '';
}

function init() {
  const q = new URLSearchParams(location.search);
  let token = storedToken();
  // A token that came in the address is moved out of it at once.
  if (q.has('token')) {
    token = q.get('token') || '';
    storeToken(token);
    q.delete('token');
    const u = new URL(location.href);
    u.search = q.toString();
    history.replaceState(null, '', u);
  }
  const pod = q.get('pod') || '';
  const participant = q.get('participant') || '';
  $('pod').value = pod;
  $('participant').value = participant;
  $('token').value = token;
  $('join-form').onsubmit = (e) => {
    e.preventDefault();
    join($('pod').value.trim(), $('participant').value.trim(), $('token').value.trim());
  };
  $('leave').onclick = leave;
  if (pod) join(pod, participant, token);
  else showJoin('');
}

init();
