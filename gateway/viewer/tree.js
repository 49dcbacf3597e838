// The context tree: a WAI-ARIA tree of HTML text (so the browser's find in
// page reaches it and ids can be copied), drawn from the model. A frame
// redraws only the nodes the model marked dirty.

import { el, setText, fmtBytes, fmtDur } from './util.js';

export class TreeView {
  constructor(root, model, onSelect) {
    this.root = root;
    this.model = model;
    this.onSelect = onSelect;
    this.byLi = new WeakMap();
    this.labelSeq = 0;
    this.selected = null; // the selected Ctx; null is the main context

    const li = this.mainLi = el('li', 'main-item st-active');
    li.setAttribute('role', 'treeitem');
    li.setAttribute('aria-level', '1');
    li.setAttribute('aria-selected', 'true');
    li.dataset.main = '';
    li.tabIndex = 0;
    const row = el('div', 'row');
    const label = el('span', 'cid', 'main');
    label.id = 'ctx-label-main';
    li.setAttribute('aria-labelledby', label.id);
    this.mainCount = el('span', 'num msgs', '0 msg');
    row.append(el('span', 'twisty'), label, el('span', 'hint', 'envelopes without a context'), this.mainCount);
    li.append(row);
    root.replaceChildren(li);
    this.focused = li;

    root.onclick = (e) => this.onClick(e);
    root.onkeydown = (e) => this.onKey(e);
  }

  // flush redraws the dirty nodes; it tells whether the selected one was
  // among them.
  flush() {
    const dirty = this.model.dirty;
    let selected = false;
    for (const c of dirty) {
      this.render(c);
      if (c === this.selected) selected = true;
    }
    dirty.clear();
    setText(this.mainCount, `${this.model.main.length} msg`);
    return selected;
  }

  ensureEl(c) {
    let u = c.ui;
    if (!u) {
      u = c.ui = { st: '', group: null };
      const li = u.li = document.createElement('li');
      li.setAttribute('role', 'treeitem');
      li.setAttribute('aria-selected', 'false');
      li.tabIndex = -1;
      li.dataset.id = c.id;
      const row = el('div', 'row');
      u.twisty = el('span', 'twisty');
      u.twisty.setAttribute('aria-hidden', 'true');
      u.cid = el('span', 'cid', c.id);
      u.cid.id = `ctx-label-${++this.labelSeq}`;
      li.setAttribute('aria-labelledby', u.cid.id);
      u.type = el('span', 'type');
      u.state = el('span', 'state');
      u.depth = el('span', 'num depth');
      u.msgs = el('span', 'num msgs');
      u.bytes = el('span', 'num bytes');
      u.age = el('span', 'num age');
      u.totals = el('span', 'totals');
      row.append(u.twisty, u.cid, u.type, u.state, u.depth, u.msgs, u.bytes, u.age, u.totals);
      li.append(row);
      this.byLi.set(li, c);
    }
    const parentGroup = c.parent ? this.ensureGroup(c.parent) : this.root;
    if (u.li.parentNode !== parentGroup) parentGroup.append(u.li);
  }

  ensureGroup(p) {
    this.ensureEl(p);
    if (!p.ui.group) {
      const g = p.ui.group = document.createElement('ul');
      g.setAttribute('role', 'group');
      // The browser's find in page unfolds a folded subtree it finds in.
      g.addEventListener('beforematch', () => {
        p.userFold = false;
        this.model.touch(p);
      });
      p.ui.li.append(g);
      this.renderFold(p);
    }
    return p.ui.group;
  }

  render(c) {
    this.ensureEl(c);
    const u = c.ui;
    const li = u.li;
    const level = String(c.level());
    if (li.getAttribute('aria-level') !== level) li.setAttribute('aria-level', level);
    const st = !c.known ? 'implied' : c.state === 'concluded' ? 'concluded' : 'active';
    if (u.st !== st) {
      if (u.st) li.classList.remove(`st-${u.st}`);
      li.classList.add(`st-${st}`);
      u.st = st;
    }
    setText(u.type, c.type ?? '');
    setText(u.state, st === 'implied' ? (c.path ? 'path prefix' : 'not seen')
      : st === 'concluded' ? `concluded: ${c.reason ?? '?'}` : 'active');
    if (st === 'implied') {
      u.state.title = c.path ? 'a prefix of a path context, not a context of its own'
        : 'named only as the parent of another context: no envelope here opened it';
    } else if (u.state.title) {
      u.state.title = '';
    }
    setText(u.depth, `depth ${c.depth ?? c.level()}`);
    setText(u.msgs, `${c.messages} msg`);
    setText(u.bytes, fmtBytes(c.bytes));
    this.renderAge(c, Date.now());
    setText(u.totals, c.children.length > 0
      ? `nested: ${c.sub.contexts} ctx · ${c.sub.messages} msg · ${fmtBytes(c.sub.bytes)}` : '');
    this.renderFold(c);
  }

