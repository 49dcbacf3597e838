// The send box: a person's message into the pod (kind chat, {"text": …}),
// in the context selected in the tree, or in the main conversation when
// none is. The page joins with echo=1, so the message shows among the
// envelopes when the gateway relays it; a refusal (system/error) shows
// here with its reason.

import { setText, str, requestID } from './util.js';
import { mayKind, capsText } from './caps.js';

export class Composer {
  // els: form, label, input, button, note; send(obj) sends an envelope and
  // tells whether the connection took it.
  constructor(els, send) {
    this.els = els;
    this.send = send;
    this.ctx = null;
    this.allowed = false;
    this.sent = new Map(); // ids sent and not yet relayed or refused -> text
    els.form.onsubmit = (e) => {
      e.preventDefault();
      this.submit();
    };
    this.setWho([]);
  }

  // setWho takes the token's capabilities: a token that may not send chat
  // gets a disabled box that says why.
  setWho(caps) {
    this.allowed = mayKind(caps, 'chat');
    this.els.input.disabled = !this.allowed;
    this.els.button.disabled = !this.allowed;
    this.els.input.placeholder = this.allowed ? 'a message to the pod' : 'this token may not send messages';
    if (!this.allowed) this.note(`This token may not send messages: its capabilities (${capsText(caps)}) allow no kind chat.`, 'bad');
    else this.note('', '');
    this.drawLabel();
  }

  // setContext follows the tree's selection (null: the main conversation).
  setContext(ctx) {
    this.ctx = ctx;
    this.drawLabel();
  }

  drawLabel() {
    const c = this.ctx;
    let text = 'Message to the main conversation';
    if (c !== null) {
      text = `Message in ${c.id}`;
      if (c.state === 'concluded') text += ' (concluded: a message opens it again)';
    }
    setText(this.els.label, text);
  }

  note(text, cls) {
    setText(this.els.note, text);
    this.els.note.className = `send-note hint ${cls}`;
  }

  submit() {
    const text = this.els.input.value;
    if (!this.allowed || text.trim() === '') return;
    const id = requestID();
    const env = { id, kind: 'chat', payload: { text } };
    const c = this.ctx;
    if (c !== null) env.context = c.path ? c.id : { id: c.id };
    if (!this.send(env)) {
      this.note('not connected: send it again once the viewer is live', 'bad');
      return;
    }
    this.sent.set(id, text);
    this.els.input.value = '';
    this.note(c !== null ? `sending in ${c.id}…` : 'sending…', 'busy');
  }

  // delivered notes the relay of a message this page sent (its echo).
  delivered(env) {
    if (typeof env.id !== 'string' || !this.sent.has(env.id)) return;
    this.sent.delete(env.id);
    this.note('sent', 'ok');
  }

  // answer takes the refusal of a message this page sent; it tells
  // whether env was one.
  answer(env) {
    const text = this.sent.get(env.correlation_id);
    if (text === undefined || env.kind !== 'system/error') return false;
    this.sent.delete(env.correlation_id);
    const p = env.payload && typeof env.payload === 'object' ? env.payload : {};
    this.note(`refused by the gateway: ${str(p.error)}: ${str(p.message)} (the message was "${text}")`, 'bad');
    if (this.els.input.value === '') this.els.input.value = text;
    return true;
  }

  connectionLost() {
    if (this.sent.size === 0) return;
    this.sent.clear();
    this.note('the connection dropped before the gateway relayed the message: look for it among the envelopes', 'bad');
  }
}
