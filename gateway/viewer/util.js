// Small helpers shared by the viewer's modules. Every string that comes from
// the pod reaches the page through textContent (el, setText) or an
// attribute, never through HTML parsing.

// el makes an element with an optional class and text.
export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// setText changes an element's text only when it differs, so that an
// unchanged field costs no layout.
export function setText(e, text) {
  if (e.textContent !== text) e.textContent = text;
}

// str shows any JSON value as text.
export function str(v) {
  if (typeof v === 'string') return v;
  if (v === undefined) return '';
  try { return JSON.stringify(v); } catch { return String(v); }
}

export function fmtBytes(n) {
  if (!Number.isFinite(n)) return '?';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

// fmtDur shows a duration coarsely enough that it changes at most once a
// second while young and once a minute after that.
export function fmtDur(ms) {
  if (!Number.isFinite(ms)) return '';
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d`;
}

const pad2 = (n) => String(n).padStart(2, '0');

// fmtClock shows an envelope's ts as local time of day with milliseconds.
export function fmtClock(ts) {
  if (typeof ts !== 'string') return '';
  const t = Date.parse(ts);
  if (!Number.isFinite(t)) return ts;
  const d = new Date(t);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

export function parseTime(s) {
  if (typeof s !== 'string') return null;
  const t = Date.parse(s);
  return Number.isFinite(t) ? t : null;
}

// utf8Length is the size in bytes of a string sent as UTF-8: the size the
// gateway counts for an envelope.
export function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) { n += 4; i++; }
    else n += 3;
  }
  return n;
}

// Deque is an array with a cheap shift, for the envelopes kept in memory
// (the oldest go first when there are too many).
export class Deque {
  constructor() { this.a = []; this.h = 0; }
  get length() { return this.a.length - this.h; }
  push(x) { this.a.push(x); }
  at(i) { return this.a[this.h + i]; }
  shift() {
    if (this.h >= this.a.length) return undefined;
    const x = this.a[this.h];
    this.a[this.h++] = undefined;
    if (this.h > 1024 && this.h * 2 > this.a.length) {
      this.a = this.a.slice(this.h);
      this.h = 0;
    }
    return x;
  }
  toArray() { return this.a.slice(this.h); }
}

let requestSeq = 0;
const requestPrefix = `viewer-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

// requestID names a gateway/* request so that its answer (correlation_id)
// can be told apart. crypto.randomUUID needs a secure context, which a
// gateway on a LAN address over http is not.
export function requestID() {
  return `${requestPrefix}-${++requestSeq}`;
}
