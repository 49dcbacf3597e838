// JSON shown to a person who decides on it (a proposed call): the text the
// gateway sent, not what JSON.parse makes of it. JSON.parse turns a number
// such as 12345678901234567890 into 12345678901234567000, so an approval
// page that re-serialized the parsed call would show a different call from
// the one it approves. Here values are cut out of the received line and
// re-indented token by token: numbers, true, false and null as they came;
// strings decoded and written again, so that "\u003cimg" (Go's escaping)
// reads "<img"; characters that would hide or reorder text (bidi
// overrides, zero-width and other format characters, line separators, C1
// controls) written as \uXXXX escapes, so that what shows is what runs.
// The result is always set as text (textContent), never parsed as HTML.

const WS = ' \t\n\r';

function skipWS(s, i) {
  while (i < s.length && WS.includes(s[i])) i++;
  return i;
}

// skipString returns the index after the string that starts at s[i] ('"').
function skipString(s, i) {
  for (i++; i < s.length; i++) {
    const c = s[i];
    if (c === '\\') i++;
    else if (c === '"') return i + 1;
  }
  throw new SyntaxError('unterminated string');
}

// skipLiteral returns the index after a number, true, false or null.
function skipLiteral(s, i) {
  let j = i;
  while (j < s.length && !WS.includes(s[j]) && !',:]}'.includes(s[j])) j++;
  if (j === i) throw new SyntaxError(`unexpected ${s[i] ?? 'end'} at ${i}`);
  return j;
}

// skipValue returns the index after the value that starts at or after i.
// It keeps a stack of its own rather than recursing, so that deep nesting
// costs no JavaScript stack.
function skipValue(s, i) {
  i = skipWS(s, i);
  const stack = [];
  for (;;) {
    const c = s[i];
    if (c === '{' || c === '[') {
      stack.push(c === '{' ? '}' : ']');
      i = skipWS(s, i + 1);
      if (s[i] === stack[stack.length - 1]) {
        stack.pop();
        i++;
      } else {
        if (c === '{') i = skipKey(s, i);
        continue;
      }
    } else if (c === '"') {
      i = skipString(s, i);
    } else {
      i = skipLiteral(s, i);
    }
    // After a value: close what ends here, or go to the next member.
    for (;;) {
      if (stack.length === 0) return i;
      i = skipWS(s, i);
      if (s[i] === ',') {
        i = skipWS(s, i + 1);
        if (stack[stack.length - 1] === '}') i = skipKey(s, i);
        break;
      }
      if (s[i] !== stack[stack.length - 1]) throw new SyntaxError(`unexpected ${s[i] ?? 'end'} at ${i}`);
      stack.pop();
      i++;
    }
  }
}

// skipKey passes an object's key and its colon.
function skipKey(s, i) {
  if (s[i] !== '"') throw new SyntaxError(`expected a key at ${i}`);
  i = skipWS(s, skipString(s, i));
  if (s[i] !== ':') throw new SyntaxError(`expected : at ${i}`);
  return skipWS(s, i + 1);
}

// rawAt returns the text of the value at path (keys and array indexes) in
// the JSON text s, or null when there is none. Where an object repeats a
// key, the last one counts, as it does for JSON.parse.
export function rawAt(s, path) {
  try {
    let start = skipWS(s, 0);
    for (const step of path) {
      let found = -1;
      if (typeof step === 'number') {
        if (s[start] !== '[') return null;
        let i = skipWS(s, start + 1);
        for (let n = 0; s[i] !== ']'; n++) {
          if (n === step) {
            found = i;
            break;
          }
          i = skipWS(s, skipValue(s, i));
          if (s[i] === ',') i = skipWS(s, i + 1);
        }
      } else {
        if (s[start] !== '{') return null;
        let i = skipWS(s, start + 1);
        while (s[i] !== '}') {
          const keyEnd = skipString(s, i);
          const key = JSON.parse(s.slice(i, keyEnd));
          i = skipWS(s, keyEnd);
          i = skipWS(s, i + 1); // the colon
          if (key === step) found = i;
          i = skipWS(s, skipValue(s, i));
          if (s[i] === ',') i = skipWS(s, i + 1);
        }
      }
      if (found < 0) return null;
      start = found;
    }
    return s.slice(start, skipValue(s, start));
  } catch {
    return null;
  }
}

// HIDING matches the characters that could make text read other than it
// is: format characters (bidi controls, zero-width ones), line and
// paragraph separators, and C1 controls.
const HIDING = /[\p{Cf}\p{Zl}\p{Zp}\u0080-\u009f]/gu;

// visible writes the characters that could hide or reorder text as \uXXXX.
export function visible(text) {
  return String(text).replace(HIDING, (c) => {
    let out = '';
    for (let i = 0; i < c.length; i++) out += `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`;
    return out;
  });
}

// Indentation stops growing this deep, and the text stops this long (a
// proposal's payload may be up to the gateway's message limit): a page
// that froze on a hostile call would decide nothing.
const MAX_INDENT = 16;
export const MAX_PRETTY = 256 * 1024;

// prettyJSON indents the JSON text raw by two spaces, keeping every number
// and literal as written and every string's value (see above). Text that
// is not JSON comes back as it is, made visible; text past MAX_PRETTY is
// cut, and says so.
export function prettyJSON(raw) {
  const s = String(raw);
  try {
    JSON.parse(s);
  } catch {
    return visible(s);
  }
  let out = '';
  let depth = 0;
  const nl = () => '\n' + '  '.repeat(Math.min(depth, MAX_INDENT));
  try {
    for (let i = 0; i < s.length;) {
      if (out.length > MAX_PRETTY) {
        return `${out}\n… cut here: the whole text is ${s.length} characters (open the envelope's JSON)`;
      }
      const c = s[i];
      if (WS.includes(c)) {
        i++;
      } else if (c === '"') {
        const j = skipString(s, i);
        out += visible(JSON.stringify(JSON.parse(s.slice(i, j))));
        i = j;
      } else if (c === '{' || c === '[') {
        const k = skipWS(s, i + 1);
        if (s[k] === (c === '{' ? '}' : ']')) {
          out += c + s[k];
          i = k + 1;
        } else {
          depth++;
          out += c + nl();
          i++;
        }
      } else if (c === '}' || c === ']') {
        depth--;
        out += nl() + c;
        i++;
      } else if (c === ',') {
        out += ',' + nl();
        i++;
      } else if (c === ':') {
        out += ': ';
        i++;
      } else {
        const j = skipLiteral(s, i);
        out += s.slice(i, j);
        i = j;
      }
    }
  } catch {
    return visible(s);
  }
  return out;
}
