// The pod picker (docs/protocol.md section 10): the join form asks the
// operator's API for the pods the token reaches (GET admin/pods, the token
// in the Authorization header). Only a token that holds gateway/admin (or,
// on an open gateway, a page opened on a loopback address) gets an answer:
// the page then offers those pods, with their member counts, in the pod
// field's suggestions and as buttons under it. Any other token is refused
// (401, 403) and the field stays a plain text field: a token sees no pod
// it could not name already.

import { el, setText } from './util.js';

// MAX_SHOWN bounds the buttons; the field's suggestions hold the same.
const MAX_SHOWN = 200;

export class PodPicker {
  constructor({ input, datalist, list, note }) {
    this.input = input;
    this.datalist = datalist;
    this.list = list;
    this.note = note;
    this.seq = 0;
    this.asked = null;
    this.shown = null;
  }

  // refresh asks with token (empty: none), unless it last asked with the
  // same and force is not set; an older answer that comes late is
  // dropped.
  async refresh(token, force) {
    if (token === this.asked && !force) return;
    this.asked = token;
    const seq = ++this.seq;
    let pods = null;
    let complete = true;
    try {
      const headers = token ? { Authorization: `Bearer ${token}` } : {};
      // Relative, as /ws is: the page works behind a proxy's path prefix.
      const r = await fetch(`admin/pods?cluster=1&limit=${MAX_SHOWN}`, { headers, cache: 'no-store', credentials: 'omit' });
      if (r.ok) {
        const a = await r.json();
        pods = Array.isArray(a.pods) ? a.pods : [];
        complete = a.complete !== false;
      }
    } catch { /* no answer: the plain field */ }
    if (seq !== this.seq) return;
    this.show(pods, complete);
  }

  // show lists pods (null: the token may not list them). The same list
  // again changes nothing: a person about to click one keeps it.
  show(pods, complete) {
    const key = JSON.stringify([pods && pods.map((p) => [p?.name, p?.member_count]), complete]);
    if (key === this.shown) return;
    this.shown = key;
    this.datalist.replaceChildren();
    this.list.replaceChildren();
    if (pods === null) {
      this.list.hidden = true;
      this.note.hidden = true;
      setText(this.note, '');
      return;
    }
    for (const p of pods.slice(0, MAX_SHOWN)) {
      if (typeof p?.name !== 'string') continue;
      const members = Number(p.member_count) || 0;
      const label = `${members} member${members === 1 ? '' : 's'}`;
      const opt = el('option');
      opt.value = p.name;
      opt.label = label;
      this.datalist.append(opt);
      const b = el('button', 'pod-choice');
      b.type = 'button';
      b.dataset.pod = p.name;
      b.append(el('span', 'pod-choice-name', p.name), el('span', 'hint', ` ${label}`));
      b.onclick = () => {
        this.input.value = p.name;
        this.input.focus();
      };
      const li = el('li');
      li.append(b);
      this.list.append(li);
    }
    this.list.hidden = pods.length === 0;
    this.note.hidden = false;
    let text = pods.length === 0 ? 'No pod is open where this token reaches.' : `Pods open where this token reaches (${pods.length}${pods.length >= MAX_SHOWN ? '+' : ''}):`;
    if (!complete) text += ' some gateway nodes did not answer; their pods may be missing.';
    setText(this.note, text);
  }
}
