'use strict';

// images.js - image definitions, their fake builds and lookups.

const { GS, STATUS, opts } = require('./options');
const { images } = require('./state');
const { fail } = require('./errors');
const { sleep } = require('./calls');

// ---------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------

function imageKey(img) {
  return JSON.stringify({
    cmds: img.dockerfile_commands || [],
    bases: (img.base_images || []).map((b) => [b.docker_tag || '', b.image_id || '']),
    secrets: img.secret_ids || [],
    reg: img.image_registry_config || null,
    gpu: img.gpu_config || null,
  });
}

function imageResult(im) {
  if (im.status === 'built') return { status: GS.SUCCESS };
  if (im.status === 'failed') return { status: GS.FAILURE, exception: im.exception };
  return undefined;
}

// Simulated build: a couple of log lines, then a result.
async function buildImage(im) {
  const step = async (data) => {
    await sleep(opts.buildDelayMs);
    im.logs.push({ entry_id: String(im.logs.length + 1), data });
    im.events.emit('change');
  };
  await step(`Building image ${im.image_id}\n`);
  for (const c of im.dockerfile_commands) await step(`=> ${c}\n`);
  await sleep(opts.buildDelayMs);
  if (im.dockerfile_commands.some((c) => c.includes('fake-build-fail'))) {
    im.status = 'failed';
    im.exception = 'fake build failure requested by "fake-build-fail" in the Dockerfile commands';
  } else {
    im.status = 'built';
  }
  im.finished_at = Date.now();
  im.events.emit('change');
}

function getImage(imageId) {
  const im = images.get(imageId);
  if (!im) fail(STATUS.NOT_FOUND, `Could not find image with ID ${imageId}`);
  return im;
}

module.exports = { imageKey, imageResult, buildImage, getImage };
