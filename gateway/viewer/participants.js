// The participants of the pod, as the welcome and presence say, and, for a
// token that may (gateway/kick), a way to kick one out of the pod with a
// reason. The viewer itself is listed first, marked "you", and "observing"
// when it watches without presence (observe=1): then the others' lists do
// not name it.

import { el, setText, str, requestID } from './util.js';
import { mayKind } from './caps.js';

export class ParticipantsView {
  // els: list, count, note; send(obj) sends an envelope and tells whether
  // the connection took it.
  constructor(els, send) {
    this.els = els;
    this.send = send;
    this.you = null;
    this.observing = false;
    this.caps = [];
    this.ids = new Map(); // id -> capabilities
    this.kicking = null; // {id, box, reason}: the open kick form
    this.reqs = new Map(); // gateway/kick request id -> participant id
    els.list.replaceChildren();
    setText(els.count, '');
    this.setNote('', '');
  }

  // welcome takes a welcome: who the viewer is, how it joined, and who is
  // there.
  welcome(you, caps, observing, others) {
    this.you = you;
    this.caps = Array.isArray(caps) ? caps : [];
    this.observing = observing;
    this.ids.clear();
    if (you !== null) this.ids.set(you, caps);
    for (const o of others) this.ids.set(o.id, o.capabilities);
  }

  presence(event, id, caps) {
    if (event === 'join') this.ids.set(id, caps);
    else if (event === 'leave' && id !== this.you) this.ids.delete(id);
  }

  mayKick() {
    return mayKind(this.caps, 'gateway/kick');
  }

  draw() {
    const ids = [...this.ids.keys()].sort((a, b) => (a === this.you ? -1 : b === this.you ? 1 : a < b ? -1 : a > b ? 1 : 0));
    const kick = this.mayKick();
    const frag = document.createDocumentFragment();
    for (const id of ids) {
      const li = el('li');
      li.dataset.id = id;
      li.append(el('span', 'pid', id));
      if (id === this.you) {
        li.append(el('span', 'you', 'you'));
        if (this.observing) {
          const o = el('span', 'you observing', 'observing');
          o.title = 'watching without presence (observe=1): no join or leave is told, and no participant list names you';
          li.append(o);
        }
      }
      const caps = this.ids.get(id);
      if (Array.isArray(caps)) li.append(el('span', 'caps', caps.map(str).join(', ')));
      if (kick && id !== this.you) {
        if (this.kicking && this.kicking.id === id) {
          li.append(this.kicking.box);
        } else {
          const b = el('button', 'kick', 'Kick');
          b.type = 'button';
          b.title = `remove ${id} from the pod (gateway/kick)`;
          b.onclick = () => this.openKick(id);
          li.append(b);
        }
      }
      frag.append(li);
    }
    this.els.list.replaceChildren(frag);
    setText(this.els.count, String(ids.length));
  }

  // openKick shows the form that asks for a reason before the kick.
  openKick(id) {
    const box = el('span', 'kick-form');
    const reason = el('input', 'kick-reason');
    reason.type = 'text';
    reason.maxLength = 500;
    reason.placeholder = 'reason, told to everyone';
    reason.setAttribute('aria-label', `reason to kick ${id}`);
    const go = el('button', 'kick-confirm', `Kick ${id}`);
    go.type = 'button';
    go.onclick = () => this.kick(id, reason.value.trim());
    reason.onkeydown = (e) => {
      if (e.key === 'Enter') go.click();
      if (e.key === 'Escape') cancel.click();
    };
    const cancel = el('button', 'kick-cancel', 'Cancel');
    cancel.type = 'button';
    cancel.onclick = () => {
      this.kicking = null;
      this.draw();
    };
    box.append(reason, go, cancel);
    this.kicking = { id, box };
    this.draw();
    reason.focus();
  }

  kick(id, reason) {
    const rid = requestID();
    const payload = { participant: id };
    if (reason) payload.reason = reason;
    this.kicking = null;
    this.draw();
    if (!this.send({ kind: 'gateway/kick', id: rid, payload })) {
      this.setNote('not connected: kick again once the viewer is live', 'bad');
      return;
    }
    this.reqs.set(rid, id);
    this.setNote(`kicking ${id}…`, 'busy');
  }

  // answer takes the answer to a kick (system/kick) or its refusal; it
  // tells whether env was one.
  answer(env) {
    const id = this.reqs.get(env.correlation_id);
    if (id === undefined) return false;
    this.reqs.delete(env.correlation_id);
    const p = env.payload && typeof env.payload === 'object' ? env.payload : {};
    if (env.kind === 'system/error') {
      this.setNote(`kicking ${id} was refused by the gateway: ${str(p.error)}: ${str(p.message)}`, 'bad');
    } else if (env.kind === 'system/kick') {
      const n = Number.isInteger(p.connections) ? p.connections : 0;
      this.setNote(`kicked ${id}: ${n} connection${n === 1 ? '' : 's'} closed${typeof p.banned_until === 'string' ? `, banned until ${p.banned_until}` : ''}`, 'ok');
    }
    return true;
  }

  connectionLost() {
    if (this.reqs.size === 0) return;
    this.reqs.clear();
    this.setNote('the connection dropped before the gateway answered the kick', 'bad');
  }

  setNote(text, cls) {
    const n = this.els.note;
    setText(n, text);
    n.className = `console-note hint ${cls}`;
    n.hidden = text === '';
  }
}
