#!/usr/bin/env node
// The fake's stand-in for /__modal/.bin/modal-sandbox-fs-tools, the
// filesystem tool Modal puts in every sandbox and today's SDKs exec with one
// JSON command as argv[1] (npm modal 0.11.1, src/sandbox_fs.ts):
//   {"ReadFile":{"path"}}               file bytes on stdout
//   {"WriteFile":{"path"}}              stdin into the file (parents created)
//   {"ListFiles":{"path"}}              JSON array of entries on stdout
//   {"Stat":{"path"}}                   one JSON entry on stdout
//   {"MakeDirectory":{"path","parents"}}
//   {"Remove":{"path","recursive"}}
//   {"Watch":{"path","recursive","filter","timeout_secs"}}  one JSON line per
//                                       change on stdout, {"event_type":
//                                       Create|Modify|Remove, "paths":[...]},
//                                       until stdin ends or timeout_secs
//                                       (then exit 0); filter null = all
//                                       types, [] = none (the SDK's shapes)
// An entry is {name, path, type: file|directory|symlink, size, mode,
// permissions, owner, group, modified_time, symlink_target}. A failure exits
// 1 with {"error_kind","message","detail"} on stderr; the kinds are those the
// SDK maps (NotFound, IsDirectory, NotDirectory, PathAlreadyExists,
// DirectoryNotEmpty, PermissionDenied, FileTooLarge, NotSupported, Other).
// Paths are sandbox paths: the server passes the sandbox root in
// MODAL_SANDBOX_ROOT and each path P is <root>P on the host.

'use strict';

const fs = require('fs');
const path = require('path');

const MAX_READ_BYTES = 64 * 1024 * 1024;
const root = process.env.MODAL_SANDBOX_ROOT;

function die(kind, message, detail) {
  process.stderr.write(JSON.stringify({ error_kind: kind, message, detail: detail || '' }));
  process.exit(1);
}

function kindOf(e) {
  switch (e && e.code) {
    case 'ENOENT': return ['NotFound', 'No such file or directory'];
    case 'EISDIR': return ['IsDirectory', 'Is a directory'];
    case 'ENOTDIR': return ['NotDirectory', 'Not a directory'];
    case 'EEXIST': return ['PathAlreadyExists', 'Path already exists'];
    case 'ENOTEMPTY': return ['DirectoryNotEmpty', 'Directory not empty'];
    case 'EACCES': case 'EPERM': return ['PermissionDenied', 'Permission denied'];
    default: return ['Other', e && e.message ? e.message : String(e)];
  }
}

function fail(e) {
  const [k, m] = kindOf(e);
  die(k, m, e && e.message);
}

function hostPath(p) {
  if (typeof p !== 'string' || !p.startsWith('/')) die('Other', 'path must be absolute', String(p));
  return path.join(root, path.posix.normalize(p));
}

function perms(mode) {
  const t = (mode & 0o170000) === 0o040000 ? 'd' : (mode & 0o170000) === 0o120000 ? 'l' : '-';
  let s = t;
  for (const sh of [6, 3, 0]) {
    const b = (mode >> sh) & 7;
    s += (b & 4 ? 'r' : '-') + (b & 2 ? 'w' : '-') + (b & 1 ? 'x' : '-');
  }
  return s;
}

function entry(p) {
  const st = fs.lstatSync(hostPath(p));
  const type = st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'file';
  return {
    name: path.posix.basename(p) || '/', path: p, type, size: st.size, mode: st.mode & 0o7777,
    permissions: perms(st.mode), owner: String(st.uid), group: String(st.gid),
    modified_time: Math.floor(st.mtimeMs / 1000),
    symlink_target: type === 'symlink' ? fs.readlinkSync(hostPath(p)) : null,
  };
}

// Watch through fs.watch (inotify): it cannot tell a rename from a create or
// a delete, so renames come as Remove + Create (Modal's tool, built on Rust's
// notify, may also say Rename/RenameFrom/RenameTo).
function watch(a) {
  const hp = hostPath(a.path);
  fs.statSync(hp); // NotFound before anything is watched
  const allow = Array.isArray(a.filter) ? new Set(a.filter) : null;
  const emit = (type, p) => {
    if (allow && !allow.has(type)) return;
    process.stdout.write(JSON.stringify({ event_type: type, paths: [p] }) + '\n');
  };
  const w = fs.watch(hp, { recursive: !!a.recursive }, (ev, name) => {
    if (!name) return;
    const host = fs.statSync(hp).isDirectory() ? path.join(hp, name) : hp;
    const p = path.posix.join('/', path.relative(root, host));
    if (ev === 'change') emit('Modify', p);
    else emit(fs.existsSync(host) ? 'Create' : 'Remove', p);
  });
  w.on('error', (e) => fail(e));
  const stop = () => { w.close(); process.exit(0); };
  process.stdin.on('end', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
  if (Number(a.timeout_secs) > 0) setTimeout(stop, Number(a.timeout_secs) * 1000);
}

function main() {
  if (!root) die('Other', 'MODAL_SANDBOX_ROOT is not set');
  let cmd;
  try {
    cmd = JSON.parse(process.argv[2] || '');
  } catch (e) {
    die('Other', 'the command is not JSON', e.message);
  }
  const [op] = Object.keys(cmd || {});
  const a = (cmd && cmd[op]) || {};
  try {
    switch (op) {
      case 'ReadFile': {
        const st = fs.statSync(hostPath(a.path));
        if (st.isDirectory()) die('IsDirectory', 'Is a directory');
        if (st.size > MAX_READ_BYTES) die('FileTooLarge', `File is larger than ${MAX_READ_BYTES} bytes`);
        process.stdout.write(fs.readFileSync(hostPath(a.path)));
        return;
      }
      case 'WriteFile': {
        const hp = hostPath(a.path);
        fs.mkdirSync(path.dirname(hp), { recursive: true });
        if (fs.existsSync(hp) && fs.statSync(hp).isDirectory()) die('IsDirectory', 'Is a directory');
        const tmp = `${hp}.fs-tools-${process.pid}`;
        const out = fs.createWriteStream(tmp);
        process.stdin.pipe(out);
        out.on('finish', () => {
          try {
            fs.renameSync(tmp, hp);
          } catch (e) {
            fail(e);
          }
        });
        out.on('error', fail);
        return;
      }
      case 'ListFiles': {
        const hp = hostPath(a.path);
        if (!fs.statSync(hp).isDirectory()) die('NotDirectory', 'Not a directory');
        const names = fs.readdirSync(hp).sort();
        process.stdout.write(JSON.stringify(names.map((n) => entry(path.posix.join(a.path, n)))));
        return;
      }
      case 'Stat':
        process.stdout.write(JSON.stringify(entry(a.path)));
        return;
      case 'MakeDirectory': {
        const hp = hostPath(a.path);
        if (!a.parents && fs.existsSync(hp)) die('PathAlreadyExists', 'Path already exists');
        fs.mkdirSync(hp, { recursive: !!a.parents });
        return;
      }
      case 'Remove': {
        const hp = hostPath(a.path);
        const st = fs.lstatSync(hp);
        if (st.isDirectory()) {
          if (!a.recursive && fs.readdirSync(hp).length) die('DirectoryNotEmpty', 'Directory not empty');
          fs.rmSync(hp, { recursive: true });
        } else {
          fs.unlinkSync(hp);
        }
        return;
      }
      case 'Watch':
        watch(a);
        return;
      default:
        die('NotSupported', `the fake's fs-tools has no command ${JSON.stringify(op)}`);
    }
  } catch (e) {
    fail(e);
  }
}

main();
