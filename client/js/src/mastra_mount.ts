/*
 * mastra_mount.ts - Mastra's mounts on SbxdSandbox: a LocalFilesystem (its
 * getMountConfig() is {type: 'local', basePath}) becomes a Docker bind mount
 * of that host directory at the mount path, requested from sbxd as a
 * `volumes` entry when the sandbox is created. sbxd's Docker policy decides
 * (providers.docker.policy: the host path prefixes a rule grants the caller,
 * read-only or read-write; root may bind anything): an ungranted path is
 * refused with the policy's own words, and only that mount fails.
 *
 * A Workspace adds its mounts before it starts the sandbox, so they are
 * all known at create; Docker cannot add or remove a bind of a running
 * container, so a mount asked for later (or an unmount of a live one) says
 * so instead of pretending.
 */
import * as nodePath from 'node:path';
import * as posix from 'node:path/posix';
import type { WorkspaceFilesystem } from '@mastra/core/workspace';

export interface SbxdBind {
    /** The host directory (absolute; sbxd resolves symlinks before it checks the grant). */
    host: string;
    /** The path inside the sandbox. */
    target: string;
    readOnly: boolean;
}

/** The bind a filesystem mounted at mountPath asks for, or why it cannot be one. */
export function bindOf(fs: WorkspaceFilesystem, mountPath: string, workingDirectory: string | undefined): SbxdBind | string {
    const cfg = fs.getMountConfig?.() as { type?: string; basePath?: string; readOnly?: boolean } | undefined;
    if (!cfg) return `${fs.provider} filesystems cannot be mounted (no getMountConfig)`;
    if (cfg.type !== 'local' || typeof cfg.basePath !== 'string')
        return `sbxd mounts local filesystems (host directories) only, not '${cfg.type}'`;
    return {
        host: nodePath.resolve(cfg.basePath),
        target: targetOf(mountPath, workingDirectory),
        readOnly: !!(fs.readOnly || cfg.readOnly),
    };
}

/** Mount paths as LocalSandbox takes them: absolute, or under the working directory. */
export function targetOf(mountPath: string, workingDirectory: string | undefined): string {
    const p = posix.isAbsolute(mountPath) ? mountPath : posix.join(workingDirectory ?? '/', mountPath);
    return posix.normalize(p).replace(/(.)\/+$/, '$1');
}

export function volumeOf(b: SbxdBind): string {
    return `${b.host}:${b.target}${b.readOnly ? ':ro' : ''}`;
}

/** SbxdSandboxOptions.volumes (a map or docker's strings) as docker's strings. */
export function volumeList(v: Record<string, string> | string[] | undefined): string[] {
    if (!v) return [];
    return Array.isArray(v) ? [...v] : Object.entries(v).map(([h, c]) => `${h}:${c}`);
}

/**
 * Whether target is a mount point inside the sandbox, from its
 * /proc/self/mountinfo (field 5 is the mount point, octal-escaped).
 */
export function isMountPoint(mountinfo: string, target: string): { mounted: boolean; readOnly: boolean } {
    let r = { mounted: false, readOnly: false };
    for (const line of mountinfo.split('\n')) {
        const f = line.split(' ');
        if (f.length < 6) continue;
        const mp = f[4]!.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
        // The last line for a mount point is the one on top.
        if (mp === target) r = { mounted: true, readOnly: f[5]!.split(',').includes('ro') };
    }
    return r;
}
