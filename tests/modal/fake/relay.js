'use strict';

// relay.js - the TCP relay in front of grpc-js and the outages it plays
// (POST /outage, fault outage_after). relay.fatal is the entry point's
// shutdown, set before anything listens.

const net = require('net');
const { log, opts, warn } = require('./options');

// ---------------------------------------------------------------------------
// The gRPC port clients see: a TCP relay in front of grpc-js, so that an
// outage can cut connections and refuse new ones like a real network fault
// ---------------------------------------------------------------------------

// One relay per port clients see (the control plane, the command router):
// an outage cuts and refuses them all, as a real network fault would.
const relay = {
  links: [], pairs: new Set(), outage: null, outages: 0, resets: 0,
  fatal: null, // shutdown(code) of the entry point, which requires this file
};

function newLink(backend) {
  const link = { server: null, port: 0, backend };
  relay.links.push(link);
  return link;
}

function relayAccept(link, client) {
  if (relay.outage) { // mode "reset": accepted, then reset before any byte is read
    relay.resets++;
    client.resetAndDestroy();
    return;
  }
  const up = net.connect(link.backend, '127.0.0.1');
  const pair = { client, up };
  relay.pairs.add(pair);
  client.setNoDelay(true);
  up.setNoDelay(true);
  const drop = () => {
    relay.pairs.delete(pair);
    if (!client.destroyed) client.destroy();
    if (!up.destroyed) up.destroy();
  };
  client.on('error', drop);
  up.on('error', drop);
  client.on('close', drop);
  up.on('close', drop);
  client.pipe(up);
  up.pipe(client);
}

function relayListen(link, port, cb) {
  const srv = net.createServer((c) => relayAccept(link, c));
  link.server = srv;
  srv.on('error', (e) => {
    if (e.code === 'EADDRINUSE' && port) { // taken meanwhile: try again shortly
      warn(`relay: port ${port} busy (${e.message}); retrying`);
      setTimeout(() => { if (link.server === srv) srv.listen(port, opts.host); }, 100);
      return;
    }
    warn(`relay error: ${e.message}`);
    relay.fatal(1);
  });
  srv.listen(port, opts.host, () => {
    link.port = srv.address().port;
    if (cb) cb(link.port);
  });
}

function startOutage(seconds, mode) {
  if (relay.outage) clearTimeout(relay.outage.timer);
  else relay.outages++;
  relay.outage = { mode, until: Date.now() + seconds * 1000, timer: setTimeout(endOutage, seconds * 1000) };
  log(`outage: ${seconds}s, mode ${mode}`);
  for (const { client, up } of [...relay.pairs]) {
    relay.resets++;
    client.resetAndDestroy();
    up.destroy();
  }
  relay.pairs.clear();
  for (const link of relay.links) {
    if (mode === 'refuse' && link.server) {
      link.server.close();
      link.server = null;
    } else if (mode === 'reset' && !link.server) {
      relayListen(link, link.port);
    }
  }
}

function endOutage() {
  if (!relay.outage) return;
  clearTimeout(relay.outage.timer);
  relay.outage = null;
  log('outage over');
  for (const link of relay.links) if (!link.server) relayListen(link, link.port);
}

function outageInfo() {
  const o = relay.outage;
  return {
    active: !!o, mode: o ? o.mode : null, ends_in_ms: o ? Math.max(0, o.until - Date.now()) : 0,
    outages: relay.outages, resets: relay.resets,
  };
}

module.exports = { relay, newLink, relayListen, startOutage, endOutage, outageInfo };
