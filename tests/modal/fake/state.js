'use strict';

// state.js - the fake's shared state: the state dir and the maps of apps,
// images, secrets, sandboxes, tasks, execs, recorded calls and armed faults
// (snapshot images are reloaded from DIR/images when first required).

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { EventEmitter } = require('events');
const { opts, warn } = require('./options');

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

const stateDir = path.resolve(opts.state);
const sandboxesDir = path.join(stateDir, 'sandboxes');
const imagesDir = path.join(stateDir, 'images');
fs.mkdirSync(sandboxesDir, { recursive: true });
fs.mkdirSync(imagesDir, { recursive: true });

const apps = new Map();          // app_id -> {app_id, name, environment}
const appsByName = new Map();    // env \0 name -> app_id
const images = new Map();        // image_id -> image
const imagesByKey = new Map();   // definition key -> image_id
const secrets = new Map();       // secret_id -> {secret_id, name, environment, env}
const secretsByName = new Map(); // env \0 name -> secret_id
const sandboxes = new Map();     // sandbox_id -> sandbox
const tasks = new Map();         // task_id -> sandbox
const execs = new Map();         // exec_id -> exec
const calls = [];
const faults = {
  breakOutput: [], failNext: [], outageAfter: [], holdNext: [], dropStdio: [], failAfter: [], routerRefuse: 0,
};
const snapshotsById = new Map();  // TaskSnapshotFilesystem snapshot_id -> image_id

function newId(prefix) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = crypto.randomBytes(22);
  let s = '';
  for (const b of bytes) s += alphabet[b % alphabet.length];
  return `${prefix}-${s}`;
}

function normEnv(e) {
  return e ? e : 'main';
}

// Snapshot images survive restarts (their folders are in DIR/images).
for (const f of fs.readdirSync(imagesDir)) {
  if (!f.endsWith('.json')) continue;
  try {
    const meta = JSON.parse(fs.readFileSync(path.join(imagesDir, f), 'utf8'));
    if (meta.image_id && fs.existsSync(meta.dir)) {
      images.set(meta.image_id, { ...meta, logs: [], events: newEmitter() });
    }
  } catch (e) {
    warn(`ignoring bad image metadata ${f}: ${e.message}`);
  }
}

function newEmitter() {
  const e = new EventEmitter();
  e.setMaxListeners(0);
  return e;
}

module.exports = {
  stateDir, sandboxesDir, imagesDir, apps, appsByName, images, imagesByKey, secrets, secretsByName,
  sandboxes, tasks, execs, calls, faults, snapshotsById, newId, normEnv, newEmitter,
};