  renderAge(c, now) {
    let text = '';
    if (c.created !== null) {
      text = c.state === 'concluded' && c.concluded !== null
        ? `lived ${fmtDur(c.concluded - c.created)}`
        : `age ${fmtDur(now - c.created)}`;
    }
    setText(c.ui.age, text);
  }

  // tick refreshes the ages of the active contexts (once a second).
  tick() {
    const now = Date.now();
    for (const c of this.model.contexts.values()) {
      if (c.ui && c.state === 'active') this.renderAge(c, now);
    }
  }

  renderFold(c) {
    const u = c.ui;
    const li = u.li;
    if (c.children.length === 0) {
      li.removeAttribute('aria-expanded');
      setText(u.twisty, '');
      return;
    }
    const open = c.expanded();
    const v = String(open);
    if (li.getAttribute('aria-expanded') !== v) li.setAttribute('aria-expanded', v);
    setText(u.twisty, open ? '▾' : '▸');
    const g = u.group;
    if (!g) return;
    if (open) {
      g.removeAttribute('hidden');
    } else if (g.getAttribute('hidden') !== 'until-found') {
      g.setAttribute('hidden', 'until-found');
      if (g.contains(this.focused)) this.setFocus(li, document.activeElement === this.focused);
    }
  }

  toggle(c, open) {
    c.userFold = !open;
    this.renderFold(c);
  }

  // ctxOf is the context of a tree item: null for main, undefined for
  // anything else.
  ctxOf(li) {
    return li === this.mainLi ? null : this.byLi.get(li);
  }

  liOf(c) {
    if (c === null) return this.mainLi;
    this.ensureEl(c);
    return c.ui.li;
  }

  select(c, focus) {
    const prev = this.selected === null ? this.mainLi : this.selected.ui && this.selected.ui.li;
    if (prev) prev.setAttribute('aria-selected', 'false');
    this.selected = c;
    const li = this.liOf(c);
    li.setAttribute('aria-selected', 'true');
    this.setFocus(li, focus);
    this.onSelect(c);
  }

  setFocus(li, move) {
    if (this.focused !== li) {
      if (this.focused) this.focused.tabIndex = -1;
      li.tabIndex = 0;
      this.focused = li;
    }
    if (move) li.focus();
  }

  onClick(e) {
    const row = e.target.closest('.row');
    if (!row || !this.root.contains(row)) return;
    const li = row.parentElement;
    const c = this.ctxOf(li);
    if (c === undefined) return;
    if (c !== null && e.target.classList.contains('twisty') && c.children.length > 0) {
      this.toggle(c, !c.expanded());
      this.setFocus(li, true);
      return;
    }
    // A click that ends a text selection (copying an id) selects nothing.
    const s = window.getSelection();
    if (s && !s.isCollapsed && row.contains(s.anchorNode)) return;
    this.select(c, true);
  }

  onKey(e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const li = e.target.closest('[role=treeitem]');
    if (!li || !this.root.contains(li)) return;
    const c = this.ctxOf(li);
    if (c === undefined) return;
    const hasKids = c !== null && c.children.length > 0;
    let next = null;
    switch (e.key) {
      case 'ArrowDown': next = nextVisible(li); break;
      case 'ArrowUp': next = prevVisible(li); break;
      case 'Home': next = this.root.firstElementChild; break;
      case 'End': next = lastVisible(this.root); break;
      case 'ArrowRight':
        if (hasKids && !c.expanded()) this.toggle(c, true);
        else if (hasKids) next = c.ui.group && c.ui.group.firstElementChild;
        break;
      case 'ArrowLeft':
        if (hasKids && c.expanded()) this.toggle(c, false);
        else next = parentItem(li);
        break;
      case 'Enter':
      case ' ':
        this.select(c, true);
        break;
      default:
        return;
    }
    e.preventDefault();
    if (next) this.setFocus(next, true);
  }
}

function groupOf(li) {
  const g = li.lastElementChild;
  return g && g.getAttribute('role') === 'group' ? g : null;
}

function isOpen(li) {
  return li.getAttribute('aria-expanded') === 'true';
}

function parentItem(li) {
  const g = li.parentElement;
  return g && g.getAttribute('role') === 'group' ? g.parentElement : null;
}

function nextVisible(li) {
  if (isOpen(li)) {
    const g = groupOf(li);
    if (g && g.firstElementChild) return g.firstElementChild;
  }
  for (let cur = li; cur; cur = parentItem(cur)) {
    if (cur.nextElementSibling) return cur.nextElementSibling;
  }
  return null;
}

function prevVisible(li) {
  let p = li.previousElementSibling;
  if (!p) return parentItem(li);
  for (;;) {
    const g = isOpen(p) ? groupOf(p) : null;
    if (!g || !g.lastElementChild) return p;
    p = g.lastElementChild;
  }
}

function lastVisible(root) {
  let p = root.lastElementChild;
  for (;;) {
    const g = p && isOpen(p) ? groupOf(p) : null;
    if (!g || !g.lastElementChild) return p;
    p = g.lastElementChild;
  }
}
