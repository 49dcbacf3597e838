// The viewer's connection to the gateway: one WebSocket at a time, joined
// as an observer where the token allows it (observe=1: no presence, in no
// participant list) and as an ordinary participant where it does not,
// reconnected with backoff and resumed from the last envelope that
// history keeps (docs/protocol.md section 8).

import { utf8Length } from './util.js';

// HISTORY is how many past envelopes a join asks for (history=).
export const HISTORY = 200;

const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 15000;

// Refusals that trying again cannot cure (docs/protocol.md section 1).
const FINAL = new Set([400, 401, 403]);

export class Connection {
  // opts: pod, participant, token, and the callbacks
  //   onWelcome(env, {again, resume, observing})
  //                                     a welcome; again on a reconnection;
  //                                     observing when joined with observe=1
  //   onEnvelope(env, bytes, line)      every later envelope, and its JSON text
  //   onStatus(state, text)             connecting | live | reconnecting | failed
  //   onRefused(status, error, message) the gateway refused the join for good
  //   onReplaced()                      another connection took our id
  //   resumeFrom()                      the id to resume after, or null
  constructor(opts) {
    Object.assign(this, opts);
    this.ws = null;
    this.stopped = false;
    this.failures = 0;
    this.welcomed = false; // some connection got a welcome
    this.timer = null;
    // The first join asks to watch without presence; a token without
    // gateway/observe is refused that (403), and then joins as an ordinary
    // participant. Once a welcome came, the connection stays as it joined.
    this.observe = true;
  }

  // url is the /ws URL. The token goes here and nowhere else: a browser
  // cannot set the Authorization header of a WebSocket.
  url(resume) {
    // Relative to the page, so that a gateway behind a reverse proxy
    // under a path prefix works too.
    const u = new URL('ws', location.href);
    u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const q = u.searchParams;
    q.set('pod', this.pod);
    if (this.participant) q.set('participant', this.participant);
    if (this.token) q.set('token', this.token);
    q.set('batch', '1');
    q.set('history', String(HISTORY));
    // The page's own messages come back once relayed: they show among
    // the envelopes as the pod has them.
    q.set('echo', '1');
    if (this.observe) q.set('observe', '1');
    if (resume) q.set('resume', resume);
    return u.toString();
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000, 'viewer left');
  }

  // reconnect tries again at once (after a refusal or a replacement).
  reconnect() {
    clearTimeout(this.timer);
    if (this.ws) return;
    this.stopped = false;
    this.connect();
  }

  send(obj) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(obj));
    return true;
  }

  connect() {
    const again = this.welcomed;
    const resume = again ? this.resumeFrom() : null;
    const url = this.url(resume);
    const observing = this.observe;
    this.onStatus(again ? 'reconnecting' : 'connecting', again ? 'reconnecting…' : 'connecting…');
    let ws;
    try {
      ws = new WebSocket(url);
    } catch (e) {
      this.onStatus('failed', `cannot open a WebSocket: ${e.message}`);
      return;
    }
    this.ws = ws;
    let welcomed = false;
    ws.onmessage = (ev) => {
      if (this.ws !== ws || typeof ev.data !== 'string') return;
      // With batch=1 a message holds several envelopes, one per line.
      for (const line of ev.data.split('\n')) {
        if (line === '') continue;
        let env;
        try {
          env = JSON.parse(line);
        } catch {
          continue;
        }
        if (!env || typeof env !== 'object' || Array.isArray(env)) continue;
        if (!welcomed) {
          if (env.kind !== 'system/welcome') continue;
          welcomed = true;
          this.welcomed = true;
          this.failures = 0;
          const you = env.payload && env.payload.you;
          // Come back as the same participant (the gateway may have made
          // the id up); with a token file the token names it anyway.
          if (you && typeof you.id === 'string') this.participant = you.id;
          this.onStatus('live', 'live');
          this.onWelcome(env, { again, resume, observing });
          continue;
        }
        this.onEnvelope(env, utf8Length(line), line);
      }
    };
    ws.onerror = () => {}; // onclose follows, with what there is to know
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.stopped) return;
      if (!welcomed) {
        this.diagnose(url, observing);
        return;
      }
      if (ev.code === 4000) {
        this.onStatus('failed', 'replaced');
        this.onReplaced();
        return;
      }
      // The gateway wants this participant gone (docs/protocol.md section
      // 5): coming straight back would undo it.
      const final = { 4401: 'the token expired', 4403: 'the token was revoked', 4410: 'removed from the pod by a moderator' }[ev.code];
      if (final) {
        this.onStatus('failed', ev.reason ? `${final}: ${ev.reason}` : final);
        return;
      }
      const why = ev.code === 1001 ? 'the gateway is shutting down'
        : ev.code === 4008 ? 'the viewer fell behind (slow consumer)'
        : ev.code === 4503 ? 'the gateway node lost the pod\'s order; resuming'
        : `connection lost (code ${ev.code})`;
      this.retry(why);
    };
  }

  // diagnose finds out why an upgrade failed. A browser's WebSocket only
  // sees a failed connection, so the same URL is fetched as a plain GET:
  // a refused join answers it with the JSON refusal {"error","message"}.
  async diagnose(url, observing) {
    let status = 0;
    let body = null;
    try {
      const r = await fetch(url.replace(/^ws/, 'http'), { cache: 'no-store', credentials: 'omit' });
      status = r.status;
      const text = await r.text();
      try { body = JSON.parse(text); } catch { body = null; }
    } catch {
      if (!this.stopped) this.retry('the gateway cannot be reached');
      return;
    }
    if (this.stopped) return;
    if (body && typeof body === 'object' && typeof body.error === 'string') {
      const message = typeof body.message === 'string' ? body.message : '';
      if (status === 403 && observing && !this.welcomed) {
        // Refused to watch without presence (or refused for another
        // reason, which the join without observe=1 meets again): join as
        // an ordinary participant, at once, and say so.
        this.observe = false;
        this.connect();
        return;
      }
      if (FINAL.has(status)) {
        this.onStatus('failed', `refused: ${body.error}`);
        this.onRefused(status, body.error, message);
        return;
      }
      this.retry(`refused: ${body.error}: ${message}`);
      return;
    }
    this.retry('the connection failed');
  }

  retry(why) {
    const n = this.failures++;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** n);
    const delay = Math.round(base * (0.75 + Math.random() * 0.5));
    this.onStatus('reconnecting', `${why}; reconnecting in ${(delay / 1000).toFixed(1)}s…`);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (!this.stopped) this.connect();
    }, delay);
  }
}
