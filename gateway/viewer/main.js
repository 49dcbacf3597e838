// The pod viewer (docs/protocol.md section 10): a form (or a link, /?pod=NAME) joins a
// pod, watching without presence where the token allows it; the page then
// shows the participants, the context tree and the envelopes of the
// selected context, live, and the pending proposals. Where the token's
// capabilities allow, it is a console too: a person sends messages,
// decides proposals and kicks participants.

import { Model } from './model.js';
import { Connection } from './conn.js';
import { TreeView } from './tree.js';
import { EnvelopeView } from './envelopes.js';
import { ProposalsView } from './proposals.js';
import { Composer } from './compose.js';
import { ParticipantsView } from './participants.js';
import { PodPicker } from './picker.js';
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
  setMode(null);
  setNote('', false);
  showJoin('');
}

// setMode says how the viewer is in the pod: observing (no presence) or
// present (a participant the others see); null says nothing.
function setMode(observing) {
  const m = $('mode');
  m.hidden = observing === null;
  m.className = `mode ${observing ? 'observing' : 'present'}`;
  setText(m, observing === null ? '' : observing ? 'observing' : 'present');
  m.title = observing
    ? 'watching without presence (observe=1): the pod is not told you joined, and no participant list names you'
    : 'joined as a participant: the pod was told you joined, and participant lists name you (this token may not observe: gateway/observe)';
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
    this.participantsDirty = false;
    const send = (obj) => this.conn.send(obj);
    this.people = new ParticipantsView({ list: $('participants'), count: $('participants-count'), note: $('participants-note') }, send);
    this.proposals = new ProposalsView({
      list: $('proposals'), count: $('proposals-count'), empty: $('proposals-empty'), hint: $('proposals-hint'),
      ended: $('ended'), endedBox: $('ended-box'),
    }, send);
    this.composer = new Composer({
      form: $('send-form'), label: $('send-label'), input: $('send-text'), button: $('send-button'), note: $('send-note'),
    }, send);

    const model = this.model = new Model();
    this.view = new EnvelopeView(model, {
      list: $('envelopes'), title: $('view-title'), info: $('view-info'),
      foldedNote: $('folded-note'), foldedText: $('folded-text'), unfold: $('unfold'),
      older: $('load-older'), olderNote: $('older-note'), nested: $('nested'),
      nestedLabel: $('nested-label'), empty: $('empty-note'),
    }, send);
    this.tree = new TreeView($('tree'), model, (c) => this.select(c));
    model.onChange = () => this.schedule();
    model.onRecord = (r) => {
      this.view.onRecord(r);
      this.schedule();
    };
    model.onConsumed = (r) => this.view.consumed(r);

    setText($('contexts-count'), '');
    setText($('history-note'), '');
    setText($('pod-name'), pod);
    document.title = `${pod} · MCPP pod viewer`;
    $('join').hidden = true;
    $('app').hidden = false;
    $('leave').hidden = false;
    setNote('', false);
    setMode(null);
    this.select(null);
    this.ticker = setInterval(() => this.tree.tick(), 1000);

    this.conn = new Connection({
      pod, participant, token,
      onWelcome: (env, how) => this.welcome(env, how),
      onEnvelope: (env, bytes, line) => this.envelope(env, bytes, line),
      onStatus: (state, text) => { if (!this.stopped) setStatus(state, text); },
      onRefused: (status, code, message) => this.refused(status, code, message),
      onReplaced: () => this.replaced(),
      resumeFrom: () => this.model.lastKeptId,
    });
    this.conn.start();
  }

  // select shows a context's envelopes (null: the main conversation's),
  // and is where a message the person sends goes.
  select(c) {
    this.view.select(c);
    this.composer.setContext(c);
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
    if (selectedChanged) {
      this.view.updateHeader();
      this.composer.drawLabel();
    }
    setText($('contexts-count'), String(this.model.knownCount));
    if (this.participantsDirty) this.drawParticipants();
  }

  welcome(env, { again, resume, observing }) {
    const p = env.payload && typeof env.payload === 'object' ? env.payload : {};
    const you = p.you && typeof p.you === 'object' ? p.you : {};
    this.you = typeof you.id === 'string' ? you.id : null;
    const caps = Array.isArray(you.capabilities) ? you.capabilities : [];
    const others = Array.isArray(p.participants) ? p.participants.filter((o) => o && typeof o.id === 'string') : [];
    if (again) {
      this.proposals.connectionLost();
      this.composer.connectionLost();
      this.people.connectionLost();
    }
    this.people.welcome(this.you, caps, observing, others);
    this.proposals.setWho(this.you, caps);
    this.composer.setWho(caps);
    setMode(observing);
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
    // The pending proposals, after the replay so that the events it held
    // are applied first.
    this.proposals.list();
  }

  envelope(env, bytes, line) {
    const kind = env.kind;
    if (kind === 'system/presence') {
      this.presence(env.payload);
      return;
    }
    if (env.correlation_id !== undefined && env.from === 'system:gateway') {
      if (this.view.answer(env)) return;
      if (this.proposals.answer(env, line)) return;
      if (this.composer.answer(env)) return;
      if (this.people.answer(env)) return;
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
    this.proposals.observe(env, line);
    if (env.from === this.you) this.composer.delivered(env);
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
    this.people.presence(p.event, p.participant.id, p.participant.capabilities);
    this.participantsDirty = true;
    this.schedule();
  }

  drawParticipants() {
    this.participantsDirty = false;
    this.people.draw();
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
  // The pods an operator's token reaches, to pick from (picker.js).
  const picker = new PodPicker({ input: $('pod'), datalist: $('pod-list'), list: $('pod-pick'), note: $('pod-pick-note') });
  let typing = 0;
  $('token').addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => picker.refresh($('token').value.trim()), 400);
  });
  $('token').addEventListener('change', () => picker.refresh($('token').value.trim()));
  // Pods open and close: the list is asked again when a person comes to pick.
  $('pod').addEventListener('focus', () => picker.refresh($('token').value.trim(), true));
  if (!pod) picker.refresh(token);
  $('join-form').onsubmit = (e) => {
    e.preventDefault();
    join($('pod').value.trim(), $('participant').value.trim(), $('token').value.trim());
  };
  $('leave').onclick = leave;
  if (pod) join(pod, participant, token);
  else showJoin('');
}

init();
