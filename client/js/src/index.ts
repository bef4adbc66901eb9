/*
 * sbxd: the TypeScript client for sbxd (proto/PROTOCOL.md). No runtime
 * dependencies beyond Node's standard library; Node 22.13+ (as @mastra/core).
 *
 *   import { SbxdClient } from 'sbxd';
 *   const c = new SbxdClient();                 // $SBXD_SOCKET or /run/sbxd/sbxd.sock
 *   const sb = await c.createSandbox({ provider: 'docker', image: 'debian:bookworm-slim' });
 *   const p = await c.spawn({ sandbox: sb.id, command: 'ls -l' }, { onStdout: (d) => process.stdout.write(d) });
 *   await p.wait();
 */
export * from './protocol.js';
export { SbxdClient, CLIENT_METHODS, DEFAULT_SOCKET, defaultSocketPath } from './client.js';
export { SbxdError, SbxdConnectionError } from './errors.js';
export type { FsTransport } from './transport.js';
export type { ClientOptions, ToolHandler } from './client.js';
export { SbxdProcess } from './process.js';
export type { SpawnOptions, OutputChunk, StreamName } from './process.js';
/* files (fs.*) in E2B's shape */
export { SbxdFiles, FS_CHUNK } from './files.js';
export type { EntryInfo, WriteData, FilesystemEvent, WatchHandle, ArchiveResult } from './files.js';
/* tar streams (files.readArchive's bytes) read entry by entry, or extracted into a local directory */
export { readTar, TarError } from './tar_read.js';
export type { TarEntry, TarEntryType, TarSource } from './tar_read.js';
export { extractTar } from './tar_extract.js';

/* The sandbox object API (issue 19): Sandbox.create / connect, sb.commands. */
export { Sandbox, Commands, CommandHandle, AbortError } from './sandbox.js';
export type {
    ProviderName,
    SandboxCreateOptions,
    ConnectOptions,
    DockerOptions,
    ModalOptions,
    JsOptions,
    CommandResult,
    RunOptions,
    ProcessSummary,
    SandboxInfo,
} from './sandbox.js';
