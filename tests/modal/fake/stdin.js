'use strict';

// stdin.js - feeding a process's stdin in order (by index or by offset),
// duplicates from retries ignored.

const { STATUS } = require('./options');
const { fail } = require('./errors');

// ---------------------------------------------------------------------------
// Stdin feeding (ordered by index, duplicates from retries ignored)
// ---------------------------------------------------------------------------

function makeStdin(child) {
  const st = { next: 1, pending: new Map(), closed: false, bytes: 0, child };
  child.stdin.on('error', () => { /* EPIPE: the process no longer reads */ });
  return st;
}

function feedStdin(st, index, data, eof) {
  if (!st || st.closed) return;
  let idx = Number(index) || 0;
  if (idx === 0) idx = st.next; // unnumbered: take the next slot
  if (idx < st.next || st.pending.has(idx)) return; // a retry of something we have
  st.pending.set(idx, { data, eof });
  while (st.pending.has(st.next)) {
    const m = st.pending.get(st.next);
    st.pending.delete(st.next);
    st.next++;
    if (m.data && m.data.length) {
      st.bytes += m.data.length;
      if (!st.child.stdin.destroyed) st.child.stdin.write(m.data);
    }
    if (m.eof) {
      st.closed = true;
      st.pending.clear();
      if (!st.child.stdin.destroyed) st.child.stdin.end();
      break;
    }
  }
}

// Router stdin: by byte offset. A write that overlaps what was written is a
// retry (the overlap is skipped); one past the end is refused.
function feedStdinAt(st, offset, data, eof) {
  if (!st) return;
  const off = Number(offset) || 0;
  const d = data ? Buffer.from(data) : Buffer.alloc(0);
  if (st.closed) {
    if (off + d.length > st.bytes) fail(STATUS.FAILED_PRECONDITION, 'stdin is already closed');
    return;
  }
  if (off > st.bytes) {
    fail(STATUS.FAILED_PRECONDITION, `stdin offset ${off} is past the ${st.bytes} bytes written so far`);
  }
  const tail = d.subarray(st.bytes - off);
  if (tail.length) {
    st.bytes += tail.length;
    if (!st.child.stdin.destroyed) st.child.stdin.write(tail);
  }
  if (eof) {
    st.closed = true;
    if (!st.child.stdin.destroyed) st.child.stdin.end();
  }
}

module.exports = { makeStdin, feedStdin, feedStdinAt };
